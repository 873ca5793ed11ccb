"""Which technique runs on which container and instance: the rules SageMaker enforces late.

reference/sagemaker-api.md §5 (the SageMaker Python SDK's validations and the API's
instance enum). These rules need the instance type, so a CRD schema cannot say them;
the operator calls `check_optimizations` before any AWS call and turns each
violation into a Terminal condition and an Event. Request builders use the same
tables (`backend_for`, `optimization_config_keys`) so validation and requests agree.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from pydantic import Field

from endpoint_optimizer.api import (
    CompressorAlgorithm,
    OptimizedEndpointSpec,
    QuantizationScheme,
    QuantizationVia,
    SpeculativeMethod,
    WeightActivation,
)
from endpoint_optimizer.api.camel import CamelModel


class Backend(StrEnum):
    VLLM = "vllm"  # LMI's default engine: quantized (awq, fp8) and speculative models
    TRTLLM = "tensorrtllm"  # compiled models on GPU
    NEURON = "neuron"  # inf2 / trn1 / trn1n


@dataclass(frozen=True)
class Accelerator:
    """What one instance family carries."""

    name: str
    kind: str  # "gpu" or "neuron"
    fp8: bool  # FP8 tensor cores (Hopper, Ada, Blackwell)
    memory_gib: int | None  # per device; None where the reference does not say


FAMILIES: dict[str, Accelerator] = {
    "g4dn": Accelerator("NVIDIA T4", "gpu", fp8=False, memory_gib=16),
    "g5": Accelerator("NVIDIA A10G", "gpu", fp8=False, memory_gib=24),
    "g6": Accelerator("NVIDIA L4", "gpu", fp8=True, memory_gib=24),
    "g6e": Accelerator("NVIDIA L40S", "gpu", fp8=True, memory_gib=48),
    "g7e": Accelerator("NVIDIA RTX PRO 6000 Blackwell", "gpu", fp8=True, memory_gib=96),
    # In the optimization-job enum; the reference names no GPU. Blackwell generation like
    # g7e is assumed, so nothing is refused for want of FP8.
    "g7": Accelerator("NVIDIA GPU (g7)", "gpu", fp8=True, memory_gib=None),
    "p4d": Accelerator("NVIDIA A100 40GB", "gpu", fp8=False, memory_gib=40),
    "p4de": Accelerator("NVIDIA A100 80GB", "gpu", fp8=False, memory_gib=80),
    "p5": Accelerator("NVIDIA H100", "gpu", fp8=True, memory_gib=80),
    "p5e": Accelerator("NVIDIA H200", "gpu", fp8=True, memory_gib=141),
    "p5en": Accelerator("NVIDIA H200", "gpu", fp8=True, memory_gib=141),
    "p6-b200": Accelerator("NVIDIA B200", "gpu", fp8=True, memory_gib=180),
    "inf2": Accelerator("AWS Inferentia2", "neuron", fp8=False, memory_gib=32),
    "trn1": Accelerator("AWS Trainium", "neuron", fp8=False, memory_gib=32),
    "trn1n": Accelerator("AWS Trainium", "neuron", fp8=False, memory_gib=32),
}

# Devices per instance: GPUs, or NeuronCores for Neuron (tensor parallelism counts cores).
DEVICES: dict[str, int] = {
    **{f"ml.g4dn.{s}": 1 for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")},
    "ml.g4dn.12xlarge": 4,
    **{
        f"ml.{f}.{s}": 1
        for f in ("g5", "g6", "g6e")
        for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")
    },
    **{f"ml.{f}.{s}": 4 for f in ("g5", "g6", "g6e") for s in ("12xlarge", "24xlarge")},
    **{f"ml.{f}.48xlarge": 8 for f in ("g5", "g6", "g6e")},
    "ml.p4d.24xlarge": 8,
    "ml.p4de.24xlarge": 8,
    "ml.p5.48xlarge": 8,
    "ml.p5e.48xlarge": 8,
    "ml.p5en.48xlarge": 8,
    "ml.p6-b200.48xlarge": 8,
    "ml.inf2.xlarge": 2,
    "ml.inf2.8xlarge": 2,
    "ml.inf2.24xlarge": 12,
    "ml.inf2.48xlarge": 24,
    "ml.trn1.2xlarge": 2,
    "ml.trn1.32xlarge": 32,
    "ml.trn1n.32xlarge": 32,
}

_SIZES_8 = (
    "xlarge",
    "2xlarge",
    "4xlarge",
    "8xlarge",
    "12xlarge",
    "16xlarge",
    "24xlarge",
    "48xlarge",
)
_SIZES_G7 = ("2xlarge", "4xlarge", "8xlarge", "12xlarge", "24xlarge", "48xlarge")
_G4DN_SIZES = ("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge")

# botocore's OptimizationJobDeploymentInstanceType enum (sagemaker 2017-07-24 service model).
OPTIMIZATION_JOB_INSTANCE_TYPES: frozenset[str] = frozenset(
    {
        "ml.p4d.24xlarge",
        "ml.p4de.24xlarge",
        "ml.p5.48xlarge",
        "ml.p5e.48xlarge",
        "ml.p5en.48xlarge",
        "ml.p6-b200.48xlarge",
        *(f"ml.g4dn.{s}" for s in _G4DN_SIZES),
        *(f"ml.{f}.{s}" for f in ("g5", "g6", "g6e") for s in _SIZES_8),
        *(f"ml.{f}.{s}" for f in ("g7e", "g7") for s in _SIZES_G7),
        "ml.inf2.xlarge",
        "ml.inf2.8xlarge",
        "ml.inf2.24xlarge",
        "ml.inf2.48xlarge",
        "ml.trn1.2xlarge",
        "ml.trn1.32xlarge",
        "ml.trn1n.32xlarge",
    }
)

# The SDK's TRT-LLM / vLLM families (p4d, p4de, p5, g5, g6) plus the newer families of
# the same generations that the API's job enum accepts. g4dn (T4: no bf16) is left out,
# as the SDK does.
GPU_OPTIMIZATION_FAMILIES = (
    "g5",
    "g6",
    "g6e",
    "g7",
    "g7e",
    "p4d",
    "p4de",
    "p5",
    "p5e",
    "p5en",
    "p6-b200",
)
FP8_FAMILIES = tuple(f for f, a in FAMILIES.items() if a.fp8)
NEURON_FAMILIES = tuple(f for f, a in FAMILIES.items() if a.kind == "neuron")

# The schemes an LMI optimization job accepts as OPTION_QUANTIZE, per engine.
JOB_SCHEMES: dict[Backend, tuple[QuantizationScheme, ...]] = {
    Backend.VLLM: (QuantizationScheme.AWQ, QuantizationScheme.FP8),
    Backend.TRTLLM: (
        QuantizationScheme.AWQ,
        QuantizationScheme.FP8,
        QuantizationScheme.SMOOTHQUANT,
    ),
    Backend.NEURON: (),
}

# llm-compressor algorithm -> weight x activation schemes it produces.
COMPRESSOR_SCHEMES: dict[CompressorAlgorithm, tuple[WeightActivation, ...]] = {
    CompressorAlgorithm.AWQ: (WeightActivation.W4A16,),
    CompressorAlgorithm.GPTQ: (
        WeightActivation.W4A16,
        WeightActivation.W8A8,
        WeightActivation.W8A16,
    ),
    CompressorAlgorithm.SMOOTHQUANT: (WeightActivation.W8A8,),
    CompressorAlgorithm.RTN: (
        WeightActivation.W4A16,
        WeightActivation.W8A8,
        WeightActivation.W8A16,
    ),
}

# Every rule `check_optimizations` applies, with the reason a user reads in the docs.
RULES: dict[str, str] = {
    "accelerated-instance": "Optimizations need a GPU or Neuron instance family.",
    "optimization-job-instance": "Quantization (optimization job), compilation, sharding and "
    "EAGLE run as a SageMaker optimization job, whose DeploymentInstanceType enum is "
    "narrower than the endpoint's.",
    "neuron-compilation-only": "On inf2, trn1 and trn1n SageMaker optimizes by compilation only: "
    "no quantization, no speculative decoding.",
    "gpu-optimization-family": "GPU optimization runs on the SDK's families (g5, g6, p4d, p4de, "
    "p5) and the newer ones of the same generations; not on g4dn (T4).",
    "compilation-llama-3.1": "SageMaker does not compile Llama 3.1 and later for GPU "
    "(TensorRT-LLM).",
    "fp8-needs-hardware": "FP8 needs FP8 tensor cores (H100/H200/B200, L4, L40S); A10G, A100 "
    "and T4 lack them.",
    "job-quantization-scheme": "An optimization job quantizes to awq or fp8 (vLLM), plus "
    "smoothquant with compilation (TensorRT-LLM); gptq and int8 go through llm-compressor.",
    "compressor-not-compilable": "llm-compressor checkpoints (compressed-tensors) are served "
    "by vLLM and cannot be compiled with TensorRT-LLM.",
    "compressor-scheme": "awq produces W4A16, smoothquant W8A8; gptq and rtn produce any of "
    "W4A16, W8A8, W8A16.",
    "compressor-group-size": "W8A8 is per-channel: groupSize applies to W4A16 and W8A16 only.",
    "tensor-parallel-devices": "tensorParallelDegree cannot exceed the instance's GPUs "
    "(NeuronCores on Neuron).",
}

# refuse(rule, field, message, allowed): records one violation.
_Refuse = Callable[[str, str, str, list[str]], None]

# The SDK refuses GPU compilation of Llama 3.1 and later (serve/validations/optimization.py).
_LLAMA_31_PLUS = re.compile(r"llama-3[.-][1-9]", re.IGNORECASE)


class MatrixViolation(CamelModel):
    """One technique/instance combination SageMaker would refuse, and what to use instead."""

    rule: str = Field(description="Rule id, e.g. fp8-needs-hardware.")
    field: str = Field(description="camelCase path of the field to change, e.g. spec.instanceType.")
    message: str = Field(description="Why, in one sentence.")
    allowed: list[str] = Field(default_factory=list, description="What would be accepted.")

    def text(self) -> str:
        allowed = f" Allowed: {', '.join(self.allowed)}." if self.allowed else ""
        return f"{self.field}: {self.message} [rule {self.rule}]{allowed}"


class MatrixError(ValueError):
    """A spec whose techniques the chosen instance or container cannot run."""

    def __init__(self, violations: list[MatrixViolation]) -> None:
        self.violations = violations
        super().__init__("; ".join(v.text() for v in violations))


def instance_family(instance_type: str) -> str:
    """`ml.g6e.2xlarge` -> `g6e`."""
    parts = instance_type.split(".")
    return parts[1] if len(parts) == 3 and parts[0] == "ml" else ""


def accelerator(instance_type: str) -> Accelerator | None:
    """The instance's accelerator, or None for CPU or unknown families."""
    return FAMILIES.get(instance_family(instance_type))


def devices(instance_type: str) -> int | None:
    """GPUs (or NeuronCores) per instance, where known."""
    return DEVICES.get(instance_type)


def is_neuron(instance_type: str) -> bool:
    return instance_family(instance_type) in NEURON_FAMILIES


def backend_for(spec: OptimizedEndpointSpec) -> Backend:
    """The serving engine the candidate runs on."""
    if is_neuron(spec.instance_type):
        return Backend.NEURON
    if spec.optimizations.compilation is not None:
        return Backend.TRTLLM
    return Backend.VLLM


def optimization_config_keys(spec: OptimizedEndpointSpec) -> list[str]:
    """CreateOptimizationJob OptimizationConfigs union keys, in the SDK's order; [] = no job."""
    o = spec.optimizations
    keys: list[str] = []
    if o.quantization is not None and o.quantization.via is QuantizationVia.OPTIMIZATION_JOB:
        keys.append("ModelQuantizationConfig")
    if o.compilation is not None:
        keys.append("ModelCompilationConfig")
    if o.sharding is not None:
        keys.append("ModelShardingConfig")
    if (
        o.speculative_decoding is not None
        and o.speculative_decoding.method is SpeculativeMethod.EAGLE
    ):
        keys.append("ModelSpeculativeDecodingConfig")
    return keys


def _model_name(spec: OptimizedEndpointSpec) -> str:
    return spec.model.jump_start_model_id or spec.model.hf_model_id or spec.model.s3_uri or ""


def _same_family_job_types(instance_type: str) -> list[str]:
    family = instance_family(instance_type)
    return sorted(t for t in OPTIMIZATION_JOB_INSTANCE_TYPES if instance_family(t) == family)


def check_optimizations(spec: OptimizedEndpointSpec) -> list[MatrixViolation]:
    """Every technique x container x instance rule the spec breaks (empty: supported)."""
    found: list[MatrixViolation] = []
    o = spec.optimizations
    instance = spec.instance_type
    family = instance_family(instance)
    device = accelerator(instance)
    quant = o.quantization
    spec_decode = o.speculative_decoding
    requested = o.techniques()

    def refuse(rule: str, field: str, message: str, allowed: list[str]) -> None:
        assert rule in RULES, rule
        found.append(MatrixViolation(rule=rule, field=field, message=message, allowed=allowed))

    if requested and device is None:
        refuse(
            "accelerated-instance",
            "spec.instanceType",
            f"{instance} has no GPU or Neuron accelerator the techniques "
            f"{', '.join(requested)} can run on",
            [f"ml.{f}.*" for f in (*GPU_OPTIMIZATION_FAMILIES, *NEURON_FAMILIES)],
        )
        return found

    if optimization_config_keys(spec) and instance not in OPTIMIZATION_JOB_INSTANCE_TYPES:
        refuse(
            "optimization-job-instance",
            "spec.instanceType",
            f"SageMaker optimization jobs do not accept DeploymentInstanceType {instance}",
            _same_family_job_types(instance) or sorted(OPTIMIZATION_JOB_INSTANCE_TYPES),
        )

    if device is not None and device.kind == "neuron":
        for name, value in (("quantization", quant), ("speculativeDecoding", spec_decode)):
            if value is not None:
                refuse(
                    "neuron-compilation-only",
                    f"spec.optimizations.{name}",
                    f"on {family} (Neuron) SageMaker optimizes by compilation only",
                    ["optimizations.compilation", "a GPU instance such as ml.g6e.12xlarge"],
                )
    elif device is not None:
        gpu_job = bool(optimization_config_keys(spec)) or (
            quant is not None and quant.via is QuantizationVia.LLM_COMPRESSOR
        )
        if gpu_job and family not in GPU_OPTIMIZATION_FAMILIES:
            refuse(
                "gpu-optimization-family",
                "spec.instanceType",
                f"quantization, compilation and EAGLE training are not supported on {family} "
                f"({device.name}: no bf16, and vLLM's quantized kernels need Ampere or newer)",
                [f"ml.{f}.*" for f in GPU_OPTIMIZATION_FAMILIES],
            )
        if o.compilation is not None and _LLAMA_31_PLUS.search(_model_name(spec)):
            refuse(
                "compilation-llama-3.1",
                "spec.optimizations.compilation",
                "SageMaker does not compile Llama 3.1 and later for GPU (TensorRT-LLM)",
                ["optimizations.quantization without compilation", "speculativeDecoding"],
            )

    if quant is not None and device is not None and device.kind == "gpu":
        _check_quantization(spec, device, refuse)

    _check_parallelism(spec, refuse)
    return found


def _check_quantization(spec: OptimizedEndpointSpec, device: Accelerator, refuse: _Refuse) -> None:
    quant = spec.optimizations.quantization
    assert quant is not None
    engine = backend_for(spec)
    if quant.via is QuantizationVia.OPTIMIZATION_JOB:
        scheme = quant.scheme
        assert scheme is not None  # the model requires it with via optimizationJob
        if scheme is QuantizationScheme.FP8 and not device.fp8:
            refuse(
                "fp8-needs-hardware",
                "spec.optimizations.quantization.scheme",
                f"{spec.instance_type} ({device.name}) has no FP8 tensor cores",
                ["scheme: awq", "via: llmCompressor (gptq W4A16 or W8A8)"]
                + [f"ml.{f}.* for fp8" for f in FP8_FAMILIES],
            )
        elif scheme not in JOB_SCHEMES[engine]:
            allowed = [f"scheme: {s.value}" for s in JOB_SCHEMES[engine]]
            if scheme is QuantizationScheme.SMOOTHQUANT:
                message = "smoothquant (INT8) runs only on TensorRT-LLM, i.e. with compilation"
                allowed = ["add optimizations.compilation", *allowed]
            else:
                message = (
                    f"the optimization job's {engine.value} engine cannot quantize to "
                    f"{scheme.value}"
                )
            refuse(
                "job-quantization-scheme",
                "spec.optimizations.quantization.scheme",
                message,
                [*allowed, "via: llmCompressor (gptq, rtn: W4A16 | W8A8 | W8A16)"],
            )
        return

    # llm-compressor writes compressed-tensors checkpoints, which vLLM serves and
    # TensorRT-LLM compilation cannot read.
    if spec.optimizations.compilation is not None:
        refuse(
            "compressor-not-compilable",
            "spec.optimizations.compilation",
            "llm-compressor checkpoints are served by vLLM and cannot be compiled with "
            "TensorRT-LLM",
            ["remove compilation", "quantization.via: optimizationJob (awq | fp8 | smoothquant)"],
        )
    algorithm = quant.algorithm
    assert algorithm is not None and quant.weight_activation is not None
    if quant.weight_activation not in COMPRESSOR_SCHEMES[algorithm]:
        refuse(
            "compressor-scheme",
            "spec.optimizations.quantization.weightActivation",
            f"{algorithm.value} does not produce {quant.weight_activation.value}",
            [f"weightActivation: {w.value}" for w in COMPRESSOR_SCHEMES[algorithm]],
        )
    if quant.weight_activation is WeightActivation.W8A8 and quant.group_size is not None:
        refuse(
            "compressor-group-size",
            "spec.optimizations.quantization.groupSize",
            "W8A8 quantizes weights per channel; groupSize applies to W4A16 and W8A16",
            ["omit groupSize", "weightActivation: W4A16 | W8A16"],
        )


def _check_parallelism(spec: OptimizedEndpointSpec, refuse: _Refuse) -> None:
    available = devices(spec.instance_type)
    if available is None:
        return
    o = spec.optimizations
    degrees = [
        ("spec.container.tensorParallelDegree", spec.container.tensor_parallel_degree),
        (
            "spec.optimizations.compilation.tensorParallelDegree",
            o.compilation.tensor_parallel_degree if o.compilation else None,
        ),
        (
            "spec.optimizations.sharding.tensorParallelDegree",
            o.sharding.tensor_parallel_degree if o.sharding else None,
        ),
    ]
    unit = "NeuronCores" if is_neuron(spec.instance_type) else "GPUs"
    for field, degree in degrees:
        if degree is not None and degree > available:
            refuse(
                "tensor-parallel-devices",
                field,
                f"tensorParallelDegree {degree} exceeds the {available} {unit} of "
                f"{spec.instance_type}",
                [str(d) for d in range(1, available + 1) if available % d == 0],
            )


def require_supported(spec: OptimizedEndpointSpec) -> None:
    """Raise MatrixError naming every broken rule; call before any AWS call."""
    violations = check_optimizations(spec)
    if violations:
        raise MatrixError(violations)
