"""Optimization jobs, training jobs, UpdateEndpoint, weights, shadow variants and List calls."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from endpoint_optimizer.sandbox.config import Faults
from endpoint_optimizer.sandbox.testing import SandboxHandle, wait_for

from .conftest import FAST, IMAGE, ROLE, create_model, deploy, variant


def _optimization_job(sm: Any, name: str, scheme: str = "fp8", out: str = "s3://out/q/") -> None:
    sm.create_optimization_job(
        OptimizationJobName=name,
        RoleArn=ROLE,
        ModelSource={"S3": {"S3Uri": "s3://models/llama-3.1-8b/"}},
        DeploymentInstanceType="ml.g6e.2xlarge",
        OptimizationConfigs=[
            {"ModelQuantizationConfig": {"OverrideEnvironment": {"OPTION_QUANTIZE": scheme}}}
        ],
        OutputConfig={"S3OutputLocation": out},
        StoppingCondition={"MaxRuntimeInSeconds": 36000},
    )


def _job_status(sm: Any, name: str) -> str:
    status: str = sm.describe_optimization_job(OptimizationJobName=name)["OptimizationJobStatus"]
    return status


def _terminal(sm: Any, name: str) -> str | None:
    status = _job_status(sm, name)
    return status if status in ("COMPLETED", "FAILED", "STOPPED") else None


def test_optimization_job_completes_and_its_output_serves_quantized(
    sandbox: SandboxHandle,
) -> None:
    # Stretched to ~3 s (slow_transitions 10) so the first describe lands while the job runs
    # on a loaded machine; at the fixture's 0.3 s it can already be COMPLETED.
    sandbox.admin.set_faults(Faults(slow_transitions=10))
    sm = sandbox.client("sagemaker")
    _optimization_job(sm, "quant-fp8")
    assert _job_status(sm, "quant-fp8") == "INPROGRESS"
    assert wait_for(lambda: _terminal(sm, "quant-fp8"), timeout=60) == "COMPLETED"
    described = sm.describe_optimization_job(OptimizationJobName="quant-fp8")
    assert "djl-inference" in described["OptimizationOutput"]["RecommendedInferenceImage"]
    assert described["OptimizationEndTime"] >= described["OptimizationStartTime"]
    deploy(sm, "fast", uri=described["OutputConfig"]["S3OutputLocation"])
    state = sandbox.admin.state()
    assert state["artifacts"]["s3://out/q/"]["quantization"] == "fp8"


def test_optimization_job_errors_and_stop(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    with pytest.raises(ClientError) as missing:
        sm.describe_optimization_job(OptimizationJobName="ghost")
    assert missing.value.response["Error"]["Code"] == "ResourceNotFound"
    sandbox.admin.configure({"timeScale": 0.01})
    _optimization_job(sm, "job")
    with pytest.raises(ClientError) as twice:
        _optimization_job(sm, "job")
    assert twice.value.response["Error"]["Code"] == "ResourceInUse"
    sm.stop_optimization_job(OptimizationJobName="job")
    assert _job_status(sm, "job") in ("STOPPING", "STOPPED")
    assert wait_for(lambda: _terminal(sm, "job")) == "STOPPED"
    sm.delete_optimization_job(OptimizationJobName="job")
    with pytest.raises(ClientError):
        sm.delete_optimization_job(OptimizationJobName="job")


def test_failed_optimization_job_fault_sets_failure_reason(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    sandbox.admin.set_faults(Faults(fail_optimization_jobs=["doomed"]))
    _optimization_job(sm, "doomed")
    assert wait_for(lambda: _terminal(sm, "doomed")) == "FAILED"
    described = sm.describe_optimization_job(OptimizationJobName="doomed")
    assert described["FailureReason"]
    assert "OptimizationOutput" not in described


def test_list_optimization_jobs_paginates_and_filters(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    for index in range(5):
        _optimization_job(sm, f"job-{index}")
    pages = list(
        sm.get_paginator("list_optimization_jobs").paginate(PaginationConfig={"PageSize": 2})
    )
    assert len(pages) == 3
    names = [s["OptimizationJobName"] for page in pages for s in page["OptimizationJobSummaries"]]
    assert sorted(names) == [f"job-{i}" for i in range(5)]
    only = sm.list_optimization_jobs(NameContains="job-3")["OptimizationJobSummaries"]
    assert [s["OptimizationJobName"] for s in only] == ["job-3"]
    assert only[0]["OptimizationTypes"] == ["Quantization"]


def test_list_endpoints_models_and_configs_paginate(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    for index in range(3):
        deploy(sm, f"ep{index}", wait=False)
    endpoints = [
        e["EndpointName"]
        for page in sm.get_paginator("list_endpoints").paginate(PaginationConfig={"PageSize": 1})
        for e in page["Endpoints"]
    ]
    assert sorted(endpoints) == ["ep0", "ep1", "ep2"]
    models = sm.list_models(NameContains="ep1")["Models"]
    assert [m["ModelName"] for m in models] == ["ep1-model"]
    assert len(sm.list_endpoint_configs()["EndpointConfigs"]) == 3


def test_training_job_output_serves_with_its_scheme(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    sm.create_training_job(
        TrainingJobName="llmc-w4a16",
        RoleArn=ROLE,
        AlgorithmSpecification={"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        HyperParameters={"scheme": "W4A16"},
        InputDataConfig=[
            {
                "ChannelName": "model",
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": "s3://models/llama-3.1-8b/",
                    }
                },
            }
        ],
        OutputDataConfig={"S3OutputPath": "s3://out/train"},
        ResourceConfig={
            "InstanceType": "ml.g6e.2xlarge",
            "InstanceCount": 1,
            "VolumeSizeInGB": 100,
        },
        StoppingCondition={"MaxRuntimeInSeconds": 7200},
    )

    def done() -> str | None:
        status: str = sm.describe_training_job(TrainingJobName="llmc-w4a16")["TrainingJobStatus"]
        return status if status != "InProgress" else None

    assert wait_for(done) == "Completed"
    artifacts = sm.describe_training_job(TrainingJobName="llmc-w4a16")["ModelArtifacts"]
    assert artifacts["S3ModelArtifacts"].startswith("s3://out/train/llmc-w4a16/")
    state = sandbox.admin.state()
    assert state["artifacts"]["s3://out/train/llmc-w4a16/"]["quantization"] == "w4a16"
    assert [j["TrainingJobName"] for j in sm.list_training_jobs()["TrainingJobSummaries"]] == [
        "llmc-w4a16"
    ]


def _serving_config(sm: Any) -> str:
    name: str = sm.describe_endpoint(EndpointName="ep")["EndpointConfigName"]
    return name


def _in_service(sm: Any) -> bool:
    return bool(sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "InService")


def _endpoint_and_candidate_config(sm: Any) -> None:
    """Endpoint "ep" serving "ep-config", and "ep-config-2" (a candidate model) to update to."""
    deploy(sm, "ep")
    create_model(sm, "candidate")
    sm.create_endpoint_config(
        EndpointConfigName="ep-config-2", ProductionVariants=[variant("AllTraffic", "candidate")]
    )


def _variant_alarm(cw: Any, name: str, metric: str, statistic: str, threshold: float) -> None:
    """An alarm on one AWS/SageMaker metric of ep's AllTraffic variant, one 60 s period."""
    cw.put_metric_alarm(
        AlarmName=name,
        Namespace="AWS/SageMaker",
        MetricName=metric,
        Dimensions=[
            {"Name": "EndpointName", "Value": "ep"},
            {"Name": "VariantName", "Value": "AllTraffic"},
        ],
        Statistic=statistic,
        Period=60,
        EvaluationPeriods=1,
        Threshold=threshold,
        ComparisonOperator="GreaterThanThreshold",
    )


def test_update_endpoint_switches_config_and_refuses_while_updating(
    sandbox: SandboxHandle,
) -> None:
    sm = sandbox.client("sagemaker")
    _endpoint_and_candidate_config(sm)
    sandbox.admin.configure({"timeScale": 0.003})
    sm.update_endpoint(
        EndpointName="ep",
        EndpointConfigName="ep-config-2",
        DeploymentConfig={
            "BlueGreenUpdatePolicy": {
                "TrafficRoutingConfiguration": {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 0}
            }
        },
    )
    described = sm.describe_endpoint(EndpointName="ep")
    assert described["EndpointStatus"] == "Updating"
    assert described["EndpointConfigName"] == "ep-config"  # the old config serves meanwhile
    assert described["PendingDeploymentSummary"]["EndpointConfigName"] == "ep-config-2"
    with pytest.raises(ClientError) as busy:
        sm.update_endpoint(EndpointName="ep", EndpointConfigName="ep-config")
    assert busy.value.response["Error"]["Code"] == "ValidationException"
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    described = sm.describe_endpoint(EndpointName="ep")
    assert described["EndpointConfigName"] == "ep-config-2"
    assert described["LastDeploymentConfig"]["BlueGreenUpdatePolicy"]


def test_failed_update_keeps_old_config_serving(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    _endpoint_and_candidate_config(sm)
    sandbox.admin.set_faults(Faults(fail_endpoint_updates=["ep"]))
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="ep-config-2")
    wait_for(lambda: _in_service(sm))
    described = sm.describe_endpoint(EndpointName="ep")
    assert described["EndpointConfigName"] == "ep-config"
    assert "rolled back" in described["FailureReason"]
    body = json.dumps({"inputs": "x", "parameters": {"max_new_tokens": 2}})
    assert rt.invoke_endpoint(EndpointName="ep", Body=body)["InvokedProductionVariant"]


def test_auto_rollback_alarm_in_alarm_rolls_the_update_back(sandbox: SandboxHandle) -> None:
    sm, cw = sandbox.client("sagemaker"), sandbox.client("cloudwatch")
    _endpoint_and_candidate_config(sm)
    _variant_alarm(cw, "ep-5xx", "Invocation5XXErrors", "Sum", 0)
    cw.set_alarm_state(AlarmName="ep-5xx", StateValue="ALARM", StateReason="test")
    sm.update_endpoint(
        EndpointName="ep",
        EndpointConfigName="ep-config-2",
        DeploymentConfig={
            "BlueGreenUpdatePolicy": {
                "TrafficRoutingConfiguration": {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 0}
            },
            "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "ep-5xx"}]},
        },
    )
    wait_for(lambda: _in_service(sm))
    described = sm.describe_endpoint(EndpointName="ep")
    assert described["EndpointConfigName"] == "ep-config"
    assert "ep-5xx" in described["FailureReason"]


def test_weights_split_traffic_and_target_variant_pins_it(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    create_model(sm, "base")
    create_model(sm, "cand")
    sm.create_endpoint_config(
        EndpointConfigName="ab",
        ProductionVariants=[variant("baseline", "base", 1.0), variant("candidate", "cand", 0.0)],
    )
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="ab")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    body = json.dumps({"inputs": "x", "parameters": {"max_new_tokens": 1}})
    served = {
        rt.invoke_endpoint(EndpointName="ep", Body=body)["InvokedProductionVariant"]
        for _ in range(10)
    }
    assert served == {"baseline"}
    pinned = rt.invoke_endpoint(EndpointName="ep", Body=body, TargetVariant="candidate")
    assert pinned["InvokedProductionVariant"] == "candidate"
    sm.update_endpoint_weights_and_capacities(
        EndpointName="ep",
        DesiredWeightsAndCapacities=[
            {"VariantName": "baseline", "DesiredWeight": 0.0},
            {"VariantName": "candidate", "DesiredWeight": 1.0},
        ],
    )
    wait_for(lambda: _in_service(sm))
    weights = {
        v["VariantName"]: v["CurrentWeight"]
        for v in sm.describe_endpoint(EndpointName="ep")["ProductionVariants"]
    }
    assert weights == {"baseline": 0.0, "candidate": 1.0}
    served = {
        rt.invoke_endpoint(EndpointName="ep", Body=body)["InvokedProductionVariant"]
        for _ in range(10)
    }
    assert served == {"candidate"}
    with pytest.raises(ClientError) as unknown:
        sm.update_endpoint_weights_and_capacities(
            EndpointName="ep",
            DesiredWeightsAndCapacities=[{"VariantName": "nope", "DesiredWeight": 1.0}],
        )
    assert "nope" in unknown.value.response["Error"]["Message"]


def test_shadow_variant_gets_a_copy_of_traffic(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    create_model(sm, "base")
    create_model(sm, "cand")
    sm.create_endpoint_config(
        EndpointConfigName="shadowed",
        ProductionVariants=[variant("baseline", "base")],
        ShadowProductionVariants=[variant("shadow", "cand")],
    )
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="shadowed")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    described = sm.describe_endpoint(EndpointName="ep")
    assert [v["VariantName"] for v in described["ShadowProductionVariants"]] == ["shadow"]
    body = json.dumps({"inputs": "x", "parameters": {"max_new_tokens": 3}})
    for _ in range(3):
        assert rt.invoke_endpoint(EndpointName="ep", Body=body)["InvokedProductionVariant"] == (
            "baseline"
        )

    def shadows_done() -> list[dict[str, Any]]:
        records = [r for r in sandbox.admin.traffic("ep") if r["shadow"] and r["t_end"]]
        return records if len(records) == 3 else []

    shadows = wait_for(shadows_done)
    assert {r["variant"] for r in shadows} == {"shadow"}
    with pytest.raises(ClientError):
        sm.create_endpoint_config(
            EndpointConfigName="two-prod",
            ProductionVariants=[variant("a", "base"), variant("b", "cand")],
            ShadowProductionVariants=[variant("c", "cand")],
        )


def test_canary_update_shifts_a_share_then_rolls_back_on_alarm(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    cw = sandbox.client("cloudwatch")
    _endpoint_and_candidate_config(sm)
    _variant_alarm(cw, "ep-latency", "ModelLatency", "Average", 1e12)
    # Provisioning 420 s and a 3600 s canary bake become 0.42 s and 3.6 s of wall time.
    sandbox.admin.configure({"timeScale": 0.001})
    sm.update_endpoint(
        EndpointName="ep",
        EndpointConfigName="ep-config-2",
        DeploymentConfig={
            "BlueGreenUpdatePolicy": {
                "TrafficRoutingConfiguration": {
                    "Type": "CANARY",
                    "WaitIntervalInSeconds": 3600,
                    "CanarySize": {"Type": "CAPACITY_PERCENT", "Value": 50},
                }
            },
            "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "ep-latency"}]},
        },
    )

    def canary_stage() -> bool:
        summary = sm.describe_endpoint(EndpointName="ep").get("PendingDeploymentSummary", {})
        stages = [
            s["Status"] for v in summary.get("ProductionVariants", []) for s in v["VariantStatus"]
        ]
        return stages == ["ActivatingTraffic"]

    wait_for(canary_stage)
    body = json.dumps({"inputs": "x", "parameters": {"max_new_tokens": 1}})
    for _ in range(40):
        rt.invoke_endpoint(EndpointName="ep", Body=body)
    configs = [r["endpoint_config"] for r in sandbox.admin.traffic("ep")]
    assert 8 <= configs.count("ep-config-2") <= 32  # ~50% canary
    assert sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "Updating"
    cw.set_alarm_state(AlarmName="ep-latency", StateValue="ALARM", StateReason="canary slow")
    wait_for(lambda: _in_service(sm))
    described = sm.describe_endpoint(EndpointName="ep")
    assert described["EndpointConfigName"] == "ep-config"
    assert "ep-latency" in described["FailureReason"]
    rt.invoke_endpoint(EndpointName="ep", Body=body)
    assert sandbox.admin.traffic("ep")[-1]["endpoint_config"] == "ep-config"
