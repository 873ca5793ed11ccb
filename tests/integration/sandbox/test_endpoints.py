"""Models, endpoint configs and endpoints over real boto3: lifecycle, errors, validation."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, WaiterError

from endpoint_optimizer.sandbox.testing import SandboxHandle

from .conftest import FAST, create_model, deploy, variant

# A waiter that waits on the condition, not on a budget a busy machine misses.
PATIENT = {"Delay": 0.05, "MaxAttempts": 2400}


def test_endpoint_goes_creating_then_in_service_then_deleted(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    # Creating lasts 7.2 s and Deleting 3 s: observable on a machine whose cores are busy.
    sandbox.admin.configure({"timeScale": 0.02})
    deploy(sm, "ep", wait=False)
    assert sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "Creating"
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=PATIENT)
    described = sm.describe_endpoint(EndpointName="ep")
    assert described["EndpointConfigName"] == "ep-config"
    (summary,) = described["ProductionVariants"]
    assert summary["VariantName"] == "AllTraffic"
    assert summary["CurrentWeight"] == 1.0
    assert summary["DeployedImages"][0]["ResolvedImage"].count("@sha256:") == 1
    sandbox.admin.configure({"timeScale": 0.05})
    sm.delete_endpoint(EndpointName="ep")
    assert sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "Deleting"
    sm.get_waiter("endpoint_deleted").wait(EndpointName="ep", WaiterConfig=PATIENT)


def test_missing_and_duplicate_resources_answer_like_aws(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    with pytest.raises(ClientError) as missing:
        sm.describe_endpoint(EndpointName="nowhere")
    assert missing.value.response["Error"]["Code"] == "ValidationException"
    assert "Could not find endpoint" in missing.value.response["Error"]["Message"]
    deploy(sm, "ep")
    with pytest.raises(ClientError) as duplicate:
        sm.create_endpoint(EndpointName="ep", EndpointConfigName="ep-config")
    assert "Cannot create already existing endpoint" in str(duplicate.value)
    with pytest.raises(ClientError) as model_twice:
        create_model(sm, "ep-model")
    assert "Cannot create already existing model" in str(model_twice.value)
    with pytest.raises(ClientError) as no_model:
        sm.create_endpoint_config(
            EndpointConfigName="other", ProductionVariants=[variant("A", "ghost")]
        )
    assert "Could not find model" in str(no_model.value)
    with pytest.raises(ClientError) as no_config:
        sm.create_endpoint(EndpointName="ep2", EndpointConfigName="ghost-config")
    assert "Could not find endpoint configuration" in str(no_config.value)


def test_server_checks_patterns_enums_and_max_that_botocore_does_not(
    sandbox: SandboxHandle,
) -> None:
    sm = sandbox.client("sagemaker")
    create_model(sm, "m")
    with pytest.raises(ClientError) as bad_name:
        sm.create_endpoint_config(
            EndpointConfigName="under_score", ProductionVariants=[variant("A", "m")]
        )
    message = bad_name.value.response["Error"]["Message"]
    assert "regular expression pattern" in message and "endpointConfigName" in message
    with pytest.raises(ClientError) as bad_enum:
        sm.create_endpoint_config(
            EndpointConfigName="cfg", ProductionVariants=[variant("A", "m", instance="ml.x9.huge")]
        )
    assert "enum value set" in bad_enum.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as too_long:
        sm.describe_endpoint(EndpointName="e" * 64)
    assert "length less than or equal to 63" in too_long.value.response["Error"]["Message"]


def test_model_too_big_for_the_gpu_fails_the_endpoint(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    deploy(sm, "big", uri="s3://models/llama-3.1-70b/", wait=False)
    with pytest.raises(WaiterError):
        sm.get_waiter("endpoint_in_service").wait(EndpointName="big", WaiterConfig=FAST)
    described = sm.describe_endpoint(EndpointName="big")
    assert described["EndpointStatus"] == "Failed"
    assert "out of memory" in described["FailureReason"]


def test_call_log_names_operation_resource_and_error(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    with pytest.raises(ClientError):
        sm.describe_endpoint(EndpointName="ghost")
    create_model(sm, "m")
    calls = sandbox.admin.calls()
    assert [(c["operation"], c["resource"], c["errorCode"]) for c in calls] == [
        ("DescribeEndpoint", "ghost", "ValidationException"),
        ("CreateModel", "m", None),
    ]
    # A poller keeps its place: only the calls after the first N.
    assert [c["operation"] for c in sandbox.admin.calls(since=1)] == ["CreateModel"]
    assert sandbox.admin.calls(since=5) == []
    for _ in range(3):
        sm.describe_model(ModelName="m")
    assert sandbox.admin.peak_calls_per_minute("m") == 4
    assert sandbox.admin.peak_calls_per_minute("m", "DescribeModel") == 3
