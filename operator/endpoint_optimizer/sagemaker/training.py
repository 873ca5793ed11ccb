"""The llm-compressor quantization path: CreateTrainingJob request and the candidate it yields.

SageMaker optimization jobs offer only some schemes, so `via: llmCompressor` runs the
entry point `endpoint_optimizer/jobs/quantize.py` in the SageMaker PyTorch training
container, the way the SDK's framework estimators run a script: the script and a
requirements.txt are uploaded as `sourcedir.tar.gz`, and the `sagemaker_program` /
`sagemaker_submit_directory` hyperparameters tell the container's training toolkit what
to install and run. The job writes an uncompressed compressed-tensors checkpoint that
LMI's vLLM engine serves with `OPTION_QUANTIZE=compressed-tensors`.

Everything here is pure: building the request, the source bundle and the candidate's
serving settings makes no AWS call. The caller uploads `source_bundle().data` to
`source_s3_uri(...)` with s3:PutObject before CreateTrainingJob.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import io
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from endpoint_optimizer.api import (
    CompressorAlgorithm,
    OptimizedEndpointSpec,
    Quantization,
    QuantizationVia,
)
from endpoint_optimizer.jobs import quantize
from endpoint_optimizer.jobs.quantize import QuantizeHyperparameters
from endpoint_optimizer.sagemaker import images
from endpoint_optimizer.sagemaker.requests import Network, tags

# The SDK's framework key and the newest PyTorch training image line whose torch is in
# llmcompressor 0.14's range (>=2.10,<=2.14): pip then keeps the image's CUDA torch.
PYTORCH_FRAMEWORK = "pytorch"
PYTORCH_VERSION = "2.10"

ENTRY_POINT = "quantize.py"
SOURCE_ARCHIVE = "sourcedir.tar.gz"
MODEL_CHANNEL = "model"
CALIBRATION_CHANNEL = "calibration"

# Enough for the weights of a ~70B fp16 model plus its compressed copy; GPU instances
# with NVMe storage (g5, g6, p4d, ...) ignore it as long as it fits the NVMe volume.
DEFAULT_VOLUME_GB = 100
DEFAULT_MAX_RUNTIME_S = 24 * 3600

# LMI passes OPTION_QUANTIZE to vLLM's --quantization; compressed-tensors also makes
# vLLM refuse a checkpoint that lacks the quantization_config it expects.
SERVING_QUANTIZE = "compressed-tensors"
# GPU families without bfloat16 (compute capability < 8.0): serve those in fp16.
_NO_BF16_FAMILIES = frozenset({"g4dn", "p3", "p3dn"})

# The training job's status, in DescribeTrainingJob's spelling.
RUNNING = frozenset({"InProgress", "Stopping"})
TERMINAL = frozenset({"Completed", "Failed", "Stopped"})


class TrainingImageError(LookupError):
    """No training image can be named; the message says which field to set instead."""


def _family(instance_type: str) -> str:
    return instance_type.removeprefix("ml.").split(".")[0]


def pytorch_training_image(region: str, instance_type: str, version: str = PYTORCH_VERSION) -> str:
    """The SDK's `image_uris.retrieve("pytorch", region, version, instance_type=...,
    image_scope="training")`, read from the same configuration the SDK ships."""
    family = _family(instance_type)
    if not family.startswith(("g", "p")):
        raise TrainingImageError(
            f"quantization.trainingInstanceType {instance_type} has no GPU; llm-compressor "
            "calibration needs one (choose an ml.g* or ml.p* instance type)"
        )
    try:
        config = images._framework_config(PYTORCH_FRAMEWORK)
    except images.ImageLookupError as error:
        raise TrainingImageError(
            f"{error}; or set spec.optimizations.quantization.trainingImage"
        ) from None
    training = config.get("training", {})
    full_version = training.get("version_aliases", {}).get(version, version)
    entry = training.get("versions", {}).get(full_version)
    if entry is None:
        raise TrainingImageError(
            f"the SDK's image table has no PyTorch {version} training image; set "
            "spec.optimizations.quantization.trainingImage"
        )
    account = entry.get("registries", {}).get(region)
    if account is None:
        raise TrainingImageError(
            f"no PyTorch {full_version} training image in region {region}; set "
            "spec.optimizations.quantization.trainingImage"
        )
    py_version = entry["py_versions"][-1]
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    # The SDK tags with the version as asked for ("2.10"), not the alias's target.
    tag = f"{entry.get('tag_prefix', version)}-gpu-{py_version}"
    return f"{account}.dkr.ecr.{region}.{domain}/{entry['repository']}:{tag}"


# ------------------------------------------------------------------ source bundle


@dataclass(frozen=True)
class SourceBundle:
    """`sourcedir.tar.gz`: the entry point and its requirements, byte-for-byte reproducible."""

    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def _add(archive: tarfile.TarFile, name: str, content: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(content)
    info.mtime = 0  # a fixed time keeps the digest (and so the S3 key) stable
    info.mode = 0o644
    archive.addfile(info, io.BytesIO(content))


@functools.cache
def source_bundle() -> SourceBundle:
    script = Path(quantize.__file__).read_bytes()
    requirements = "".join(f"{r}\n" for r in quantize.JOB_REQUIREMENTS).encode()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        _add(archive, ENTRY_POINT, script)
        _add(archive, "requirements.txt", requirements)
    # gzip's header carries a time too; mtime=0 makes it reproducible as well.
    return SourceBundle(gzip.compress(raw.getvalue(), mtime=0))


def source_s3_uri(output_s3_uri: str, bundle: SourceBundle | None = None) -> str:
    """Where the bundle goes: under the spec's output prefix, keyed by its content."""
    digest = (bundle or source_bundle()).sha256[:16]
    return f"{output_s3_uri.rstrip('/')}/llm-compressor-source/{digest}/{SOURCE_ARCHIVE}"


def upload_source_request(source_uri: str, bundle: SourceBundle | None = None) -> dict[str, Any]:
    """boto3 s3 `put_object` keyword arguments that put the bundle at `source_uri`.

    The key is content-addressed, so repeating the upload after a crash is harmless.
    """
    if not source_uri.startswith("s3://") or "/" not in source_uri.removeprefix("s3://"):
        raise ValueError(f"source location {source_uri!r} is not an s3://bucket/key URI")
    bucket, key = source_uri.removeprefix("s3://").split("/", 1)
    data = (bundle or source_bundle()).data
    return {"Bucket": bucket, "Key": key, "Body": data, "ContentType": "application/gzip"}


# ------------------------------------------------------------------ the job


@dataclass(frozen=True)
class QuantizationTrainingJob:
    """Everything CreateTrainingJob needs, in plain typed fields."""

    name: str
    region: str
    role_arn: str
    model_s3_uri: str
    output_s3_uri: str
    instance_type: str
    hyperparameters: QuantizeHyperparameters
    source_s3_uri: str
    image: str | None = None
    calibration_s3_uri: str | None = None
    accept_eula: bool = False
    volume_size_gb: int = DEFAULT_VOLUME_GB
    max_runtime_s: int = DEFAULT_MAX_RUNTIME_S
    environment: Mapping[str, str] = field(default_factory=dict)
    network: Network | None = None

    @property
    def training_image(self) -> str:
        return self.image or pytorch_training_image(self.region, self.instance_type)


def hyperparameters_from_spec(spec: Quantization) -> QuantizeHyperparameters:
    """The entry point's hyperparameters for a `via: llmCompressor` quantization spec.

    Raises `UnsupportedPairError` (a ValueError) for an algorithm/scheme pair the entry
    point cannot produce, before anything reaches AWS.
    """
    if spec.via is not QuantizationVia.LLM_COMPRESSOR or spec.algorithm is None:
        raise ValueError(
            "quantization.via must be llmCompressor with an algorithm for a training job"
        )
    algorithm = quantize.Algorithm(spec.algorithm.value)
    scheme = quantize.Scheme(
        spec.weight_activation.value if spec.weight_activation is not None else "W4A16"
    )
    quantize.check_pair(algorithm, scheme)
    values: dict[str, Any] = {"algorithm": algorithm, "scheme": scheme}
    if spec.symmetric is not None:
        values["symmetric"] = spec.symmetric
    if spec.group_size is not None and scheme in quantize.GROUPED_SCHEMES:
        values["group_size"] = spec.group_size
    if spec.num_calibration_samples is not None:
        values["num_samples"] = spec.num_calibration_samples
    if spec.max_sequence_length is not None:
        values["max_seq_length"] = spec.max_sequence_length
    if spec.smoothing_strength is not None:
        values["smoothing_strength"] = spec.smoothing_strength
    if spec.ignore is not None:
        values["ignore"] = list(spec.ignore)
    if spec.targets is not None:
        values["targets"] = list(spec.targets)
    dataset = spec.calibration_dataset
    if dataset is not None and spec.algorithm is not CompressorAlgorithm.RTN:
        if dataset.s3_uri is not None:
            values["calibration_dataset"] = f"{quantize.CHANNEL_PREFIX}{CALIBRATION_CHANNEL}"
        else:
            values["calibration_dataset"] = f"{quantize.HUB_PREFIX}{dataset.hf_dataset_id}"
            values["calibration_split"] = dataset.split
        values["text_field"] = dataset.text_field
    return QuantizeHyperparameters.model_validate(values)


def job_from_spec(
    spec: Quantization,
    *,
    name: str,
    region: str,
    role_arn: str,
    model_s3_uri: str,
    output_s3_uri: str,
    instance_type: str,
    accept_eula: bool = False,
) -> QuantizationTrainingJob:
    """Map the spec (spec.optimizations.quantization plus the endpoint's fields) to a job.

    `instance_type` is spec.instanceType; quantization.trainingInstanceType wins over it.
    """
    calibration = spec.calibration_dataset
    return QuantizationTrainingJob(
        name=name,
        region=region,
        role_arn=role_arn,
        model_s3_uri=model_s3_uri,
        output_s3_uri=output_s3_uri,
        instance_type=spec.training_instance_type or instance_type,
        hyperparameters=hyperparameters_from_spec(spec),
        source_s3_uri=source_s3_uri(output_s3_uri),
        image=spec.training_image,
        calibration_s3_uri=(
            calibration.s3_uri
            if calibration is not None and spec.algorithm is not CompressorAlgorithm.RTN
            else None
        ),
        accept_eula=accept_eula,
    )


def training_job_for(
    spec: OptimizedEndpointSpec, name: str, network: Network | None = None
) -> QuantizationTrainingJob | None:
    """The llm-compressor training job a whole spec asks for, or None (no such quantization).

    `name` is the job's deterministic SageMaker name (the loop's job name for this
    generation). Raises ValueError naming the spec field when the job cannot be built.
    """
    quantization = spec.optimizations.quantization
    if quantization is None or quantization.via is not QuantizationVia.LLM_COMPRESSOR:
        return None
    if spec.model.s3_uri is None:
        raise ValueError(
            "spec.model.s3Uri: the llm-compressor training job reads the weights from an S3 "
            "prefix; a JumpStart or Hugging Face model id cannot be its input channel"
        )
    if spec.output_s3_uri is None:
        raise ValueError(
            "spec.outputS3Uri is required: the training job writes the checkpoint there"
        )
    job = job_from_spec(
        quantization,
        name=name,
        region=spec.region,
        role_arn=spec.execution_role_arn,
        model_s3_uri=spec.model.s3_uri,
        output_s3_uri=spec.output_s3_uri,
        instance_type=spec.instance_type,
        accept_eula=spec.model.accept_eula,
    )
    return dataclasses.replace(job, network=network) if network is not None else job


def _s3_channel(name: str, uri: str, prefix: bool, accept_eula: bool = False) -> dict[str, Any]:
    source: dict[str, Any] = {
        "S3DataType": "S3Prefix",
        "S3Uri": uri if uri.endswith("/") or not prefix else uri + "/",
        "S3DataDistributionType": "FullyReplicated",
    }
    if accept_eula:
        source["ModelAccessConfig"] = {"AcceptEula": True}
    return {
        "ChannelName": name,
        "DataSource": {"S3DataSource": source},
        "CompressionType": "None",
        "InputMode": "File",
    }


def framework_hyperparameters(job: QuantizationTrainingJob) -> dict[str, str]:
    """What the SDK's framework estimators add for the container's training toolkit."""
    return {
        "sagemaker_program": f'"{ENTRY_POINT}"',
        "sagemaker_submit_directory": f'"{job.source_s3_uri}"',
        "sagemaker_container_log_level": "20",
        "sagemaker_job_name": f'"{job.name}"',
        "sagemaker_region": f'"{job.region}"',
    }


def create_training_job(job: QuantizationTrainingJob, owner: str) -> dict[str, Any]:
    """boto3 `create_training_job` keyword arguments."""
    quantize.check_pair(job.hyperparameters.algorithm, job.hyperparameters.scheme)
    channels = [_s3_channel(MODEL_CHANNEL, job.model_s3_uri, True, job.accept_eula)]
    if job.calibration_s3_uri is not None:
        # An object key or a prefix: S3Prefix matches both (every key that starts with it).
        channels.append(_s3_channel(CALIBRATION_CHANNEL, job.calibration_s3_uri, False))
    request: dict[str, Any] = {
        "TrainingJobName": job.name,
        "RoleArn": job.role_arn,
        "AlgorithmSpecification": {
            "TrainingImage": job.training_image,
            "TrainingInputMode": "File",
        },
        "HyperParameters": job.hyperparameters.to_sagemaker() | framework_hyperparameters(job),
        "InputDataConfig": channels,
        # NONE: /opt/ml/model lands as a plain prefix, which a Model can serve as
        # S3Prefix without a tarball to unpack at every cold start.
        "OutputDataConfig": {"S3OutputPath": job.output_s3_uri, "CompressionType": "NONE"},
        "ResourceConfig": {
            "InstanceType": job.instance_type,
            "InstanceCount": 1,
            "VolumeSizeInGB": job.volume_size_gb,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": job.max_runtime_s},
        "Tags": tags(owner),
    }
    if job.environment:
        request["Environment"] = dict(job.environment)
    if job.network is not None:
        request |= job.network.model_members()
        if job.network.volume_kms_key_id is not None:
            request["ResourceConfig"]["VolumeKmsKeyId"] = job.network.volume_kms_key_id
        if job.network.output_kms_key_id is not None:
            request["OutputDataConfig"]["KmsKeyId"] = job.network.output_kms_key_id
    return request


# ------------------------------------------------------------------ after the job


@dataclass(frozen=True)
class TrainingJobState:
    """DescribeTrainingJob, reduced to what the loop decides on."""

    name: str
    status: str
    failure_reason: str = ""
    model_s3_uri: str = ""

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    @property
    def succeeded(self) -> bool:
        return self.status == "Completed" and bool(self.model_s3_uri)

    @property
    def optimization_status(self) -> str:
        """The status in DescribeOptimizationJob's spelling (InProgress -> INPROGRESS), so
        one piece of the loop can wait on, and fail for, either kind of job."""
        return self.status.upper()


def training_job_state(describe: Mapping[str, Any]) -> TrainingJobState:
    status = str(describe.get("TrainingJobStatus", ""))
    artifacts = str(describe.get("ModelArtifacts", {}).get("S3ModelArtifacts", ""))
    if artifacts and not artifacts.endswith(".tar.gz") and not artifacts.endswith("/"):
        artifacts += "/"
    return TrainingJobState(
        name=str(describe.get("TrainingJobName", "")),
        status=status,
        failure_reason=str(describe.get("FailureReason", "")),
        model_s3_uri=artifacts,
    )


@dataclass(frozen=True)
class CandidateServing:
    """How the candidate Model serves the job's checkpoint."""

    image: str
    model_s3_uri: str
    environment: dict[str, str]


def serving_dtype(instance_type: str) -> str:
    return "fp16" if _family(instance_type) in _NO_BF16_FAMILIES else "bf16"


def candidate_serving(
    state: TrainingJobState,
    *,
    region: str,
    instance_type: str,
    image: str | None = None,
) -> CandidateServing:
    """The serving image, weights and quantization environment for the compressed checkpoint.

    `instance_type` is the endpoint's; `image` is spec.model.image (default: the region's
    LMI image). The caller merges its container settings into `environment`.
    """
    if not state.succeeded:
        raise ValueError(
            f"training job {state.name} is {state.status or 'unknown'}, not Completed with "
            "model artifacts; there is no checkpoint to serve"
        )
    if state.model_s3_uri.endswith(".tar.gz"):
        raise ValueError(
            f"training job {state.name} wrote a tarball ({state.model_s3_uri}); the operator "
            "serves uncompressed prefixes (OutputDataConfig.CompressionType NONE)"
        )
    return CandidateServing(
        image=image or images.default_image(region, images.LMI),
        model_s3_uri=state.model_s3_uri,
        environment={
            "OPTION_QUANTIZE": SERVING_QUANTIZE,
            "OPTION_DTYPE": serving_dtype(instance_type),
        },
    )
