"""The baseline after a promotion: the rollback annotation returns to it within
rollout.baselineRetention; after it, the operator deletes the baseline config and model it
made (a throttled delete is reported and retried until SageMaker takes it), and refuses
the rollback with the reason."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from endpoint_optimizer.sandbox.config import Faults
from tests.e2e.conftest import E2E, GUARD, spec
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
    obj = e2e.wait_phase(name, ENDS)
    assert obj["status"]["phase"] == "Succeeded", e2e.explain(obj)
    return obj


def test_rollback_within_the_window_returns_traffic_to_the_baseline_config(e2e: E2E) -> None:
    # 600 s x TIME_SCALE 0.5: a window the annotation lands in, however busy the machine.
    names = e2e.create("chat", spec(rollout=rollout("600s")))
    obj = succeeded(e2e, "chat")
    assert obj["status"]["sagemaker"]["baselineRetainedUntil"], e2e.explain(obj)
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.promoted_config
    e2e.cluster.annotate(e2e.namespace, "chat", {"optimizer.dev/rollback": "true"})
    obj = e2e.wait_phase("chat", "RolledBack")
    events = [h["event"] for h in obj["status"]["history"]]
    assert "ManualRollback" in events and "BaselineDeleted" not in events, e2e.explain(obj)
    endpoint = e2e.serving("chat-e2e")
    assert endpoint["EndpointConfigName"] == names.baseline_config
    assert [v["VariantName"] for v in endpoint["ProductionVariants"]] == [
        obj["status"]["baseline"]["variantName"]
    ]
    # Deletion (Retain): the endpoint keeps serving the baseline; the candidate goes.
    e2e.cluster.delete(e2e.namespace, "chat")
    e2e.cluster.wait_gone(e2e.namespace, "chat", timeout=GUARD, on_timeout=e2e.diagnostics)
    sagemaker = e2e.sandbox.client("sagemaker")
    assert sagemaker.describe_endpoint(EndpointName="chat-e2e")["EndpointConfigName"] == (
        names.baseline_config
    )
    with pytest.raises(ClientError):
        sagemaker.describe_model(ModelName=names.candidate_model)


def history(obj: dict[str, Any]) -> list[str]:
    return [h["event"] for h in obj.get("status", {}).get("history", [])]


def test_after_the_window_a_throttled_delete_is_retried_and_rollback_is_refused(
    e2e: E2E,
) -> None:
    # Every DeleteEndpointConfig is throttled (past botocore's own retries) until cleared;
    # nothing before the retention delete calls it.
    e2e.sandbox.admin.set_faults(
        Faults(throttle_fraction=1.0, throttle_operations=["DeleteEndpointConfig"])
    )
    names = e2e.create("chat", spec(rollout=rollout("3s"), deletionPolicy="Delete"))
    succeeded(e2e, "chat")
    obj = e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: "BaselineDeleteFailed" in history(o),
        timeout=GUARD,
        what="BaselineDeleteFailed",
        on_timeout=e2e.diagnostics,
    )
    status = obj["status"]
    assert status["phase"] == "Succeeded", e2e.explain(obj)
    assert not status["sagemaker"].get("baselineDeletedAt"), "deleted while every delete failed"
    failure = next(h for h in status["history"] if h["event"] == "BaselineDeleteFailed")
    assert names.baseline_config in failure["message"], failure
    assert "ThrottlingException" in failure["message"], failure
    sagemaker = e2e.sandbox.client("sagemaker")
    sagemaker.describe_endpoint_config(EndpointConfigName=names.baseline_config)
    warnings = [
        e for e in e2e.cluster.events(e2e.namespace) if e.get("reason") == "BaselineDeleteFailed"
    ]
    assert warnings and warnings[0]["type"] == "Warning", warnings

    e2e.sandbox.admin.clear_faults()
    obj = e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: bool(o["status"].get("sagemaker", {}).get("baselineDeletedAt")),
        timeout=GUARD,
        what="baselineDeletedAt",
        on_timeout=e2e.diagnostics,
    )
    assert obj["status"]["phase"] == "Succeeded", e2e.explain(obj)
    assert history(obj)[-1] == "BaselineDeleted", e2e.explain(obj)
    # Nothing else was deleted, nor asked to be.
    state = e2e.sandbox.admin.state()
    assert list(state["endpointConfigs"]) == [names.promoted_config]
    assert list(state["models"]) == [names.candidate_model]
    deletes = [c for c in e2e.sandbox.admin.calls() if c["operation"].startswith("Delete")]
    assert {c["resource"] for c in deletes} == {
        names.baseline_config,
        names.rollout_config,
        names.baseline_model,
    }
    # Retried at the wake-ups' pace, never in a loop: each attempt is botocore's few tries.
    throttled = [c for c in deletes if c.get("errorCode")]
    span = max(c["wallTime"] for c in deletes) - min(c["wallTime"] for c in deletes)
    assert throttled and len(throttled) <= 4 * (span / 0.4 + 2), (len(throttled), span)
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
        timeout=GUARD,
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
    e2e.cluster.wait_gone(e2e.namespace, "chat", timeout=GUARD, on_timeout=e2e.diagnostics)
    state = e2e.sandbox.admin.state()
    assert not [e for e in state.get("endpoints", []) if "chat-e2e" in str(e)]
    assert not state.get("models")
    assert not state.get("endpointConfigs")
