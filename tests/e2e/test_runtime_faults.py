"""Runtime errors by what they are, through a fault proxy in front of the sandbox.

The real operator's AWS calls go through tests/e2e/fault_proxy.py. What must hold: a
container's 503 during the eval, throttling on InvokeEndpoint and TCP resets are retried
with a backoff that status names (status.retry, the message), never "fix the spec", and
the pipeline finishes once they pass; a failure that does not pass while a candidate holds
traffic ends with traffic back on the baseline.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from endpoint_optimizer.sandbox.testing import running_sandbox
from tests.e2e.conftest import E2E, NAMESPACE, NO_MUST_PASS, operator_env, sandbox_config, spec
from tests.e2e.fault_proxy import FaultProxy, Rule, running_fault_proxy
from tests.e2e.harness import OperatorProcess, condition, running_cluster, tempdir, write_kubeconfig
from tests.e2e.test_crash import ENDPOINT

ENDS = {"Succeeded", "Failed", "RolledBack"}
ONE_STEP = {
    "strategy": "canary",
    "steps": [{"weight": 10, "pause": "1s"}],
    "analysis": {"onNoData": "pass"},
}
EVALUATION = {
    "dataset": {"configMapRef": {"name": "evals", "key": "items.jsonl"}},
    "metric": "exact_match",
    "maxOutputTokens": 8,
    "slices": NO_MUST_PASS,
}
ITEMS = [f'{{"prompt": "What is {a} + {a}?", "reference": "{2 * a}"}}' for a in range(11, 19)]


@pytest.fixture
def proxied() -> Iterator[tuple[E2E, FaultProxy]]:
    directory: Path = tempdir()
    with (
        running_cluster() as (emulator, cluster),
        running_sandbox(sandbox_config()) as sandbox,
        running_fault_proxy(sandbox.url) as proxy,
    ):
        cluster.create_namespace(NAMESPACE)
        operator = OperatorProcess(
            kubeconfig=write_kubeconfig(emulator.url, directory),
            namespace=NAMESPACE,
            aws_endpoint_url=proxy.url,
            log_path=directory / "operator.log",
            extra_env=operator_env(
                ENDPOINT_OPTIMIZER_RETRY_MAX_DELAY="1.5",
                ENDPOINT_OPTIMIZER_RETRY_LIMIT="3",
            ),
            extra_args=("--log-console",),
        )
        operator.start()
        try:
            e2e = E2E(cluster, emulator, sandbox, operator)
            cluster.create_configmap(NAMESPACE, "evals", {"items.jsonl": "\n".join(ITEMS)})
            yield e2e, proxy
        finally:
            operator.stop()
            shutil.rmtree(directory, ignore_errors=True)


def retried(e2e: E2E, reason: str) -> dict[str, Any]:
    """Wait until status says it waits on a retry of `reason`; return that object."""
    return e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: (o.get("status", {}).get("retry") or {}).get("reason") == reason,
        timeout=90,
        what=f"status.retry for {reason}",
        on_timeout=e2e.diagnostics,
    )


def assert_not_terminal(e2e: E2E, obj: dict[str, Any]) -> None:
    assert obj["status"]["phase"] in ("Succeeded", "RolledBack"), e2e.explain(obj)
    terminal = condition(obj, "Terminal")
    assert terminal is None or terminal["status"] == "False", e2e.explain(obj)
    assert "retry" not in obj["status"]


def test_a_503_from_the_container_during_the_eval_is_retried_not_fix_the_spec(
    proxied: tuple[E2E, FaultProxy],
) -> None:
    e2e, proxy = proxied
    names = e2e.create("chat", spec(rollout=ONE_STEP, evaluation=EVALUATION))
    # The candidate's eval answers (pinned InvokeEndpoint) meet two 503s, at 10 % canary.
    proxy.add(Rule("model_error", "InvokeEndpoint", variant=names.candidate_variant, times=2))
    waiting = retried(e2e, "Transient")
    status = waiting["status"]
    assert status["phase"] == "Analyzing"
    assert "ModelError" in status["lastError"] and "503" in status["lastError"]
    assert "fix the" not in status["lastError"]
    assert status["message"].startswith("retrying in ")
    assert status["retry"]["attempt"] >= 1 and status["retry"]["nextAttemptAt"]
    obj = e2e.wait_phase("chat", ENDS, timeout=120)
    assert_not_terminal(e2e, obj)
    assert obj["status"]["candidate"]["evalItems"] == len(ITEMS)


def test_throttling_on_invoke_endpoint_backs_off_and_the_baseline_is_measured(
    proxied: tuple[E2E, FaultProxy],
) -> None:
    e2e, proxy = proxied
    names = e2e.create("chat", spec(rollout=ONE_STEP, evaluation=EVALUATION))
    # Throttled until the operator says it waits on it (botocore's own 4 attempts are spent).
    proxy.add(Rule("throttle", "InvokeEndpoint", variant=names.baseline_variant))
    waiting = retried(e2e, "Throttled")
    proxy.clear()
    assert waiting["status"]["phase"] == "Baselining"
    assert "ThrottlingException" in waiting["status"]["lastError"]
    obj = e2e.wait_phase("chat", ENDS, timeout=120)
    assert_not_terminal(e2e, obj)
    assert obj["status"]["baseline"]["evalItems"] == len(ITEMS)


def test_a_connection_reset_is_a_transient_retry_in_status_not_a_stall(
    proxied: tuple[E2E, FaultProxy],
) -> None:
    e2e, proxy = proxied
    e2e.create("chat", spec(rollout=ONE_STEP))
    e2e.cluster.wait_for_phase(e2e.namespace, "chat", "Optimizing", on_timeout=e2e.diagnostics)
    # Every DescribeEndpoint reset until the operator says it waits on it.
    rule = proxy.add(Rule("reset", "DescribeEndpoint"))
    waiting = retried(e2e, "Transient")
    proxy.clear()
    assert rule.hits >= 4, "botocore's own attempts came first"
    assert "ConnectionClosedError" in waiting["status"]["lastError"]
    obj = e2e.wait_phase("chat", ENDS, timeout=120)
    assert_not_terminal(e2e, obj)


def test_a_candidate_whose_errors_do_not_pass_is_given_up_with_traffic_back_on_the_baseline(
    proxied: tuple[E2E, FaultProxy],
) -> None:
    e2e, proxy = proxied
    names = e2e.create("chat", spec(rollout=ONE_STEP, evaluation=EVALUATION))
    proxy.add(Rule("model_error", "InvokeEndpoint", variant=names.candidate_variant))
    obj = e2e.wait_phase("chat", ENDS, timeout=120)
    status = obj["status"]
    assert status["phase"] == "Failed", e2e.explain(obj)
    assert "returning traffic to the baseline" in " ".join(h["message"] for h in status["history"])
    assert status["rollout"]["rollbackReason"] == "error"
    assert e2e.serving(ENDPOINT)["EndpointConfigName"] == names.baseline_config
