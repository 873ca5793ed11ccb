"""S3 PutObject (the llm-compressor source bundle) and where a training job's model lands."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from endpoint_optimizer.sagemaker import training
from endpoint_optimizer.sandbox.testing import SandboxHandle, wait_for

from .conftest import IMAGE, ROLE


def test_put_object_answers_with_the_md5_etag_and_keeps_metadata(sandbox: SandboxHandle) -> None:
    s3 = sandbox.client("s3")
    uri = "s3://models/optimized/llm-compressor-source/abc/sourcedir.tar.gz"
    request = training.upload_source_request(uri)
    response = s3.put_object(**request)
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert response["ETag"] == f'"{hashlib.md5(request["Body"]).hexdigest()}"'
    stored = sandbox.admin.state()["objects"][uri]
    assert stored["size"] == len(request["Body"])
    assert stored["contentType"] == "application/gzip"
    assert stored["etag"] == response["ETag"]
    assert any(
        c["operation"] == "PutObject" and c["resource"] == uri for c in sandbox.admin.calls()
    )
    # A second upload of the same key replaces it (content-addressed keys make it harmless).
    s3.put_object(
        Bucket="models", Key="optimized/llm-compressor-source/abc/sourcedir.tar.gz", Body=b"x"
    )
    assert sandbox.admin.state()["objects"][uri]["size"] == 1


def _train(sm: Any, name: str, scheme: str, compression: str | None) -> dict[str, Any]:
    output: dict[str, str] = {"S3OutputPath": "s3://out/train"}
    if compression is not None:
        output["CompressionType"] = compression
    sm.create_training_job(
        TrainingJobName=name,
        RoleArn=ROLE,
        AlgorithmSpecification={"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        # JSON-encoded values, the way the SDK and the operator send them.
        HyperParameters={"algorithm": json.dumps("gptq"), "scheme": json.dumps(scheme)},
        InputDataConfig=[
            {
                "ChannelName": "model",
                "DataSource": {
                    "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://models/llama-8b/"}
                },
            }
        ],
        OutputDataConfig=output,
        ResourceConfig={
            "InstanceType": "ml.g6e.2xlarge",
            "InstanceCount": 1,
            "VolumeSizeInGB": 100,
        },
        StoppingCondition={"MaxRuntimeInSeconds": 7200},
    )

    def done() -> dict[str, Any] | None:
        described: dict[str, Any] = sm.describe_training_job(TrainingJobName=name)
        return described if described["TrainingJobStatus"] != "InProgress" else None

    return wait_for(done)


@pytest.mark.parametrize(
    ("compression", "suffix"),
    [("NONE", "output/model/"), ("GZIP", "output/model.tar.gz"), (None, "output/model.tar.gz")],
)
def test_model_artifacts_follow_the_output_compression(
    sandbox: SandboxHandle, compression: str | None, suffix: str
) -> None:
    described = _train(sandbox.client("sagemaker"), "llmc", "W4A16", compression)
    assert described["TrainingJobStatus"] == "Completed"
    assert described["ModelArtifacts"]["S3ModelArtifacts"] == f"s3://out/train/llmc/{suffix}"
    state = training.training_job_state(described)
    assert state.succeeded
    if compression == "NONE":
        assert (
            training.candidate_serving(
                state, region="us-east-1", instance_type="ml.g6e.2xlarge"
            ).model_s3_uri
            == "s3://out/train/llmc/output/model/"
        )


@pytest.mark.parametrize(
    ("scheme", "profile"), [("W4A16", "w4a16"), ("W8A8", "int8"), ("W8A16", "int8")]
)
def test_the_artifact_profile_follows_the_jobs_scheme(
    sandbox: SandboxHandle, scheme: str, profile: str
) -> None:
    _train(sandbox.client("sagemaker"), "llmc", scheme, "NONE")
    assert sandbox.admin.state()["artifacts"]["s3://out/train/llmc/"]["quantization"] == profile
