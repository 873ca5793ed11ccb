"""A Hugging Face Hub model as the source, and the token added only at use time."""

from __future__ import annotations

from typing import Any

import pytest

from endpoint_optimizer.api import SpecError, parse_spec
from endpoint_optimizer.controller.secrets import redact
from endpoint_optimizer.pipeline import plan
from endpoint_optimizer.pipeline.model import JobView
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sandbox.validation import validate
from tests.unit.pipeline.test_decide import OWNER, spec

NAMES = plan.Names.of(OWNER, 1)
HUB = {"hfModelId": "mistralai/Mistral-7B-Instruct-v0.3", "hfRevision": "v0.3", "image": "i:1"}


def hub_spec(**overrides: Any) -> Any:
    return parse_spec(spec(model=HUB | overrides.pop("model", {}), **overrides))


def test_the_baseline_downloads_the_hub_model_at_its_revision() -> None:
    request = rq.create_model(plan.baseline_model(hub_spec(), NAMES), "owner")
    validate("sagemaker", "CreateModel", request)
    container = request["PrimaryContainer"]
    assert "ModelDataSource" not in container
    assert container["Environment"] == {
        "HF_MODEL_ID": "mistralai/Mistral-7B-Instruct-v0.3",
        "HF_REVISION": "v0.3",
    }


def test_an_optimization_job_reads_the_baseline_model_and_the_candidate_its_output() -> None:
    parsed = hub_spec()
    job = plan.optimization_job(parsed, NAMES)
    assert job is not None
    request = rq.create_optimization_job(job, "owner")
    validate("sagemaker", "CreateOptimizationJob", request)
    assert request["ModelSource"] == {"SageMakerModel": {"ModelName": NAMES.baseline_model}}
    done = JobView(NAMES.job, "COMPLETED", output_s3_uri="s3://out/j/")
    candidate = plan.candidate_model(parsed, NAMES, done)
    assert candidate.model_s3_uri == "s3://out/j/"
    assert "HF_MODEL_ID" not in candidate.environment


def test_refusals_name_the_field() -> None:
    with pytest.raises(plan.PlanError, match=r"^spec\.model\.hfModelId:"):
        plan.optimization_job(hub_spec(adoptExisting=True, adoption={"byTag": True}), NAMES)
    with pytest.raises(SpecError, match="hfRevision"):
        parse_spec(spec(model={"s3Uri": "s3://models/m/", "hfRevision": "main"}))
    with pytest.raises(SpecError, match="exactly one"):
        parse_spec(spec(model={"s3Uri": "s3://models/m/", "hfModelId": "a/b"}))
    compressor = {
        "quantization": {"via": "llmCompressor", "algorithm": "rtn", "trainingImage": "t:1"}
    }
    with pytest.raises(plan.PlanError, match=r"^spec\.model\.s3Uri:.*Hugging Face"):
        plan.training_job(hub_spec(optimizations=compressor), NAMES)


def test_the_token_is_added_to_a_copy_of_the_request_and_redacted_from_errors() -> None:
    request = rq.create_model(plan.baseline_model(hub_spec(), NAMES), "owner")
    with_token = rq.add_environment("CreateModel", request, {"HF_TOKEN": "hf_abc"})
    assert with_token["PrimaryContainer"]["Environment"]["HF_TOKEN"] == "hf_abc"
    assert "HF_TOKEN" not in request["PrimaryContainer"]["Environment"]
    validate("sagemaker", "CreateModel", with_token)
    training = rq.add_environment("CreateTrainingJob", {"TrainingJobName": "t"}, {"HF_TOKEN": "x"})
    assert training["Environment"] == {"HF_TOKEN": "x"}
    with pytest.raises(ValueError, match="CreateEndpoint"):
        rq.add_environment("CreateEndpoint", {}, {"HF_TOKEN": "x"})
    assert "hf_abc" not in redact("Value 'hf_abc' at 'environment' failed", "hf_abc")
