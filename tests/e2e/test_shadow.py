"""The shadow strategy end to end: the candidate gets a copy of production traffic, is
judged on CloudWatch per-variant aggregates (it cannot be invoked with TargetVariant),
and is promoted to a single-variant config or rolled back."""

from __future__ import annotations

from typing import Any

from endpoint_optimizer.sandbox.config import Faults, LatencyRegression
from tests.e2e.conftest import E2E, production_traffic, spec
from tests.e2e.test_live_judge import ENDS, live_state

SHADOW = {
    "strategy": "shadow",
    # Interval 2s x TIME_SCALE 0.5: one-second CloudWatch periods.
    "steps": [{"pause": "16s"}],
    "analysis": {"interval": "2s", "onNoData": "pass", "minInvocations": 5},
}


def shadowed(e2e: E2E, name: str) -> dict[str, Any]:
    """Wait until the endpoint serves the rollout config; it has one shadow variant."""
    obj = e2e.wait_phase(name, "Analyzing")
    endpoint = e2e.serving("chat-e2e")
    assert [v["VariantName"] for v in endpoint["ProductionVariants"]] == [
        obj["status"]["baseline"]["variantName"]
    ]
    assert len(endpoint.get("ShadowProductionVariants", [])) == 1, endpoint
    return obj


def test_a_good_candidate_is_promoted_through_shadow(e2e: E2E) -> None:
    names = e2e.create("chat", spec(rollout=SHADOW))
    with production_traffic(e2e.sandbox, "chat-e2e"):
        shadowed(e2e, "chat")
        obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "Succeeded", e2e.explain(obj)
    live = live_state(obj)["liveJudge"]
    assert live["intervals"] - live["noDataIntervals"] >= 2, live
    checks = {c["name"]: c for c in status["checks"]}
    assert checks["live_latency"]["verdict"] == "Pass", e2e.explain(obj)
    endpoint = e2e.serving("chat-e2e")
    assert endpoint["EndpointConfigName"] == names.promoted_config
    assert [v["VariantName"] for v in endpoint["ProductionVariants"]] == [names.candidate_variant]
    assert not endpoint.get("ShadowProductionVariants")
    copies = [r for r in e2e.sandbox.admin.traffic_records("chat-e2e") if r.shadow]
    assert copies and {r.variant for r in copies} == {names.candidate_variant}


def test_a_latency_regressed_shadow_is_rolled_back(e2e: E2E) -> None:
    names = e2e.create("chat", spec(rollout=SHADOW))
    # 4x its own FP8 timings: over twice the baseline's (FP8 serves the 70B at ~0.57x).
    e2e.sandbox.admin.set_faults(
        Faults(latency_regressions=[LatencyRegression(model=names.candidate_model, factor=4.0)])
    )
    with production_traffic(e2e.sandbox, "chat-e2e"):
        obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "RolledBack", e2e.explain(obj)
    latency = next(c for c in status["checks"] if c["name"] == "live_latency")
    assert latency["verdict"] == "Fail", e2e.explain(obj)
    assert latency["candidate"] > 2 * latency["baseline"], latency
    endpoint = e2e.serving("chat-e2e")
    assert endpoint["EndpointConfigName"] == names.baseline_config
    assert not endpoint.get("ShadowProductionVariants")
