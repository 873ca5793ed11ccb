"""SageMaker failing under the operator: failed jobs and updates, throttling, broken endpoints.

Each fault comes from a sandbox switch and meets the real operator process. What must hold:
the right phase and condition with the AWS message, a failed request never repeated
unchanged, nothing reported as success that SageMaker did not finish, throttling absorbed
with jittered backoff instead of a spin, and the baseline answering throughout.
"""

from __future__ import annotations

import itertools
import statistics
import time
from typing import Any

from endpoint_optimizer.sandbox.config import Faults
from tests.e2e.conftest import E2E, GUARD, spec
from tests.e2e.harness import condition
from tests.e2e.test_crash import ENDPOINT, Prober, ok_calls, wait_in_service

ONE_STEP = {
    "strategy": "canary",
    "steps": [{"weight": 20, "pause": "1s"}],
    "analysis": {"onNoData": "pass"},
}
ENDS = {"Succeeded", "Failed", "RolledBack"}


def calls_of(e2e: E2E, operation: str) -> list[dict[str, Any]]:
    return [c for c in e2e.sandbox.admin.calls() if c["operation"] == operation]


def settle(e2e: E2E, rechecks: int = 2) -> None:
    """Let the operator run through `rechecks` more endpoint re-describes: at least one whole
    recheck period, ENDPOINT_RECHECK_POLLS wake-ups (a retry would show in the call log)."""
    start = len(calls_of(e2e, "DescribeEndpoint"))
    deadline = time.monotonic() + GUARD
    while len(calls_of(e2e, "DescribeEndpoint")) < start + rechecks:
        assert time.monotonic() < deadline, e2e.diagnostics()
        time.sleep(0.05)


def test_a_failed_optimization_job_is_terminal_and_never_deploys(e2e: E2E) -> None:
    names = e2e.create("chat", spec(rollout=ONE_STEP))
    e2e.sandbox.admin.set_faults(Faults(fail_optimization_jobs=[names.job]))
    wait_in_service(e2e)
    with Prober(e2e) as prober:
        obj = e2e.wait_phase("chat", ENDS)
        settle(e2e)
    status = obj["status"]
    assert status["phase"] == "Failed", e2e.explain(obj)
    terminal = condition(obj, "Terminal")
    assert terminal is not None and terminal["status"] == "True"
    assert terminal["reason"] == "OptimizationJobFailed"
    assert "quantization step exited with code 1" in terminal["message"]  # FailureReason
    assert "change the spec" in terminal["message"]
    assert condition(obj, "Ready")["status"] == "True"  # type: ignore[index]
    # The job is not started again, and no candidate is built from a failed job.
    assert len(calls_of(e2e, "CreateOptimizationJob")) == 1
    assert calls_of(e2e, "UpdateEndpoint") == []
    assert names.candidate_model not in e2e.sandbox.admin.state()["models"]
    assert e2e.serving(ENDPOINT)["EndpointConfigName"] == names.baseline_config
    prober.assert_all_answered()


def test_a_failed_endpoint_update_is_rolled_back_not_reported_and_not_retried(
    e2e: E2E,
) -> None:
    names = e2e.create("chat", spec(rollout=ONE_STEP))
    # The candidate's UpdateEndpoint fails; SageMaker keeps the baseline config serving.
    e2e.sandbox.admin.set_faults(Faults(fail_endpoint_updates=[ENDPOINT]))
    wait_in_service(e2e)
    with Prober(e2e) as prober:
        obj = e2e.wait_phase("chat", ENDS)
        settle(e2e)
    status = obj["status"]
    assert status["phase"] == "RolledBack", e2e.explain(obj)
    assert status["history"][-1]["event"] == "UpdateFailed"
    assert "ping health check" in status["lastError"]
    degraded = condition(obj, "Degraded")
    assert degraded is not None and degraded["status"] == "True"
    assert degraded["reason"] == "UpdateFailed"
    # Never reported as success: the candidate was never judged, the baseline serves.
    assert status.get("checks", []) == []
    served = e2e.serving(ENDPOINT)
    assert served["EndpointConfigName"] == names.baseline_config
    assert status["sagemaker"]["servingEndpointConfig"] == names.baseline_config
    assert len(calls_of(e2e, "UpdateEndpoint")) == 1, "the failed config is not retried"
    prober.assert_all_answered()


def test_a_throttling_storm_backs_off_with_jitter_and_the_pipeline_finishes(e2e: E2E) -> None:
    names = e2e.create("chat", spec(rollout=ONE_STEP))
    wait_in_service(e2e)
    storm = 4.0
    started = time.time()
    e2e.sandbox.admin.set_faults(Faults(throttle_fraction=1.0))
    with Prober(e2e) as prober:
        time.sleep(storm)  # the storm's length is the scenario, not a guess at readiness
        e2e.sandbox.admin.clear_faults()
        ended = time.time()
        obj = e2e.wait_phase("chat", ENDS)
    assert obj["status"]["phase"] == "Succeeded", e2e.explain(obj)
    throttled = [
        c
        for c in e2e.sandbox.admin.calls()
        if c.get("errorCode") == "ThrottlingException" and started <= c["wallTime"] <= ended
    ]
    assert throttled, "the storm reached no call"
    rate = len(throttled) / storm
    # One resource polled every 0.2 s: a spin would be hundreds of calls a second; botocore's
    # standard retries (base 1 s for throttling, full jitter) keep it near one a second.
    assert rate <= 4.0, f"{len(throttled)} calls in a {storm:.0f} s storm"
    gaps = [b["wallTime"] - a["wallTime"] for a, b in itertools.pairwise(throttled)]
    if len(gaps) >= 3:
        assert statistics.pstdev(gaps) > 0.01, f"retries in lockstep: {gaps}"
    assert obj["status"]["sagemaker"]["servingEndpointConfig"] == names.promoted_config
    assert condition(obj, "Terminal")["status"] == "False"  # type: ignore[index]
    assert len(ok_calls(e2e, "CreateEndpoint")) == 1
    prober.assert_all_answered()
