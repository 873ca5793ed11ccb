"""JumpStart ids resolved from the region's metadata, as the SageMaker SDK resolves them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from endpoint_optimizer.api import parse_spec
from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.jumpstart import MetadataCache, read_sources
from endpoint_optimizer.pipeline import plan
from endpoint_optimizer.pipeline.decide import decide
from endpoint_optimizer.pipeline.model import Observations, Resource, Timing
from endpoint_optimizer.sagemaker import jumpstart
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sandbox.config import SandboxConfig
from endpoint_optimizer.sandbox.jumpstart import DATA
from endpoint_optimizer.sandbox.testing import running_sandbox
from endpoint_optimizer.sandbox.validation import validate
from tests.unit.pipeline.test_decide import NOW, OWNER, parse_status, spec

NAMES = plan.Names.of(OWNER, 1)
LLAMA_8B = "meta-textgeneration-llama-3-1-8b-instruct"
LLAMA_1B = "meta-textgeneration-llama-3-2-1b-instruct"
MISTRAL = "huggingface-llm-mistral-7b-instruct-v3"


def read(key: str) -> bytes:
    return (DATA / key).read_bytes()


def js_spec(model: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "model": model or {"jumpStartModelId": LLAMA_8B, "acceptEula": True},
        "instanceType": "ml.g5.12xlarge",
        "optimizations": {"speculativeDecoding": {"method": "ngram"}},
        "outputS3Uri": None,
    }
    return spec(**(fields | overrides))


def sources_for(data: dict[str, Any]) -> jumpstart.ModelSources:
    return jumpstart.resolve_sources(parse_spec(data), read)


# The SDK's own reading of the same files, in a child process: importing sagemaker.core
# installs rich's traceback handler, which this process should not inherit.
_SDK_SCRIPT = """
import json, sys
from sagemaker.core.jumpstart.types import JumpStartModelSpecs
from sagemaker.core.jumpstart.artifacts.model_uris import _retrieve_hosting_prepacked_artifact_key
from sagemaker.core.jumpstart.utils import (
    get_jumpstart_content_bucket, get_jumpstart_gated_content_bucket,
)
path, region, instance_type = sys.argv[1:4]
specs = JumpStartModelSpecs(json.load(open(path)))
bucket = (get_jumpstart_gated_content_bucket(region) if specs.gated_bucket
          else get_jumpstart_content_bucket(region))
variants = specs.hosting_instance_type_variants
env = {e.name: str(e.default) for e in specs.inference_environment_variables
       if e.required_for_model_class}
env.update(variants.get_instance_specific_environment_variables(instance_type))
print(json.dumps({
    "image": variants.get_image_uri(instance_type=instance_type, region=region),
    "artifact": f"s3://{bucket}/" + _retrieve_hosting_prepacked_artifact_key(specs, instance_type),
    "environment": env,
    "gated": specs.is_gated_model(),
}))
"""


@pytest.mark.parametrize(
    ("model_id", "version", "region", "instance_type"),
    [
        (LLAMA_8B, "2.13.0", "us-east-1", "ml.g5.12xlarge"),
        (LLAMA_8B, "2.2.0", "eu-west-1", "ml.g6e.2xlarge"),
        ("meta-textgeneration-llama-3-1-70b-instruct", "2.11.0", "us-east-1", "ml.p4d.24xlarge"),
        (LLAMA_1B, "1.3.0", "ap-northeast-1", "ml.g6.xlarge"),
        (MISTRAL, "1.4.0", "us-west-2", "ml.g5.12xlarge"),
    ],
)
def test_resolution_matches_the_sdks_own_reading_of_the_metadata(
    model_id: str, version: str, region: str, instance_type: str
) -> None:
    path = DATA / "community_models" / model_id / f"specs_v{version}.json"
    sdk = subprocess.run(
        [sys.executable, "-c", _SDK_SCRIPT, str(path), region, instance_type],
        capture_output=True,
        text=True,
        check=True,
    )
    expected = json.loads(sdk.stdout.strip().splitlines()[-1])
    ours = jumpstart.resolve(json.loads(path.read_text()), region, instance_type)
    assert ours.image == expected["image"] and ours.image
    assert ours.artifact_s3_uri == expected["artifact"]
    assert dict(ours.environment) == expected["environment"]
    assert ours.gated is expected["gated"]


def test_version_star_is_the_newest_and_an_unknown_version_names_the_field() -> None:
    assert sources_for(js_spec()).model.version == "2.13.0"  # type: ignore[union-attr]
    older = js_spec({"jumpStartModelId": LLAMA_8B, "jumpStartModelVersion": "2.2.*"})
    assert sources_for(older).model.version == "2.2.0"  # type: ignore[union-attr]
    missing = sources_for(js_spec({"jumpStartModelId": LLAMA_8B, "jumpStartModelVersion": "9.9"}))
    assert missing.model is None
    assert missing.problem.startswith("spec.model.jumpStartModelVersion:")
    assert "2.2.0, 2.13.0" in missing.problem


def test_an_unknown_id_or_instance_type_is_a_problem_naming_the_field() -> None:
    unknown = sources_for(js_spec({"jumpStartModelId": "meta-textgeneration-llama-9"}))
    assert unknown.problem.startswith("spec.model.jumpStartModelId:")
    trn = sources_for({**js_spec(), "instanceType": "ml.trn1.2xlarge"})
    assert trn.problem.startswith("spec.model.jumpStartModelId:")
    assert "ml.g5.12xlarge" in trn.problem and "spec.model.image" in trn.problem


def test_a_jumpstart_baseline_model_is_the_sdks_image_artifact_environment_and_eula() -> None:
    parsed = parse_spec(js_spec(model={"jumpStartModelId": LLAMA_8B, "acceptEula": True}))
    sources = jumpstart.resolve_sources(parsed, read)
    model = plan.baseline_model(parsed, NAMES, sources)
    request = rq.create_model(model, "owner")
    validate("sagemaker", "CreateModel", request)
    container = request["PrimaryContainer"]
    assert container["Image"].startswith(
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference"
    )
    source = container["ModelDataSource"]["S3DataSource"]
    assert source["S3Uri"].startswith("s3://jumpstart-private-cache-prod-us-east-1/meta-textgen")
    assert source["ModelAccessConfig"] == {"AcceptEula": True}
    assert container["Environment"]["OPTION_TENSOR_PARALLEL_DEGREE"] == "4"
    assert container["Environment"]["HF_MODEL_ID"] == "/opt/ml/model"


def test_accept_eula_false_on_a_gated_model_is_refused_with_the_field_before_any_call() -> None:
    data = js_spec(model={"jumpStartModelId": LLAMA_8B})
    decision = decide(
        data,
        parse_status(None),
        Observations(endpoint=None, sources=sources_for(data)),
        Resource(owner=OWNER, generation=1),
        NOW,
        Timing(),
    )
    assert decision.actions == []
    assert decision.status["phase"] == "Failed"
    assert decision.status["message"].startswith("spec.model.acceptEula:")
    assert "jumpstart-cache-prod-us-east-1/fmhMetadata/eula" in decision.status["message"]
    # An ungated model needs no acceptance.
    mistral = js_spec(model={"jumpStartModelId": MISTRAL})
    assert (
        plan.baseline_model(parse_spec(mistral), NAMES, sources_for(mistral)).accept_eula is False
    )


def _draft_spec(draft: dict[str, Any]) -> dict[str, Any]:
    return js_spec(
        optimizations={"speculativeDecoding": {"method": "draftModel", "draftModel": draft}}
    )


def test_a_jumpstart_draft_is_its_prepacked_artifact_and_needs_its_own_acceptance() -> None:
    data = _draft_spec({"jumpStartModelId": LLAMA_1B, "acceptEula": True})
    model = plan.candidate_model(parse_spec(data), NAMES, None, sources_for(data))
    request = rq.create_model(model, "owner")
    validate("sagemaker", "CreateModel", request)
    (channel,) = request["PrimaryContainer"]["AdditionalModelDataSources"]
    assert channel["ChannelName"] == "draft_model"
    assert channel["S3DataSource"]["S3Uri"] == (
        f"s3://jumpstart-private-cache-prod-us-east-1/meta-textgeneration/{LLAMA_1B}/"
        "artifacts/inference-prepack/v1.0.0/"
    )
    assert channel["S3DataSource"]["ModelAccessConfig"] == {"AcceptEula": True}
    refused = _draft_spec({"jumpStartModelId": LLAMA_1B})
    with pytest.raises(plan.PlanError, match=r"^spec\.optimizations\.speculativeDecoding"):
        plan.optimization_job(parse_spec(refused), NAMES, sources_for(refused))


def test_a_sagemaker_provided_draft_comes_from_the_models_deployment_config() -> None:
    data = _draft_spec({"modelProvider": "sageMaker"})
    sources = sources_for(data)
    assert sources.model is not None and sources.model.config_name == "lmi-optimized"
    model = plan.candidate_model(parse_spec(data), NAMES, None, sources)
    request = rq.create_model(model, "owner")
    validate("sagemaker", "CreateModel", request)
    (channel,) = request["PrimaryContainer"]["AdditionalModelDataSources"]
    # No provider or a non-JumpStart one: the SDK's neo content bucket.
    assert channel["S3DataSource"]["S3Uri"] == (
        "s3://sagemaker-sd-models-prod-us-east-1/sagemaker-speculative-decoding-llama3-small-v3/"
    )
    assert request["PrimaryContainer"]["Environment"]["OPTION_SPECULATIVE_DRAFT_MODEL"]
    old = _draft_spec({"modelProvider": "sageMaker"})
    old["model"]["jumpStartModelVersion"] = "2.2.0"
    assert sources_for(old).problem.startswith(
        "spec.optimizations.speculativeDecoding.draftModel.modelProvider:"
    )


def test_a_sagemaker_provided_draft_needs_a_jumpstart_model() -> None:
    data = _draft_spec({"modelProvider": "sageMaker"})
    data["model"] = {"s3Uri": "s3://models/llama/"}
    with pytest.raises(ValueError, match="modelProvider"):
        parse_spec(data)


def test_the_operator_reads_the_metadata_from_s3_once_per_cache_period(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = parse_spec(_draft_spec({"jumpStartModelId": LLAMA_1B, "acceptEula": True}))
    with running_sandbox(SandboxConfig()) as sandbox:
        for name, value in sandbox.environment.items():
            monkeypatch.setenv(name, value)
        aws = AwsClients()
        cache = MetadataCache()
        try:
            first = asyncio.run(read_sources(aws, data, cache))
            second = asyncio.run(read_sources(aws, data, cache))
        finally:
            aws.close()
        reads = [c for c in sandbox.admin.calls() if c["operation"] == "GetObject"]
    assert first == second and first.model is not None and first.draft is not None
    assert first.model.model_id == LLAMA_8B and first.draft.model_id == LLAMA_1B
    # The manifest and two spec files, each once.
    assert len(reads) == 3
    assert {r["resource"].split("/", 3)[3] for r in reads} == {
        "models_manifest.json",
        f"community_models/{LLAMA_8B}/specs_v2.13.0.json",
        f"community_models/{LLAMA_1B}/specs_v1.3.0.json",
    }


def test_sandbox_data_is_a_content_bucket_layout(tmp_path: Path) -> None:
    manifest = json.loads(read(jumpstart.MANIFEST_KEY))
    for header in manifest:
        assert (DATA / header["spec_key"]).is_file()
