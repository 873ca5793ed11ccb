"""Inference components over real boto3: create/describe/list/update/delete, their errors,
rolling updates with auto-rollback alarms, copy counts, invocation by component name and
the per-component CloudWatch metrics; and serving after a Model resource is deleted."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from endpoint_optimizer.sandbox.config import Faults
from endpoint_optimizer.sandbox.testing import SandboxHandle, wait_for

from .conftest import FAST, ROLE, create_model, stream_lines

INSTANCE = "ml.g6e.12xlarge"  # 4 accelerators per instance in the sandbox's table
BODY = json.dumps({"inputs": "hello there", "parameters": {"max_new_tokens": 4}})


def _error(excinfo: pytest.ExceptionInfo[ClientError]) -> tuple[str, str]:
    error = excinfo.value.response["Error"]
    return str(error["Code"]), str(error["Message"])


def ic_endpoint(sm: Any, name: str = "ep", instances: int = 1, wait: bool = True) -> None:
    """An endpoint built for inference components: its variant names no model."""
    sm.create_endpoint_config(
        EndpointConfigName=f"{name}-config",
        ExecutionRoleArn=ROLE,
        ProductionVariants=[
            {
                "VariantName": "AllTraffic",
                "InstanceType": INSTANCE,
                "InitialInstanceCount": instances,
                "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"},
            }
        ],
    )
    sm.create_endpoint(EndpointName=name, EndpointConfigName=f"{name}-config")
    if wait:
        sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=FAST)


def spec(model: str, devices: int = 1) -> dict[str, Any]:
    return {
        "ModelName": model,
        "ComputeResourceRequirements": {
            "NumberOfAcceleratorDevicesRequired": devices,
            "MinMemoryRequiredInMb": 1024,
        },
    }


def create_ic(sm: Any, name: str, model: str, copies: int = 1, endpoint: str = "ep") -> None:
    sm.create_inference_component(
        InferenceComponentName=name,
        EndpointName=endpoint,
        VariantName="AllTraffic",
        Specification=spec(model),
        RuntimeConfig={"CopyCount": copies},
    )


def status(sm: Any, name: str) -> str:
    return str(
        sm.describe_inference_component(InferenceComponentName=name)["InferenceComponentStatus"]
    )


def in_service(sm: Any, name: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        found = sm.describe_inference_component(InferenceComponentName=name)
        return found if found["InferenceComponentStatus"] == "InService" else None

    return wait_for(check, timeout=30)


def test_create_describe_list_and_delete(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    create_model(sm, "m1")
    ic_endpoint(sm)
    arn = sm.create_inference_component(
        InferenceComponentName="ic-a",
        EndpointName="ep",
        VariantName="AllTraffic",
        Specification=spec("m1"),
        RuntimeConfig={"CopyCount": 2},
    )["InferenceComponentArn"]
    assert arn == "arn:aws:sagemaker:us-east-1:123456789012:inference-component/ic-a"
    creates = [c for c in sandbox.admin.calls() if c["operation"] == "CreateInferenceComponent"]
    assert [c["resource"] for c in creates] == ["ic-a"]
    first = sm.describe_inference_component(InferenceComponentName="ic-a")
    if first["InferenceComponentStatus"] != "InService":
        assert first["InferenceComponentStatus"] == "Creating"
        assert first["RuntimeConfig"] == {"DesiredCopyCount": 2, "CurrentCopyCount": 0}
    found = in_service(sm, "ic-a")
    assert found["RuntimeConfig"] == {"DesiredCopyCount": 2, "CurrentCopyCount": 2}
    assert found["EndpointName"] == "ep" and found["VariantName"] == "AllTraffic"
    assert found["Specification"]["ModelName"] == "m1"
    assert found["Specification"]["Container"]["DeployedImage"]["SpecifiedImage"].endswith(
        "djl-inference:0.38.0-lmi29.0.0-cu130"
    )
    assert found["Specification"]["ComputeResourceRequirements"]["MinMemoryRequiredInMb"] == 1024

    # A second endpoint's component is filtered out by EndpointNameEquals; pages of one.
    ic_endpoint(sm, "other")
    create_ic(sm, "ic-b", "m1", endpoint="ep")
    create_ic(sm, "ic-c", "m1", endpoint="other")
    pages = sm.get_paginator("list_inference_components").paginate(
        EndpointNameEquals="ep",
        SortBy="Name",
        SortOrder="Ascending",
        PaginationConfig={"PageSize": 1},
    )
    names = [c["InferenceComponentName"] for page in pages for c in page["InferenceComponents"]]
    assert names == ["ic-a", "ic-b"]
    assert [
        c["InferenceComponentName"]
        for c in sm.list_inference_components(EndpointNameEquals="other")["InferenceComponents"]
    ] == ["ic-c"]

    sm.delete_inference_component(InferenceComponentName="ic-a")
    # Deleting, or already gone: on a loaded host the sandbox's short delete can end
    # before this look (seen under two CPU burners: the describe answered not found).
    listed = [
        c["InferenceComponentName"] for c in sm.list_inference_components()["InferenceComponents"]
    ]
    if "ic-a" in listed:
        try:
            assert status(sm, "ic-a") == "Deleting"
        except ClientError as exc:
            assert "Could not find inference component" in exc.response["Error"]["Message"]

    def gone() -> bool:
        try:
            sm.describe_inference_component(InferenceComponentName="ic-a")
        except ClientError as exc:
            return "Could not find inference component" in exc.response["Error"]["Message"]
        return False

    wait_for(gone, timeout=30)


def test_errors_as_sagemaker_gives_them(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    create_model(sm, "m1")
    with pytest.raises(ClientError) as excinfo:
        sm.describe_inference_component(InferenceComponentName="nope")
    code, message = _error(excinfo)
    assert code == "ValidationException" and "Could not find inference component" in message

    # A variant without a model needs the config's ExecutionRoleArn.
    with pytest.raises(ClientError) as excinfo:
        sm.create_endpoint_config(
            EndpointConfigName="no-role",
            ProductionVariants=[
                {"VariantName": "AllTraffic", "InstanceType": INSTANCE, "InitialInstanceCount": 1}
            ],
        )
    assert _error(excinfo)[0] == "ValidationException"
    assert "ExecutionRoleArn" in _error(excinfo)[1]

    # The endpoint must be in service. Its create is stretched to ~7 s (0.07 s at this
    # time scale): the describe and the refused create both land inside it on a busy host
    # (CI once saw the endpoint reach InService between the two).
    sandbox.admin.set_faults(Faults(slow_transitions=100.0))
    ic_endpoint(sm, wait=False)
    sandbox.admin.set_faults(Faults())
    assert sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "Creating"
    with pytest.raises(ClientError) as excinfo:
        create_ic(sm, "early", "m1")
    assert _error(excinfo)[0] == "ValidationException"
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)

    # Copies must fit: one instance has 4 accelerators; 3 copies of 2 devices need 6.
    with pytest.raises(ClientError) as excinfo:
        sm.create_inference_component(
            InferenceComponentName="big",
            EndpointName="ep",
            VariantName="AllTraffic",
            Specification=spec("m1", devices=2),
            RuntimeConfig={"CopyCount": 3},
        )
    assert _error(excinfo)[0] == "ResourceLimitExceeded"
    create_ic(sm, "ic-a", "m1", copies=3)
    in_service(sm, "ic-a")
    with pytest.raises(ClientError) as excinfo:
        create_ic(sm, "ic-b", "m1", copies=2)  # 3 + 2 > 4 devices
    assert _error(excinfo)[0] == "ResourceLimitExceeded"
    with pytest.raises(ClientError) as excinfo:
        sm.update_inference_component_runtime_config(
            InferenceComponentName="ic-a", DesiredRuntimeConfig={"CopyCount": 5}
        )
    assert _error(excinfo)[0] == "ResourceLimitExceeded"
    with pytest.raises(ClientError) as excinfo:
        create_ic(sm, "ic-a", "m1")
    assert "already existing" in _error(excinfo)[1]
    with pytest.raises(ClientError) as excinfo:
        create_ic(sm, "ic-x", "missing-model")
    assert "Could not find model" in _error(excinfo)[1]

    # An endpoint whose variant hosts a model takes no components.
    sm.create_endpoint_config(
        EndpointConfigName="model-config",
        ProductionVariants=[
            {
                "VariantName": "AllTraffic",
                "ModelName": "m1",
                "InstanceType": INSTANCE,
                "InitialInstanceCount": 1,
            }
        ],
    )
    sm.create_endpoint(EndpointName="model-ep", EndpointConfigName="model-config")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="model-ep", WaiterConfig=FAST)
    with pytest.raises(ClientError) as excinfo:
        create_ic(sm, "ic-m", "m1", endpoint="model-ep")
    assert _error(excinfo)[0] == "ValidationException"


def _metric(cw: Any, metric: str, component: str, stat: str = "Sum") -> list[float]:
    now = datetime.now(UTC)
    result = cw.get_metric_data(
        MetricDataQueries=[
            {
                "Id": "m",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "AWS/SageMaker",
                        "MetricName": metric,
                        "Dimensions": [{"Name": "InferenceComponentName", "Value": component}],
                    },
                    "Period": 60,
                    "Stat": stat,
                },
            }
        ],
        StartTime=now - timedelta(minutes=5),
        EndTime=now + timedelta(minutes=1),
    )
    return [float(v) for v in result["MetricDataResults"][0]["Values"]]


def test_invoke_by_component_and_its_metrics(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    cw = sandbox.client("cloudwatch")
    create_model(sm, "m1")
    create_model(sm, "m2", env={"OPTION_MAX_MODEL_LEN": "4096"})
    ic_endpoint(sm)
    create_ic(sm, "ic-a", "m1")
    create_ic(sm, "ic-b", "m2")
    in_service(sm, "ic-a")
    in_service(sm, "ic-b")
    for _ in range(3):
        answer = rt.invoke_endpoint(
            EndpointName="ep",
            InferenceComponentName="ic-a",
            Body=BODY,
            ContentType="application/json",
        )
        assert answer["InvokedProductionVariant"] == "AllTraffic"
        assert json.loads(answer["Body"].read())["generated_text"]
    lines = stream_lines(rt, "ep", json.loads(BODY), InferenceComponentName="ic-b")
    assert lines
    served = {(r["inference_component"], r["model"]) for r in sandbox.admin.traffic("ep")}
    assert served == {("ic-a", "m1"), ("ic-b", "m2")}

    # Without the component name, or with an unknown one, SageMaker refuses the request.
    with pytest.raises(ClientError) as excinfo:
        rt.invoke_endpoint(EndpointName="ep", Body=BODY, ContentType="application/json")
    code, message = _error(excinfo)
    assert code == "ValidationError" and "Inference Component Name header is required" in message
    with pytest.raises(ClientError) as excinfo:
        rt.invoke_endpoint(EndpointName="ep", InferenceComponentName="nope", Body=BODY)
    assert _error(excinfo)[0] == "ValidationError"

    assert sum(_metric(cw, "Invocations", "ic-a")) == 3
    assert sum(_metric(cw, "Invocations", "ic-b")) == 1
    assert sum(_metric(cw, "Invocation5XXErrors", "ic-a")) == 0
    assert all(v > 0 for v in _metric(cw, "ModelLatency", "ic-b", "Average"))
    assert _metric(cw, "Invocations", "nope") == []


def test_a_model_too_big_for_its_copy_fails(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    create_model(sm, "big", uri="s3://models/llama-3.1-70b/")
    ic_endpoint(sm)
    create_ic(sm, "ic-big", "big")  # one L40S (48 GB) for 140 GB of bf16 weights

    def failed() -> dict[str, Any] | None:
        found = sm.describe_inference_component(InferenceComponentName="ic-big")
        return found if found["InferenceComponentStatus"] == "Failed" else None

    assert "CUDA out of memory" in wait_for(failed, timeout=30)["FailureReason"]


def test_an_update_to_a_model_too_big_rolls_back(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    create_model(sm, "m1")
    create_model(sm, "big", uri="s3://models/llama-3.1-70b/")
    ic_endpoint(sm)
    create_ic(sm, "ic-a", "m1", copies=2)
    in_service(sm, "ic-a")
    sm.update_inference_component(
        InferenceComponentName="ic-a", Specification=spec("big"), DeploymentConfig=_rolling()
    )
    done = in_service(sm, "ic-a")
    assert done["Specification"]["ModelName"] == "m1"
    assert "CUDA out of memory" in done["FailureReason"]


def test_copy_count_changes_and_zero_copies_refuse_requests(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    cw = sandbox.client("cloudwatch")
    create_model(sm, "m1")
    ic_endpoint(sm)
    create_ic(sm, "ic-a", "m1")
    in_service(sm, "ic-a")
    sm.update_inference_component_runtime_config(
        InferenceComponentName="ic-a", DesiredRuntimeConfig={"CopyCount": 3}
    )
    found = sm.describe_inference_component(InferenceComponentName="ic-a")
    if found["InferenceComponentStatus"] == "Updating":
        assert found["RuntimeConfig"] == {"DesiredCopyCount": 3, "CurrentCopyCount": 1}
    assert in_service(sm, "ic-a")["RuntimeConfig"]["CurrentCopyCount"] == 3
    # An update that changes nothing comes back InService with the same copies.
    sm.update_inference_component(InferenceComponentName="ic-a", RuntimeConfig={"CopyCount": 3})
    assert in_service(sm, "ic-a")["RuntimeConfig"]["CurrentCopyCount"] == 3

    sm.update_inference_component_runtime_config(
        InferenceComponentName="ic-a", DesiredRuntimeConfig={"CopyCount": 0}
    )
    assert in_service(sm, "ic-a")["RuntimeConfig"]["CurrentCopyCount"] == 0
    with pytest.raises(ClientError) as excinfo:
        rt.invoke_endpoint(EndpointName="ep", InferenceComponentName="ic-a", Body=BODY)
    code, message = _error(excinfo)
    assert code == "ValidationError" and "has no capacity" in message
    assert sum(_metric(cw, "NoCapacityInvocationFailures", "ic-a")) == 1
    assert _metric(cw, "Invocations", "ic-a") == []


def _share(sandbox: SandboxHandle, name: str) -> float | None:
    return sandbox.admin.state().get("inferenceComponentRollouts", {}).get(name)


def _rolling(alarm: str | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "RollingUpdatePolicy": {
            "MaximumBatchSize": {"Type": "CAPACITY_PERCENT", "Value": 50},
            "WaitIntervalInSeconds": 300,
        }
    }
    if alarm is not None:
        config["AutoRollbackConfiguration"] = {"Alarms": [{"AlarmName": alarm}]}
    return config


def test_rolling_update_moves_copies_batch_by_batch(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    create_model(sm, "m1")
    create_model(sm, "m2", env={"OPTION_MAX_MODEL_LEN": "4096"})
    ic_endpoint(sm, instances=1)
    create_ic(sm, "ic-a", "m1", copies=2)
    in_service(sm, "ic-a")
    # Slow the clock so each batch (provision 240 s, bake 300 s) lasts a few seconds.
    sandbox.admin.configure({"time_scale": 0.004})
    sm.update_inference_component(
        InferenceComponentName="ic-a", Specification=spec("m2"), DeploymentConfig=_rolling()
    )
    assert status(sm, "ic-a") == "Updating"
    assert wait_for(lambda: _share(sandbox, "ic-a") == 0.5 or None, timeout=30)
    # Half the copies run the new specification: requests reach both models.
    before = len(sandbox.admin.traffic("ep"))
    for _ in range(30):
        rt.invoke_endpoint(EndpointName="ep", InferenceComponentName="ic-a", Body=BODY)
    models = {r["model"] for r in sandbox.admin.traffic("ep")[before:]}
    assert models == {"m1", "m2"}
    assert (
        sm.describe_inference_component(InferenceComponentName="ic-a")["Specification"]["ModelName"]
        == "m1"
    )
    assert wait_for(lambda: _share(sandbox, "ic-a") == 1.0 or None, timeout=30)
    done = in_service(sm, "ic-a")
    assert done["Specification"]["ModelName"] == "m2"
    assert done["LastDeploymentConfig"] == _rolling()
    sandbox.admin.configure({"time_scale": 0.0002})
    before = len(sandbox.admin.traffic("ep"))
    rt.invoke_endpoint(EndpointName="ep", InferenceComponentName="ic-a", Body=BODY)
    assert {r["model"] for r in sandbox.admin.traffic("ep")[before:]} == {"m2"}


def test_an_alarm_in_alarm_rolls_the_component_back(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    cw = sandbox.client("cloudwatch")
    create_model(sm, "m1")
    create_model(sm, "m2")
    ic_endpoint(sm)
    create_ic(sm, "ic-a", "m1", copies=2)
    in_service(sm, "ic-a")
    cw.put_metric_alarm(
        AlarmName="ic-errors",
        Namespace="AWS/SageMaker",
        MetricName="Invocation5XXErrors",
        Dimensions=[{"Name": "InferenceComponentName", "Value": "ic-a"}],
        Statistic="Sum",
        Period=60,
        EvaluationPeriods=1,
        Threshold=1,
        ComparisonOperator="GreaterThanOrEqualToThreshold",
    )
    sandbox.admin.configure({"time_scale": 0.004})
    sm.update_inference_component(
        InferenceComponentName="ic-a",
        Specification=spec("m2"),
        DeploymentConfig=_rolling("ic-errors"),
    )
    assert wait_for(lambda: _share(sandbox, "ic-a") == 0.5 or None, timeout=30)
    cw.set_alarm_state(AlarmName="ic-errors", StateValue="ALARM", StateReason="test")
    rolled = in_service(sm, "ic-a")
    assert rolled["Specification"]["ModelName"] == "m1"
    assert "ic-errors" in rolled["FailureReason"]
    before = len(sandbox.admin.traffic("ep"))
    for _ in range(5):
        rt.invoke_endpoint(EndpointName="ep", InferenceComponentName="ic-a", Body=BODY)
    assert {r["model"] for r in sandbox.admin.traffic("ep")[before:]} == {"m1"}


def test_a_component_keeps_serving_after_its_model_is_deleted(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    create_model(sm, "m1")
    ic_endpoint(sm)
    create_ic(sm, "ic-a", "m1")
    in_service(sm, "ic-a")
    sm.delete_model(ModelName="m1")
    answer = rt.invoke_endpoint(EndpointName="ep", InferenceComponentName="ic-a", Body=BODY)
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
    # A new component naming the deleted Model cannot be made.
    with pytest.raises(ClientError) as excinfo:
        create_ic(sm, "ic-b", "m1")
    assert "Could not find model" in _error(excinfo)[1]


def test_update_endpoint_to_a_config_whose_model_was_deleted_fails(
    sandbox: SandboxHandle,
) -> None:
    sm = sandbox.client("sagemaker")
    create_model(sm, "m1")
    create_model(sm, "m2")
    for name, model in (("c1", "m1"), ("c2", "m2")):
        sm.create_endpoint_config(
            EndpointConfigName=name,
            ProductionVariants=[
                {
                    "VariantName": "AllTraffic",
                    "ModelName": model,
                    "InstanceType": INSTANCE,
                    "InitialInstanceCount": 1,
                }
            ],
        )
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="c1")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    sm.delete_model(ModelName="m2")
    with pytest.raises(ClientError) as excinfo:
        sm.update_endpoint(EndpointName="ep", EndpointConfigName="c2")
    code, message = _error(excinfo)
    assert code == "ValidationException" and "Could not find model" in message
    assert sm.describe_endpoint(EndpointName="ep")["EndpointConfigName"] == "c1"


def _instances(sm: Any, endpoint: str = "ep") -> int:
    [variant] = sm.describe_endpoint(EndpointName=endpoint)["ProductionVariants"]
    return int(variant["CurrentInstanceCount"])


def test_scale_to_zero_releases_instances_and_cold_starts(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    create_model(sm, "m1")
    # MinInstanceCount 0 needs an endpoint that hosts inference components.
    with pytest.raises(ClientError) as excinfo:
        sm.create_endpoint_config(
            EndpointConfigName="model-zero",
            ProductionVariants=[
                {
                    "VariantName": "AllTraffic",
                    "ModelName": "m1",
                    "InstanceType": INSTANCE,
                    "InitialInstanceCount": 1,
                    "ManagedInstanceScaling": {
                        "Status": "ENABLED",
                        "MinInstanceCount": 0,
                        "MaxInstanceCount": 2,
                    },
                }
            ],
        )
    assert _error(excinfo)[0] == "ValidationException"
    sm.create_endpoint_config(
        EndpointConfigName="ep-config",
        ExecutionRoleArn=ROLE,
        ProductionVariants=[
            {
                "VariantName": "AllTraffic",
                "InstanceType": INSTANCE,
                "InitialInstanceCount": 1,
                "ManagedInstanceScaling": {
                    "Status": "ENABLED",
                    "MinInstanceCount": 0,
                    "MaxInstanceCount": 2,
                },
            }
        ],
    )
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="ep-config")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    create_ic(sm, "ic-a", "m1")
    in_service(sm, "ic-a")
    assert _instances(sm) == 1

    # The cold start and the idle release come from the sandbox's own durations.
    config = sandbox.admin.configure({"time_scale": 0.002})
    scale = float(config["timeScale"])
    durations = config["durations"]
    release = float(durations["instanceIdleRelease"]) * scale
    cold = (
        float(durations["instanceProvision"]) + float(durations["inferenceComponentCopy"])
    ) * scale

    sm.update_inference_component_runtime_config(
        InferenceComponentName="ic-a", DesiredRuntimeConfig={"CopyCount": 0}
    )
    assert in_service(sm, "ic-a")["RuntimeConfig"]["CurrentCopyCount"] == 0
    idle_from = time.monotonic()
    wait_for(lambda: _instances(sm) == 0 or None, timeout=30)
    # The release clock starts when the copies reach zero, just before `idle_from`.
    assert time.monotonic() - idle_from >= release * 0.9
    with pytest.raises(ClientError) as excinfo:
        rt.invoke_endpoint(EndpointName="ep", InferenceComponentName="ic-a", Body=BODY)
    assert "has no capacity" in _error(excinfo)[1]

    # Back from zero: an instance is provisioned before the copy loads.
    started = time.monotonic()
    sm.update_inference_component_runtime_config(
        InferenceComponentName="ic-a", DesiredRuntimeConfig={"CopyCount": 1}
    )
    in_service(sm, "ic-a")
    assert time.monotonic() - started >= cold
    assert _instances(sm) == 1
    answer = rt.invoke_endpoint(EndpointName="ep", InferenceComponentName="ic-a", Body=BODY)
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
