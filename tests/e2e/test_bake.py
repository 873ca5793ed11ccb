"""The bake after a promotion (rollout.bake), through the real operator and the sandbox.

The canary's live judge measures the baseline with probes (pinned, fixed shape); the
candidate is promoted; during the bake the same judge compares the promoted variant
with the baseline's last figures. The sandbox slows the candidate's model down on
command, after the promotion, so only the bake can catch it.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from endpoint_optimizer.sandbox.config import Faults, LatencyRegression
from tests.e2e.conftest import E2E, GUARD, spec

ENDS = {"Succeeded", "Failed", "RolledBack"}


def rollout(bake: str) -> dict[str, Any]:
    # Interval 2s x TIME_SCALE 0.5: one-second CloudWatch periods. The step's pause must
    # hold the comparison and then live intervals, so that the judge has measured the
    # baseline (else BakeSkipped): on a busy host the comparison alone took over 8 s.
    return {
        "strategy": "canary",
        "steps": [{"weight": 50, "pause": "60s"}],
        "analysis": {
            "interval": "2s",
            "onNoData": "pass",
            "minInvocations": 5,
            "probes": {"perInterval": 8, "inputTokens": 32, "outputTokens": 8},
        },
        "baselineRetention": "20m",
        "bake": bake,
    }


def bake_of(obj: dict[str, Any]) -> dict[str, Any]:
    bake: dict[str, Any] = obj.get("status", {}).get("rollout", {}).get("bake") or {}
    return bake


def history_time(obj: dict[str, Any], event: str) -> float:
    entry = next(h for h in obj["status"]["history"] if h["event"] == event)
    return datetime.fromisoformat(entry["time"].replace("Z", "+00:00")).timestamp()


def test_a_promoted_candidate_that_degrades_during_the_bake_is_rolled_back(e2e: E2E) -> None:
    # Outside the operator's making: must survive the rollback.
    sagemaker = e2e.sandbox.client("sagemaker")
    sagemaker.create_model(
        ModelName="someone-elses-model",
        ExecutionRoleArn="arn:aws:iam::123456789012:role/sagemaker-exec",
        PrimaryContainer={"Image": spec()["model"]["image"]},
    )
    # A bake far longer than the rollback takes: the rollback ends it early.
    names = e2e.create("chat", spec(rollout=rollout("10m")))
    baking = e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: (
            bake_of(o).get("intervals", 0) >= 1
            or o.get("status", {}).get("phase") in ENDS - {"Succeeded"}
        ),
        timeout=GUARD,
        what="the promotion and the bake's first judged interval",
        on_timeout=e2e.diagnostics,
    )
    assert baking["status"]["phase"] == "Succeeded", e2e.explain(baking)
    assert bake_of(baking)["judge"]["decision"] == "Continue", e2e.explain(baking)
    reference = bake_of(baking)["reference"]
    assert reference["probeTtftS"], reference
    # The load the reference was measured at, from CloudWatch's InvocationsPerInstance
    # (real boto3 against the sandbox): the probes alone, at the same rate on either side
    # of the promotion, so the bake compares latency (a promotion that doubled the load
    # would not be: tests/unit/pipeline/test_bake_load.py).
    assert reference["loadPerInstanceS"] > 0, reference
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.promoted_config
    # 4x its own FP8 timings: over twice the baseline's.
    e2e.sandbox.admin.set_faults(
        Faults(latency_regressions=[LatencyRegression(model=names.candidate_model, factor=4.0)])
    )
    degraded_at = time.time()
    obj = e2e.wait_phase("chat", {"RolledBack", "Failed"})
    status = obj["status"]
    assert status["phase"] == "RolledBack", e2e.explain(obj)
    assert status["rollout"]["rollbackReason"] == "bake", e2e.explain(obj)
    events = [h["event"] for h in status["history"]]
    assert "BakeFailed" in events and "CandidatePromoted" in events, events
    assert bake_of(obj)["outcome"] == "Failed"
    assert bake_of(obj)["judge"]["decision"] == "Rollback"
    failed = [c for c in status["checks"] if c["kind"] == "live" and c["verdict"] == "Fail"]
    assert failed, e2e.explain(obj)
    # Traffic is all on the baseline config, which SageMaker reports serving.
    served = e2e.serving("chat-e2e")
    assert served["EndpointConfigName"] == names.baseline_config
    assert [v["VariantName"] for v in served["ProductionVariants"]] == [names.baseline_variant]
    # Nothing the operator did not make is gone; the baseline it returned to is kept.
    sagemaker.describe_model(ModelName="someone-elses-model")
    sagemaker.describe_endpoint_config(EndpointConfigName=names.baseline_config)
    # The Event was posted (the rollback counter reads rollbackReason, asserted above).
    posted = [e.get("reason") for e in e2e.cluster.events(e2e.namespace)]
    assert "BakeFailed" in posted, posted
    # For the record (docs/operations.md): the operator's clock against the test's, one
    # host. Judged: the fold that rejected; decided: the wake-up that began the rollback.
    judged = history_time(obj, "LiveJudgeRollback") - degraded_at
    decided = history_time(obj, "BakeFailed") - degraded_at
    restored = history_time(obj, "RolledBack") - degraded_at
    print(
        f"\nbake: degradation -> judged {judged:.2f} s, rollback decided {decided:.2f} s, "
        f"traffic back on the baseline {restored:.2f} s (period "
        f"{bake_of(obj)['periodSeconds']} s, {bake_of(obj)['intervals']} bake "
        f"intervals judged, {bake_of(baking)['intervals']} before the degradation)"
    )


def test_a_clean_bake_ends_once_and_stops_judging(e2e: E2E) -> None:
    names = e2e.create("chat", spec(rollout=rollout("20s")))
    passed = e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: (
            bake_of(o).get("outcome") is not None
            or o.get("status", {}).get("phase") in ENDS - {"Succeeded"}
        ),
        timeout=GUARD,
        what="the bake's end",
        on_timeout=e2e.diagnostics,
    )
    status = passed["status"]
    assert status["phase"] == "Succeeded", e2e.explain(passed)
    bake = bake_of(passed)
    assert bake["outcome"] == "Passed", e2e.explain(passed)
    assert bake["intervals"] >= 1 and bake["judge"]["decision"] == "Continue", bake
    assert "BakePassed" in [h["event"] for h in status["history"]]
    ended = datetime.fromisoformat(bake["endedAt"].replace("Z", "+00:00")).timestamp()
    probes_at_end = [
        r
        for r in e2e.sandbox.admin.traffic_records("chat-e2e")
        if r.variant == names.candidate_variant and r.wall_time > ended
    ]
    # A later look at the endpoint (the finished resource's recheck) comes and goes
    # without a judge: no probe, the same intervals, still serving the promoted config.
    later = e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: _observed_after(o, ended + 1.0),
        timeout=GUARD,
        what="a wake-up after the bake's end",
        on_timeout=e2e.diagnostics,
    )
    assert bake_of(later)["judge"] == bake["judge"]
    assert [h["event"] for h in later["status"]["history"]].count("BakePassed") == 1
    after = [
        r
        for r in e2e.sandbox.admin.traffic_records("chat-e2e")
        if r.variant == names.candidate_variant and r.wall_time > ended + 1.0
    ]
    assert after == [] and len(probes_at_end) <= 8, (len(probes_at_end), len(after))
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.promoted_config


def _observed_after(obj: dict[str, Any], moment: float) -> bool:
    seen = obj.get("status", {}).get("endpointObservedAt")
    if not seen:
        return False
    return datetime.fromisoformat(seen.replace("Z", "+00:00")).timestamp() > moment
