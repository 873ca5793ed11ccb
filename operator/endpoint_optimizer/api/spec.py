"""The OptimizedEndpoint's spec: what a team asks for, the one source of the CRD.

The CRD (crds/optimizedendpoint.yaml), its CEL rules and docs/crd-reference.md are
generated from these models by `endpoint_optimizer.api.crd`. Rules that need no context
live here twice on purpose: as CEL (`x-kubernetes-validations`, so `kubectl apply`
refuses bad input) and as pydantic validators (so the operator refuses the same input
when the CRD was applied without them). Rules that need the technique x instance
matrix live in `endpoint_optimizer.sagemaker.matrix`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import (
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from endpoint_optimizer.api.camel import CamelModel
from endpoint_optimizer.api.errors import FieldProblem, SpecError, problems_from
from endpoint_optimizer.api.types import (
    CONFIGMAP_KEY_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    ENV_NAME_PATTERN,
    Duration,
    HfId,
    ImageUri,
    InstanceType,
    LayerName,
    ModelId,
    PromptClass,
    Region,
    RoleArn,
    S3Uri,
    SageMakerName,
    cel,
    duration_seconds,
    rule,
)

# --------------------------------------------------------------------------- enums


class Objective(StrEnum):
    LATENCY = "latency"  # end-to-end p50 at the judged concurrency (the default; = e2eP50)
    E2E_P50 = "e2eP50"  # end-to-end latency p50
    TTFT_P99 = "ttftP99"  # time to first token p99
    ITL_P50 = "itlP50"  # inter-token latency p50: each request's mean token gap (TPOT)
    THROUGHPUT = "throughput"  # output tokens per second at the judged concurrency
    COST = "costPerMillionTokens"  # instance time per output token: 1 / throughput

    @property
    def lower_is_better(self) -> bool:
        return self is not Objective.THROUGHPUT

    @property
    def binding(self) -> str:
        """The metric name the search's `binding` uses for this objective."""
        return {
            Objective.LATENCY: "e2e",
            Objective.E2E_P50: "e2e",
            Objective.TTFT_P99: "ttft",
            Objective.ITL_P50: "itl",
            Objective.THROUGHPUT: "throughput",
            Objective.COST: "cost",
        }[self]


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


class ConcurrencyCutoff(StrEnum):
    """What the operator does with the concurrency above which speculation stops winning."""

    RECORD = "record"  # status and the report only; the candidate serves as it is
    APPLY = "apply"  # the candidate is re-made with vLLM's batch-size schedule for it


class SpeculativeMethod(StrEnum):
    DRAFT_MODEL = "draftModel"
    NGRAM = "ngram"
    EAGLE = "eagle"


class DraftProvider(StrEnum):
    # The SageMaker SDK's speculative_decoding_config ModelProvider, spelled as the CRD does.
    SAGEMAKER = "sageMaker"  # the draft SageMaker provides in the model's JumpStart metadata
    JUMPSTART = "jumpStart"  # another JumpStart model (draftModel.jumpStartModelId)
    CUSTOM = "custom"  # weights you name (draftModel.s3Uri or hfModelId)


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


class RequestFormat(StrEnum):
    """The body the serving container's /invocations route takes (benchmark and eval)."""

    # {"inputs", "parameters"}: LMI (DJL Serving) and TGI; the prompt is sent as written.
    LMI = "lmi"
    # OpenAI chat completions {"messages"}: vLLM's SageMaker route, LMI's messages API; the
    # container applies the model's chat template, as it does for the endpoint's users.
    CHAT = "chat"
    # OpenAI completions {"prompt"}: vLLM's SageMaker route; no template.
    COMPLETIONS = "completions"


DISABLE_SPECULATION_STRATEGY = (
    "rollout.onAcceptanceDrift: disableSpeculation needs strategy: canary (the twin takes "
    "the candidate variant's place and weight); use rollback or alert with shadow or blueGreen"
)
DISABLE_SPECULATION_NEEDS = (
    "rollout.onAcceptanceDrift: disableSpeculation needs optimizations.speculativeDecoding "
    "with method ngram or draftModel (EAGLE heads are built into the optimized weights, so "
    "there is no speculation-free twin of the same weights); use rollback or alert"
)


class AcceptanceDriftPolicy(StrEnum):
    """What a confident fall of live acceptance below the floor does (canary and bake)."""

    ROLLBACK = "rollback"  # a failed live check: failureLimit such intervals roll back
    ALERT = "alert"  # an Event, a status condition and a metric; traffic stays as it is
    # failureLimit such intervals: the candidate's traffic moves to its speculation-free
    # twin (same weights and settings, speculation off) through the normal update path.
    DISABLE_SPECULATION = "disableSpeculation"


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


class BenchmarkJudge(StrEnum):
    """How the benchmark judge reaches its verdicts (docs/analysis.md §1)."""

    # Rounds of requests per level until every gating check is decided or the budget
    # (maxRequests, maxDuration) is spent; valid under that optional stopping.
    SEQUENTIAL = "sequential"
    FIXED = "fixed"  # one round of `requests`, the bootstrap judge


class TailGating(StrEnum):
    """Whether a tail quantile (p95, p99: fewer than 10 % of samples beyond it) gates."""

    WHEN_DECIDABLE = "whenDecidable"  # when its projected sample need fits the budget
    ALWAYS = "always"
    NEVER = "never"


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


class SecretKeyRef(CamelModel):
    """A key of a Secret in the resource's own namespace."""

    name: Annotated[
        str, StringConstraints(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    ] = Field(description="Secret name (same namespace as the OptimizedEndpoint).")
    key: Annotated[
        str, StringConstraints(min_length=1, max_length=253, pattern=CONFIGMAP_KEY_PATTERN)
    ] = Field(default="token", description="Key in the Secret's data holding the token.")


_MODEL_SOURCE_COUNT = (
    "(has(self.s3Uri) ? 1 : 0) + (has(self.jumpStartModelId) ? 1 : 0) "
    "+ (has(self.hfModelId) ? 1 : 0)"
)


class ModelSource(CamelModel):
    """The model the endpoint serves: S3 weights, a JumpStart model id or a Hugging Face id."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                f"{_MODEL_SOURCE_COUNT} == 1",
                "model: set exactly one of s3Uri, jumpStartModelId or hfModelId",
            ),
            (
                "!has(self.hfRevision) || has(self.hfModelId)",
                "model.hfRevision applies only to model.hfModelId",
                ".hfRevision",
            ),
        )
    )

    s3_uri: S3Uri | None = Field(
        default=None,
        description="S3 prefix of uncompressed weights (ends with `/`), e.g. s3://bucket/llama/.",
    )
    jump_start_model_id: ModelId | None = Field(
        default=None,
        description="SageMaker JumpStart model id, e.g. meta-textgeneration-llama-3-1-8b-instruct; "
        "image, weights and environment come from the region's JumpStart metadata.",
    )
    jump_start_model_version: Annotated[str, StringConstraints(max_length=32)] = Field(
        default="*", description="JumpStart model version; `*` is the latest."
    )
    hf_model_id: HfId | None = Field(
        default=None,
        description="Hugging Face Hub model id the serving container downloads at start "
        "(HF_MODEL_ID), e.g. mistralai/Mistral-7B-Instruct-v0.3.",
    )
    hf_revision: (
        Annotated[
            str, StringConstraints(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9._/\-]+$")
        ]
        | None
    ) = Field(
        default=None,
        description="Hub revision (branch, tag or commit) of hfModelId (HF_REVISION); default: "
        "main. Pin a commit for a reproducible baseline.",
    )
    token_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="A Secret key with a Hugging Face token for gated models and datasets, read "
        "when a model or training job is created and passed to it as HF_TOKEN; never stored in "
        "status, Events, logs or metrics.",
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
        given = [x for x in (self.s3_uri, self.jump_start_model_id, self.hf_model_id) if x]
        if len(given) != 1:
            raise rule(
                "s3Uri", "set exactly one of model.s3Uri, model.jumpStartModelId or hfModelId"
            )
        if self.hf_revision is not None and self.hf_model_id is None:
            raise rule("hfRevision", "hfRevision applies only to model.hfModelId")
        return self


_SUBNET = Annotated[str, StringConstraints(min_length=1, max_length=32, pattern=r"^[-0-9a-zA-Z]+$")]
_KMS_KEY = Annotated[
    str, StringConstraints(min_length=1, max_length=2048, pattern=r"^[a-zA-Z0-9:/_-]+$")
]


class NetworkSpec(CamelModel):
    """Private networking and encryption for everything the operator creates in SageMaker."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "has(self.subnets) == has(self.securityGroupIds)",
                "network: set subnets and securityGroupIds together (a VPC needs both)",
                ".subnets",
            ),
        )
    )

    subnets: list[_SUBNET] | None = Field(
        default=None,
        min_length=1,
        max_length=16,
        description="VPC subnet ids (1..16) for models, training and optimization jobs "
        "(VpcConfig.Subnets); the execution role needs the EC2 network-interface permissions "
        "in docs/iam.md.",
    )
    security_group_ids: list[_SUBNET] | None = Field(
        default=None,
        min_length=1,
        max_length=5,
        description="VPC security group ids (1..5), with subnets (VpcConfig.SecurityGroupIds).",
    )
    enable_network_isolation: bool = Field(
        default=False,
        description="No network access for model and training containers "
        "(EnableNetworkIsolation): weights come only from S3, so not with model.hfModelId, a "
        "Hub draft or via: llmCompressor, which download at start.",
    )
    volume_kms_key_id: _KMS_KEY | None = Field(
        default=None,
        description="KMS key for the ML storage volumes of endpoints (CreateEndpointConfig "
        "KmsKeyId) and training jobs (VolumeKmsKeyId); instance-store NVMe volumes are "
        "hardware-encrypted instead.",
    )
    output_kms_key_id: _KMS_KEY | None = Field(
        default=None,
        description="KMS key for the artifacts optimization and training jobs write to S3 "
        "(OutputConfig / OutputDataConfig KmsKeyId).",
    )

    @model_validator(mode="after")
    def _vpc_pair(self) -> Self:
        if (self.subnets is None) != (self.security_group_ids is None):
            raise rule("subnets", "set subnets and securityGroupIds together (a VPC needs both)")
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
    kv_cache_dtype: Literal["fp8", "nvfp4"] | None = Field(
        default=None,
        description=(
            "KV-cache data type (option.kv_cache_dtype): fp8 halves the cache (vLLM, "
            "TensorRT-LLM; vLLM's default scales are 1.0 without calibration), nvfp4 "
            "quarters it (TensorRT-LLM on Blackwell). More sequences fit, and answers change "
            "where attention reaches far back: long context first. Unset: the model's dtype."
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
        json_schema_extra=cel(
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
            raise rule("s3Uri", "set exactly one of calibrationDataset.s3Uri or hfDatasetId")
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
        json_schema_extra=cel(
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
                raise rule(
                    "scheme",
                    "scheme is required with via: optimizationJob (fp8 | int8 | smoothquant | awq "
                    "| gptq)",
                )
            extra = sorted(fields_set & set(_COMPRESSOR_ONLY_FIELDS))
            verb = "applies" if len(extra) == 1 else "apply"
            if extra:
                raise rule(
                    extra[0],
                    f"{', '.join(extra)} {verb} only to via: llmCompressor; remove them or set "
                    "via: llmCompressor",
                )
            return self
        if self.algorithm is None:
            raise rule(
                "algorithm",
                "algorithm is required with via: llmCompressor (awq | gptq | smoothquant | rtn)",
            )
        extra = sorted(fields_set & set(_JOB_ONLY_FIELDS))
        verb = "applies" if len(extra) == 1 else "apply"
        if extra:
            raise rule(
                extra[0],
                f"{', '.join(extra)} {verb} only to via: optimizationJob; with llmCompressor use "
                "algorithm, weightActivation and trainingImage",
            )
        if self.algorithm is not CompressorAlgorithm.RTN and self.calibration_dataset is None:
            raise rule(
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


_DRAFT_SOURCE_COUNT = (
    "(has(self.s3Uri) ? 1 : 0) + (has(self.jumpStartModelId) ? 1 : 0) "
    "+ (has(self.hfModelId) ? 1 : 0)"
)


class DraftModelSource(CamelModel):
    """Where the draft model comes from: SageMaker's own, a JumpStart model, S3 or Hugging Face."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "has(self.modelProvider) && self.modelProvider == 'sageMaker' ? "
                f"{_DRAFT_SOURCE_COUNT} == 0 : {_DRAFT_SOURCE_COUNT} == 1",
                "draftModel: set exactly one of s3Uri, jumpStartModelId or hfModelId "
                "(none with modelProvider: sageMaker)",
            ),
            (
                "!has(self.modelProvider) || self.modelProvider != 'jumpStart' "
                "|| has(self.jumpStartModelId)",
                "draftModel.modelProvider jumpStart needs draftModel.jumpStartModelId",
                ".jumpStartModelId",
            ),
            (
                "!has(self.modelProvider) || self.modelProvider != 'custom' "
                "|| has(self.s3Uri) || has(self.hfModelId)",
                "draftModel.modelProvider custom needs draftModel.s3Uri or hfModelId",
                ".s3Uri",
            ),
        )
    )

    model_provider: DraftProvider | None = Field(
        default=None,
        description="Who provides the draft, as the SageMaker SDK's ModelProvider: sageMaker "
        "(the draft in the JumpStart model's own metadata; needs spec.model.jumpStartModelId "
        "and no other draft field), jumpStart or custom; default: from the field that is set.",
    )
    s3_uri: S3Uri | None = Field(default=None, description="S3 prefix of the draft weights.")
    jump_start_model_id: ModelId | None = Field(default=None, description="JumpStart draft id.")
    jump_start_model_version: Annotated[str, StringConstraints(max_length=32)] = Field(
        default="*", description="JumpStart draft version; `*` is the latest."
    )
    hf_model_id: HfId | None = Field(
        default=None, description="Hugging Face id the container downloads, e.g. org/name."
    )
    accept_eula: bool = Field(default=False, description="Accept a gated draft's licence.")

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        given = [
            x for x in (self.s3_uri, self.jump_start_model_id, self.hf_model_id) if x is not None
        ]
        if self.model_provider is DraftProvider.SAGEMAKER:
            if given:
                raise rule(
                    "modelProvider",
                    "modelProvider sageMaker uses the draft of the model's JumpStart metadata: "
                    "remove draftModel.s3Uri, jumpStartModelId and hfModelId",
                )
            return self
        if len(given) != 1:
            raise rule(
                "s3Uri", "set exactly one of draftModel.s3Uri, jumpStartModelId or hfModelId"
            )
        if self.model_provider is DraftProvider.JUMPSTART and self.jump_start_model_id is None:
            raise rule("jumpStartModelId", "modelProvider jumpStart needs jumpStartModelId")
        if self.model_provider is DraftProvider.CUSTOM and self.jump_start_model_id is not None:
            raise rule("s3Uri", "modelProvider custom needs draftModel.s3Uri or hfModelId")
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
        json_schema_extra=cel(
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
                "!has(self.concurrencyCutoff) || self.concurrencyCutoff != 'apply' "
                "|| self.method == 'ngram'",
                "speculativeDecoding.concurrencyCutoff: apply needs method: ngram (the switch "
                "is a key of vLLM's speculative config; draft-model and EAGLE serving "
                "options carry none the operator can set)",
                ".concurrencyCutoff",
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
    concurrency_cutoff: ConcurrencyCutoff = Field(
        default=ConcurrencyCutoff.RECORD,
        description="record: the concurrency above which speculation stops winning (from the "
        "candidate's per-level comparison) goes to status and the report. apply (ngram on "
        "LMI with vLLM 0.25 or later): the candidate is also re-made with vLLM's "
        "num_speculative_tokens_per_batch_size (no drafts above it) before the canary goes on.",
    )

    @model_validator(mode="after")
    def _method_fields(self) -> Self:
        if (
            self.concurrency_cutoff is ConcurrencyCutoff.APPLY
            and self.method is not SpeculativeMethod.NGRAM
        ):
            raise rule(
                "concurrencyCutoff",
                "concurrencyCutoff: apply needs method: ngram (the switch is a key of vLLM's "
                "speculative config; draft-model and EAGLE serving options carry none the "
                "operator can set)",
            )
        if self.method is SpeculativeMethod.DRAFT_MODEL and self.draft_model is None:
            raise rule(
                "draftModel",
                "draftModel (s3Uri, jumpStartModelId or hfModelId) is required with method: "
                "draftModel",
            )
        if self.method is not SpeculativeMethod.DRAFT_MODEL and self.draft_model is not None:
            raise rule("draftModel", "draftModel applies only to method: draftModel")
        if self.method is not SpeculativeMethod.EAGLE and self.eagle_training_data is not None:
            raise rule("eagleTrainingData", "eagleTrainingData applies only to method: eagle")
        lookup = (self.prompt_lookup_min, self.prompt_lookup_max)
        if self.method is not SpeculativeMethod.NGRAM and lookup != (None, None):
            raise rule("promptLookupMin", "promptLookupMin/Max apply only to method: ngram")
        if None not in lookup and lookup[0] > lookup[1]:  # type: ignore[operator]
            raise rule("promptLookupMin", "promptLookupMin must be at most promptLookupMax")
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
        json_schema_extra=cel(
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
            raise rule(
                "compilation",
                "compilation and speculativeDecoding cannot be combined; remove one",
            )
        if self.sharding is not None and (
            self.quantization is not None or self.compilation is not None
        ):
            raise rule("sharding", "sharding cannot be combined with quantization or compilation")
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
        """Names of the requested techniques, in the order they are applied (field order)."""
        return [
            info.alias or name
            for name, info in type(self).model_fields.items()
            if getattr(self, name) is not None
        ]


# A search alternative's name: a DNS label, short, since a candidate's resources are
# named from the stack of names it was built on (hashed) and status shows it in tables.
SEARCH_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$"
SearchName = Annotated[str, StringConstraints(max_length=32, pattern=SEARCH_NAME_PATTERN)]
_NAME_DOC = "Unique in spec.search (a DNS label, at most 32 characters); status names it."
MAX_SEARCH_ALTERNATIVES = 8


class SettingsAlternative(ContainerSettings):
    """One set of container settings to try: a candidate of the first rung."""

    name: SearchName = Field(description=_NAME_DOC)


class QuantizationAlternative(Quantization):
    """One quantization to try on the current best, e.g. fp8 beside awq."""

    name: SearchName = Field(description=_NAME_DOC)


class SpeculationAlternative(SpeculativeDecoding):
    """One speculative-decoding method to try on the current best (n-gram, draft, EAGLE)."""

    name: SearchName = Field(description=_NAME_DOC)


class CompilationAlternative(Compilation):
    """Compilation to try last, on the frozen winner."""

    name: SearchName = Field(description=_NAME_DOC)


class InstanceAlternative(CamelModel):
    """A smaller instance type to try after a kept 4-bit or 8-bit quantization, once the
    memory check (search.memoryFit) says the quantized model still fits."""

    name: SearchName = Field(description=_NAME_DOC)
    instance_type: InstanceType = Field(description="Instance type, e.g. ml.g6e.2xlarge.")
    instance_count: int | None = Field(
        default=None, ge=1, le=64, description="Instances; unset: spec.instanceCount."
    )
    tensor_parallel_degree: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="GPUs per model copy on it; unset: every GPU of the instance type.",
    )
    usd_per_instance_hour: float | None = Field(
        default=None,
        gt=0,
        le=1000,
        description="Its price; unset: the chart's table, else the AWS Price List.",
    )


class MemoryFit(CamelModel):
    """What the memory check before a smaller instance needs: the model's shape (from its
    config.json) and the sequences it must hold (pipeline/fit.py)."""

    parameters_billion: float = Field(gt=0, le=10_000, description="Parameters, in billions.")
    layers: int = Field(ge=1, le=1024, description="config.json num_hidden_layers.")
    kv_heads: int = Field(ge=1, le=1024, description="config.json num_key_value_heads.")
    head_dim: int = Field(
        ge=1, le=4096, description="config.json head_dim (hidden_size / num_attention_heads)."
    )
    max_model_len: int | None = Field(
        default=None,
        ge=128,
        le=1_048_576,
        description="Tokens per sequence to hold; a smaller instance is then served with it "
        "as its maxModelLen (unless a kept settings alternative set one). Unset: the stack's "
        "container maxModelLen, else 8192.",
    )
    batch: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Sequences to hold at once per model copy; unset: the stack's "
        "maxRollingBatchSize, else the judged benchmark concurrency.",
    )


class SearchBudget(CamelModel):
    """Stops the search with the best found so far."""

    candidates: int | None = Field(
        default=None, ge=1, le=32, description="Most candidates measured. Unset: every one."
    )
    instance_hours: float | None = Field(
        default=None,
        gt=0,
        le=10_000,
        description="Most instance-hours the candidates' weight-0 variants may run while "
        "measured (each candidate's time from its deployment to its verdict, times "
        "instanceCount). Unset: no bound.",
    )


# A list keyed by name: the apiserver refuses two alternatives of one name in a rung (the
# operator refuses a name repeated across rungs too).
_BY_NAME: dict[str, Any] = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}


class SearchSpec(CamelModel):
    """The optimization order as a search (design.md): settings -> quantization ->
    speculative decoding (only while latency still binds) -> compilation (last, on the
    frozen winner). Each rung's alternatives are measured, one at a time on a weight-0
    variant, against the current best (paired, same run, same eval); a rung's winner is
    kept only if it improves the objective and passes every gate. Only the final winner is
    rolled out. Instead of spec.optimizations and spec.container."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "(has(self.settings) && size(self.settings) > 0) || (has(self.quantization) "
                "&& size(self.quantization) > 0) || (has(self.speculativeDecoding) "
                "&& size(self.speculativeDecoding) > 0) || (has(self.compilation) "
                "&& size(self.compilation) > 0)",
                "search needs at least one alternative in settings, quantization, "
                "speculativeDecoding or compilation",
            ),
            (
                "!has(self.instanceTypes) || size(self.instanceTypes) == 0 || has(self.memoryFit)",
                "search.instanceTypes needs search.memoryFit (the model's parameters, layers, "
                "kvHeads and headDim from its config.json) for the memory check",
            ),
        )
    )

    settings: list[SettingsAlternative] = Field(
        default_factory=list,
        max_length=MAX_SEARCH_ALTERNATIVES,
        json_schema_extra=_BY_NAME,
        description="Container settings to try first (no job, no new weights).",
    )
    quantization: list[QuantizationAlternative] = Field(
        default_factory=list,
        max_length=MAX_SEARCH_ALTERNATIVES,
        json_schema_extra=_BY_NAME,
        description="Quantizations to compare, e.g. fp8, awq, gptq, smoothquant.",
    )
    speculative_decoding: list[SpeculationAlternative] = Field(
        default_factory=list,
        max_length=MAX_SEARCH_ALTERNATIVES,
        json_schema_extra=_BY_NAME,
        description="Speculative decoding to try while the objective is unmet or TTFT/ITL "
        "binds; skipped otherwise.",
    )
    instance_types: list[InstanceAlternative] = Field(
        default_factory=list,
        max_length=MAX_SEARCH_ALTERNATIVES,
        json_schema_extra=_BY_NAME,
        description="Smaller instance types to try after a kept quantization (skipped "
        "otherwise), each only where memoryFit says the stack fits; judged like any rung, "
        "so a costPerMillionTokens objective is what makes a cheaper instance pay.",
    )
    memory_fit: MemoryFit | None = Field(
        default=None,
        description="The model's shape for the memory check of instanceTypes (required with them).",
    )
    compilation: list[CompilationAlternative] = Field(
        default_factory=list,
        max_length=MAX_SEARCH_ALTERNATIVES,
        json_schema_extra=_BY_NAME,
        description="Compilation, tried last on the frozen winner (not after speculation).",
    )
    budget: SearchBudget = Field(
        default_factory=SearchBudget, description="Stops the search with the best so far."
    )
    usd_per_instance_hour: float | None = Field(
        default=None,
        gt=0,
        le=1000,
        description="The instance type's price, for each candidate's cost per 1M output "
        "tokens at its measured throughput (status.search). Unset: the chart's "
        "pricing.usdPerInstanceHour, else the AWS Price List (status.search.price says which).",
    )
    parallel_jobs: int = Field(
        default=2,
        ge=1,
        le=MAX_SEARCH_ALTERNATIVES,
        description="Candidates of one rung whose jobs run at once: while one is measured, "
        "the jobs of the next ones in its rung are already building. 1: one at a time.",
    )
    min_step_improvement: float = Field(
        default=0.02,
        ge=0.0,
        lt=1.0,
        description="A candidate is kept when it improves the objective over the current best "
        "by at least this fraction with confidence (objective.minImprovement is the whole "
        "stack's bar against the baseline: the winner's rollout judges it).",
    )

    @model_validator(mode="after")
    def _names(self) -> Self:
        if not (self.settings or self.quantization or self.speculative_decoding) and not (
            self.compilation
        ):
            raise rule(
                "settings",
                "search needs at least one alternative in settings, quantization, "
                "speculativeDecoding or compilation",
            )
        if self.instance_types and self.memory_fit is None:
            raise rule(
                "memoryFit",
                "search.instanceTypes needs search.memoryFit (the model's parameters, layers, "
                "kvHeads and headDim from its config.json) for the memory check",
            )
        seen: set[str] = set()
        for rung, alternatives in self.rungs().items():
            for index, alternative in enumerate(alternatives):
                if alternative.name in seen:
                    raise rule(
                        f"{rung}[{index}].name",
                        f"alternative names must be unique in spec.search: {alternative.name!r} "
                        "is used twice; rename one",
                    )
                seen.add(alternative.name)
        return self

    def rungs(self) -> dict[str, list[Any]]:
        """The alternatives by rung, in the seed's order (camelCase rung names)."""
        return {
            "settings": list(self.settings),
            "quantization": list(self.quantization),
            "instanceTypes": list(self.instance_types),
            "speculativeDecoding": list(self.speculative_decoding),
            "compilation": list(self.compilation),
        }

    def names(self) -> list[str]:
        return [a.name for alternatives in self.rungs().values() for a in alternatives]

    def alternative(self, name: str) -> Any:
        for alternatives in self.rungs().values():
            for alternative in alternatives:
                if alternative.name == name:
                    return alternative
        raise KeyError(name)

    def needs_output(self) -> bool:
        eagle = any(s.method is SpeculativeMethod.EAGLE for s in self.speculative_decoding)
        return bool(self.quantization or self.compilation or eagle)

    def changes_numerics(self) -> bool:
        return bool(
            self.quantization
            or self.compilation
            or self.speculative_decoding
            or any(s.dtype is not None or s.kv_cache_dtype is not None for s in self.settings)
        )


# The highest benchmark concurrency any operator runs (its --bench-max-streams is at most
# twice this): refused at admission, so no spec waits on a limit no install can raise.
MAX_BENCH_CONCURRENCY = 1024


COST_NEEDS_SLO = (
    "objective.metric costPerMillionTokens needs a latency limit in benchmark.slo (ttftP99Ms, "
    "itlP99Ms or e2eP99Ms): cost is judged instead of relative speed, so the limits are what "
    "keeps a cheaper candidate from being any slower"
)


class ObjectiveSpec(CamelModel):
    """What "better" means, and by how much the candidate must beat the baseline."""

    metric: Objective = Field(
        default=Objective.LATENCY,
        description="What better means at the judged concurrency: latency or e2eP50 (end-to-end "
        "p50, lower), ttftP99 (time to first token p99, lower), itlP50 (inter-token latency p50 "
        "over each request's mean token gap, lower), throughput (output tokens per second, "
        "higher) or costPerMillionTokens (instance time per output token, lower: the "
        "reciprocal of throughput on the same instance type).",
    )
    min_improvement: float = Field(
        default=0.05,
        ge=0.0,
        le=10.0,
        description="Minimum relative gain on the metric, as a fraction (0.05 = 5 % better: "
        "5 % lower for a latency or cost, 5 % higher for throughput).",
    )
    concurrency: int | None = Field(
        default=None,
        ge=1,
        le=MAX_BENCH_CONCURRENCY,
        description="The one benchmark concurrency the objective is judged at; unset, the "
        "candidate must show the improvement at every level in benchmark.concurrency.",
    )


class Slo(CamelModel):
    """Absolute limits the candidate must meet (in addition to beating the baseline)."""

    ttft_p99_ms: float | None = Field(default=None, gt=0, description="TTFT p99, in ms.")
    itl_p99_ms: float | None = Field(default=None, gt=0, description="Inter-token p99, in ms.")
    # The alias by hand: the generator would spell it e2EP99Ms.
    e2e_p99_ms: float | None = Field(
        default=None, gt=0, alias="e2eP99Ms", description="End-to-end p99, in ms."
    )
    max_error_rate: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Failed requests, as a fraction."
    )

    def latency_limits_ms(self) -> dict[str, float | None]:
        """The p99 limits by metric ("ttft", "itl", "e2e"), as analysis/slo.py takes them."""
        return {"ttft": self.ttft_p99_ms, "itl": self.itl_p99_ms, "e2e": self.e2e_p99_ms}


class BenchmarkSpec(CamelModel):
    """How baseline and candidate are measured: same prompts, same concurrency levels."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "self.judge == 'fixed' || self.maxRequests >= self.requests",
                "benchmark.maxRequests is below benchmark.requests, the sequential judge's "
                "first round: raise maxRequests or lower requests",
                ".maxRequests",
            ),
        )
    )

    concurrency: list[Annotated[int, Field(ge=1, le=MAX_BENCH_CONCURRENCY)]] = Field(
        default_factory=lambda: [1, 8],
        min_length=1,
        max_length=8,
        description="Concurrency levels, in simultaneous requests, at most "
        f"{MAX_BENCH_CONCURRENCY}. The operator's own limit may be lower (half its "
        "--bench-max-streams, 128 by default): a level above it is refused before any "
        "request.",
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
    input_tokens_sd: float = Field(
        default=0,
        ge=0,
        le=1_048_576,
        description="Standard deviation of the prompt length, in tokens: above 0 each "
        "synthetic request draws its length from a normal distribution around inputTokens "
        "(LLMPerf's mean +- stddev; rounded, at least 1), the same for a given seed and "
        "request whichever process sends it. 0: every prompt is inputTokens long.",
    )
    output_tokens_sd: float = Field(
        default=0,
        ge=0,
        le=131_072,
        description="Standard deviation of the generated length (max_tokens), drawn as "
        "inputTokensSd is. A dataset item's own outputTokens wins over the draw.",
    )
    dataset: DatasetRef | None = Field(
        default=None, description="Real prompts (JSON lines); overrides inputTokens when set."
    )
    request_timeout: Duration = Field(default="120s", description="Per-request time limit.")
    seed: int = Field(default=0, ge=0, description="Seed for prompt sampling and ordering.")
    request_format: RequestFormat = Field(
        default=RequestFormat.LMI,
        description="Request body the endpoint serves: lmi ({inputs, parameters}; LMI, TGI), "
        "chat (OpenAI chat completions; vLLM, LMI's messages API; the container applies "
        "the chat template) or completions (OpenAI completions; vLLM).",
    )
    slo: Slo | None = Field(default=None, description="Absolute limits; optional.")
    judge: BenchmarkJudge = Field(
        default=BenchmarkJudge.SEQUENTIAL,
        description="sequential: `requests` is the first round; more rounds are added per "
        "level until every gating check is decided or maxRequests/maxDuration is spent, "
        "with an error bound that holds however many rounds it takes. fixed: one round of "
        "`requests`, judged once.",
    )
    max_requests: int = Field(
        default=2_000,
        ge=1,
        le=100_000,
        description="Sequential budget: most measured requests per variant per level, all "
        "rounds (at least `requests`).",
    )
    max_duration: Duration = Field(
        default="30m",
        description="Sequential budget: most wall time per level, all rounds. A check still "
        "undecided when the budget is spent is Inconclusive (rollout.analysis.onNoData).",
    )
    tail_gating: TailGating = Field(
        default=TailGating.WHEN_DECIDABLE,
        description="Whether p99 checks gate: whenDecidable (when the requests they need "
        "fit the budget; otherwise reported, not gating), always, or never.",
    )

    @field_validator("concurrency")
    @classmethod
    def _unique_levels(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError("concurrency levels must be unique")
        return value

    @model_validator(mode="after")
    def _budget_holds_the_first_round(self) -> BenchmarkSpec:
        if self.judge is BenchmarkJudge.SEQUENTIAL and self.max_requests < self.requests:
            raise ValueError(
                f"maxRequests: {self.max_requests} is below requests ({self.requests}), the "
                "first round: raise maxRequests or lower requests"
            )
        return self


class SpotCheck(CamelModel):
    """A person reads paired baseline/candidate answers before promotion."""

    samples: int = Field(default=50, ge=1, le=200, description="Paired samples to show.")
    prompt_classes: list[PromptClass] = Field(
        default_factory=list,
        max_length=20,
        description="Prompt classes (the eval items' `class` field) to sample from; empty: the "
        "two hardest classes by baseline score.",
    )


# The generated suites' item classes: the slices where low-bit schemes degrade first.
LONG_CONTEXT_CLASS = "long-context"
MULTI_STEP_CLASS = "multi-step-reasoning"


class LongContextSuite(CamelModel):
    """Retrieval from long distractor text: one fact at a known depth, one exact answer."""

    items: int = Field(
        default=600,
        ge=1,
        le=5000,
        description="Items generated; 600 lets the paired gate resolve a one-point margin on "
        "this slice alone when at most ~2 % of items change between the variants.",
    )
    max_prompt_tokens: int | None = Field(
        default=None,
        ge=256,
        le=1_048_576,
        description="Longest prompt, in tokens (estimated at 4 characters a token); lengths "
        "spread from a quarter of it to all of it. Default: container.maxModelLen less "
        "maxOutputTokens and a 10 % margin, or 4096 without maxModelLen.",
    )
    seed: int = Field(default=0, ge=0, description="Seed of the generator.")


class ReasoningSuite(CamelModel):
    """Chained arithmetic: each step uses the previous result; one exact integer answer."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "self.minSteps <= self.maxSteps",
                "multiStepReasoning.minSteps must be at most maxSteps",
                ".minSteps",
            )
        )
    )

    items: int = Field(
        default=600,
        ge=1,
        le=5000,
        description="Items generated; 600 for the same resolution as longContext.",
    )
    min_steps: int = Field(default=3, ge=2, le=12, description="Fewest chained operations.")
    max_steps: int = Field(default=6, ge=2, le=12, description="Most chained operations.")
    seed: int = Field(default=0, ge=0, description="Seed of the generator.")

    @model_validator(mode="after")
    def _step_range(self) -> Self:
        if self.min_steps > self.max_steps:
            raise rule("minSteps", "minSteps must be at most maxSteps")
        return self


class GeneratedSuites(CamelModel):
    """Eval items made by the operator (no downloads), deterministic per seed."""

    long_context: LongContextSuite | None = Field(
        default=None, description=f"Long-context retrieval items, class `{LONG_CONTEXT_CLASS}`."
    )
    multi_step_reasoning: ReasoningSuite | None = Field(
        default=None, description=f"Multi-step arithmetic items, class `{MULTI_STEP_CLASS}`."
    )


class SliceGate(CamelModel):
    """Each item class judged on its own, so a broken slice is not averaged away."""

    min_items: int = Field(
        default=30,
        ge=1,
        le=100_000,
        description="A class with at least this many items is judged on its own; a Fail on "
        "any judged class rolls back.",
    )
    must_pass: list[PromptClass] | None = Field(
        default=None,
        max_length=20,
        description="Classes that must be shown non-inferior on their own (Inconclusive or "
        "missing holds for a person even under onNoData: pass; rolls back under fail). "
        f"Default: [{LONG_CONTEXT_CLASS}, {MULTI_STEP_CLASS}] "
        "for 4-bit weights or 8-bit activations (awq, gptq, fp8, int8, smoothquant, W4A16, "
        "W8A8), else none; [] names none.",
    )


class EvaluationSpec(CamelModel):
    """The quality gate: the same items scored on both variants (paired).

    An eval set is the dataset's items, the generated suites' or both; a waiver instead
    skips the gate and is recorded in status, an Event and the report.
    """

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "has(self.dataset) || has(self.generated) || has(self.waiver)",
                "spec.evaluation needs an eval set (evaluation.dataset and/or "
                'evaluation.generated) or evaluation.waiver: "<reason>"',
                ".dataset",
            ),
            (
                "!has(self.waiver) || "
                "(!has(self.dataset) && !has(self.generated) && !has(self.spotCheck))",
                "evaluation.waiver skips the quality gate: remove it, or remove dataset, "
                "generated and spotCheck",
                ".waiver",
            ),
        )
    )

    dataset: DatasetRef | None = Field(
        default=None, description="Eval items, JSON lines with prompt and reference."
    )
    generated: GeneratedSuites | None = Field(
        default=None,
        description="Generated long-context and multi-step suites, alone or mixed with dataset.",
    )
    waiver: Annotated[str, StringConstraints(min_length=1, max_length=512)] | None = Field(
        default=None,
        description="Why this candidate needs no quality gate; the only way past the eval "
        "required for numerical changes, recorded in status, an Event and the report.",
    )
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
        default=None,
        ge=1,
        le=100_000,
        description="Score at most this many dataset items; default: all.",
    )
    max_output_tokens: int = Field(
        default=256, ge=1, le=32_768, description="Tokens generated per eval item."
    )
    request_format: RequestFormat | None = Field(
        default=None,
        description="Request body of the eval requests (lmi, chat or completions); default: "
        "benchmark.requestFormat. Sampling is greedy (temperature 0, LMI do_sample false) "
        "with benchmark.seed where the container honours a seed.",
    )
    noise_items: int = Field(
        default=200,
        ge=0,
        le=100_000,
        description="Eval items the baseline answers a second time when it is measured (same "
        "request, same sampling), once per generation, to measure the eval set's A/A noise "
        "(status.evalNoise, shown next to the margin in the eval check); at most this many, "
        "0: not measured.",
    )
    slices: SliceGate = Field(default_factory=SliceGate, description="Per-class gates.")
    spot_check: SpotCheck | None = Field(
        default=None, description="Optional human spot check (needs approval: beforePromotion)."
    )

    @model_validator(mode="after")
    def _eval_set_or_waiver(self) -> Self:
        has_set = self.dataset is not None or self.generated is not None
        if self.waiver is None and not has_set:
            raise rule(
                "dataset",
                "spec.evaluation needs an eval set (evaluation.dataset and/or "
                'evaluation.generated) or evaluation.waiver: "<reason>"',
            )
        if self.waiver is not None and (has_set or self.spot_check is not None):
            raise rule(
                "waiver",
                "waiver skips the quality gate: remove it, or remove dataset, generated and "
                "spotCheck",
            )
        return self

    @property
    def waived(self) -> bool:
        return self.waiver is not None

    @property
    def has_eval_set(self) -> bool:
        """Items to score: the dataset's, the generated suites' or both (not a waiver)."""
        return self.dataset is not None or self.generated is not None


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


class LiveProbes(CamelModel):
    """Probe requests pinned to each variant while the live judge reads an interval.

    CloudWatch gives the live judge an Average and a p99 of ModelLatency per minute; the
    probes give it streamed TTFT and per-token latency per request, the same fixed-shape
    requests to both variants, so a regression of the whole distribution shows within a
    few intervals whatever the canary weight (docs/analysis.md §2).
    """

    per_interval: int = Field(
        default=20,
        ge=0,
        le=600,
        description="Probes per variant per judged interval, `concurrency` at a time (0: "
        "none). Each is a real invocation, billed and counted by CloudWatch like any other.",
    )
    concurrency: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Probes in flight per variant at once. One at a time, an interval "
        "holds at most its length over one probe's duration (docs/analysis.md §2, sizing "
        "the probes).",
    )
    input_tokens: int = Field(default=128, ge=1, le=32_768, description="Probe prompt length.")
    output_tokens: int = Field(default=32, ge=2, le=4_096, description="Probe max_tokens.")


class AnalysisSpec(CamelModel):
    """Live analysis during each rollout step."""

    interval: Duration = Field(
        default="1m",
        description="How often live metrics are judged; longer than 0s.",
        # A duration is positive exactly when it has a non-zero digit.
        json_schema_extra=cel(
            ("self.matches('[1-9]')", "rollout.analysis.interval must be longer than 0s, e.g. 1m")
        ),
    )
    failure_limit: int = Field(
        default=2, ge=0, le=100, description="Failed intervals tolerated before rollback."
    )
    latency_margin: float = Field(
        default=0.0,
        ge=0.0,
        le=10.0,
        description="Relative latency increase the live judge tolerates (0.3 = 30 % slower); "
        "0: an optimization must not be slower. A costPerMillionTokens objective that may "
        "move to a cheaper, slower instance type states here how much slower it accepts.",
    )
    on_no_data: NoDataPolicy = Field(
        default=NoDataPolicy.PAUSE,
        description="What an Inconclusive interval does: pause, fail (count it) or pass "
        "(an undecided must-pass eval slice holds under pass too).",
    )
    min_invocations: int = Field(
        default=20,
        ge=0,
        le=1_000_000,
        description="Candidate invocations an interval needs to be judged at all.",
    )
    probes: LiveProbes = Field(
        default_factory=LiveProbes,
        description="Streamed probe requests pinned to each variant per judged interval "
        "(not for shadow, whose variant cannot be invoked).",
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
        json_schema_extra=cel(
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
            (
                "!has(self.bake) || duration(self.bake) <= duration(has(self.baselineRetention) "
                "? self.baselineRetention : '1h')",
                "rollout.bake must not exceed rollout.baselineRetention (a bake rolls back to "
                "the retained baseline): shorten bake, lengthen baselineRetention, or set "
                "bake: 0s",
                ".bake",
            ),
            (
                "!has(self.onAcceptanceDrift) || self.onAcceptanceDrift != 'disableSpeculation' "
                "|| !has(self.strategy) || self.strategy == 'canary'",
                DISABLE_SPECULATION_STRATEGY,
                ".onAcceptanceDrift",
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
        json_schema_extra=cel(
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
    on_acceptance_drift: AcceptanceDriftPolicy = Field(
        default=AcceptanceDriftPolicy.ROLLBACK,
        description="Speculative candidates: when the acceptance rate the serving container "
        "logs falls below speculativeDecoding.minAcceptanceRate with confidence (the "
        "interval's upper bound under the floor) during the rollout. rollback: counts as a "
        "failed live check (failureLimit); alert: a Warning Event, the AcceptanceDrift "
        "condition and the metric, traffic untouched; disableSpeculation (canary, method "
        "ngram or draftModel): after failureLimit such intervals, during the canary or the "
        "bake, the candidate's traffic moves to its speculation-free twin (the same weights "
        "and settings, speculation off) through the normal update, and the judges go on "
        "with the twin (status.rollout.speculationDisabled).",
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
        json_schema_extra=cel(
            (
                "duration(self) <= duration('720h')",
                "rollout.baselineRetention must be at most 720h (30 days), e.g. 1h; "
                "0s deletes the baseline at promotion",
            )
        ),
    )

    bake: Duration | None = Field(
        default=None,
        description="After a promotion, how long the live judge keeps watching the promoted "
        "variant against the baseline's last measured live figures; a confident regression "
        "rolls back to the retained baseline (rollbackReason bake). Unset: half of "
        "baselineRetention; 0s: no bake; at most baselineRetention (the rollback target must "
        "still exist).",
        json_schema_extra=cel(
            (
                "duration(self) <= duration('720h')",
                "rollout.bake must be at most 720h and at most rollout.baselineRetention, e.g. "
                "30m; 0s turns the bake off",
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
                raise rule(
                    f"steps[{index}].weight",
                    "weight must be omitted with strategy: shadow (shadow copies traffic)",
                )
            if self.strategy is not RolloutStrategy.SHADOW and step.weight is None:
                raise rule(
                    f"steps[{index}].weight",
                    f"weight (1..100 percent) is required with strategy {self.strategy.value}",
                )
        for index in range(1, len(self.steps)):
            previous, current = self.steps[index - 1].weight, self.steps[index].weight
            if previous is not None and current is not None and current <= previous:
                raise rule(
                    f"steps[{index}].weight",
                    f"weight must be greater than the previous step's {previous} "
                    "(weights strictly increase, up to 100)",
                )
        if not self.steps:
            self.steps = default_steps(self.strategy)
        if (
            self.on_acceptance_drift is AcceptanceDriftPolicy.DISABLE_SPECULATION
            and self.strategy is not RolloutStrategy.CANARY
        ):
            raise rule(
                "onAcceptanceDrift",
                DISABLE_SPECULATION_STRATEGY.removeprefix("rollout.onAcceptanceDrift: "),
            )
        if self.bake is not None and duration_seconds(self.bake) > duration_seconds(
            self.baseline_retention
        ):
            raise rule(
                "bake",
                f"bake {self.bake} must not exceed baselineRetention "
                f"{self.baseline_retention}: a bake rolls back to the retained baseline, so it "
                "must end before the baseline is deleted. Shorten rollout.bake, lengthen "
                "rollout.baselineRetention, or set bake: 0s to turn the bake off",
            )
        return self

    def bake_seconds(self) -> float:
        """How long the bake after a promotion lasts, in spec seconds (0: none).

        Unset: half of baselineRetention, so the last half of the retention window still
        offers the optimizer.dev/rollback lever after the judge has stopped.
        """
        if self.bake is not None:
            return duration_seconds(self.bake)
        return duration_seconds(self.baseline_retention) / 2.0


_NEEDS_OUTPUT_RULE = (
    "has(self.outputS3Uri) || !has(self.optimizations) || (!has(self.optimizations.quantization) "
    "&& !has(self.optimizations.compilation) && !has(self.optimizations.sharding) "
    "&& (!has(self.optimizations.speculativeDecoding) "
    "|| self.optimizations.speculativeDecoding.method != 'eagle'))"
)


_SEARCH_CHANGES_NUMERICS = (
    "(has(self.search) && ((has(self.search.quantization) && size(self.search.quantization) > 0) "
    "|| (has(self.search.compilation) && size(self.search.compilation) > 0) "
    "|| (has(self.search.speculativeDecoding) && size(self.search.speculativeDecoding) > 0) "
    "|| (has(self.search.settings) && self.search.settings.exists(a, has(a.dtype) "
    "|| has(a.kvCacheDtype)))))"
)
_SEARCH_NEEDS_OUTPUT = (
    "has(self.outputS3Uri) || !has(self.search) || ((!has(self.search.quantization) "
    "|| size(self.search.quantization) == 0) && (!has(self.search.compilation) "
    "|| size(self.search.compilation) == 0) && (!has(self.search.speculativeDecoding) "
    "|| !self.search.speculativeDecoding.exists(a, a.method == 'eagle')))"
)
SEARCH_EXCLUSIVE = (
    "search replaces optimizations and container: a search's settings are its first rung "
    "and its techniques the later ones; move them into spec.search or remove spec.search"
)
_CHANGES_NUMERICS = (
    f"{_SEARCH_CHANGES_NUMERICS} || "
    "(has(self.optimizations) && (has(self.optimizations.quantization) "
    "|| has(self.optimizations.compilation) || has(self.optimizations.speculativeDecoding))) "
    "|| (has(self.container) && (has(self.container.dtype) || has(self.container.kvCacheDtype))) "
    "|| has(self.model.image)"
)
EVALUATION_REQUIRED = (
    "spec.evaluation is required when the candidate changes numerics (quantization, "
    "compilation, speculativeDecoding, container.dtype, container.kvCacheDtype or "
    "model.image): add an eval set "
    '(evaluation.dataset or evaluation.generated) or evaluation.waiver: "<reason>"'
)

ADOPT_TAG_KEY = "optimizer.dev/adopt"
ENDPOINT_ARN_PATTERN = (
    r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:endpoint/[a-zA-Z0-9-]{1,63}$"
)


class Adoption(CamelModel):
    """The proof that an existing endpoint is this resource's to optimize (adoptExisting).

    Without one, an endpointName typed by mistake (or another team's) would be benchmarked,
    rolled over and, with deletionPolicy Delete, put at risk. The operator checks the proof
    against SageMaker before it touches the endpoint.
    """

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "has(self.endpointArn) != (has(self.byTag) && self.byTag)",
                "adoption: set exactly one of endpointArn or byTag: true",
            ),
        )
    )

    endpoint_arn: (
        Annotated[str, StringConstraints(max_length=256, pattern=ENDPOINT_ARN_PATTERN)] | None
    ) = Field(
        default=None,
        description="The endpoint's ARN exactly as DescribeEndpoint reports it (EndpointArn), "
        "e.g. arn:aws:sagemaker:us-east-1:123456789012:endpoint/chat: the spec's author looked "
        "the endpoint up in the account it runs in.",
    )
    by_tag: bool = Field(
        default=False,
        description=f"The endpoint carries the tag `{ADOPT_TAG_KEY}=<namespace>/<name>` of this "
        "OptimizedEndpoint, put there by whoever owns the endpoint (the shipped IAM policy lets "
        "the operator update only endpoints tagged so, or made by it).",
    )

    @model_validator(mode="after")
    def _one_proof(self) -> Self:
        if (self.endpoint_arn is None) == (not self.by_tag):
            raise rule("endpointArn", "set exactly one of adoption.endpointArn or byTag: true")
        return self


class InferenceComponentTarget(CamelModel):
    """The endpoint's model is an inference component: the one optimized.

    The component must already run on the adopted endpoint. The candidate is a second
    component on the same endpoint, benchmarked and evaluated by InferenceComponentName;
    the promotion is SageMaker's own rolling update of this component to the candidate's
    model (callers keep invoking the same component name), with auto-rollback alarms.
    """

    name: SageMakerName = Field(
        description="The existing inference component (InferenceComponentName) on the "
        "adopted endpoint whose model is optimized. Immutable.",
        json_schema_extra=cel(
            (
                "self == oldSelf",
                "inferenceComponent.name is immutable: create a new OptimizedEndpoint for "
                "another component",
            )
        ),
    )
    idle_release: Duration = Field(
        default="15m",
        description="For status.scaleToZero only (nothing is scaled): how long the component "
        "must be idle before managed instance scaling to zero would release its instances. "
        "The default stands for a scale-in of the copies to zero after 15 idle one-minute "
        "periods (the span of the scale-in alarm target tracking creates, as commonly "
        "observed; set your own policy's time), after which IDLE_RELEASE releases the "
        "instances. Rounded up to whole minutes (the traffic's resolution).",
    )


INFERENCE_COMPONENT_NEEDS_ADOPTION = (
    "inferenceComponent needs adoptExisting: true (the component runs on an existing "
    "endpoint built for inference components; the operator does not create one)"
)
INFERENCE_COMPONENT_NO_SHADOW = (
    "inferenceComponent cannot use rollout.strategy shadow: a shadow variant hosts a Model, "
    "not inference components; use canary or blueGreen"
)


class OptimizedEndpointSpec(CamelModel):
    """What the user asks for: an endpoint, the techniques to try, and how to judge them."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                _NEEDS_OUTPUT_RULE,
                "spec.outputS3Uri is required for quantization, compilation, sharding and eagle "
                "(they write new model artifacts)",
                ".outputS3Uri",
            ),
            (
                _SEARCH_NEEDS_OUTPUT,
                "spec.outputS3Uri is required when spec.search has quantization, compilation or "
                "eagle alternatives (they write new model artifacts)",
                ".outputS3Uri",
            ),
            (
                "!has(self.search) || ((!has(self.optimizations) || self.optimizations == {}) "
                "&& (!has(self.container) || self.container == {}))",
                SEARCH_EXCLUSIVE,
                ".search",
            ),
            (
                "!has(self.search) || !has(self.inferenceComponent)",
                "spec.search does not yet optimize an inference component: remove one of them",
                ".search",
            ),
            (
                "!has(self.objective) || !has(self.objective.metric) "
                "|| self.objective.metric != 'costPerMillionTokens' || (has(self.benchmark) "
                "&& has(self.benchmark.slo) && (has(self.benchmark.slo.ttftP99Ms) "
                "|| has(self.benchmark.slo.itlP99Ms) || has(self.benchmark.slo.e2eP99Ms)))",
                COST_NEEDS_SLO,
                ".benchmark.slo",
            ),
            (
                f"has(self.evaluation) || !({_CHANGES_NUMERICS})",
                EVALUATION_REQUIRED,
                ".evaluation",
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
                "!has(self.optimizations) || !has(self.optimizations.speculativeDecoding) "
                "|| !has(self.optimizations.speculativeDecoding.draftModel) "
                "|| !has(self.optimizations.speculativeDecoding.draftModel.modelProvider) "
                "|| self.optimizations.speculativeDecoding.draftModel.modelProvider != 'sageMaker' "
                "|| has(self.model.jumpStartModelId)",
                "draftModel.modelProvider sageMaker needs spec.model.jumpStartModelId (SageMaker "
                "provides drafts for JumpStart models)",
                ".optimizations.speculativeDecoding.draftModel.modelProvider",
            ),
            (
                "!has(self.objective) || !has(self.objective.concurrency) || "
                "(has(self.benchmark) && has(self.benchmark.concurrency) "
                "&& self.objective.concurrency in self.benchmark.concurrency)",
                "objective.concurrency must be one of benchmark.concurrency",
                ".objective.concurrency",
            ),
            (
                "!has(self.rollout) || !has(self.rollout.onAcceptanceDrift) "
                "|| self.rollout.onAcceptanceDrift != 'disableSpeculation' "
                "|| (has(self.optimizations) && has(self.optimizations.speculativeDecoding) "
                "&& self.optimizations.speculativeDecoding.method != 'eagle')",
                DISABLE_SPECULATION_NEEDS,
                ".rollout.onAcceptanceDrift",
            ),
            (
                "!(has(self.adoptExisting) && self.adoptExisting) || has(self.adoption)",
                "adoptExisting needs spec.adoption, the proof the endpoint is yours to optimize: "
                "adoption.endpointArn (its EndpointArn) or adoption.byTag: true with the tag "
                f"{ADOPT_TAG_KEY}=<namespace>/<name> on the endpoint",
                ".adoption",
            ),
            (
                "!has(self.adoption) || (has(self.adoptExisting) && self.adoptExisting)",
                "adoption applies only with adoptExisting: true",
                ".adoption",
            ),
            (
                "!has(self.inferenceComponent) || (has(self.adoptExisting) && self.adoptExisting)",
                INFERENCE_COMPONENT_NEEDS_ADOPTION,
                ".inferenceComponent",
            ),
            (
                "!has(self.inferenceComponent) || !has(self.rollout) "
                "|| !has(self.rollout.strategy) || self.rollout.strategy != 'shadow'",
                INFERENCE_COMPONENT_NO_SHADOW,
                ".inferenceComponent",
            ),
        )
    )

    # Immutable: the operator's SageMaker resources and the baseline hang off this endpoint;
    # renaming or moving it would orphan them. Make a new OptimizedEndpoint instead.
    endpoint_name: SageMakerName = Field(
        description="SageMaker endpoint name (1..63 of [a-zA-Z0-9-]); created unless "
        "adoptExisting. Immutable.",
        json_schema_extra=cel(
            (
                "self == oldSelf",
                "endpointName is immutable: create a new OptimizedEndpoint for another endpoint",
            )
        ),
    )
    adopt_existing: bool = Field(
        default=False,
        description="Adopt an existing endpoint of that name as the baseline instead of creating "
        "it; needs spec.adoption, the proof it is yours to optimize. The operator never deletes "
        "an adopted endpoint, nor a model or config it did not make.",
    )
    adoption: Adoption | None = Field(
        default=None,
        description="With adoptExisting: the proof (the endpoint's ARN, or its adopt tag).",
    )
    inference_component: InferenceComponentTarget | None = Field(
        default=None,
        description="The endpoint hosts its model as an inference component: optimize that "
        "component (needs adoptExisting; not with rollout.strategy shadow).",
    )
    region: Region = Field(
        description="AWS region, e.g. us-east-1. Immutable.",
        json_schema_extra=cel(
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
    network: NetworkSpec | None = Field(
        default=None,
        description="VPC, network isolation and KMS keys for the models, endpoint configs and "
        "jobs the operator creates.",
    )
    timeouts: DeploymentTimeouts = Field(
        default_factory=DeploymentTimeouts, description="Deployment timeouts."
    )
    optimizations: Optimizations = Field(
        default_factory=Optimizations, description="Techniques to try."
    )
    search: SearchSpec | None = Field(
        default=None,
        description="The optimization order as a search: alternatives per rung, each measured "
        "against the current best and kept only if it pays; only the winner is rolled out. "
        "Instead of optimizations and container.",
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
        default=None,
        description="Quality gate; required (an eval set or a waiver) when the candidate "
        "changes numerics: quantization, compilation, speculativeDecoding, container.dtype, "
        "container.kvCacheDtype or model.image.",
    )
    rollout: RolloutSpec = Field(default_factory=RolloutSpec, description="Rollout.")
    deletion_policy: DeletionPolicy = Field(
        default=DeletionPolicy.RETAIN,
        description="On delete: Retain keeps the endpoint serving the baseline; Delete removes "
        "it. Candidate resources the operator made are always removed.",
    )

    @model_validator(mode="after")
    def _cross_fields(self) -> Self:
        if self.search is not None:
            self._search_fields(self.search)
        slo = self.benchmark.slo
        if self.objective.metric is Objective.COST and (
            slo is None or (slo.ttft_p99_ms, slo.itl_p99_ms, slo.e2e_p99_ms) == (None,) * 3
        ):
            raise rule("benchmark.slo", COST_NEEDS_SLO)
        if self.output_s3_uri is None and self.optimizations.needs_output():
            raise rule(
                "outputS3Uri",
                "outputS3Uri is required for quantization, compilation, sharding and eagle "
                "(they write new model artifacts)",
            )
        if self.evaluation is None and self.changes_numerics():
            raise rule("evaluation", EVALUATION_REQUIRED.removeprefix("spec.evaluation is "))
        if (
            self.evaluation is not None
            and self.evaluation.spot_check is not None
            and self.rollout.approval is not Approval.BEFORE_PROMOTION
        ):
            raise rule(
                "evaluation.spotCheck",
                "spotCheck needs rollout.approval: beforePromotion (a person approves after "
                "reading the samples)",
            )
        if self.adopt_existing and self.adoption is None:
            raise rule(
                "adoption",
                "adoptExisting needs spec.adoption, the proof the endpoint is yours to optimize: "
                "adoption.endpointArn (its EndpointArn) or adoption.byTag: true with the tag "
                f"{ADOPT_TAG_KEY}=<namespace>/<name> on the endpoint",
            )
        if self.adoption is not None and not self.adopt_existing:
            raise rule("adoption", "adoption applies only with adoptExisting: true")
        if self.inference_component is not None:
            if not self.adopt_existing:
                raise rule(
                    "inferenceComponent",
                    INFERENCE_COMPONENT_NEEDS_ADOPTION.removeprefix("inferenceComponent "),
                )
            if self.rollout.strategy is RolloutStrategy.SHADOW:
                raise rule(
                    "inferenceComponent",
                    INFERENCE_COMPONENT_NO_SHADOW.removeprefix("inferenceComponent "),
                )
        speculative = self.optimizations.speculative_decoding
        draft = speculative.draft_model if speculative is not None else None
        if (
            draft is not None
            and draft.model_provider is DraftProvider.SAGEMAKER
            and self.model.jump_start_model_id is None
        ):
            raise rule(
                "optimizations.speculativeDecoding.draftModel.modelProvider",
                "modelProvider sageMaker needs spec.model.jumpStartModelId (SageMaker provides "
                "drafts for JumpStart models); name the draft with s3Uri or hfModelId instead",
            )
        if self.rollout.on_acceptance_drift is AcceptanceDriftPolicy.DISABLE_SPECULATION and (
            speculative is None or speculative.method is SpeculativeMethod.EAGLE
        ):
            raise rule(
                "rollout.onAcceptanceDrift",
                DISABLE_SPECULATION_NEEDS.removeprefix("rollout.onAcceptanceDrift: "),
            )
        if (
            self.objective.concurrency is not None
            and self.objective.concurrency not in self.benchmark.concurrency
        ):
            raise rule(
                "objective.concurrency",
                f"concurrency must be one of benchmark.concurrency {self.benchmark.concurrency}",
            )
        return self

    def _search_fields(self, search: SearchSpec) -> None:
        if self.optimizations.techniques() or self.container.model_dump(exclude_none=True):
            raise rule("search", SEARCH_EXCLUSIVE)
        if self.inference_component is not None:
            raise rule(
                "search",
                "spec.search does not yet optimize an inference component: remove one of them",
            )
        if self.output_s3_uri is None and search.needs_output():
            raise rule(
                "outputS3Uri",
                "outputS3Uri is required when spec.search has quantization, compilation or "
                "eagle alternatives (they write new model artifacts)",
            )
        for index, alternative in enumerate(search.speculative_decoding):
            draft = alternative.draft_model
            if (
                draft is not None
                and draft.model_provider is DraftProvider.SAGEMAKER
                and self.model.jump_start_model_id is None
            ):
                raise rule(
                    f"search.speculativeDecoding[{index}].draftModel.modelProvider",
                    "modelProvider sageMaker needs spec.model.jumpStartModelId (SageMaker "
                    "provides drafts for JumpStart models); name the draft with s3Uri or "
                    "hfModelId instead",
                )

    def searched(self, stack: Sequence[str], step: bool = False) -> OptimizedEndpointSpec:
        """The spec a search candidate is built, served and judged by: the alternatives of
        `stack` (names in spec.search, at most one per rung) as container settings and
        optimizations. Not validated again: each alternative was, and the search never
        stacks what SageMaker refuses together (compilation after speculation).

        `step`: judged as a step of the search (against the current best), so the
        objective's bar is search.minStepImprovement; the winner's rollout is judged
        against the baseline with objective.minImprovement."""
        if self.search is None or not stack:
            return self
        container: dict[str, Any] = {}
        optimizations: dict[str, Any] = {}
        for name in stack:
            alternative = self.search.alternative(name)
            fields = alternative.model_dump(exclude={"name"})
            if isinstance(alternative, SettingsAlternative):
                container.update({k: v for k, v in fields.items() if v is not None})
            elif isinstance(alternative, QuantizationAlternative):
                optimizations["quantization"] = Quantization.model_validate(fields)
            elif isinstance(alternative, SpeculationAlternative):
                optimizations["speculative_decoding"] = SpeculativeDecoding.model_validate(fields)
            elif isinstance(alternative, CompilationAlternative):
                optimizations["compilation"] = Compilation.model_validate(fields)
        update: dict[str, Any] = {}
        for name in stack:
            alternative = self.search.alternative(name)
            if isinstance(alternative, InstanceAlternative):
                # Its own instance type and count; the engine spans its GPUs unless told.
                update["instance_type"] = alternative.instance_type
                update["instance_count"] = alternative.instance_count or self.instance_count
                if alternative.tensor_parallel_degree is not None or container.get(
                    "tensor_parallel_degree"
                ):
                    container["tensor_parallel_degree"] = alternative.tensor_parallel_degree
                # Served with the sequence length its memory check assumed, so the engine
                # sizes its KV cache as the check did (memoryFit.maxModelLen).
                fit = self.search.memory_fit
                if fit is not None and fit.max_model_len and not container.get("max_model_len"):
                    container["max_model_len"] = fit.max_model_len
        update |= {
            "container": ContainerSettings.model_validate(container),
            "optimizations": Optimizations.model_validate(optimizations),
        }
        if step:
            update["objective"] = self.objective.model_copy(
                update={"min_improvement": self.search.min_step_improvement}
            )
        return self.model_copy(update=update)

    def changes_numerics(self) -> bool:
        """Whether the candidate's answers may differ from the baseline's by more than noise."""
        if self.search is not None and self.search.changes_numerics():
            return True
        o = self.optimizations
        return (
            o.quantization is not None
            or o.compilation is not None
            or o.speculative_decoding is not None
            or self.container.dtype is not None
            or self.container.kv_cache_dtype is not None
            or self.model.image is not None
        )

    def eval_request_format(self) -> RequestFormat:
        """The eval requests' body: evaluation.requestFormat, else the benchmark's."""
        chosen = self.evaluation.request_format if self.evaluation else None
        return chosen or self.benchmark.request_format

    def judged_concurrency(self) -> int:
        """The one level the objective's gain is reported at: objective.concurrency, else
        the highest (unset, the judges require the gain at every level)."""
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
                "network",
                "instance_type",
                "instance_count",
                "container",
                "timeouts",
                "optimizations",
                "output_s3_uri",
            },
        )
        if defining.get("network") is None:
            # Specs written before spec.network keep their hash.
            defining.pop("network", None)
        canonical = json.dumps(defining, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


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
