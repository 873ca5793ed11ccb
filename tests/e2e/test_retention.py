"""The baseline after a promotion: the rollback annotation returns to it within
rollout.baselineRetention; after it, the operator deletes the baseline config and model it
made, and refuses the rollback with the reason."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.e2e.conftest import E2E, spec
from tests.e2e.harness import condition

ENDS = {"Succeeded", "Failed", "RolledBack"}


def rollout(retention: str) -> dict[str, Any]:
    return {
        "strategy": "canary",
        "steps": [{"weight": 20, "pause": "1s"}],
        "analysis": {"onNoData": "pass"},
        "baselineRetention": retention,
    }


def succeeded(e2e: E2E, name: str) -> dict[str, Any]:
    obj = e2e.wait_phase(name, ENDS, timeout=60)
    assert obj["status"]["phase"] == "Succeeded", e2e.explain(obj)
    return obj


def test_rollback_within_the_window_returns_traffic_to_the_baseline_config(e2e: E2E) -> None:
    # 60 s x TIME_SCALE 0.5: a window the annotation lands in.
    names = e2e.create("chat", spec(rollout=rollout("60s")))
    obj = succeeded(e2e, "chat")
    assert obj["status"]["sagemaker"]["baselineRetainedUntil"], e2e.explain(obj)
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.promoted_config
    e2e.cluster.annotate(e2e.namespace, "chat", {"optimizer.dev/rollback": "true"})
    obj = e2e.wait_phase("chat", "RolledBack", timeout=30)
    events = [h["event"] for h in obj["status"]["history"]]
    assert "ManualRollback" in events and "BaselineDeleted" not in events, e2e.explain(obj)
    endpoint = e2e.serving("chat-e2e")
    assert endpoint["EndpointConfigName"] == names.baseline_config
    assert [v["VariantName"] for v in endpoint["ProductionVariants"]] == [
        obj["status"]["baseline"]["variantName"]
    ]
    # Deletion (Retain): the endpoint keeps serving the baseline; the candidate goes.
    e2e.cluster.delete(e2e.namespace, "chat")
    e2e.cluster.wait_gone(e2e.namespace, "chat", timeout=30, on_timeout=e2e.diagnostics)
    sagemaker = e2e.sandbox.client("sagemaker")
    assert sagemaker.describe_endpoint(EndpointName="chat-e2e")["EndpointConfigName"] == (
        names.baseline_config
    )
    with pytest.raises(ClientError):
        sagemaker.describe_model(ModelName=names.candidate_model)


def test_after_the_window_the_baseline_is_gone_and_rollback_is_refused(e2e: E2E) -> None:
    names = e2e.create("chat", spec(rollout=rollout("3s"), deletionPolicy="Delete"))
    succeeded(e2e, "chat")
    obj = e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: bool(o["status"].get("sagemaker", {}).get("baselineDeletedAt")),
        timeout=30,
        what="baselineDeletedAt",
        on_timeout=e2e.diagnostics,
    )
    assert obj["status"]["phase"] == "Succeeded"
    sagemaker = e2e.sandbox.client("sagemaker")
    for config in (names.baseline_config, names.rollout_config):
        with pytest.raises(ClientError) as gone:
            sagemaker.describe_endpoint_config(EndpointConfigName=config)
        assert gone.value.response["Error"]["Code"] == "ValidationException"
    with pytest.raises(ClientError):
        sagemaker.describe_model(ModelName=names.baseline_model)
    # What serves is untouched.
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.promoted_config
    sagemaker.describe_model(ModelName=names.candidate_model)

    e2e.cluster.annotate(e2e.namespace, "chat", {"optimizer.dev/rollback": "true"})
    obj = e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: any(h["event"] == "RollbackRefused" for h in o["status"].get("history", [])),
        timeout=30,
        what="RollbackRefused",
        on_timeout=e2e.diagnostics,
    )
    status = obj["status"]
    assert status["phase"] == "Succeeded", e2e.explain(obj)
    assert "baseline expired at" in status["message"], status["message"]
    progressing = condition(obj, "Progressing")
    assert progressing is not None and progressing["reason"] == "RollbackRefused"
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.promoted_config
    updates = [c for c in e2e.sandbox.admin.calls() if c["operation"] == "UpdateEndpoint"]
    assert len(updates) == 2, "the candidate's rollout and its promotion; no rollback update"

    # Deletion (Delete) still removes everything, the already-deleted baseline included.
    e2e.cluster.delete(e2e.namespace, "chat")
    e2e.cluster.wait_gone(e2e.namespace, "chat", timeout=30, on_timeout=e2e.diagnostics)
    state = e2e.sandbox.admin.state()
    assert not [e for e in state.get("endpoints", []) if "chat-e2e" in str(e)]
    assert not state.get("models")
    assert not state.get("endpointConfigs")
