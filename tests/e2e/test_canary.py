"""A good candidate goes through a canary and is promoted, by the real operator process."""

from __future__ import annotations

from tests.e2e.conftest import E2E, spec
from tests.e2e.harness import condition


def test_canary_promotes_a_faster_candidate(e2e: E2E) -> None:
    e2e.cluster.create(e2e.namespace, "chat", spec())
    obj = e2e.wait_phase("chat", {"Succeeded", "Failed", "RolledBack"}, timeout=40)
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
