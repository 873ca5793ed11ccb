"""A good candidate goes through a canary and is promoted, by the real operator process."""

from __future__ import annotations

from tests.e2e.conftest import E2E, spec
from tests.e2e.harness import condition


def test_canary_promotes_a_faster_candidate(e2e: E2E) -> None:
    e2e.cluster.create(e2e.namespace, "chat", spec())
    obj = e2e.wait_phase("chat", {"Succeeded", "Failed", "RolledBack"})
    status = obj["status"]
    assert status["phase"] == "Succeeded", e2e.explain(obj)
    sm = status["sagemaker"]
    endpoint = e2e.sandbox.client("sagemaker").describe_endpoint(EndpointName="chat-e2e")
    # Success is what SageMaker serves, not what the operator believes.
    assert endpoint["EndpointStatus"] == "InService"
    assert endpoint["EndpointConfigName"] == sm["servingEndpointConfig"]
    assert "-promoted-" in endpoint["EndpointConfigName"]
    assert [v["VariantName"] for v in endpoint["ProductionVariants"]] == [
        status["candidate"]["variantName"]
    ]
    verdicts = {c["name"]: c["verdict"] for c in status["checks"]}
    assert verdicts["objective_latency"] == "Pass"
    assert "Fail" not in verdicts.values()
    assert condition(obj, "Ready")["status"] == "True"
    assert condition(obj, "Terminal")["status"] == "False"
    events = [history["event"] for history in status["history"]]
    for expected in (
        "BaselineMeasured",
        "CandidateBuilt",
        "CandidateDeployed",
        "CandidatePromoted",
    ):
        assert expected in events
    # The canary shifted traffic in the spec's steps, with UpdateEndpointWeightsAndCapacities.
    weights = [
        c
        for c in e2e.sandbox.admin.calls()
        if c["operation"] == "UpdateEndpointWeightsAndCapacities"
    ]
    assert len(weights) >= 1


def test_blue_green_judges_at_weight_zero_then_switches_under_alarms(e2e: E2E) -> None:
    rollout = {
        "strategy": "blueGreen",
        "steps": [{"weight": 100, "pause": "1s"}],
        "analysis": {"onNoData": "pass"},
    }
    names = e2e.create("chat", spec(rollout=rollout))
    obj = e2e.wait_phase("chat", {"Succeeded", "Failed", "RolledBack"})
    status = obj["status"]
    assert status["phase"] == "Succeeded", e2e.explain(obj)
    endpoint = e2e.serving("chat-e2e")
    assert endpoint["EndpointConfigName"] == names.promoted_config
    deployment = endpoint["LastDeploymentConfig"]
    alarms = [a["AlarmName"] for a in deployment["AutoRollbackConfiguration"]["Alarms"]]
    assert sorted(alarms) == sorted(status["sagemaker"]["alarms"])
    described = e2e.sandbox.client("cloudwatch").describe_alarms(AlarmNames=alarms)
    assert len(described["MetricAlarms"]) == 2
    # Users never saw the candidate before the switch: weight 0 while it was judged.
    shifts = [
        c
        for c in e2e.sandbox.admin.calls()
        if c["operation"] == "UpdateEndpointWeightsAndCapacities"
    ]
    assert shifts == []
