"""The remaining operations' happy and error paths: describe/delete echoes, training-job
stop and failure, alarms evaluated from served traffic, GetMetricStatistics."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.errors import SageMakerError
from endpoint_optimizer.aws.perform import perform_call
from endpoint_optimizer.pipeline.model import Action, ActionKind
from endpoint_optimizer.sandbox.config import BreakStreams, Faults, InvocationErrors
from endpoint_optimizer.sandbox.testing import SandboxHandle, wait_for

from .conftest import IMAGE, ROLE, create_model, deploy, variant

DIMENSIONS = [
    {"Name": "EndpointName", "Value": "ep"},
    {"Name": "VariantName", "Value": "AllTraffic"},
]


def test_describe_echoes_and_delete_removes_models_and_configs(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    create_model(sm, "m", env={"OPTION_QUANTIZE": "fp8"})
    model = sm.describe_model(ModelName="m")
    assert model["PrimaryContainer"]["Environment"] == {"OPTION_QUANTIZE": "fp8"}
    assert model["ModelArn"].endswith(":model/m")
    sm.create_endpoint_config(
        EndpointConfigName="c",
        ProductionVariants=[variant("A", "m")],
        MetricsConfig={"EnableEnhancedMetrics": True},
    )
    config = sm.describe_endpoint_config(EndpointConfigName="c")
    assert config["ProductionVariants"][0]["InstanceType"] == "ml.g6e.2xlarge"
    assert config["MetricsConfig"] == {"EnableEnhancedMetrics": True}
    sm.delete_endpoint_config(EndpointConfigName="c")
    sm.delete_model(ModelName="m")
    for call, kwargs in (
        (sm.describe_endpoint_config, {"EndpointConfigName": "c"}),
        (sm.describe_model, {"ModelName": "m"}),
        (sm.delete_model, {"ModelName": "m"}),
    ):
        with pytest.raises(ClientError) as missing:
            call(**kwargs)
        assert "Could not find" in missing.value.response["Error"]["Message"]


def _training_job(sm: Any, name: str) -> None:
    sm.create_training_job(
        TrainingJobName=name,
        RoleArn=ROLE,
        AlgorithmSpecification={"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        HyperParameters={"scheme": "FP8_DYNAMIC"},
        OutputDataConfig={"S3OutputPath": "s3://out/train/"},
        ResourceConfig={"InstanceType": "ml.g6e.2xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
        StoppingCondition={"MaxRuntimeInSeconds": 3600},
    )


def _training_status(sm: Any, name: str) -> str | None:
    status: str = sm.describe_training_job(TrainingJobName=name)["TrainingJobStatus"]
    return None if status in ("InProgress", "Stopping") else status


def test_training_job_failure_fault_stop_and_errors(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    sandbox.admin.set_faults(Faults(fail_training_jobs=["broken"]))
    _training_job(sm, "broken")
    assert wait_for(lambda: _training_status(sm, "broken")) == "Failed"
    assert sm.describe_training_job(TrainingJobName="broken")["FailureReason"]
    sandbox.admin.configure({"timeScale": 0.01})
    _training_job(sm, "long")
    with pytest.raises(ClientError) as twice:
        _training_job(sm, "long")
    assert twice.value.response["Error"]["Code"] == "ResourceInUse"
    sm.stop_training_job(TrainingJobName="long")
    assert wait_for(lambda: _training_status(sm, "long")) == "Stopped"
    # SageMaker refuses to stop a job that already ended (awslabs/benchmark-ai#928).
    with pytest.raises(ClientError) as ended:
        sm.stop_training_job(TrainingJobName="long")
    assert ended.value.response["Error"]["Code"] == "ValidationException"
    assert "in status Stopped" in ended.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as missing:
        sm.describe_training_job(TrainingJobName="ghost")
    assert missing.value.response["Error"]["Code"] == "ValidationException"
    statuses = sm.list_training_jobs(StatusEquals="Stopped")["TrainingJobSummaries"]
    assert [job["TrainingJobName"] for job in statuses] == ["long"]


def test_partial_throttling_is_absorbed_by_botocore_retries(sandbox: SandboxHandle) -> None:
    sandbox.admin.set_faults(Faults(throttle_fraction=0.3))
    sm = sandbox.client("sagemaker", retries={"mode": "standard", "total_max_attempts": 10})
    for index in range(10):
        create_model(sm, f"m{index}")
    codes = [c["errorCode"] for c in sandbox.admin.calls()]
    assert codes.count(None) == 10
    assert codes.count("ThrottlingException") >= 1  # seeded: the same calls every run


def _alarm_request(described: dict[str, Any]) -> dict[str, Any]:
    keys = ("AlarmName", "Namespace", "MetricName", "Dimensions", "Statistic", "Period")
    keys += ("EvaluationPeriods", "Threshold", "ComparisonOperator")
    return {key: described[key] for key in keys}


def test_alarm_goes_into_alarm_from_served_errors(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    cw = sandbox.client("cloudwatch")
    deploy(sm, "ep")
    cw.put_metric_alarm(
        AlarmName="ep-4xx",
        Namespace="AWS/SageMaker",
        MetricName="Invocation4XXErrors",
        Dimensions=DIMENSIONS,
        Statistic="Sum",
        Period=60,
        EvaluationPeriods=1,
        Threshold=0,
        ComparisonOperator="GreaterThanThreshold",
    )
    (alarm,) = cw.describe_alarms(AlarmNames=["ep-4xx"])["MetricAlarms"]
    assert alarm["StateValue"] == "INSUFFICIENT_DATA"
    cw.put_metric_alarm(**{**_alarm_request(alarm), "TreatMissingData": "notBreaching"})
    assert cw.describe_alarms(AlarmNames=["ep-4xx"])["MetricAlarms"][0]["StateValue"] == "OK"
    body = json.dumps({"inputs": "x", "parameters": {"max_new_tokens": 2}})
    rt.invoke_endpoint(EndpointName="ep", Body=body)
    assert cw.describe_alarms(AlarmNames=["ep-4xx"])["MetricAlarms"][0]["StateValue"] == "OK"
    sandbox.admin.set_faults(Faults(break_streams=[BreakStreams(after_tokens=1)]))
    response = rt.invoke_endpoint_with_response_stream(EndpointName="ep", Body=body)
    with pytest.raises(ClientError):
        for _event in response["Body"]:
            pass
    assert cw.describe_alarms(StateValue="ALARM")["MetricAlarms"][0]["AlarmName"] == "ep-4xx"
    now = datetime.now(UTC)
    stats = cw.get_metric_statistics(
        Namespace="AWS/SageMaker",
        MetricName="Invocations",
        Dimensions=DIMENSIONS,
        StartTime=now - timedelta(minutes=5),
        EndTime=now + timedelta(minutes=1),
        Period=60,
        Statistics=["Sum"],
    )
    assert sum(point["Sum"] for point in stats["Datapoints"]) == 2
    cw.delete_alarms(AlarmNames=["ep-4xx"])
    assert cw.describe_alarms()["MetricAlarms"] == []


def test_invocation_errors_fault_answers_model_error_and_counts_5xx(
    sandbox: SandboxHandle,
) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    cw = sandbox.client("cloudwatch")
    deploy(sm, "ep")
    sandbox.admin.set_faults(Faults(invocation_errors=[InvocationErrors(endpoint="ep")]))
    body = json.dumps({"inputs": "x", "parameters": {"max_new_tokens": 2}})
    with pytest.raises(ClientError) as failed:
        rt.invoke_endpoint(EndpointName="ep", Body=body)
    error = failed.value.response
    assert error["Error"]["Code"] == "ModelError"
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert error["OriginalStatusCode"] == 500
    with pytest.raises(ClientError):
        rt.invoke_endpoint_with_response_stream(EndpointName="ep", Body=body)
    sandbox.admin.set_faults(
        Faults(break_streams=[BreakStreams(after_tokens=0, exception="InternalStreamFailure")])
    )
    response = rt.invoke_endpoint_with_response_stream(EndpointName="ep", Body=body)
    with pytest.raises(ClientError) as internal:
        for _event in response["Body"]:
            pass
    assert internal.value.response["Error"]["Code"] == "InternalStreamFailure"
    now = datetime.now(UTC)
    result = cw.get_metric_data(
        MetricDataQueries=[
            {
                "Id": "e5",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "AWS/SageMaker",
                        "MetricName": "Invocation5XXErrors",
                        "Dimensions": DIMENSIONS,
                    },
                    "Period": 60,
                    "Stat": "Sum",
                },
            }
        ],
        StartTime=now - timedelta(minutes=5),
        EndTime=now + timedelta(minutes=1),
    )
    assert sum(result["MetricDataResults"][0]["Values"]) == 3


async def test_the_operator_takes_a_refused_stop_of_an_ended_job_as_done(
    sandbox: SandboxHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job the search started ahead may end before the search stops it: the stop is
    refused, and the job is not running, which is what the stop was for."""
    for key, value in sandbox.environment.items():
        monkeypatch.setenv(key, value)
    sm = sandbox.client("sagemaker")
    sandbox.admin.set_faults(Faults(fail_training_jobs=["ended"]))
    _training_job(sm, "ended")
    assert wait_for(lambda: _training_status(sm, "ended")) == "Failed"
    aws = AwsClients(max_concurrency=2)
    stop = Action(ActionKind.STOP_TRAINING_JOB, "ended", {"TrainingJobName": "ended"})
    try:
        await perform_call(aws, "us-east-1", stop)  # refused by SageMaker, taken as done
        refused = [c for c in sandbox.admin.calls() if c["operation"] == "StopTrainingJob"]
        assert [c["errorCode"] for c in refused] == ["ValidationException"]
        # Any other refusal still raises: a create SageMaker rejects is not "done".
        bad = Action(ActionKind.CREATE_MODEL, "m", {"ModelName": "m"})
        with pytest.raises(SageMakerError):
            await perform_call(aws, "us-east-1", bad)
    finally:
        aws.close()
