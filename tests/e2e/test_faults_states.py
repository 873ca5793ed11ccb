"""Endpoint states the operator does not cause: SystemUpdating, RollingBack, UpdateRollbackFailed,
Failed (sagemaker-api.md §2.5). Waited out when they end by themselves; Terminal, with what
to do, when they need a person; never retried blindly.
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from endpoint_optimizer.sandbox.config import Faults
from endpoint_optimizer.sandbox.testing import running_sandbox, wait_for
from tests.e2e.conftest import E2E, GUARD, sandbox_config, spec
from tests.e2e.harness import condition
from tests.e2e.test_crash import ENDPOINT, Prober
from tests.e2e.test_faults import ONE_STEP, calls_of, settle

ENDS = {"Succeeded", "Failed", "RolledBack"}
UPDATES = ("UpdateEndpoint", "UpdateEndpointWeightsAndCapacities", "DeleteEndpoint")


def test_the_endpoint_states_switch_reports_the_state_and_refuses_updates() -> None:
    with running_sandbox(sandbox_config()) as sandbox:
        sm = sandbox.client("sagemaker")
        image = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0"
        sm.create_model(
            ModelName="m",
            PrimaryContainer={"Image": image, "ModelDataUrl": "s3://b/llama-8b/model.tar.gz"},
            ExecutionRoleArn="arn:aws:iam::123456789012:role/r",
        )
        variant = {"VariantName": "v", "ModelName": "m", "InstanceType": "ml.g6e.2xlarge"}
        sm.create_endpoint_config(
            EndpointConfigName="c", ProductionVariants=[{**variant, "InitialInstanceCount": 1}]
        )
        sm.create_endpoint(EndpointName="ep", EndpointConfigName="c")
        wait_for(
            lambda: sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "InService",
            timeout=GUARD,
        )
        sandbox.admin.set_faults(Faults(endpoint_states={"ep": "SystemUpdating"}))
        assert sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "SystemUpdating"
        listed = sm.list_endpoints()["Endpoints"]
        assert [e["EndpointStatus"] for e in listed] == ["SystemUpdating"]
        with pytest.raises(ClientError, match="Cannot update in-progress endpoint"):
            sm.update_endpoint(EndpointName="ep", EndpointConfigName="c")
        with pytest.raises(ClientError, match="Cannot update in-progress endpoint"):
            sm.update_endpoint_weights_and_capacities(
                EndpointName="ep", DesiredWeightsAndCapacities=[{"VariantName": "v"}]
            )
        with pytest.raises(ClientError, match="SystemUpdating"):
            sm.delete_endpoint(EndpointName="ep")
        # Maintenance does not stop serving.
        runtime = sandbox.client("sagemaker-runtime")
        answer = runtime.invoke_endpoint(
            EndpointName="ep", Body=b'{"inputs": "hi", "parameters": {"max_new_tokens": 2}}'
        )
        assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
        sandbox.admin.clear_faults()
        assert sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "InService"


@pytest.mark.slow
def test_system_updating_and_rolling_back_are_waited_out_without_any_update(e2e: E2E) -> None:
    e2e.create("chat", spec(rollout=ONE_STEP))
    e2e.cluster.wait_for_phase(
        e2e.namespace, "chat", "Optimizing", timeout=GUARD, on_timeout=e2e.diagnostics
    )
    for state in ("SystemUpdating", "RollingBack"):
        e2e.sandbox.admin.set_faults(Faults(endpoint_states={ENDPOINT: state}))
        before = sum(len(calls_of(e2e, op)) for op in UPDATES)
        settle(e2e, rechecks=3)
        obj = e2e.cluster.get(e2e.namespace, "chat")
        assert obj["status"]["phase"] in ("Optimizing", "Deploying"), e2e.explain(obj)
        assert state in obj["status"]["message"], e2e.explain(obj)
        assert sum(len(calls_of(e2e, op)) for op in UPDATES) == before, "updated mid-maintenance"
    e2e.sandbox.admin.clear_faults()
    obj = e2e.wait_phase("chat", ENDS)
    assert obj["status"]["phase"] == "Succeeded", e2e.explain(obj)


def test_update_rollback_failed_is_terminal_with_what_to_do(e2e: E2E) -> None:
    names = e2e.create("chat", spec(rollout=ONE_STEP))
    e2e.cluster.wait_for_phase(
        e2e.namespace, "chat", "Analyzing", timeout=GUARD, on_timeout=e2e.diagnostics
    )
    e2e.sandbox.admin.set_faults(Faults(endpoint_states={ENDPOINT: "UpdateRollbackFailed"}))
    with Prober(e2e) as prober:
        obj = e2e.wait_phase("chat", ENDS)
        after = sum(len(calls_of(e2e, op)) for op in UPDATES)
        settle(e2e)
    assert obj["status"]["phase"] == "Failed", e2e.explain(obj)
    terminal = condition(obj, "Terminal")
    assert terminal is not None and terminal["status"] == "True"
    assert terminal["reason"] == "EndpointUpdateRollbackFailed"
    assert names.baseline_config in terminal["message"]  # where to put it back by hand
    assert "does not retry" in terminal["message"]
    assert sum(len(calls_of(e2e, op)) for op in UPDATES) == after, "retried blindly"
    prober.assert_all_answered()


def test_a_failed_endpoint_create_is_terminal_and_not_recreated(e2e: E2E) -> None:
    e2e.sandbox.admin.set_faults(Faults(fail_endpoint_creates=[ENDPOINT]))
    e2e.create("chat", spec(rollout=ONE_STEP))
    obj = e2e.wait_phase("chat", ENDS)
    settle(e2e)
    assert obj["status"]["phase"] == "Failed", e2e.explain(obj)
    terminal = condition(obj, "Terminal")
    assert terminal is not None and terminal["reason"] == "EndpointFailed"
    assert "ping health check" in terminal["message"]  # SageMaker's FailureReason
    assert "only DeleteEndpoint" in terminal["message"]
    assert len(calls_of(e2e, "CreateEndpoint")) == 1
    assert calls_of(e2e, "DeleteEndpoint") == []  # the user decides; nothing deleted for them
