"""What SageMaker's instance families carry: accelerators, device counts, the job enum.

Facts from reference/sagemaker-api.md §5 (the SageMaker Python SDK's validations and the
API's instance enums). The matrix check and the techniques read them; nothing here
knows a technique.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


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
    fp4: bool = False  # FP4 tensor cores (Blackwell): NVFP4


FAMILIES: dict[str, Accelerator] = {
    "g4dn": Accelerator("NVIDIA T4", "gpu", fp8=False, memory_gib=16),
    "g5": Accelerator("NVIDIA A10G", "gpu", fp8=False, memory_gib=24),
    "g6": Accelerator("NVIDIA L4", "gpu", fp8=True, memory_gib=24),
    "g6e": Accelerator("NVIDIA L40S", "gpu", fp8=True, memory_gib=48),
    "g7e": Accelerator("NVIDIA RTX PRO 6000 Blackwell", "gpu", fp8=True, memory_gib=96, fp4=True),
    # In the optimization-job enum; the reference names no GPU. Blackwell generation like
    # g7e is assumed, so nothing is refused for want of FP8.
    "g7": Accelerator("NVIDIA GPU (g7)", "gpu", fp8=True, memory_gib=None, fp4=True),
    "p4d": Accelerator("NVIDIA A100 40GB", "gpu", fp8=False, memory_gib=40),
    "p4de": Accelerator("NVIDIA A100 80GB", "gpu", fp8=False, memory_gib=80),
    "p5": Accelerator("NVIDIA H100", "gpu", fp8=True, memory_gib=80),
    "p5e": Accelerator("NVIDIA H200", "gpu", fp8=True, memory_gib=141),
    "p5en": Accelerator("NVIDIA H200", "gpu", fp8=True, memory_gib=141),
    "p6-b200": Accelerator("NVIDIA B200", "gpu", fp8=True, memory_gib=180, fp4=True),
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
FP4_FAMILIES = tuple(f for f, a in FAMILIES.items() if a.fp4)
NEURON_FAMILIES = tuple(f for f, a in FAMILIES.items() if a.kind == "neuron")


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
