"""spec.network reaches each SageMaker request exactly where its API accepts it."""

from __future__ import annotations

from typing import Any

import pytest

from endpoint_optimizer.api import SpecError, parse_spec
from endpoint_optimizer.pipeline import plan
from endpoint_optimizer.pipeline.model import JobView
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker import training
from endpoint_optimizer.sandbox.validation import validate
from tests.unit.pipeline.test_decide import OWNER, spec

NAMES = plan.Names.of(OWNER, 1)
NETWORK = {
    "subnets": ["subnet-0a1b2c3d", "subnet-4e5f6a7b"],
    "securityGroupIds": ["sg-0123456789abcdef0"],
    "enableNetworkIsolation": True,
    "volumeKmsKeyId": "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    "outputKmsKeyId": "alias/optimized-artifacts",
}
VPC = {
    "SecurityGroupIds": ["sg-0123456789abcdef0"],
    "Subnets": ["subnet-0a1b2c3d", "subnet-4e5f6a7b"],
}


def networked(**overrides: Any) -> Any:
    return parse_spec(spec(network=NETWORK, **overrides))


def test_models_get_the_vpc_and_isolation() -> None:
    parsed = networked()
    for model in (
        plan.baseline_model(parsed, NAMES),
        plan.candidate_model(parsed, NAMES, JobView(NAMES.job, "COMPLETED", "", "s3://o/j/")),
    ):
        request = rq.create_model(model, "owner")
        validate("sagemaker", "CreateModel", request)
        assert request["VpcConfig"] == VPC
        assert request["EnableNetworkIsolation"] is True


def test_endpoint_configs_get_the_volume_key_only() -> None:
    parsed = networked()
    base = plan.variant(parsed, "base", "m1")
    cand = plan.variant(parsed, "cand", "m2", weight=0.0)
    for request in (
        rq.create_endpoint_config("c1", [base, cand], "owner"),
        rq.create_endpoint_config("c2", [base], "owner", shadow=cand),
    ):
        validate("sagemaker", "CreateEndpointConfig", request)
        assert request["KmsKeyId"] == NETWORK["volumeKmsKeyId"]
        assert "VpcConfig" not in request and "EnableNetworkIsolation" not in request


def test_optimization_jobs_get_the_vpc_and_the_output_key() -> None:
    job = plan.optimization_job(networked(), NAMES)
    assert job is not None
    request = rq.create_optimization_job(job, "owner")
    validate("sagemaker", "CreateOptimizationJob", request)
    assert request["VpcConfig"] == VPC
    assert request["OutputConfig"]["KmsKeyId"] == "alias/optimized-artifacts"
    assert "EnableNetworkIsolation" not in request


def test_training_jobs_get_all_four() -> None:
    network = {**NETWORK, "enableNetworkIsolation": False}
    compressor = {
        "quantization": {"via": "llmCompressor", "algorithm": "rtn", "trainingImage": "t:1"}
    }
    parsed = parse_spec(spec(network=network, optimizations=compressor))
    job = plan.training_job(parsed, NAMES)
    assert job is not None
    request = training.create_training_job(job, "owner")
    validate("sagemaker", "CreateTrainingJob", request)
    assert request["VpcConfig"] == VPC
    assert request["ResourceConfig"]["VolumeKmsKeyId"] == NETWORK["volumeKmsKeyId"]
    assert request["OutputDataConfig"]["KmsKeyId"] == "alias/optimized-artifacts"
    assert "EnableNetworkIsolation" not in request


def test_no_network_changes_no_request_and_no_hash() -> None:
    plain = parse_spec(spec())
    request = rq.create_model(plan.baseline_model(plain, NAMES), "owner")
    assert "VpcConfig" not in request and "EnableNetworkIsolation" not in request
    assert "KmsKeyId" not in rq.create_endpoint_config("c", [plan.variant(plain, "b", "m")], "o")
    assert plain.candidate_hash() != networked().candidate_hash()


def test_isolation_is_refused_where_a_container_must_download() -> None:
    hub = {"hfModelId": "org/model", "image": "i:1"}
    with pytest.raises(plan.PlanError, match=r"^spec\.network\.enableNetworkIsolation:.*hfModel"):
        plan.baseline_model(networked(model=hub), NAMES)
    compressor = {
        "quantization": {"via": "llmCompressor", "algorithm": "rtn", "trainingImage": "t"}
    }
    with pytest.raises(plan.PlanError, match=r"^spec\.network\.enableNetworkIsolation:.*PyPI"):
        plan.training_job(networked(optimizations=compressor), NAMES)


def test_a_vpc_needs_subnets_and_security_groups() -> None:
    with pytest.raises(SpecError, match="securityGroupIds"):
        parse_spec(spec(network={"subnets": ["subnet-1"]}))
