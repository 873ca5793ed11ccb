"""Application Auto Scaling over real boto3: scalable targets and policies of a SageMaker
variant, their errors, UpdateEndpoint's refusal on an autoscaled variant, and a variant that
keeps serving after its Model resource is deleted."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from endpoint_optimizer.sandbox.testing import SandboxHandle, wait_for

from .conftest import FAST, create_model, deploy, variant

RESOURCE = "endpoint/ep/variant/AllTraffic"
DIMENSION = "sagemaker:variant:DesiredInstanceCount"
TARGET = {"ServiceNamespace": "sagemaker", "ResourceId": RESOURCE, "ScalableDimension": DIMENSION}
TRACKING = {
    "TargetValue": 70.0,
    "PredefinedMetricSpecification": {
        "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"
    },
    "ScaleInCooldown": 300,
    "ScaleOutCooldown": 60,
}
CUSTOM = {
    "TargetValue": 2.5,
    "CustomizedMetricSpecification": {
        "MetricName": "ModelLatency",
        "Namespace": "AWS/SageMaker",
        "Dimensions": [
            {"Name": "EndpointName", "Value": "ep"},
            {"Name": "VariantName", "Value": "AllTraffic"},
        ],
        "Statistic": "Average",
    },
}
STEP = {
    "AdjustmentType": "ChangeInCapacity",
    "StepAdjustments": [
        {"MetricIntervalLowerBound": 0.0, "MetricIntervalUpperBound": 10.0, "ScalingAdjustment": 1},
        {"MetricIntervalLowerBound": 10.0, "ScalingAdjustment": 2},
    ],
    "Cooldown": 120,
    "MetricAggregationType": "Average",
}


def _error(excinfo: pytest.ExceptionInfo[ClientError]) -> tuple[str, str]:
    error = excinfo.value.response["Error"]
    return str(error["Code"]), str(error["Message"])


def test_register_describe_update_and_deregister_a_variant(sandbox: SandboxHandle) -> None:
    sm, aas = sandbox.client("sagemaker"), sandbox.client("application-autoscaling")
    deploy(sm, "ep")
    arn = aas.register_scalable_target(**TARGET, MinCapacity=1, MaxCapacity=4)["ScalableTargetARN"]
    assert arn.startswith("arn:aws:application-autoscaling:us-east-1:")
    [target] = aas.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    assert (target["ResourceId"], target["MinCapacity"], target["MaxCapacity"]) == (RESOURCE, 1, 4)
    assert target["RoleARN"].endswith("AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint")
    # Registering again updates in place (the same ARN), one bound at a time if asked.
    again = aas.register_scalable_target(**TARGET, MaxCapacity=6)["ScalableTargetARN"]
    assert again == arn
    [target] = aas.describe_scalable_targets(
        ServiceNamespace="sagemaker", ResourceIds=[RESOURCE], ScalableDimension=DIMENSION
    )["ScalableTargets"]
    assert (target["MinCapacity"], target["MaxCapacity"]) == (1, 6)
    assert (
        aas.describe_scalable_targets(
            ServiceNamespace="sagemaker", ResourceIds=["endpoint/ep/variant/Other"]
        )["ScalableTargets"]
        == []
    )
    aas.deregister_scalable_target(**TARGET)
    assert aas.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"] == []


def test_register_errors(sandbox: SandboxHandle) -> None:
    sm, aas = sandbox.client("sagemaker"), sandbox.client("application-autoscaling")
    deploy(sm, "ep")
    cases: list[tuple[dict[str, Any], str]] = [
        ({**TARGET, "ResourceId": "endpoint/nope/variant/AllTraffic"}, "does not exist"),
        ({**TARGET, "ResourceId": "endpoint/ep/variant/Missing"}, "does not exist"),
        ({**TARGET, "ResourceId": "endpoint/ep"}, "Unsupported"),
        (
            {**TARGET, "ScalableDimension": "sagemaker:variant:DesiredProvisionedConcurrency"},
            "Unsupported",
        ),
        ({**TARGET, "MinCapacity": 3, "MaxCapacity": 2}, "cannot be greater"),
        ({**TARGET, "MinCapacity": 0, "MaxCapacity": 2}, "below 1"),
        ({**TARGET}, "MinCapacity and MaxCapacity are required"),
        ({**TARGET, "ScalableDimension": "bogus:dimension"}, "failed to satisfy constraint"),
    ]
    for request, wording in cases:
        with pytest.raises(ClientError) as excinfo:
            aas.register_scalable_target(**request)
        code, message = _error(excinfo)
        assert code == "ValidationException", (request, message)
        assert wording in message, (request, message)
    with pytest.raises(ClientError) as excinfo:
        aas.deregister_scalable_target(**TARGET)
    code, message = _error(excinfo)
    assert code == "ObjectNotFoundException"
    assert message == (
        f"No scalable target registered for service namespace: sagemaker, resource ID: "
        f"{RESOURCE}, scalable dimension: {DIMENSION}"
    )


def test_policies_put_describe_update_delete_and_go_with_their_target(
    sandbox: SandboxHandle,
) -> None:
    sm, aas = sandbox.client("sagemaker"), sandbox.client("application-autoscaling")
    deploy(sm, "ep")
    aas.register_scalable_target(**TARGET, MinCapacity=1, MaxCapacity=4)
    tracked = aas.put_scaling_policy(
        **TARGET,
        PolicyName="invocations",
        PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration=TRACKING,
    )
    assert [a["AlarmName"].split("-")[-6] for a in tracked["Alarms"]] == ["AlarmHigh", "AlarmLow"]
    aas.put_scaling_policy(
        **TARGET,
        PolicyName="latency",
        PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration=CUSTOM,
    )
    stepped = aas.put_scaling_policy(
        **TARGET,
        PolicyName="steps",
        PolicyType="StepScaling",
        StepScalingPolicyConfiguration=STEP,
    )
    assert "Alarms" not in stepped or stepped["Alarms"] == []
    policies = aas.describe_scaling_policies(ServiceNamespace="sagemaker", ResourceId=RESOURCE)[
        "ScalingPolicies"
    ]
    by_name = {p["PolicyName"]: p for p in policies}
    assert sorted(by_name) == ["invocations", "latency", "steps"]
    assert by_name["invocations"]["TargetTrackingScalingPolicyConfiguration"] == TRACKING
    assert by_name["latency"]["TargetTrackingScalingPolicyConfiguration"] == CUSTOM
    assert by_name["steps"]["StepScalingPolicyConfiguration"] == STEP
    assert by_name["steps"]["PolicyType"] == "StepScaling"
    # Putting a policy again updates it under the same ARN.
    changed = aas.put_scaling_policy(
        **TARGET,
        PolicyName="invocations",
        PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration={**TRACKING, "TargetValue": 50.0},
    )
    assert changed["PolicyARN"] == tracked["PolicyARN"]
    [one] = aas.describe_scaling_policies(
        ServiceNamespace="sagemaker", PolicyNames=["invocations"]
    )["ScalingPolicies"]
    assert one["TargetTrackingScalingPolicyConfiguration"]["TargetValue"] == 50.0
    aas.delete_scaling_policy(**TARGET, PolicyName="latency")
    with pytest.raises(ClientError) as excinfo:
        aas.delete_scaling_policy(**TARGET, PolicyName="latency")
    assert _error(excinfo)[0] == "ObjectNotFoundException"
    # Deregistering the target deletes its policies with it.
    aas.deregister_scalable_target(**TARGET)
    assert aas.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"] == []


def test_policy_errors(sandbox: SandboxHandle) -> None:
    sm, aas = sandbox.client("sagemaker"), sandbox.client("application-autoscaling")
    deploy(sm, "ep")
    with pytest.raises(ClientError) as excinfo:
        aas.put_scaling_policy(
            **TARGET,
            PolicyName="p",
            PolicyType="TargetTrackingScaling",
            TargetTrackingScalingPolicyConfiguration=TRACKING,
        )
    code, message = _error(excinfo)
    assert code == "ObjectNotFoundException"
    assert message.startswith("No scalable target registered for service namespace: sagemaker")
    aas.register_scalable_target(**TARGET, MinCapacity=1, MaxCapacity=2)
    wrong: list[dict[str, Any]] = [
        {"PolicyType": "TargetTrackingScaling", "StepScalingPolicyConfiguration": STEP},
        {"PolicyType": "StepScaling", "TargetTrackingScalingPolicyConfiguration": TRACKING},
        {
            "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": {
                "TargetValue": 50.0,
                "PredefinedMetricSpecification": {
                    "PredefinedMetricType": "ECSServiceAverageCPUUtilization"
                },
            },
        },
        {
            "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": {"TargetValue": 50.0},
        },
        {"PolicyType": "PredictiveScaling"},
    ]
    for request in wrong:
        with pytest.raises(ClientError) as excinfo:
            aas.put_scaling_policy(**TARGET, PolicyName="p", **request)
        assert _error(excinfo)[0] == "ValidationException", request


def _update_to(sm: Any, config: str, variants: list[dict[str, Any]]) -> None:
    sm.create_endpoint_config(EndpointConfigName=config, ProductionVariants=variants)
    sm.update_endpoint(EndpointName="ep", EndpointConfigName=config)
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)


def test_update_endpoint_refuses_to_remove_or_resize_an_autoscaled_variant(
    sandbox: SandboxHandle,
) -> None:
    sm, aas = sandbox.client("sagemaker"), sandbox.client("application-autoscaling")
    deploy(sm, "ep")
    create_model(sm, "other")
    aas.register_scalable_target(**TARGET, MinCapacity=1, MaxCapacity=4)
    refused = {
        "removed": [variant("Candidate", "other")],
        "resized": [variant("AllTraffic", "ep-model", instance="ml.g6e.12xlarge")],
    }
    for config, variants in refused.items():
        sm.create_endpoint_config(EndpointConfigName=config, ProductionVariants=variants)
        with pytest.raises(ClientError) as excinfo:
            sm.update_endpoint(EndpointName="ep", EndpointConfigName=config)
        code, message = _error(excinfo)
        assert code == "ValidationException"
        assert '"[AllTraffic]"' in message and "DeregisterScalableTarget" in message
        assert sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "InService"
    # A new model on the same variant and instance type is allowed, and so is adding one.
    _update_to(sm, "new-model", [variant("AllTraffic", "other")])
    _update_to(sm, "paired", [variant("AllTraffic", "other"), variant("Candidate", "ep-model")])
    # Deregistered, the removal goes through.
    aas.deregister_scalable_target(**TARGET)
    _update_to(sm, "removed-now", [variant("Candidate", "other")])
    assert sm.describe_endpoint(EndpointName="ep")["EndpointConfigName"] == "removed-now"


def test_delete_endpoint_deregisters_its_targets(sandbox: SandboxHandle) -> None:
    sm, aas = sandbox.client("sagemaker"), sandbox.client("application-autoscaling")
    deploy(sm, "ep")
    aas.register_scalable_target(**TARGET, MinCapacity=1, MaxCapacity=4)
    aas.put_scaling_policy(
        **TARGET,
        PolicyName="p",
        PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration=TRACKING,
    )
    sm.delete_endpoint(EndpointName="ep")
    assert aas.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"] == []
    assert aas.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"] == []


def test_describe_pages_with_next_token(sandbox: SandboxHandle) -> None:
    sm, aas = sandbox.client("sagemaker"), sandbox.client("application-autoscaling")
    for name in ("ep", "ep2", "ep3"):
        deploy(sm, name)
        aas.register_scalable_target(
            **{**TARGET, "ResourceId": f"endpoint/{name}/variant/AllTraffic"},
            MinCapacity=1,
            MaxCapacity=2,
        )
    pages = aas.get_paginator("describe_scalable_targets").paginate(
        ServiceNamespace="sagemaker", PaginationConfig={"PageSize": 2}
    )
    seen = [t["ResourceId"] for page in pages for t in page["ScalableTargets"]]
    assert sorted(seen) == [f"endpoint/{n}/variant/AllTraffic" for n in ("ep", "ep2", "ep3")]
    with pytest.raises(ClientError) as excinfo:
        aas.describe_scalable_targets(ServiceNamespace="sagemaker", NextToken="garbage")
    assert _error(excinfo)[0] == "InvalidNextTokenException"


def test_a_running_variant_keeps_serving_after_its_model_is_deleted(
    sandbox: SandboxHandle,
) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    deploy(sm, "ep")
    sm.delete_model(ModelName="ep-model")
    body = json.dumps({"inputs": "hello", "parameters": {"max_new_tokens": 4}})
    answer = rt.invoke_endpoint(EndpointName="ep", Body=body, ContentType="application/json")
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert answer["InvokedProductionVariant"] == "AllTraffic"
    # A new deployment needs the Model again: a config naming it cannot be made.
    with pytest.raises(ClientError) as excinfo:
        sm.create_endpoint_config(
            EndpointConfigName="again", ProductionVariants=[variant("AllTraffic", "ep-model")]
        )
    assert "Could not find model" in _error(excinfo)[1]
    assert wait_for(lambda: rt.invoke_endpoint(EndpointName="ep", Body=body)["Body"].read())
