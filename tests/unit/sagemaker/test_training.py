"""The llm-compressor training-job builder: botocore-valid requests, the SDK's conventions,
refusal before AWS, and the candidate's serving settings."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.validate import validate_parameters
from pydantic import ValidationError

from endpoint_optimizer.api import (
    CompressorAlgorithm,
    Quantization,
    QuantizationVia,
    WeightActivation,
)
from endpoint_optimizer.jobs import quantize
from endpoint_optimizer.sagemaker import training as tr
from endpoint_optimizer.sagemaker.techniques import quantization

_SESSION = botocore.session.get_session()
ROLE = "arn:aws:iam::123456789012:role/sagemaker-exec"
OUTPUT = "s3://bucket/optimized"
MODEL = "s3://bucket/llama-3.1-8b/"


def valid(operation: str, params: dict[str, Any]) -> dict[str, Any]:
    model = _SESSION.get_service_model("sagemaker").operation_model(operation)
    validate_parameters(params, model.input_shape)  # raises ParamValidationError
    return params


def _spec(**fields: Any) -> Quantization:
    return Quantization.model_validate({"via": "llmCompressor", **fields})


def _job(spec: Quantization, **overrides: Any) -> tr.QuantizationTrainingJob:
    arguments: dict[str, Any] = {
        "name": "ml-chat-quant-g3-1a2b3c4d",
        "region": "us-east-1",
        "role_arn": ROLE,
        "model_s3_uri": MODEL,
        "output_s3_uri": OUTPUT,
        "instance_type": "ml.g6.12xlarge",
    } | overrides
    return tr.job_from_spec(spec, **arguments)


def test_gptq_w4a16_request_is_valid_and_carries_the_sdk_script_mode_hyperparameters() -> None:
    spec = _spec(
        algorithm="gptq",
        weightActivation="W4A16",
        calibrationDataset={"s3Uri": "s3://bucket/calib/items.jsonl", "textField": "prompt"},
        numCalibrationSamples=256,
        maxSequenceLength=4096,
    )
    job = _job(spec)
    request = valid("CreateTrainingJob", tr.create_training_job(job, "ml/chat/uid"))

    assert request["AlgorithmSpecification"] == {
        "TrainingImage": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:"
        "2.10-gpu-py313",
        "TrainingInputMode": "File",
    }
    hps = request["HyperParameters"]
    # Every value JSON-encoded, as the SDK's framework estimators send them.
    assert all(isinstance(v, str) for v in hps.values())
    assert json.loads(hps["sagemaker_program"]) == "quantize.py"
    submit = json.loads(hps["sagemaker_submit_directory"])
    assert submit.startswith(f"{OUTPUT}/llm-compressor-source/")
    assert submit.endswith("/sourcedir.tar.gz")
    assert json.loads(hps["sagemaker_region"]) == "us-east-1"
    assert json.loads(hps["sagemaker_job_name"]) == job.name
    parsed = quantize.QuantizeHyperparameters.from_sagemaker(hps)
    assert (parsed.algorithm, parsed.scheme) == (quantize.Algorithm.GPTQ, quantize.Scheme.W4A16)
    assert (parsed.num_samples, parsed.max_seq_length) == (256, 4096)
    assert parsed.calibration_dataset == "channel:calibration"
    assert parsed.text_field == "prompt"
    assert parsed.effective_group_size == 128
    assert parsed.ignore == ["lm_head"]
    assert parsed.targets == ["Linear"]

    channels = {
        c["ChannelName"]: c["DataSource"]["S3DataSource"] for c in request["InputDataConfig"]
    }
    assert channels["model"]["S3Uri"] == MODEL
    assert channels["model"]["S3DataType"] == "S3Prefix"
    assert channels["calibration"]["S3Uri"] == "s3://bucket/calib/items.jsonl"
    assert request["OutputDataConfig"] == {"S3OutputPath": OUTPUT, "CompressionType": "NONE"}
    assert request["ResourceConfig"]["InstanceType"] == "ml.g6.12xlarge"
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": tr.DEFAULT_MAX_RUNTIME_S}
    assert request["RoleArn"] == ROLE
    assert {"Key": "optimizer.dev/owner", "Value": "ml/chat/uid"} in request["Tags"]


def test_hub_calibration_and_training_overrides_map_to_hyperparameters_and_resources() -> None:
    spec = _spec(
        algorithm="smoothquant",
        calibrationDataset={"hfDatasetId": "HuggingFaceH4/ultrachat_200k", "split": "train_sft"},
        smoothingStrength=0.5,
        ignore=["lm_head", "re:.*mlp.gate$"],
        trainingInstanceType="ml.p4d.24xlarge",
        trainingImage="123456789012.dkr.ecr.us-east-1.amazonaws.com/my-llmc:1",
    )
    request = valid("CreateTrainingJob", tr.create_training_job(_job(spec), "o"))
    parsed = quantize.QuantizeHyperparameters.from_sagemaker(request["HyperParameters"])
    assert parsed.scheme is quantize.Scheme.W8A8  # the spec's default for smoothquant
    assert parsed.calibration_dataset == "hf:HuggingFaceH4/ultrachat_200k"
    assert parsed.calibration_split == "train_sft"
    assert parsed.smoothing_strength == 0.5
    assert parsed.ignore == ["lm_head", "re:.*mlp.gate$"]
    assert parsed.group_size is None
    assert [c["ChannelName"] for c in request["InputDataConfig"]] == ["model"]
    assert request["ResourceConfig"]["InstanceType"] == "ml.p4d.24xlarge"
    assert request["AlgorithmSpecification"]["TrainingImage"].endswith("/my-llmc:1")


def test_rtn_is_data_free_and_asks_for_no_calibration_channel() -> None:
    spec = _spec(algorithm="rtn", weightActivation="W8A16")
    request = valid("CreateTrainingJob", tr.create_training_job(_job(spec), "o"))
    parsed = quantize.QuantizeHyperparameters.from_sagemaker(request["HyperParameters"])
    assert not parsed.needs_calibration
    assert [c["ChannelName"] for c in request["InputDataConfig"]] == ["model"]


def test_gated_model_channel_accepts_the_eula() -> None:
    spec = _spec(algorithm="rtn")
    request = valid("CreateTrainingJob", tr.create_training_job(_job(spec, accept_eula=True), "o"))
    source = request["InputDataConfig"][0]["DataSource"]["S3DataSource"]
    assert source["ModelAccessConfig"] == {"AcceptEula": True}


@pytest.mark.parametrize(
    ("algorithm", "scheme"),
    [
        (a, s)
        for a in CompressorAlgorithm
        for s in WeightActivation
        if s.value not in {x.value for x in quantize.SUPPORTED_SCHEMES[quantize.Algorithm(a.value)]}
    ],
)
def test_unsupported_pair_is_refused_before_any_request_is_built(
    algorithm: CompressorAlgorithm, scheme: WeightActivation
) -> None:
    # The spec model may let the pair through (the matrix judges it with context); the
    # builder refuses it from the entry point's own table, naming the allowed pairs.
    spec = Quantization.model_construct(
        via=QuantizationVia.LLM_COMPRESSOR, algorithm=algorithm, weight_activation=scheme
    )
    with pytest.raises(quantize.UnsupportedPairError, match="choose one of: awq: W4A16; gptq"):
        tr.hyperparameters_from_spec(spec)


def test_optimization_job_spec_is_not_a_training_job() -> None:
    spec = Quantization.model_validate({"via": "optimizationJob", "scheme": "fp8"})
    with pytest.raises(ValueError, match="via must be llmCompressor"):
        tr.hyperparameters_from_spec(spec)


def test_matrix_and_entry_point_agree_on_the_supported_pairs() -> None:
    # The quantization technique keeps its own copy for admission; it must not drift from
    # the table the job actually enforces.
    from_matrix = {
        a.value: {s.value for s in ss} for a, ss in quantization.COMPRESSOR_SCHEMES.items()
    }
    from_job = {a.value: {s.value for s in ss} for a, ss in quantize.SUPPORTED_SCHEMES.items()}
    assert from_matrix == from_job


def test_training_image_follows_the_sdk_table_per_region_and_refuses_cpu_instances() -> None:
    assert tr.pytorch_training_image("cn-north-1", "ml.g5.2xlarge") == (
        "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/pytorch-training:2.10-gpu-py313"
    )
    assert tr.pytorch_training_image("eu-south-1", "ml.p5.48xlarge").startswith("692866216735.")
    with pytest.raises(tr.TrainingImageError, match="has no GPU"):
        tr.pytorch_training_image("us-east-1", "ml.m5.xlarge")
    with pytest.raises(tr.TrainingImageError, match="trainingImage"):
        tr.pytorch_training_image("xx-nowhere-1", "ml.g6.xlarge")


def test_source_bundle_is_reproducible_and_holds_the_entry_point_and_requirements() -> None:
    bundle = tr.source_bundle()
    assert bundle.sha256 == tr.SourceBundle(bundle.data).sha256
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(bundle.data))) as archive:
        names = sorted(archive.getnames())
        assert names == ["quantize.py", "requirements.txt"]
        script = archive.extractfile("quantize.py")
        requirements = archive.extractfile("requirements.txt")
        assert script is not None and requirements is not None
        assert b"def main(" in script.read()
        assert requirements.read().decode().split() == ["llmcompressor==0.14.0.1"]
    assert bundle.sha256[:16] in tr.source_s3_uri(OUTPUT)


def test_entry_point_imports_nothing_from_the_operator_package() -> None:
    # It runs alone in the training container: only the standard library and pydantic
    # at import time, the ML libraries inside functions.
    source = tr.source_bundle()
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(source.data))) as archive:
        member = archive.extractfile("quantize.py")
        assert member is not None
        text = member.read().decode()
    top_level = [line for line in text.splitlines() if line.startswith(("import ", "from "))]
    assert not [line for line in top_level if "endpoint_optimizer" in line]
    assert not [
        line
        for line in top_level
        if any(lib in line for lib in ("torch", "transformers", "llmcompressor", "datasets"))
    ]


def _describe(status: str, **extra: Any) -> dict[str, Any]:
    return {"TrainingJobName": "job-1", "TrainingJobStatus": status} | extra


def test_completed_job_gives_a_candidate_served_by_lmi_with_compressed_tensors() -> None:
    state = tr.training_job_state(
        _describe(
            "Completed",
            ModelArtifacts={"S3ModelArtifacts": f"{OUTPUT}/job-1/output/model"},
        )
    )
    assert state.done and state.succeeded
    assert state.model_s3_uri == f"{OUTPUT}/job-1/output/model/"
    serving = tr.candidate_serving(state, region="us-east-1", instance_type="ml.g6.12xlarge")
    assert serving.environment == {"OPTION_QUANTIZE": "compressed-tensors", "OPTION_DTYPE": "bf16"}
    assert "/djl-inference:" in serving.image
    assert serving.model_s3_uri == f"{OUTPUT}/job-1/output/model/"
    t4 = tr.candidate_serving(state, region="us-east-1", instance_type="ml.g4dn.xlarge", image="x")
    assert t4.environment["OPTION_DTYPE"] == "fp16"
    assert t4.image == "x"


@pytest.mark.parametrize("status", ["InProgress", "Stopping"])
def test_running_job_is_not_done(status: str) -> None:
    state = tr.training_job_state(_describe(status))
    assert not state.done
    with pytest.raises(ValueError, match=f"job-1 is {status}"):
        tr.candidate_serving(state, region="us-east-1", instance_type="ml.g6.xlarge")


def test_failed_job_carries_its_failure_reason_and_has_no_candidate() -> None:
    state = tr.training_job_state(
        _describe("Failed", FailureReason="AlgorithmError: bad hyperparameters: ...")
    )
    assert state.done and not state.succeeded
    assert state.failure_reason.startswith("AlgorithmError")
    with pytest.raises(ValueError, match="no checkpoint to serve"):
        tr.candidate_serving(state, region="us-east-1", instance_type="ml.g6.xlarge")


def test_a_tarball_output_is_refused_with_the_setting_that_avoids_it() -> None:
    state = tr.training_job_state(
        _describe(
            "Completed", ModelArtifacts={"S3ModelArtifacts": f"{OUTPUT}/j/output/model.tar.gz"}
        )
    )
    with pytest.raises(ValueError, match="CompressionType NONE"):
        tr.candidate_serving(state, region="us-east-1", instance_type="ml.g6.xlarge")


def test_spec_group_size_reaches_the_job_and_bad_values_stop_at_the_spec() -> None:
    calibration = {"s3Uri": "s3://bucket/calib/"}
    job = _job(_spec(algorithm="awq", groupSize=64, calibrationDataset=calibration))
    assert job.hyperparameters.effective_group_size == 64
    assert job.hyperparameters.symmetric is False  # the spec's default for awq
    with pytest.raises(ValidationError):
        _spec(algorithm="gptq", groupSize=8)


def test_bundled_script_runs_alone_as_the_toolkit_runs_it(tmp_path: Path) -> None:
    # Unpack sourcedir.tar.gz and run `python quantize.py` in it, as the training toolkit
    # does; an unsupported pair must fail fast (before torch loads) with exit code 2.
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(tr.source_bundle().data))) as archive:
        archive.extractall(tmp_path / "code", filter="data")
    config = tmp_path / "input" / "config"
    config.mkdir(parents=True)
    (config / "hyperparameters.json").write_text(
        json.dumps({"algorithm": '"smoothquant"', "scheme": '"W4A16"'})
    )
    (tmp_path / "output").mkdir()
    environ = {
        "PATH": os.environ.get("PATH", ""),
        "SM_INPUT_CONFIG_DIR": str(config),
        "SM_INPUT_DATA_DIR": str(tmp_path / "input" / "data"),
        "SM_OUTPUT_DIR": str(tmp_path / "output"),
        "SM_MODEL_DIR": str(tmp_path / "model"),
    }
    done = subprocess.run(
        [sys.executable, "quantize.py", "--algorithm", "smoothquant"],
        cwd=tmp_path / "code",
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    failure = (tmp_path / "output" / "failure").read_text()
    assert "algorithm='smoothquant' and scheme='W4A16' are not a supported pair" in failure
    assert json.loads(done.stdout.splitlines()[-1])["stage"] == "failed"


def test_source_upload_request_is_a_valid_put_object_at_the_submit_directory() -> None:
    job = _job(_spec(algorithm="rtn"))
    request = tr.upload_source_request(job.source_s3_uri)
    model = botocore.session.get_session().get_service_model("s3")
    validate_parameters(request, model.operation_model("PutObject").input_shape)
    assert f"s3://{request['Bucket']}/{request['Key']}" == job.source_s3_uri
    assert request["Body"] == tr.source_bundle().data
    with pytest.raises(ValueError, match="not an s3://bucket/key URI"):
        tr.upload_source_request("https://example.com/x")


@pytest.mark.parametrize(
    ("status", "spelled"),
    [
        ("InProgress", "INPROGRESS"),
        ("Stopping", "STOPPING"),
        ("Completed", "COMPLETED"),
        ("Failed", "FAILED"),
        ("Stopped", "STOPPED"),
    ],
)
def test_training_status_reads_like_an_optimization_job_status(status: str, spelled: str) -> None:
    optimization_statuses = (
        _SESSION.get_service_model("sagemaker").shape_for("OptimizationJobStatus").enum
    )
    state = tr.training_job_state(_describe(status))
    assert state.optimization_status == spelled
    assert spelled in optimization_statuses


def test_the_shipped_awq_example_becomes_a_valid_training_job() -> None:
    import yaml

    from endpoint_optimizer.api import parse_spec

    example = Path(__file__).parents[3] / "examples" / "awq-batch-throughput.yaml"
    spec = parse_spec(yaml.safe_load(example.read_text())["spec"])
    job = tr.training_job_for(spec, "batch-mistral-7b-batch-opt-g1-0a1b2c3d")
    assert job is not None
    request = valid("CreateTrainingJob", tr.create_training_job(job, "batch/mistral/uid"))
    assert request["ResourceConfig"]["InstanceType"] == "ml.g5.12xlarge"
    assert request["AlgorithmSpecification"]["TrainingImage"].startswith(
        "763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-training:"
    )
    assert request["OutputDataConfig"]["S3OutputPath"] == spec.output_s3_uri
    parsed = quantize.QuantizeHyperparameters.from_sagemaker(request["HyperParameters"])
    assert (parsed.algorithm, parsed.scheme, parsed.symmetric) == (
        quantize.Algorithm.AWQ,
        quantize.Scheme.W4A16,
        False,
    )
    assert parsed.calibration_dataset == "hf:HuggingFaceH4/ultrachat_200k"
    assert parsed.calibration_split == "train_sft"
    assert parsed.num_samples == 256


def test_a_spec_without_llm_compressor_asks_for_no_training_job() -> None:
    import yaml

    from endpoint_optimizer.api import parse_spec

    example = Path(__file__).parents[3] / "examples" / "fp8-chat-latency.yaml"
    spec = parse_spec(yaml.safe_load(example.read_text())["spec"])
    assert tr.training_job_for(spec, "x") is None
