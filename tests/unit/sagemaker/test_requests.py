"""Request builders produce what botocore's service model accepts and what the reference says."""

from __future__ import annotations

import json
from typing import Any

import botocore.session
import pytest
from botocore.validate import validate_parameters

from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker.techniques.settings import container_environment
from endpoint_optimizer.sagemaker.techniques.speculative import draft_environment, ngram_environment

_SESSION = botocore.session.get_session()


def valid(service: str, operation: str, params: dict[str, Any]) -> dict[str, Any]:
    model = _SESSION.get_service_model(service).operation_model(operation)
    validate_parameters(params, model.input_shape)  # raises ParamValidationError
    return params


ROLE = "arn:aws:iam::123456789012:role/sagemaker-exec"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"


def test_create_model_uses_an_uncompressed_s3_prefix_and_the_environment() -> None:
    model = rq.ServingModel(
        name="m1",
        image=IMAGE,
        model_s3_uri="s3://bucket/llama",
        role_arn=ROLE,
        environment=container_environment(max_model_len=8192, gpu_memory_utilization=0.92),
        accept_eula=True,
    )
    request = valid("sagemaker", "CreateModel", rq.create_model(model, "ml/chat/uid"))
    container = request["PrimaryContainer"]
    source = container["ModelDataSource"]["S3DataSource"]
    assert source == {
        "S3Uri": "s3://bucket/llama/",
        "S3DataType": "S3Prefix",
        "CompressionType": "None",
        "ModelAccessConfig": {"AcceptEula": True},
    }
    assert container["Environment"] == {
        "OPTION_MAX_MODEL_LEN": "8192",
        "OPTION_GPU_MEMORY_UTILIZATION": "0.92",
    }
    assert request["Tags"][0] == {"Key": "optimizer.dev/owner", "Value": "ml/chat/uid"}


def test_a_draft_model_is_mounted_as_the_draft_model_channel() -> None:
    model = rq.ServingModel(
        name="m2",
        image=IMAGE,
        model_s3_uri="s3://bucket/llama/",
        role_arn=ROLE,
        environment=draft_environment(5),
        draft=rq.DraftModel(s3_uri="s3://bucket/draft/"),
    )
    request = valid("sagemaker", "CreateModel", rq.create_model(model, "o"))
    container = request["PrimaryContainer"]
    assert container["AdditionalModelDataSources"][0]["ChannelName"] == "draft_model"
    assert container["Environment"]["OPTION_SPECULATIVE_DRAFT_MODEL"] == (
        "/opt/ml/additional-model-data-sources/draft_model"
    )
    assert container["Environment"]["OPTION_SPECULATIVE_LENGTH"] == "5"


def test_ngram_goes_through_the_lmi_speculative_config() -> None:
    environment = ngram_environment(5, lookup_min=1, lookup_max=4)
    assert json.loads(environment["OPTION_SPECULATIVE_CONFIG"]) == {
        "method": "ngram",
        "num_speculative_tokens": 5,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 1,
    }


def test_endpoint_config_carries_two_weighted_variants_and_the_spec_timeouts() -> None:
    variants = [
        rq.Variant("base", "m1", "ml.g6.12xlarge", 1, 90, 1200, 1800),
        rq.Variant("cand", "m2", "ml.g6.12xlarge", 1, 10, 1200, 1800),
    ]
    request = valid(
        "sagemaker", "CreateEndpointConfig", rq.create_endpoint_config("c", variants, "o")
    )
    first = request["ProductionVariants"][0]
    assert first["ModelDataDownloadTimeoutInSeconds"] == 1200
    assert first["ContainerStartupHealthCheckTimeoutInSeconds"] == 1800
    assert [v["InitialVariantWeight"] for v in request["ProductionVariants"]] == [90.0, 10.0]


def test_shadow_config_has_one_production_and_one_shadow_variant() -> None:
    base = rq.Variant("base", "m1", "ml.g6.12xlarge")
    shadow = rq.Variant("cand", "m2", "ml.g6.12xlarge")
    request = valid(
        "sagemaker", "CreateEndpointConfig", rq.create_endpoint_config("c", [base], "o", shadow)
    )
    assert request["ShadowProductionVariants"][0]["VariantName"] == "cand"
    with pytest.raises(ValueError, match="exactly one production variant"):
        rq.create_endpoint_config("c", [base, base], "o", shadow)


def test_blue_green_update_names_the_alarms_it_rolls_back_on() -> None:
    deployment = rq.blue_green_deployment(
        ["a-errors", "a-latency"], wait_s=600, termination_wait_s=900
    )
    request = valid("sagemaker", "UpdateEndpoint", rq.update_endpoint("e", "c2", deployment))
    config = request["DeploymentConfig"]
    assert config["AutoRollbackConfiguration"]["Alarms"] == [
        {"AlarmName": "a-errors"},
        {"AlarmName": "a-latency"},
    ]
    assert config["BlueGreenUpdatePolicy"]["TerminationWaitInSeconds"] == 900
    for alarm in rq.rollback_alarms("e", "cand", "a", 0.01, 500):
        valid("cloudwatch", "PutMetricAlarm", alarm)


def test_weights_shift_by_variant_name() -> None:
    request = valid(
        "sagemaker",
        "UpdateEndpointWeightsAndCapacities",
        rq.update_weights("e", rq.canary_weights("base", "cand", 10)),
    )
    assert request["DesiredWeightsAndCapacities"] == [
        {"VariantName": "base", "DesiredWeight": 90.0},
        {"VariantName": "cand", "DesiredWeight": 10.0},
    ]


def test_optimization_job_has_one_union_element_per_technique() -> None:
    job = rq.OptimizationJob(
        name="j",
        role_arn=ROLE,
        model_s3_uri="s3://bucket/llama/",
        instance_type="ml.g6.12xlarge",
        output_s3_uri="s3://bucket/out/",
        configs=[
            rq.container_config(
                "ModelQuantizationConfig", override_environment={"OPTION_QUANTIZE": "fp8"}
            ),
            rq.container_config(
                "ModelCompilationConfig",
                override_environment={"OPTION_TENSOR_PARALLEL_DEGREE": "4"},
            ),
            rq.OptimizationConfig(
                "ModelSpeculativeDecodingConfig",
                {
                    "Technique": "EAGLE",
                    "TrainingDataSource": {"S3Uri": "s3://bucket/chats/", "S3DataType": "S3Prefix"},
                },
            ),
        ],
        environment={"OPTION_MAX_MODEL_LEN": "8192"},
    )
    request = valid("sagemaker", "CreateOptimizationJob", rq.create_optimization_job(job, "o"))
    assert [list(element) for element in request["OptimizationConfigs"]] == [
        ["ModelQuantizationConfig"],
        ["ModelCompilationConfig"],
        ["ModelSpeculativeDecodingConfig"],
    ]
    assert request["OptimizationConfigs"][2]["ModelSpeculativeDecodingConfig"] == {
        "Technique": "EAGLE",
        "TrainingDataSource": {"S3Uri": "s3://bucket/chats/", "S3DataType": "S3Prefix"},
    }
    assert rq.serving_environment(job) == {
        "OPTION_MAX_MODEL_LEN": "8192",
        "OPTION_QUANTIZE": "fp8",
        "OPTION_TENSOR_PARALLEL_DEGREE": "4",
    }
