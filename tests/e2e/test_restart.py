"""The operator killed mid-rollout picks up from status and SageMaker: no twin, same end."""

from __future__ import annotations

from tests.e2e.conftest import E2E, GUARD, spec

ONE_STEP = {
    "strategy": "canary",
    "steps": [{"weight": 20, "pause": "1s"}],
    "analysis": {"onNoData": "pass"},
}


def test_sigkill_during_the_canary_then_restart_reaches_the_same_end_without_twins(
    e2e: E2E,
) -> None:
    names = e2e.create("chat", spec(rollout=ONE_STEP))
    e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: o.get("status", {}).get("phase") in ("Deploying", "Analyzing"),
        timeout=GUARD,
        on_timeout=e2e.diagnostics,
    )
    e2e.operator.kill()
    e2e.operator.start()
    obj = e2e.wait_phase("chat", {"Succeeded", "Failed", "RolledBack"})
    assert obj["status"]["phase"] == "Succeeded", e2e.explain(obj)
    state = e2e.sandbox.admin.state()
    assert sorted(state["models"]) == sorted([names.baseline_model, names.candidate_model])
    assert sorted(state["endpointConfigs"]) == sorted(
        [names.baseline_config, names.rollout_config, names.promoted_config]
    )
    assert list(state["optimizationJobs"]) == [names.job]
    creates = [c for c in e2e.sandbox.admin.calls() if c["operation"] == "CreateEndpoint"]
    assert len(creates) == 1
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.promoted_config
