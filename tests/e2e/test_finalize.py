"""Deletion works from status, never from a spec that changed or no longer parses.

A canary holds 10 % of the traffic when the spec changes under it (a new instance type, or
an environment key the CRD admits but the operator refuses), and the resource is deleted
right after. What must hold, read from the sandbox: traffic back on the baseline config
before anything is deleted, nothing ownerless left (no candidate variant serving, no model
or config of ours but the baseline's), the baseline config never deleted while it serves,
and every probe answered throughout.
"""

from __future__ import annotations

from typing import Any

from endpoint_optimizer.pipeline.plan import Names
from tests.e2e.conftest import E2E, spec
from tests.e2e.test_crash import ENDPOINT, Prober, wait_in_service

# The first step holds 10 % long enough to edit the spec while it does.
CANARY = {
    "strategy": "canary",
    "steps": [{"weight": 10, "pause": "60s"}, {"weight": 50, "pause": "1s"}],
    "analysis": {"onNoData": "pass"},
}


def at_ten_percent(e2e: E2E, names: Names) -> None:
    def candidate_weight(obj: dict[str, Any]) -> bool:
        if obj.get("status", {}).get("rollout", {}).get("canaryWeight") != 10:
            return False
        served = e2e.serving(ENDPOINT)
        weights = {v["VariantName"]: v.get("CurrentWeight") for v in served["ProductionVariants"]}
        return bool(weights.get(names.candidate_variant))

    e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        candidate_weight,
        timeout=90,
        what="the candidate at 10 %",
        on_timeout=e2e.diagnostics,
    )


def assert_only_the_baseline_is_left(e2e: E2E, names: Names) -> None:
    served = e2e.serving(ENDPOINT)
    assert served["EndpointConfigName"] == names.baseline_config, e2e.diagnostics()
    assert [v["VariantName"] for v in served["ProductionVariants"]] == [names.baseline_variant]
    state = e2e.sandbox.admin.state()
    assert sorted(state["endpointConfigs"]) == [names.baseline_config]
    assert sorted(state["models"]) == [names.baseline_model]
    deletes = [
        c
        for c in e2e.sandbox.admin.calls()
        if c["operation"] in ("DeleteEndpointConfig", "DeleteEndpoint")
    ]
    assert all(c["resource"] != names.baseline_config for c in deletes)
    assert all(c["operation"] != "DeleteEndpoint" for c in deletes)


def test_an_instance_type_edit_mid_canary_then_a_delete_leaves_the_baseline_serving(
    e2e: E2E,
) -> None:
    names = e2e.create("chat", spec(rollout=CANARY))
    wait_in_service(e2e)
    with Prober(e2e) as prober:
        at_ten_percent(e2e, names)
        edited = spec(rollout=CANARY, instanceType="ml.g6e.4xlarge")
        e2e.cluster.patch_spec(e2e.namespace, "chat", edited)
        e2e.cluster.delete(e2e.namespace, "chat")
        e2e.cluster.wait_gone(e2e.namespace, "chat", timeout=90, on_timeout=e2e.diagnostics)
    assert_only_the_baseline_is_left(e2e, names)
    prober.assert_all_answered()


def test_a_spec_that_no_longer_parses_returns_traffic_and_is_still_cleaned_up(
    e2e: E2E,
) -> None:
    names = e2e.create("chat", spec(rollout=CANARY))
    wait_in_service(e2e)
    with Prober(e2e) as prober:
        at_ten_percent(e2e, names)
        broken = spec(rollout=CANARY)
        # The CRD admits any key; the operator refuses one SageMaker would (a dash).
        broken["model"] = {**broken["model"], "environment": {"MY-VAR": "1"}}
        e2e.cluster.patch_spec(e2e.namespace, "chat", broken)
        obj = e2e.wait_phase("chat", "Failed", timeout=60)
        assert "MY-VAR" in obj["status"]["message"], e2e.explain(obj)
        served = e2e.serving(ENDPOINT)
        assert served["EndpointConfigName"] == names.baseline_config, e2e.explain(obj)
        e2e.cluster.delete(e2e.namespace, "chat")
        e2e.cluster.wait_gone(e2e.namespace, "chat", timeout=60, on_timeout=e2e.diagnostics)
    assert_only_the_baseline_is_left(e2e, names)
    prober.assert_all_answered()


def test_a_delete_right_after_the_spec_stopped_parsing_still_cleans_up_from_status(
    e2e: E2E,
) -> None:
    names = e2e.create("chat", spec(rollout=CANARY, deletionPolicy="Delete"))
    wait_in_service(e2e)
    at_ten_percent(e2e, names)
    broken = spec(rollout=CANARY, deletionPolicy="Delete")
    broken["model"] = {**broken["model"], "environment": {"MY-VAR": "1"}}
    e2e.cluster.patch_spec(e2e.namespace, "chat", broken)
    e2e.cluster.delete(e2e.namespace, "chat")
    e2e.cluster.wait_gone(e2e.namespace, "chat", timeout=60, on_timeout=e2e.diagnostics)
    # deletionPolicy Delete, read from the raw spec: the endpoint and all it served are gone.
    state = e2e.sandbox.admin.state()
    assert ENDPOINT not in state["endpoints"], e2e.diagnostics()
    assert not state["endpointConfigs"] and not state["models"], e2e.diagnostics()
