"""Rollback, levers, new generations and deletion, with the real operator on KMock + sandbox."""

from __future__ import annotations

from endpoint_optimizer.sandbox.config import Faults, LatencyRegression
from tests.e2e.conftest import E2E, GUARD, spec
from tests.e2e.harness import condition

ONE_STEP = {
    "strategy": "canary",
    "steps": [{"weight": 20, "pause": "1s"}],
    "analysis": {"onNoData": "pass"},
}
HELD = {**ONE_STEP, "approval": "beforePromotion"}
ENDS = {"Succeeded", "Failed", "RolledBack"}


def test_a_latency_regression_rolls_back_to_the_still_serving_baseline(e2e: E2E) -> None:
    names = e2e.create("chat", spec(rollout=ONE_STEP))
    # The candidate model serves three times slower than its configuration would.
    e2e.sandbox.admin.set_faults(
        Faults(latency_regressions=[LatencyRegression(model=names.candidate_model, factor=3.0)])
    )
    obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "RolledBack", e2e.explain(obj)
    failed = [c["name"] for c in status["checks"] if c["verdict"] == "Fail"]
    assert failed, e2e.explain(obj)
    endpoint = e2e.serving("chat-e2e")
    assert endpoint["EndpointStatus"] == "InService"
    assert endpoint["EndpointConfigName"] == names.baseline_config
    assert condition(obj, "Degraded")["status"] == "True"
    assert condition(obj, "Ready")["status"] == "True"
    reasons = {(e.get("type"), e.get("reason")) for e in e2e.cluster.events(e2e.namespace)}
    assert ("Warning", "CheckFailed") in reasons
    # The baseline answered every user request throughout (the sandbox's traffic record).
    traffic = e2e.sandbox.admin.traffic("chat-e2e")
    assert any(r["variant"] == names.baseline_variant for r in traffic)


def hold(e2e: E2E) -> None:
    e2e.wait_phase("chat", {"AwaitingApproval", *ENDS})
    obj = e2e.cluster.get(e2e.namespace, "chat")
    assert obj["status"]["phase"] == "AwaitingApproval", e2e.explain(obj)


def test_approval_pause_and_resume_through_annotations(e2e: E2E) -> None:
    names = e2e.create("chat", spec(rollout=HELD))
    hold(e2e)
    e2e.cluster.annotate(e2e.namespace, "chat", {"optimizer.dev/pause": "true"})
    e2e.cluster.wait_for(
        e2e.namespace, "chat", lambda o: o["status"].get("paused") is True, timeout=GUARD
    )
    e2e.cluster.annotate(
        e2e.namespace, "chat", {"optimizer.dev/pause": None, "optimizer.dev/approve": "true"}
    )
    obj = e2e.wait_phase("chat", ENDS)
    assert obj["status"]["phase"] == "Succeeded", e2e.explain(obj)
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.promoted_config


def test_rollback_annotation_returns_traffic_to_the_baseline(e2e: E2E) -> None:
    names = e2e.create("chat", spec(rollout=HELD))
    hold(e2e)
    e2e.cluster.annotate(e2e.namespace, "chat", {"optimizer.dev/rollback": "true"})
    obj = e2e.wait_phase("chat", ENDS)
    assert obj["status"]["phase"] == "RolledBack", e2e.explain(obj)
    assert any(h["event"] == "ManualRollback" for h in obj["status"]["history"])
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.baseline_config


def test_a_new_generation_returns_to_the_baseline_and_starts_again(e2e: E2E) -> None:
    names = e2e.create("chat", spec(rollout=HELD))
    hold(e2e)
    e2e.cluster.patch_spec(e2e.namespace, "chat", {"benchmark": {"requests": 31}})
    obj = e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: o["status"].get("observedGeneration") == 2,
        timeout=GUARD,
        what="observedGeneration 2",
        on_timeout=e2e.diagnostics,
    )
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.baseline_config
    assert any(h["event"] == "NewGeneration" for h in obj["status"]["history"])
    # Generation 2 builds its own candidate under its own names, and holds it again.
    hold(e2e)
    second = e2e.names("chat", obj["metadata"]["uid"], generation=2)
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == second.rollout_config


def test_delete_removes_what_the_operator_made(e2e: E2E) -> None:
    e2e.create("chat", spec(rollout=ONE_STEP, deletionPolicy="Delete"))
    e2e.wait_phase("chat", ENDS)
    e2e.cluster.delete(e2e.namespace, "chat")
    e2e.cluster.wait_gone(e2e.namespace, "chat", timeout=GUARD, on_timeout=e2e.diagnostics)
    state = e2e.sandbox.admin.state()
    assert not [e for e in state.get("endpoints", []) if "chat-e2e" in str(e)]
    assert not state.get("models")
    assert not state.get("endpointConfigs")
