"""The OptimizedEndpoint resource: spec and status models, the one source of truth.

The CRD (crds/optimizedendpoint.yaml), its CEL rules and docs/crd-reference.md are
generated from these models by `endpoint_optimizer.crd`. Rules that need no context
live here twice on purpose: as CEL (`x-kubernetes-validations`, so `kubectl apply`
refuses bad input) and as pydantic validators (so the operator refuses the same input
when the CRD was applied without them). Rules that need the technique x instance
matrix live in `endpoint_optimizer.sagemaker.matrix`.

Units: durations are strings like "30s", "5m", "1h30m" (see `duration_seconds`);
latencies in status are milliseconds; fractions are 0..1 (0.05 = 5 %); traffic
weights are integer percent.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime
from enum import StrEnum
from types import UnionType
from typing import Annotated, Any, Literal, Self, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    ValidationError,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from endpoint_optimizer.analysis.verdict import Check
from endpoint_optimizer.camel import CamelModel

# --------------------------------------------------------------------------- scalar types

SAGEMAKER_NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
S3_URI_PATTERN = r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?$"
ROLE_ARN_PATTERN = r"^arn:aws[a-z\-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/\-]{1,512}$"
REGION_PATTERN = r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]{1,2}$"
INSTANCE_TYPE_PATTERN = r"^ml\.[a-z0-9]+(-[a-z0-9]+)*\.[a-z0-9]+$"
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
CONFIGMAP_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
ENV_NAME_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

SageMakerName = Annotated[
    str, StringConstraints(min_length=1, max_length=63, pattern=SAGEMAKER_NAME_PATTERN)
]
S3Uri = Annotated[str, StringConstraints(min_length=8, max_length=1024, pattern=S3_URI_PATTERN)]
RoleArn = Annotated[
    str, StringConstraints(min_length=20, max_length=2048, pattern=ROLE_ARN_PATTERN)
]
Region = Annotated[str, StringConstraints(max_length=32, pattern=REGION_PATTERN)]
InstanceType = Annotated[str, StringConstraints(max_length=64, pattern=INSTANCE_TYPE_PATTERN)]
Duration = Annotated[str, StringConstraints(min_length=2, max_length=32, pattern=DURATION_PATTERN)]
ImageUri = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=r"^\S+$")]
ModelId = Annotated[
    str, StringConstraints(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")
]
HfId = Annotated[
    str,
    StringConstraints(
        min_length=1,
        max_length=256,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*(/[A-Za-z0-9][A-Za-z0-9._\-]*)?$",
    ),
]
LayerName = Annotated[str, StringConstraints(min_length=1, max_length=256)]
PromptClass = Annotated[
    str, StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
]

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_DURATION_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(value: str) -> float:
    """Seconds in a duration string like "90s", "5m" or "1h30m" (Go-style units ms|s|m|h)."""
    if not re.fullmatch(DURATION_PATTERN, value):
        raise ValueError(
            f"duration {value!r} is not valid: use a number and a unit ms|s|m|h, "
            "e.g. 30s, 5m, 1h30m"
        )
    return sum(
        float(number) * _DURATION_UNIT_SECONDS[unit]
        for number, unit in _DURATION_PART.findall(value)
    )


def _rule(field: str, message: str) -> PydanticCustomError:
    """A cross-field refusal naming `field` (camelCase, relative to the model that raises)."""
    return PydanticCustomError("spec_rule", message, {"field": field})


def _cel(*rules: tuple[str, str] | tuple[str, str, str]) -> dict[str, Any]:
    """json_schema_extra carrying CEL rules, copied into the CRD.

    Each rule is (rule, message) or (rule, message, fieldPath); fieldPath (Kubernetes
    1.28+) makes the apiserver report the refusal at that field instead of the object.
    """
    validations = []
    for rule, message, *field_path in rules:
        validation = {"rule": rule, "message": message}
        if field_path:
            validation["fieldPath"] = field_path[0]
        validations.append(validation)
    return {"x-kubernetes-validations": validations}


# --------------------------------------------------------------------------- enums


class Objective(StrEnum):
    LATENCY = "latency"  # per-request latency at the judged concurrency
    THROUGHPUT = "throughput"  # output tokens per second at the judged concurrency


class QuantizationVia(StrEnum):
    OPTIMIZATION_JOB = "optimizationJob"  # SageMaker CreateOptimizationJob (LMI container)
    LLM_COMPRESSOR = "llmCompressor"  # a SageMaker training job running llm-compressor


class QuantizationScheme(StrEnum):
    FP8 = "fp8"
    INT8 = "int8"
    SMOOTHQUANT = "smoothquant"
    AWQ = "awq"
    GPTQ = "gptq"


class CompressorAlgorithm(StrEnum):
    AWQ = "awq"
    GPTQ = "gptq"
    SMOOTHQUANT = "smoothquant"
    RTN = "rtn"  # round-to-nearest, data-free


class WeightActivation(StrEnum):
    W4A16 = "W4A16"
    W8A8 = "W8A8"
    W8A16 = "W8A16"


class SpeculativeMethod(StrEnum):
    DRAFT_MODEL = "draftModel"
    NGRAM = "ngram"
    EAGLE = "eagle"


class EagleDataType(StrEnum):
    S3_PREFIX = "S3Prefix"
    MANIFEST_FILE = "ManifestFile"


class EvalMetric(StrEnum):
    # The scorers of endpoint_optimizer.evaluation.scorers (an eval item may override
    # the metric with its own `scorer`).
    EXACT_MATCH = "exact_match"
    CONTAINS = "contains"
    REGEX = "regex"
    NUMERIC = "numeric"
    ROUGE_L = "rouge_l"


class RolloutStrategy(StrEnum):
    SHADOW = "shadow"
    CANARY = "canary"
    BLUE_GREEN = "blueGreen"


class NoDataPolicy(StrEnum):
    PAUSE = "pause"
    FAIL = "fail"
    PASS = "pass"


class Approval(StrEnum):
    NONE = "none"
    BEFORE_PROMOTION = "beforePromotion"


class DeletionPolicy(StrEnum):
    RETAIN = "Retain"
    DELETE = "Delete"


# --------------------------------------------------------------------------- spec


class ConfigMapRef(CamelModel):
    """A key of a ConfigMap in the resource's own namespace."""

    name: Annotated[
        str, StringConstraints(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    ] = Field(description="ConfigMap name (same namespace as the OptimizedEndpoint).")
    key: Annotated[
        str, StringConstraints(min_length=1, max_length=253, pattern=CONFIGMAP_KEY_PATTERN)
    ] = Field(description="Key in the ConfigMap's data, e.g. `items.jsonl` (JSON lines).")


class DatasetRef(CamelModel):
    """Where prompts or eval items come from."""

    config_map_ref: ConfigMapRef = Field(
        description="A ConfigMap key holding JSON lines, one item per line."
    )


class ModelSource(CamelModel):
    """The model the endpoint serves: an S3 prefix of weights or a JumpStart model id."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "has(self.s3Uri) != has(self.jumpStartModelId)",
                "model: set exactly one of s3Uri or jumpStartModelId",
            ),
        )
    )

    s3_uri: S3Uri | None = Field(
        default=None,
        description="S3 prefix of uncompressed weights (ends with `/`), e.g. s3://bucket/llama/.",
    )
    jump_start_model_id: ModelId | None = Field(
        default=None,
        description="SageMaker JumpStart model id, e.g. meta-textgeneration-llama-3-1-8b.",
    )
    jump_start_model_version: Annotated[str, StringConstraints(max_length=32)] = Field(
        default="*", description="JumpStart model version; `*` is the latest."
    )
    image: ImageUri | None = Field(
        default=None,
        description="Serving container image URI; default: the region's LMI (djl-inference) image.",
    )
    accept_eula: bool = Field(
        default=False,
        description="Accept the model's end-user licence (needed for gated JumpStart models).",
    )
    environment: dict[str, Annotated[str, StringConstraints(max_length=1024)]] = Field(
        default_factory=dict,
        max_length=100,
        description="Extra container environment variables (names `[a-zA-Z_][a-zA-Z0-9_]*`).",
    )

    @field_validator("environment")
    @classmethod
    def _environment_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if len(name) > 1024 or not re.fullmatch(ENV_NAME_PATTERN, name):
                raise ValueError(
                    f"environment variable name {name[:64]!r} is not valid: "
                    "use letters, digits and _ and do not start with a digit"
                )
        return value

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.s3_uri is None) == (self.jump_start_model_id is None):
            raise _rule("s3Uri", "set exactly one of model.s3Uri or model.jumpStartModelId")
        return self


class ContainerSettings(CamelModel):
    """Free container settings (LMI options); unset means the container's own default."""

    max_model_len: int | None = Field(
        default=None, ge=128, le=1_048_576, description="Maximum sequence length, in tokens."
    )
    max_rolling_batch_size: int | None = Field(
        default=None, ge=1, le=1024, description="Maximum concurrent sequences per model copy."
    )
    gpu_memory_utilization: float | None = Field(
        default=None,
        ge=0.1,
        le=0.99,
        description="Fraction of GPU memory the engine may use (weights + KV cache), 0.1..0.99.",
    )
    tensor_parallel_degree: int | None = Field(
        default=None, ge=1, le=64, description="GPUs per model copy; default: all GPUs."
    )
    dtype: Literal["fp32", "fp16", "bf16"] | None = Field(
        default=None,
        description=(
            "Weight and activation data type (LMI option.dtype); bf16 is the near-lossless "
            "half-precision choice. Unset: the container's default."
        ),
    )


class DeploymentTimeouts(CamelModel):
    """Deployment timeouts: the usual cause of failed large-model deployments."""

    model_data_download_seconds: int = Field(
        default=1200, ge=60, le=3600, description="Time to download model data, in seconds."
    )
    container_startup_health_check_seconds: int = Field(
        default=1800,
        ge=60,
        le=3600,
        description="Time for the container to pass its health check, in seconds "
        "(keep at least LMI's model loading timeout, 1800 s).",
    )


class CalibrationDataset(CamelModel):
    """Calibration prompts for llm-compressor: an S3 object/prefix or a Hugging Face dataset id."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "has(self.s3Uri) != has(self.hfDatasetId)",
                "calibrationDataset: set exactly one of s3Uri or hfDatasetId",
            ),
        )
    )

    s3_uri: S3Uri | None = Field(
        default=None, description="S3 URI of JSON lines with a text field."
    )
    hf_dataset_id: HfId | None = Field(
        default=None, description="Hugging Face dataset id, e.g. HuggingFaceH4/ultrachat_200k."
    )
    split: Annotated[str, StringConstraints(min_length=1, max_length=64)] = Field(
        default="train", description="Dataset split to sample from."
    )
    text_field: Annotated[str, StringConstraints(min_length=1, max_length=64)] = Field(
        default="text", description="Field holding the prompt text (chat `messages` also work)."
    )

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.s3_uri is None) == (self.hf_dataset_id is None):
            raise _rule("s3Uri", "set exactly one of calibrationDataset.s3Uri or hfDatasetId")
        return self


_JOB_ONLY_FIELDS = ("scheme", "image")
_COMPRESSOR_ONLY_FIELDS = (
    "algorithm",
    "weightActivation",
    "symmetric",
    "groupSize",
    "calibrationDataset",
    "numCalibrationSamples",
    "maxSequenceLength",
    "smoothingStrength",
    "ignore",
    "targets",
    "trainingInstanceType",
    "trainingImage",
)


def _none_of(fields: tuple[str, ...]) -> str:
    return " && ".join(f"!has(self.{f})" for f in fields)


class Quantization(CamelModel):
    """Ahead-of-time quantization, through a SageMaker optimization job or llm-compressor."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "self.via != 'optimizationJob' || has(self.scheme)",
                "quantization.scheme is required with via: optimizationJob "
                "(fp8 | int8 | smoothquant | awq | gptq)",
                ".scheme",
            ),
            (
                "self.via != 'optimizationJob' || (" + _none_of(_COMPRESSOR_ONLY_FIELDS) + ")",
                "quantization: algorithm, weightActivation, symmetric, groupSize, calibration and "
                "training fields apply only to via: llmCompressor",
            ),
            (
                "self.via != 'llmCompressor' || has(self.algorithm)",
                "quantization.algorithm is required with via: llmCompressor "
                "(awq | gptq | smoothquant | rtn)",
                ".algorithm",
            ),
            (
                "self.via != 'llmCompressor' || (" + _none_of(_JOB_ONLY_FIELDS) + ")",
                "quantization: scheme and image apply only to via: optimizationJob; "
                "use weightActivation and trainingImage with llmCompressor",
            ),
            (
                "self.via != 'llmCompressor' || !has(self.algorithm) || self.algorithm == 'rtn' "
                "|| has(self.calibrationDataset)",
                "quantization.calibrationDataset is required for awq, gptq and smoothquant "
                "(only rtn is data-free)",
                ".calibrationDataset",
            ),
        )
    )

    via: QuantizationVia = Field(
        default=QuantizationVia.OPTIMIZATION_JOB,
        description="How to quantize: a SageMaker optimization job, or llm-compressor in a "
        "SageMaker training job.",
    )
    scheme: QuantizationScheme | None = Field(
        default=None,
        description="Optimization-job scheme (OPTION_QUANTIZE): fp8 needs FP8 hardware "
        "(H100/H200/L4/L40S); smoothquant (INT8) runs on TensorRT-LLM, i.e. with compilation.",
    )
    image: ImageUri | None = Field(
        default=None, description="Optimization-job container image; default: the service's."
    )
    algorithm: CompressorAlgorithm | None = Field(
        default=None, description="llm-compressor algorithm; rtn needs no calibration data."
    )
    weight_activation: WeightActivation | None = Field(
        default=None,
        description="llm-compressor weight x activation bits; default W4A16 "
        "(W8A8 for smoothquant).",
    )
    symmetric: bool | None = Field(
        default=None,
        description="Symmetric weight quantization; default true (false for awq, which uses zero "
        "points).",
    )
    group_size: int | None = Field(
        default=None,
        ge=16,
        le=1024,
        description="Weights per quantization group for W4A16/W8A16 (default 128); W8A8 is "
        "per-channel and takes none.",
    )
    calibration_dataset: CalibrationDataset | None = Field(
        default=None, description="Calibration prompts (awq, gptq, smoothquant)."
    )
    num_calibration_samples: int | None = Field(
        default=None, ge=1, le=65536, description="Calibration samples, in prompts; default 512."
    )
    max_sequence_length: int | None = Field(
        default=None,
        ge=16,
        le=131072,
        description="Tokens per calibration sample (longer ones are cut); default 2048.",
    )
    smoothing_strength: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="SmoothQuant migration strength alpha, 0..1; default 0.8.",
    )
    ignore: list[LayerName] | None = Field(
        default=None,
        max_length=64,
        description="Layers left unquantized (names or `re:` patterns); default [lm_head].",
    )
    targets: list[LayerName] | None = Field(
        default=None,
        max_length=64,
        description="Module types or names to quantize; default [Linear].",
    )
    training_instance_type: InstanceType | None = Field(
        default=None,
        description="Instance type of the llm-compressor training job; default: spec.instanceType.",
    )
    training_image: ImageUri | None = Field(
        default=None, description="llm-compressor training image; default: the operator's."
    )

    @model_validator(mode="after")
    def _via_fields(self) -> Self:
        fields_set = {
            (info.alias or name)
            for name, info in type(self).model_fields.items()
            if getattr(self, name) is not None
        }
        if self.via is QuantizationVia.OPTIMIZATION_JOB:
            if self.scheme is None:
                raise _rule(
                    "scheme",
                    "scheme is required with via: optimizationJob (fp8 | int8 | smoothquant | awq "
                    "| gptq)",
                )
            extra = sorted(fields_set & set(_COMPRESSOR_ONLY_FIELDS))
            verb = "applies" if len(extra) == 1 else "apply"
            if extra:
                raise _rule(
                    extra[0],
                    f"{', '.join(extra)} {verb} only to via: llmCompressor; remove them or set "
                    "via: llmCompressor",
                )
            return self
        if self.algorithm is None:
            raise _rule(
                "algorithm",
                "algorithm is required with via: llmCompressor (awq | gptq | smoothquant | rtn)",
            )
        extra = sorted(fields_set & set(_JOB_ONLY_FIELDS))
        verb = "applies" if len(extra) == 1 else "apply"
        if extra:
            raise _rule(
                extra[0],
                f"{', '.join(extra)} {verb} only to via: optimizationJob; with llmCompressor use "
                "algorithm, weightActivation and trainingImage",
            )
        if self.algorithm is not CompressorAlgorithm.RTN and self.calibration_dataset is None:
            raise _rule(
                "calibrationDataset",
                f"calibrationDataset is required for algorithm {self.algorithm.value} "
                "(only rtn is data-free)",
            )
        # Defaults that depend on the algorithm, filled here so consumers read one value.
        if self.weight_activation is None:
            self.weight_activation = (
                WeightActivation.W8A8
                if self.algorithm is CompressorAlgorithm.SMOOTHQUANT
                else WeightActivation.W4A16
            )
        if self.symmetric is None:
            self.symmetric = self.algorithm is not CompressorAlgorithm.AWQ
        if self.group_size is None and self.weight_activation is not WeightActivation.W8A8:
            self.group_size = 128
        if self.num_calibration_samples is None and self.algorithm is not CompressorAlgorithm.RTN:
            self.num_calibration_samples = 512
        if self.max_sequence_length is None and self.algorithm is not CompressorAlgorithm.RTN:
            self.max_sequence_length = 2048
        if self.smoothing_strength is None and self.algorithm is CompressorAlgorithm.SMOOTHQUANT:
            self.smoothing_strength = 0.8
        if self.ignore is None:
            self.ignore = ["lm_head"]
        if self.targets is None:
            self.targets = ["Linear"]
        return self


class DraftModelSource(CamelModel):
    """Where the draft model comes from: exactly one of S3, JumpStart or Hugging Face."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "(has(self.s3Uri) ? 1 : 0) + (has(self.jumpStartModelId) ? 1 : 0) "
                "+ (has(self.hfModelId) ? 1 : 0) == 1",
                "draftModel: set exactly one of s3Uri, jumpStartModelId or hfModelId",
            ),
        )
    )

    s3_uri: S3Uri | None = Field(default=None, description="S3 prefix of the draft weights.")
    jump_start_model_id: ModelId | None = Field(default=None, description="JumpStart draft id.")
    hf_model_id: HfId | None = Field(
        default=None, description="Hugging Face id the container downloads, e.g. org/name."
    )
    accept_eula: bool = Field(default=False, description="Accept a gated draft's licence.")

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        given = [
            x for x in (self.s3_uri, self.jump_start_model_id, self.hf_model_id) if x is not None
        ]
        if len(given) != 1:
            raise _rule(
                "s3Uri", "set exactly one of draftModel.s3Uri, jumpStartModelId or hfModelId"
            )
        return self


class EagleTrainingData(CamelModel):
    """Training data for EAGLE heads (ShareGPT / OpenAI chat or completions JSON lines)."""

    s3_uri: S3Uri = Field(description="S3 prefix or manifest of the training data.")
    s3_data_type: EagleDataType = Field(
        default=EagleDataType.S3_PREFIX, description="Whether s3Uri is a prefix or a manifest."
    )


class SpeculativeDecoding(CamelModel):
    """Speculative decoding; kept only where the measured acceptance rate pays for it."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "self.method != 'draftModel' || has(self.draftModel)",
                "speculativeDecoding.draftModel (s3Uri, jumpStartModelId or hfModelId) is required "
                "with method: draftModel",
                ".draftModel",
            ),
            (
                "self.method == 'draftModel' || !has(self.draftModel)",
                "speculativeDecoding.draftModel applies only to method: draftModel",
                ".draftModel",
            ),
            (
                "self.method == 'eagle' || !has(self.eagleTrainingData)",
                "speculativeDecoding.eagleTrainingData applies only to method: eagle",
                ".eagleTrainingData",
            ),
            (
                "self.method == 'ngram' "
                "|| (!has(self.promptLookupMin) && !has(self.promptLookupMax))",
                "speculativeDecoding.promptLookupMin/Max apply only to method: ngram",
            ),
            (
                "!has(self.promptLookupMin) || !has(self.promptLookupMax) "
                "|| self.promptLookupMin <= self.promptLookupMax",
                "speculativeDecoding.promptLookupMin must be at most promptLookupMax",
                ".promptLookupMin",
            ),
        )
    )

    method: SpeculativeMethod = Field(
        description="draftModel (a small model proposes), ngram (prompt lookup, no extra model) "
        "or eagle (trained draft heads, via an optimization job)."
    )
    draft_model: DraftModelSource | None = Field(
        default=None, description="Draft model source; required with method draftModel."
    )
    eagle_training_data: EagleTrainingData | None = Field(
        default=None, description="EAGLE head training data; default: the service's own."
    )
    num_speculative_tokens: int = Field(
        default=5, ge=1, le=16, description="Draft tokens proposed per step, in tokens."
    )
    min_acceptance_rate: float = Field(
        default=0.4,
        ge=0.0,
        le=1.0,
        description="Below this fraction of accepted draft tokens the candidate is refused.",
    )
    prompt_lookup_min: int | None = Field(
        default=None, ge=1, le=16, description="ngram: shortest n-gram matched, in tokens."
    )
    prompt_lookup_max: int | None = Field(
        default=None, ge=1, le=16, description="ngram: longest n-gram matched, in tokens."
    )

    @model_validator(mode="after")
    def _method_fields(self) -> Self:
        if self.method is SpeculativeMethod.DRAFT_MODEL and self.draft_model is None:
            raise _rule(
                "draftModel",
                "draftModel (s3Uri, jumpStartModelId or hfModelId) is required with method: "
                "draftModel",
            )
        if self.method is not SpeculativeMethod.DRAFT_MODEL and self.draft_model is not None:
            raise _rule("draftModel", "draftModel applies only to method: draftModel")
        if self.method is not SpeculativeMethod.EAGLE and self.eagle_training_data is not None:
            raise _rule("eagleTrainingData", "eagleTrainingData applies only to method: eagle")
        lookup = (self.prompt_lookup_min, self.prompt_lookup_max)
        if self.method is not SpeculativeMethod.NGRAM and lookup != (None, None):
            raise _rule("promptLookupMin", "promptLookupMin/Max apply only to method: ngram")
        if None not in lookup and lookup[0] > lookup[1]:  # type: ignore[operator]
            raise _rule("promptLookupMin", "promptLookupMin must be at most promptLookupMax")
        return self


class Compilation(CamelModel):
    """Compilation (TensorRT-LLM on GPU, Neuron SDK on inf2/trn1); applied last."""

    tensor_parallel_degree: int | None = Field(
        default=None, ge=1, le=64, description="GPUs (or NeuronCores) per model copy."
    )
    image: ImageUri | None = Field(default=None, description="Compilation job image.")


class Sharding(CamelModel):
    """Pre-sharding for SageMaker's fast model loader; not combined with other techniques."""

    tensor_parallel_degree: int = Field(ge=1, le=64, description="GPUs per model copy.")
    image: ImageUri | None = Field(default=None, description="Sharding job image.")


class Optimizations(CamelModel):
    """Techniques to try, in the order quantize → speculate → compile. Empty: settings only."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "!has(self.compilation) || !has(self.speculativeDecoding)",
                "optimizations: compilation and speculativeDecoding cannot be combined; remove one",
                ".compilation",
            ),
            (
                "!has(self.sharding) || (!has(self.quantization) && !has(self.compilation))",
                "optimizations.sharding cannot be combined with quantization or compilation",
                ".sharding",
            ),
        )
    )

    quantization: Quantization | None = Field(default=None, description="Quantization.")
    speculative_decoding: SpeculativeDecoding | None = Field(
        default=None, description="Speculative decoding."
    )
    compilation: Compilation | None = Field(default=None, description="Compilation.")
    sharding: Sharding | None = Field(default=None, description="Pre-sharding.")

    @model_validator(mode="after")
    def _combinations(self) -> Self:
        if self.compilation is not None and self.speculative_decoding is not None:
            raise _rule(
                "compilation",
                "compilation and speculativeDecoding cannot be combined; remove one",
            )
        if self.sharding is not None and (
            self.quantization is not None or self.compilation is not None
        ):
            raise _rule("sharding", "sharding cannot be combined with quantization or compilation")
        return self

    def needs_output(self) -> bool:
        """Whether a technique writes new model artifacts (so spec.outputS3Uri is needed)."""
        eagle = (
            self.speculative_decoding is not None
            and self.speculative_decoding.method is SpeculativeMethod.EAGLE
        )
        return (
            self.quantization is not None
            or self.compilation is not None
            or self.sharding is not None
            or eagle
        )

    def techniques(self) -> list[str]:
        """Names of the requested techniques, in the order they are applied."""
        names = [
            ("quantization", self.quantization),
            ("speculativeDecoding", self.speculative_decoding),
            ("compilation", self.compilation),
            ("sharding", self.sharding),
        ]
        return [name for name, value in names if value is not None]


class ObjectiveSpec(CamelModel):
    """What "better" means, and by how much the candidate must beat the baseline."""

    metric: Objective = Field(
        default=Objective.LATENCY,
        description="latency: lower end-to-end and first-token latency; throughput: more output "
        "tokens per second.",
    )
    min_improvement: float = Field(
        default=0.05,
        ge=0.0,
        le=10.0,
        description="Minimum relative gain on the metric, as a fraction (0.05 = 5 % better).",
    )
    concurrency: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="Concurrency the objective is judged at; default: the highest in "
        "benchmark.concurrency.",
    )


class Slo(CamelModel):
    """Absolute limits the candidate must meet (in addition to beating the baseline)."""

    ttft_p99_ms: float | None = Field(default=None, gt=0, description="TTFT p99, in ms.")
    itl_p99_ms: float | None = Field(default=None, gt=0, description="Inter-token p99, in ms.")
    e2e_p99_ms: float | None = Field(default=None, gt=0, description="End-to-end p99, in ms.")
    max_error_rate: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Failed requests, as a fraction."
    )


class BenchmarkSpec(CamelModel):
    """How baseline and candidate are measured: same prompts, same concurrency levels."""

    concurrency: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        default_factory=lambda: [1, 8],
        min_length=1,
        max_length=8,
        description="Concurrency levels, in simultaneous requests.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    requests: int = Field(
        default=64, ge=1, le=100_000, description="Measured requests per concurrency level."
    )
    warmup: int = Field(
        default=4, ge=0, le=10_000, description="Unmeasured requests per level before measuring."
    )
    input_tokens: int = Field(
        default=512, ge=1, le=1_048_576, description="Prompt length, in tokens (synthetic prompts)."
    )
    output_tokens: int = Field(
        default=256, ge=1, le=131_072, description="Generated tokens per request (max_tokens)."
    )
    dataset: DatasetRef | None = Field(
        default=None, description="Real prompts (JSON lines); overrides inputTokens when set."
    )
    request_timeout: Duration = Field(default="120s", description="Per-request time limit.")
    seed: int = Field(default=0, ge=0, description="Seed for prompt sampling and ordering.")
    slo: Slo | None = Field(default=None, description="Absolute limits; optional.")

    @field_validator("concurrency")
    @classmethod
    def _unique_levels(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError("concurrency levels must be unique")
        return value


class SpotCheck(CamelModel):
    """A person reads paired baseline/candidate answers before promotion."""

    samples: int = Field(default=10, ge=1, le=200, description="Paired samples to show.")
    prompt_classes: list[PromptClass] = Field(
        default_factory=list,
        max_length=20,
        description="Prompt classes (the eval items' `class` field) to sample from; empty: all.",
    )


class EvaluationSpec(CamelModel):
    """The quality gate: the same items scored on both variants (paired)."""

    dataset: DatasetRef = Field(description="Eval items, JSON lines with prompt and reference.")
    metric: EvalMetric = Field(default=EvalMetric.EXACT_MATCH, description="Task metric.")
    max_absolute_drop: float = Field(
        default=0.01,
        ge=0.0,
        le=1.0,
        description="Largest allowed drop of the task metric, absolute (0.01 = one point).",
    )
    max_refusal_rate_increase: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Largest allowed rise of the refusal rate, absolute fraction.",
    )
    confidence: float = Field(
        default=0.95, ge=0.5, le=0.999, description="Confidence of the paired test, 0.5..0.999."
    )
    max_items: int | None = Field(
        default=None, ge=1, le=100_000, description="Score at most this many items; default: all."
    )
    max_output_tokens: int = Field(
        default=256, ge=1, le=32_768, description="Tokens generated per eval item."
    )
    spot_check: SpotCheck | None = Field(
        default=None, description="Optional human spot check (needs approval: beforePromotion)."
    )


MAX_ROLLOUT_STEPS = 10
MAX_BASELINE_RETENTION_S = 720 * 3600.0


def _steps_increasing_rule() -> str:
    # Index comparisons, each guarded by the list size: list macros such as
    # map(...).isSorted() are refused by real apiservers as over the CEL cost budget.
    parts = [
        f"(size(self) < {i + 2} || !has(self[{i}].weight) || !has(self[{i + 1}].weight) "
        f"|| self[{i}].weight < self[{i + 1}].weight)"
        for i in range(MAX_ROLLOUT_STEPS - 1)
    ]
    return " && ".join(parts)


class RolloutStep(CamelModel):
    """One rollout step: send `weight` percent to the candidate, then judge for `pause`."""

    weight: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="Candidate traffic, in percent (1..100); omitted for shadow.",
    )
    pause: Duration = Field(default="5m", description="How long to observe this step.")


class AnalysisSpec(CamelModel):
    """Live analysis during each rollout step."""

    interval: Duration = Field(
        default="1m",
        description="How often live metrics are judged; longer than 0s.",
        # A duration is positive exactly when it has a non-zero digit.
        json_schema_extra=_cel(
            ("self.matches('[1-9]')", "rollout.analysis.interval must be longer than 0s, e.g. 1m")
        ),
    )
    failure_limit: int = Field(
        default=2, ge=0, le=100, description="Failed intervals tolerated before rollback."
    )
    on_no_data: NoDataPolicy = Field(
        default=NoDataPolicy.PAUSE,
        description="What an Inconclusive interval does: pause, fail (count it) or pass.",
    )
    min_invocations: int = Field(
        default=20,
        ge=0,
        le=1_000_000,
        description="Candidate invocations an interval needs to be judged at all.",
    )

    @field_validator("interval")
    @classmethod
    def _positive_interval(cls, value: str) -> str:
        if duration_seconds(value) <= 0:
            raise ValueError("interval must be longer than 0s, e.g. 1m")
        return value


def default_steps(strategy: RolloutStrategy) -> list[RolloutStep]:
    """The steps used when spec.rollout.steps is empty."""
    if strategy is RolloutStrategy.SHADOW:
        return [RolloutStep(pause="10m")]
    if strategy is RolloutStrategy.BLUE_GREEN:
        return [RolloutStep(weight=100, pause="10m")]
    return [RolloutStep(weight=10, pause="5m"), RolloutStep(weight=50, pause="10m")]


class RolloutSpec(CamelModel):
    """How the candidate meets real traffic."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "self.strategy != 'shadow' || !has(self.steps) "
                "|| self.steps.all(s, !has(s.weight))",
                "rollout.steps[].weight must be omitted with strategy: shadow "
                "(shadow copies traffic)",
                ".steps",
            ),
            (
                "self.strategy == 'shadow' || !has(self.steps) || self.steps.all(s, has(s.weight))",
                "rollout.steps[].weight is required with strategy canary or blueGreen",
                ".steps",
            ),
        )
    )

    strategy: RolloutStrategy = Field(
        default=RolloutStrategy.CANARY,
        description="shadow (copy traffic, users see only the baseline), canary (shift weight "
        "in steps) or blueGreen (switch at once, baseline kept warm).",
    )
    steps: list[RolloutStep] = Field(
        default_factory=list,
        max_length=MAX_ROLLOUT_STEPS,
        description="Steps with strictly increasing weight; empty: canary 10 %/5m then "
        "50 %/10m, blueGreen 100 %/10m, shadow one 10m step.",
        json_schema_extra=_cel(
            (
                _steps_increasing_rule(),
                "rollout.steps[].weight must strictly increase from step to step",
            )
        ),
    )
    analysis: AnalysisSpec = Field(default_factory=AnalysisSpec, description="Live analysis.")
    approval: Approval = Field(
        default=Approval.NONE,
        description="none: promote when all checks pass; beforePromotion: wait for the approve "
        "annotation.",
    )
    # Argo Rollouts' scaleDownDelaySeconds and SageMaker's TerminationWaitInSeconds keep the
    # old fleet for a while; an idle endpoint config and model cost nothing, so the window
    # is longer by default, and bounded so status never promises a rollback for months.
    baseline_retention: Duration = Field(
        default="1h",
        description="After a promotion, how long the baseline endpoint config (and the model "
        "the operator made for it) stay for the optimizer.dev/rollback annotation; then the "
        "operator deletes them. 0s: delete at promotion; at most 720h. A config the operator "
        "did not make (adoptExisting) is never deleted.",
        json_schema_extra=_cel(
            (
                "duration(self) <= duration('720h')",
                "rollout.baselineRetention must be at most 720h (30 days), e.g. 1h; "
                "0s deletes the baseline at promotion",
            )
        ),
    )

    @field_validator("baseline_retention")
    @classmethod
    def _bounded_retention(cls, value: str) -> str:
        if duration_seconds(value) > MAX_BASELINE_RETENTION_S:
            raise ValueError(
                "must be at most 720h (30 days), e.g. 1h; 0s deletes the baseline at promotion"
            )
        return value

    @model_validator(mode="after")
    def _steps(self) -> Self:
        for index, step in enumerate(self.steps):
            if self.strategy is RolloutStrategy.SHADOW and step.weight is not None:
                raise _rule(
                    f"steps[{index}].weight",
                    "weight must be omitted with strategy: shadow (shadow copies traffic)",
                )
            if self.strategy is not RolloutStrategy.SHADOW and step.weight is None:
                raise _rule(
                    f"steps[{index}].weight",
                    f"weight (1..100 percent) is required with strategy {self.strategy.value}",
                )
        for index in range(1, len(self.steps)):
            previous, current = self.steps[index - 1].weight, self.steps[index].weight
            if previous is not None and current is not None and current <= previous:
                raise _rule(
                    f"steps[{index}].weight",
                    f"weight must be greater than the previous step's {previous} "
                    "(weights strictly increase, up to 100)",
                )
        if not self.steps:
            self.steps = default_steps(self.strategy)
        return self


_NEEDS_OUTPUT_RULE = (
    "has(self.outputS3Uri) || !has(self.optimizations) || (!has(self.optimizations.quantization) "
    "&& !has(self.optimizations.compilation) && !has(self.optimizations.sharding) "
    "&& (!has(self.optimizations.speculativeDecoding) "
    "|| self.optimizations.speculativeDecoding.method != 'eagle'))"
)


class OptimizedEndpointSpec(CamelModel):
    """What the user asks for: an endpoint, the techniques to try, and how to judge them."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                _NEEDS_OUTPUT_RULE,
                "spec.outputS3Uri is required for quantization, compilation, sharding and eagle "
                "(they write new model artifacts)",
                ".outputS3Uri",
            ),
            (
                "!has(self.evaluation) || !has(self.evaluation.spotCheck) || "
                "(has(self.rollout) && has(self.rollout.approval) "
                "&& self.rollout.approval == 'beforePromotion')",
                "evaluation.spotCheck needs rollout.approval: beforePromotion "
                "(a person approves after reading the samples)",
                ".evaluation.spotCheck",
            ),
            (
                "!has(self.objective) || !has(self.objective.concurrency) || "
                "(has(self.benchmark) && has(self.benchmark.concurrency) "
                "&& self.objective.concurrency in self.benchmark.concurrency)",
                "objective.concurrency must be one of benchmark.concurrency",
                ".objective.concurrency",
            ),
        )
    )

    # Immutable: the operator's SageMaker resources and the baseline hang off this endpoint;
    # renaming or moving it would orphan them. Make a new OptimizedEndpoint instead.
    endpoint_name: SageMakerName = Field(
        description="SageMaker endpoint name (1..63 of [a-zA-Z0-9-]); created unless "
        "adoptExisting. Immutable.",
        json_schema_extra=_cel(
            (
                "self == oldSelf",
                "endpointName is immutable: create a new OptimizedEndpoint for another endpoint",
            )
        ),
    )
    adopt_existing: bool = Field(
        default=False,
        description="Adopt an existing endpoint of that name as the baseline instead of creating "
        "it.",
    )
    region: Region = Field(
        description="AWS region, e.g. us-east-1. Immutable.",
        json_schema_extra=_cel(
            (
                "self == oldSelf",
                "region is immutable: create a new OptimizedEndpoint for another region",
            )
        ),
    )
    execution_role_arn: RoleArn = Field(
        description="IAM role SageMaker assumes (S3 read/write, ECR, CloudWatch)."
    )
    model: ModelSource = Field(description="The served model.")
    instance_type: InstanceType = Field(description="Instance type, e.g. ml.g6.12xlarge.")
    instance_count: int = Field(default=1, ge=1, le=100, description="Instances per variant.")
    container: ContainerSettings = Field(
        default_factory=ContainerSettings, description="Free container settings."
    )
    timeouts: DeploymentTimeouts = Field(
        default_factory=DeploymentTimeouts, description="Deployment timeouts."
    )
    optimizations: Optimizations = Field(
        default_factory=Optimizations, description="Techniques to try."
    )
    output_s3_uri: S3Uri | None = Field(
        default=None, description="S3 prefix for optimized artifacts (jobs write here)."
    )
    objective: ObjectiveSpec = Field(
        default_factory=ObjectiveSpec, description="What better means."
    )
    benchmark: BenchmarkSpec = Field(
        default_factory=BenchmarkSpec, description="Offline benchmark."
    )
    evaluation: EvaluationSpec | None = Field(
        default=None, description="Quality gate; without it quality is not judged."
    )
    rollout: RolloutSpec = Field(default_factory=RolloutSpec, description="Rollout.")
    deletion_policy: DeletionPolicy = Field(
        default=DeletionPolicy.RETAIN,
        description="On delete: Retain keeps the endpoint serving the baseline; Delete removes "
        "it. Candidate resources the operator made are always removed.",
    )

    @model_validator(mode="after")
    def _cross_fields(self) -> Self:
        if self.output_s3_uri is None and self.optimizations.needs_output():
            raise _rule(
                "outputS3Uri",
                "outputS3Uri is required for quantization, compilation, sharding and eagle "
                "(they write new model artifacts)",
            )
        if (
            self.evaluation is not None
            and self.evaluation.spot_check is not None
            and self.rollout.approval is not Approval.BEFORE_PROMOTION
        ):
            raise _rule(
                "evaluation.spotCheck",
                "spotCheck needs rollout.approval: beforePromotion (a person approves after "
                "reading the samples)",
            )
        if (
            self.objective.concurrency is not None
            and self.objective.concurrency not in self.benchmark.concurrency
        ):
            raise _rule(
                "objective.concurrency",
                f"concurrency must be one of benchmark.concurrency {self.benchmark.concurrency}",
            )
        return self

    def judged_concurrency(self) -> int:
        """The concurrency level the objective is judged at."""
        if self.objective.concurrency is not None:
            return self.objective.concurrency
        return max(self.benchmark.concurrency)

    def candidate_hash(self) -> str:
        """12 hex digits over what defines the candidate's artifacts and serving config.

        Model, instance, container settings, timeouts, optimizations and output prefix;
        not the benchmark, evaluation or rollout, which judge the candidate without
        changing it. Defaults count as written, so `instanceCount: 1` and no
        instanceCount hash the same.
        """
        defining = self.model_dump(
            mode="json",
            by_alias=True,
            include={
                "model",
                "instance_type",
                "instance_count",
                "container",
                "timeouts",
                "optimizations",
                "output_s3_uri",
            },
        )
        canonical = json.dumps(defining, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


# --------------------------------------------------------------------------- status


class Phase(StrEnum):
    PENDING = "Pending"
    BASELINING = "Baselining"
    OPTIMIZING = "Optimizing"
    DEPLOYING = "Deploying"
    ANALYZING = "Analyzing"
    AWAITING_APPROVAL = "AwaitingApproval"
    PROMOTING = "Promoting"
    ROLLING_BACK = "RollingBack"
    SUCCEEDED = "Succeeded"
    ROLLED_BACK = "RolledBack"
    FAILED = "Failed"


TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.ROLLED_BACK, Phase.FAILED})


class ConditionType(StrEnum):
    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    TERMINAL = "Terminal"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(CamelModel):
    """A Kubernetes-convention condition."""

    type: ConditionType = Field(description="Ready, Progressing, Degraded or Terminal.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: Annotated[
        str, StringConstraints(min_length=1, max_length=1024, pattern=CONDITION_REASON_PATTERN)
    ] = Field(description="CamelCase reason, e.g. BaselineMeasured.")
    message: Annotated[str, StringConstraints(max_length=32768)] = Field(
        default="", description="Human-readable detail."
    )
    last_transition_time: datetime = Field(description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the condition was set for."
    )

    @field_serializer("message")
    def _fit_message(self, value: str) -> str:
        return value[:32768]


class LevelMeasurement(CamelModel):
    """Benchmark results of one variant at one concurrency level."""

    concurrency: int = Field(ge=1, description="Simultaneous requests.")
    requests: int = Field(default=0, ge=0, description="Measured requests.")
    errors: int = Field(default=0, ge=0, description="Failed requests.")
    ttft_p50_ms: float | None = Field(default=None, description="Time to first token p50, ms.")
    ttft_p90_ms: float | None = Field(default=None, description="Time to first token p90, ms.")
    ttft_p99_ms: float | None = Field(default=None, description="Time to first token p99, ms.")
    itl_p50_ms: float | None = Field(default=None, description="Inter-token latency p50, ms.")
    itl_p90_ms: float | None = Field(default=None, description="Inter-token latency p90, ms.")
    itl_p99_ms: float | None = Field(default=None, description="Inter-token latency p99, ms.")
    tpot_p50_ms: float | None = Field(default=None, description="Time per output token p50, ms.")
    tpot_p99_ms: float | None = Field(default=None, description="Time per output token p99, ms.")
    e2e_p50_ms: float | None = Field(
        default=None, alias="e2eP50Ms", description="End-to-end latency p50, ms."
    )
    e2e_p90_ms: float | None = Field(
        default=None, alias="e2eP90Ms", description="End-to-end latency p90, ms."
    )
    e2e_p99_ms: float | None = Field(
        default=None, alias="e2eP99Ms", description="End-to-end latency p99, ms."
    )
    output_tokens_per_second: float | None = Field(
        default=None, description="Output tokens per second, all requests together."
    )
    requests_per_second: float | None = Field(default=None, description="Completed requests/s.")


class VariantMeasurements(CamelModel):
    """Everything measured about one variant (baseline or candidate)."""

    variant_name: str = Field(default="", max_length=63, description="SageMaker variant name.")
    levels: list[LevelMeasurement] = Field(
        default_factory=list, description="One entry per benchmark concurrency level."
    )
    acceptance_rate: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Speculative decoding: accepted draft fraction."
    )
    acceptance_source: str = Field(
        default="", description="Where acceptanceRate came from (server metrics, logs, client)."
    )
    eval_score: float | None = Field(default=None, description="Task metric on the eval set.")
    refusal_rate: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Fraction of eval items refused."
    )
    eval_items: int = Field(default=0, ge=0, description="Eval items scored.")
    served_by: str = Field(
        default="",
        description=(
            "The engine that produced these numbers, as the serving container labelled its "
            "responses (CustomAttributes `engine=`): `real`, `synthetic` (a stand-in model, "
            "e.g. the local sandbox), or `mixed`; empty when the container sets no label, as "
            "a real SageMaker container does not."
        ),
    )
    engine_note: str = Field(
        default="",
        description=(
            "Why the numbers are synthetic (the container's `fallback=` reason: a technique "
            "the serving engine cannot run, such as FP8 on a CPU, was modelled instead) or "
            "what the engine served without (`not modelled: ...`)."
        ),
    )
    measured_at: datetime | None = Field(default=None, description="When measured (RFC 3339).")

    def level(self, concurrency: int) -> LevelMeasurement | None:
        """The measurement at `concurrency`, if there is one."""
        return next((m for m in self.levels if m.concurrency == concurrency), None)


class SageMakerResources(CamelModel):
    """The SageMaker resources the operator made or adopted (names)."""

    endpoint_name: str = Field(default="", description="The endpoint.")
    baseline_endpoint_config: str = Field(default="", description="Baseline endpoint config.")
    candidate_endpoint_config: str = Field(default="", description="Candidate endpoint config.")
    serving_endpoint_config: str = Field(
        default="", description="Config the endpoint serves now, as last observed."
    )
    baseline_model: str = Field(default="", description="Baseline SageMaker Model.")
    candidate_model: str = Field(default="", description="Candidate SageMaker Model.")
    models: list[str] = Field(default_factory=list, description="Models the operator made.")
    endpoint_configs: list[str] = Field(
        default_factory=list, description="Endpoint configs the operator made."
    )
    optimization_jobs: list[str] = Field(
        default_factory=list, description="Optimization jobs the operator started."
    )
    training_jobs: list[str] = Field(
        default_factory=list, description="Training jobs (llm-compressor) the operator started."
    )
    alarms: list[str] = Field(default_factory=list, description="CloudWatch alarms made.")
    adopted: bool = Field(
        default=False, description="True when the endpoint existed before (adoptExisting)."
    )
    baseline_retained_until: datetime | None = Field(
        default=None,
        description="After a promotion: until when optimizer.dev/rollback can return to the "
        "baseline config; then the operator deletes it (spec.rollout.baselineRetention). Unset "
        "when the baseline is not the operator's to delete (adopted) or serves again.",
    )
    baseline_deleted_at: datetime | None = Field(
        default=None,
        description="When the operator deleted the baseline config and model after the "
        "retention window; a later rollback annotation is refused.",
    )


class RolloutStatus(CamelModel):
    """Where the rollout stands."""

    step_index: int = Field(default=0, ge=0, description="Current step, 0-based.")
    canary_weight: int = Field(default=0, ge=0, le=100, description="Candidate traffic, percent.")
    step_started_at: datetime | None = Field(default=None, description="When this step began.")
    failed_checks: int = Field(default=0, ge=0, description="Failed intervals so far.")
    live_judge_state: dict[str, Any] = Field(
        default_factory=dict,
        description="Free-form state of the live judge (kept between wake-ups).",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class SpotCheckStatus(CamelModel):
    """The human spot check's samples and decision."""

    config_map: str = Field(default="", description="ConfigMap holding the paired samples.")
    samples: int = Field(default=0, ge=0, description="Paired samples written.")
    approved: bool | None = Field(default=None, description="The reviewer's decision, if any.")


MAX_HISTORY = 50


class HistoryEntry(CamelModel):
    """One decision the operator took."""

    time: datetime = Field(description="When (RFC 3339).")
    phase: Phase = Field(description="Phase at the time.")
    event: Annotated[str, StringConstraints(max_length=128)] = Field(
        description="What happened, CamelCase, e.g. CandidatePromoted."
    )
    message: Annotated[str, StringConstraints(max_length=1024)] = Field(
        default="", description="One line."
    )

    @field_serializer("event")
    def _fit_event(self, value: str) -> str:
        return value[:128]

    @field_serializer("message")
    def _fit_message(self, value: str) -> str:
        return value[:1024]


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


class OptimizedEndpointStatus(CamelModel):
    """What the operator observed and decided; written by the control loop only."""

    phase: Phase = Field(default=Phase.PENDING, description="Pipeline phase.")
    paused: bool = Field(default=False, description="True while paused (annotation or onNoData).")
    observed_generation: int = Field(
        default=0, ge=0, description="metadata.generation the status describes."
    )
    observed_levers: dict[str, Annotated[str, StringConstraints(max_length=253)]] | None = Field(
        default=None,
        max_length=8,
        description=(
            "The optimizer.dev/ lever annotations (approve, rollback, pause, refresh) as of the "
            "last wake-up that acted on them: a change wakes the operator at once, and a new "
            "refresh value is honoured once, with a full observe of the endpoint and jobs."
        ),
    )
    endpoint_observed_at: datetime | None = Field(
        default=None,
        description=(
            "When DescribeEndpoint last ran, kept while the endpoint is described sparsely "
            "(waiting on a job, or finished): the observe cadence reads it."
        ),
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        description="Conditions, one per type.",
        # The Kubernetes convention: a map keyed by type, so server-side apply merges them.
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    baseline: VariantMeasurements | None = Field(default=None, description="Baseline measured.")
    candidate: VariantMeasurements | None = Field(default=None, description="Candidate measured.")
    checks: list[Check] = Field(default_factory=list, description="Latest verdict of each check.")
    objective_gain: float | None = Field(
        default=None,
        description="Candidate's relative gain on the objective, fraction (0.18 = 18 % better).",
    )
    ttft_p99_summary: str = Field(
        default="", description="Baseline → candidate TTFT p99 at the judged concurrency."
    )
    sagemaker: SageMakerResources = Field(
        default_factory=SageMakerResources, description="SageMaker resources."
    )
    rollout: RolloutStatus = Field(default_factory=RolloutStatus, description="Rollout progress.")
    candidate_hash: str = Field(
        default="", description="Hash of the spec parts that define the candidate."
    )
    candidate_techniques: list[str] = Field(
        default_factory=list, description="Techniques the current candidate applies."
    )
    spot_check: SpotCheckStatus | None = Field(default=None, description="Human spot check.")
    history: list[HistoryEntry] = Field(
        default_factory=list,
        max_length=MAX_HISTORY,
        description=f"Latest decisions, oldest first, at most {MAX_HISTORY}.",
    )
    message: Annotated[str, StringConstraints(max_length=1024)] = Field(
        default="", description="One line: what is happening now."
    )
    last_error: Annotated[str, StringConstraints(max_length=4096)] = Field(
        default="", description="The last error seen, with the resource it came from."
    )

    @field_validator("history", mode="before")
    @classmethod
    def _keep_latest(cls, value: Any) -> Any:
        if isinstance(value, list) and len(value) > MAX_HISTORY:
            return value[-MAX_HISTORY:]
        return value

    # The control loop assigns fields directly (no validation on assignment); what it
    # writes must still fit the CRD's bounds, or the apiserver refuses the whole patch.
    @field_serializer("history", mode="wrap")
    def _fit_history(
        self, value: list[HistoryEntry], handler: SerializerFunctionWrapHandler
    ) -> Any:
        return handler(value[-MAX_HISTORY:])

    @field_serializer("message")
    def _fit_message(self, value: str) -> str:
        return value[:1024]

    @field_serializer("last_error")
    def _fit_last_error(self, value: str) -> str:
        return value[:4096]

    @model_serializer(mode="wrap")
    def _finite_numbers(self, handler: SerializerFunctionWrapHandler) -> Any:
        # JSON has no NaN or Infinity and the apiserver refuses a patch carrying them:
        # a value that could not be measured is written as null.
        return _finite(handler(self))

    def record(self, time: datetime, event: str, message: str = "") -> None:
        """Append a history entry at the current phase, keeping the latest MAX_HISTORY."""
        entry = HistoryEntry(time=time, phase=self.phase, event=event, message=message[:1024])
        self.history = [*self.history, entry][-MAX_HISTORY:]

    def condition(self, type_: ConditionType) -> Condition | None:
        """The condition of that type, if set."""
        return next((c for c in self.conditions if c.type is type_), None)

    def set_condition(
        self,
        type_: ConditionType,
        status: ConditionStatus,
        reason: str,
        message: str,
        now: datetime,
        generation: int | None = None,
    ) -> None:
        """Set a condition; lastTransitionTime moves only when its status changes."""
        previous = self.condition(type_)
        changed = previous is None or previous.status is not status
        updated = Condition(
            type=type_,
            status=status,
            reason=reason,
            message=message,
            last_transition_time=now
            if changed or previous is None
            else previous.last_transition_time,
            observed_generation=generation,
        )
        self.conditions = [c for c in self.conditions if c.type is not type_] + [updated]


class OptimizedEndpoint(CamelModel):
    """The whole resource as the Kubernetes API returns it."""

    api_version: Literal["optimizer.dev/v1alpha1"] = Field(
        default="optimizer.dev/v1alpha1", description="optimizer.dev/v1alpha1"
    )
    kind: Literal["OptimizedEndpoint"] = Field(default="OptimizedEndpoint")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Object metadata.")
    spec: OptimizedEndpointSpec
    status: OptimizedEndpointStatus | None = None


# --------------------------------------------------------------------------- parsing


class FieldProblem(CamelModel):
    """One refused field: its camelCase path and what is allowed."""

    path: str
    message: str


class SpecError(ValueError):
    """A spec that the model refuses; the message names each bad field by its camelCase path."""

    def __init__(self, problems: list[FieldProblem]) -> None:
        self.problems = problems
        lines = [f"{p.path}: {p.message}" for p in problems]
        super().__init__("invalid OptimizedEndpoint spec: " + "; ".join(lines))


def _path(prefix: str, loc: tuple[str | int, ...]) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not part.startswith("function-") and part not in ("[key]",):
            path += f".{part}"
    return path


# What each pattern allows, in words, for error messages.
_PATTERN_TEXT = {
    SAGEMAKER_NAME_PATTERN: "must be 1..63 letters, digits and hyphens, starting and ending "
    "with a letter or digit",
    S3_URI_PATTERN: "must be an S3 URI like s3://bucket/prefix/ (lower-case bucket name)",
    ROLE_ARN_PATTERN: "must be an IAM role ARN like arn:aws:iam::123456789012:role/name",
    REGION_PATTERN: "must be an AWS region like us-east-1",
    INSTANCE_TYPE_PATTERN: "must be a SageMaker instance type like ml.g6e.2xlarge",
    DURATION_PATTERN: "must be a duration like 30s, 5m or 1h30m (units ms, s, m, h)",
    DNS_SUBDOMAIN_PATTERN: "must be a Kubernetes name: lower-case letters, digits, - and .",
    CONFIGMAP_KEY_PATTERN: "must be a ConfigMap key: letters, digits, -, _ and .",
    CONDITION_REASON_PATTERN: "must be a CamelCase reason",
}


def _unwrap(annotation: Any) -> Any:
    """The model type inside Optional[...] / list[...] / Annotated[...], if any."""
    for _ in range(4):
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, UnionType):
            annotation = next(a for a in get_args(annotation) if a is not type(None))
        elif origin is list:
            annotation = get_args(annotation)[0]
        else:
            break
    return annotation


def _fields_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """camelCase field names of the model found at `loc` (empty if it is not a model)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = next(
            (f for name, f in current.model_fields.items() if (f.alias or name) == part), None
        )
        if field is None:
            return []
        current = _unwrap(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return []


def problems_from(
    error: ValidationError,
    prefix: str = "spec",
    model: type[BaseModel] | None = None,
) -> list[FieldProblem]:
    """Field problems from a pydantic ValidationError, with camelCase paths under `prefix`."""
    problems: list[FieldProblem] = []
    for item in error.errors(include_url=False):
        path = _path(prefix, tuple(item["loc"]))
        context = item.get("ctx") or {}
        field = context.get("field")
        if isinstance(field, str) and field:
            path = f"{path}.{field}" if not field.startswith("[") else path + field
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "string_pattern_mismatch" and context.get("pattern") in _PATTERN_TEXT:
            message = f"{_PATTERN_TEXT[context['pattern']]} (pattern {context['pattern']})"
        elif item["type"] == "extra_forbidden":
            loc = tuple(item["loc"])
            allowed = _fields_at(model, loc[:-1]) if model is not None else []
            message = f"unknown field {str(loc[-1])!r}" + (
                f"; allowed here: {', '.join(allowed)}" if allowed else ""
            )
        elif item["type"] == "missing":
            message = "field required"
        problems.append(FieldProblem(path=path, message=message))
    return problems


def parse_spec(data: Any) -> OptimizedEndpointSpec:
    """Validate a spec dict (camelCase, as in the resource); raise SpecError naming each field."""
    if not isinstance(data, dict):
        raise SpecError([FieldProblem(path="spec", message="must be an object")])
    try:
        text = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SpecError([FieldProblem(path="spec", message=f"is not JSON: {exc}")]) from None
    try:
        # Strict JSON validation accepts what the apiserver accepts: no `0.0` for a
        # boolean, no "5" for an integer (lax pydantic would coerce both).
        return OptimizedEndpointSpec.model_validate_json(text, strict=True)
    except ValidationError as exc:
        raise SpecError(problems_from(exc, model=OptimizedEndpointSpec)) from None


def parse_status(data: Any) -> OptimizedEndpointStatus:
    """Read a status dict written by the operator (an empty or missing one is the default)."""
    if not data:
        return OptimizedEndpointStatus()
    try:
        return OptimizedEndpointStatus.model_validate(data)
    except ValidationError as exc:
        raise SpecError(
            problems_from(exc, prefix="status", model=OptimizedEndpointStatus)
        ) from None
