"""Conflicts over one SageMaker endpoint: two resources naming it, and a delete behind our back."""

from __future__ import annotations

from tests.e2e.conftest import E2E, GUARD, spec
from tests.e2e.harness import condition
from tests.e2e.test_crash import ENDPOINT, ok_calls
from tests.e2e.test_faults import ONE_STEP, settle

ENDS = {"Succeeded", "Failed", "RolledBack"}


def test_a_second_resource_on_the_same_endpoint_is_refused_and_the_first_goes_on(
    e2e: E2E,
) -> None:
    # Created together: both see no endpoint yet, the hardest case. The older one wins.
    first = e2e.create("chat", spec(rollout=ONE_STEP))
    adoption = {"byTag": True}
    second = e2e.create(
        "chat2",
        spec(rollout=ONE_STEP, adoptExisting=True, adoption=adoption, deletionPolicy="Delete"),
    )
    refused = e2e.wait_phase("chat2", ENDS)
    assert refused["status"]["phase"] == "Failed", e2e.explain(refused)
    terminal = condition(refused, "Terminal")
    assert terminal is not None and terminal["status"] == "True"
    assert terminal["reason"] == "EndpointConflict"
    assert "OptimizedEndpoint ml/chat;" in terminal["message"]
    assert "spec.endpointName" in terminal["message"]
    assert refused["status"]["sagemaker"].get("endpointName", "") == ""

    # Deleting the refused resource (deletionPolicy Delete) must not touch the endpoint.
    e2e.cluster.delete(e2e.namespace, "chat2")
    e2e.cluster.wait_gone(e2e.namespace, "chat2", timeout=GUARD, on_timeout=e2e.diagnostics)
    obj = e2e.wait_phase("chat", ENDS)
    assert obj["status"]["phase"] == "Succeeded", e2e.explain(obj)
    state = e2e.sandbox.admin.state()
    assert ENDPOINT in state["endpoints"]
    assert e2e.serving(ENDPOINT)["EndpointConfigName"] == first.promoted_config
    assert len(ok_calls(e2e, "CreateEndpoint")) == 1
    assert not [m for m in state["models"] if m in (second.baseline_model, second.candidate_model)]
    assert not [c for c in e2e.sandbox.admin.calls() if c["operation"] == "DeleteEndpoint"]


def test_an_endpoint_deleted_outside_the_operator_is_reported_not_recreated(e2e: E2E) -> None:
    e2e.create("chat", spec(rollout=ONE_STEP))
    e2e.cluster.wait_for_phase(
        e2e.namespace, "chat", "Optimizing", timeout=GUARD, on_timeout=e2e.diagnostics
    )
    e2e.sandbox.client("sagemaker").delete_endpoint(EndpointName=ENDPOINT)
    obj = e2e.wait_phase("chat", ENDS)
    settle(e2e)
    assert obj["status"]["phase"] == "Failed", e2e.explain(obj)
    terminal = condition(obj, "Terminal")
    assert terminal is not None and terminal["reason"] == "EndpointDisappeared"
    assert ENDPOINT in terminal["message"]
    ready = condition(obj, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert len(ok_calls(e2e, "CreateEndpoint")) == 1, "recreated silently"
    assert ENDPOINT not in e2e.sandbox.admin.state()["endpoints"]
