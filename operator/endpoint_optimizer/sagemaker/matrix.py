"""Which technique runs on which container and instance: the rules SageMaker enforces late.

reference/sagemaker-api.md §5 (the SageMaker Python SDK's validations and the API's
instance enum). These rules need the instance type, so a CRD schema cannot say them;
the operator calls `check_optimizations` before any AWS call and turns each
violation into a Terminal condition and an Event. The rules that hold for every
technique live here; each technique's own rules live in its module
(sagemaker/techniques/), and this check runs them in table order.
"""

from __future__ import annotations

from pydantic import Field

from endpoint_optimizer.api import OptimizedEndpointSpec
from endpoint_optimizer.api.camel import CamelModel
from endpoint_optimizer.sagemaker import techniques
from endpoint_optimizer.sagemaker.instances import (
    GPU_OPTIMIZATION_FAMILIES,
    NEURON_FAMILIES,
    OPTIMIZATION_JOB_INSTANCE_TYPES,
    accelerator,
    devices,
    instance_family,
    is_neuron,
)
from endpoint_optimizer.sagemaker.techniques import TECHNIQUES, Target

# The rules that hold whatever the technique, with the reason a user reads in the docs.
_COMMON_RULES: dict[str, str] = {
    "accelerated-instance": "Optimizations need a GPU or Neuron instance family.",
    "optimization-job-instance": "Quantization (optimization job), compilation, sharding and "
    "EAGLE run as a SageMaker optimization job, whose DeploymentInstanceType enum is "
    "narrower than the endpoint's.",
    "neuron-compilation-only": "On inf2, trn1 and trn1n SageMaker optimizes by compilation only: "
    "no quantization, no speculative decoding.",
    "gpu-optimization-family": "GPU optimization runs on the SDK's families (g5, g6, p4d, p4de, "
    "p5) and the newer ones of the same generations; not on g4dn (T4).",
}
_PARALLELISM_RULES: dict[str, str] = {
    "tensor-parallel-devices": "tensorParallelDegree cannot exceed the instance's GPUs "
    "(NeuronCores on Neuron).",
}

# Every rule `check_optimizations` applies, in the order it applies them.
RULES: dict[str, str] = {
    **_COMMON_RULES,
    **{rule: text for technique in TECHNIQUES for rule, text in technique.rules.items()},
    **_PARALLELISM_RULES,
}


class MatrixViolation(CamelModel):
    """One technique/instance combination SageMaker would refuse, and what to use instead."""

    rule: str = Field(description="Rule id, e.g. fp8-needs-hardware.")
    field: str = Field(description="camelCase path of the field to change, e.g. spec.instanceType.")
    message: str = Field(description="Why, in one sentence.")
    allowed: list[str] = Field(default_factory=list, description="What would be accepted.")

    def text(self) -> str:
        allowed = f" Allowed: {', '.join(self.allowed)}." if self.allowed else ""
        return f"{self.field}: {self.message} [rule {self.rule}]{allowed}"


def optimization_config_keys(spec: OptimizedEndpointSpec) -> list[str]:
    """CreateOptimizationJob OptimizationConfigs union members, in request order; [] = no job."""
    return [config.member for config in techniques.job_configs(spec)]


def _same_family_job_types(instance_type: str) -> list[str]:
    family = instance_family(instance_type)
    return sorted(t for t in OPTIMIZATION_JOB_INSTANCE_TYPES if instance_family(t) == family)


def check_optimizations(spec: OptimizedEndpointSpec) -> list[MatrixViolation]:
    """Every technique x container x instance rule the spec breaks (empty: supported)."""
    found: list[MatrixViolation] = []
    instance = spec.instance_type
    family = instance_family(instance)
    device = accelerator(instance)
    requested = spec.optimizations.techniques()

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

    job = optimization_config_keys(spec)
    if job and instance not in OPTIMIZATION_JOB_INSTANCE_TYPES:
        refuse(
            "optimization-job-instance",
            "spec.instanceType",
            f"SageMaker optimization jobs do not accept DeploymentInstanceType {instance}",
            _same_family_job_types(instance) or sorted(OPTIMIZATION_JOB_INSTANCE_TYPES),
        )

    if device is not None and device.kind == "neuron":
        for technique in TECHNIQUES:
            if not technique.runs_on_neuron and technique.applies(spec):
                refuse(
                    "neuron-compilation-only",
                    f"spec.optimizations.{technique.label}",
                    f"on {family} (Neuron) SageMaker optimizes by compilation only",
                    ["optimizations.compilation", "a GPU instance such as ml.g6e.12xlarge"],
                )
    elif device is not None:
        gpu_job = bool(job) or any(technique.trains(spec) for technique in TECHNIQUES)
        if gpu_job and family not in GPU_OPTIMIZATION_FAMILIES:
            refuse(
                "gpu-optimization-family",
                "spec.instanceType",
                f"quantization, compilation and EAGLE training are not supported on {family} "
                f"({device.name}: no bf16, and vLLM's quantized kernels need Ampere or newer)",
                [f"ml.{f}.*" for f in GPU_OPTIMIZATION_FAMILIES],
            )

    target = Target(instance, device, techniques.engine(spec))
    for technique in TECHNIQUES:
        technique.check_placement(spec, target, refuse)
    for technique in TECHNIQUES:
        technique.check_parameters(spec, target, refuse)
    _check_parallelism(spec, refuse)
    return found


def _check_parallelism(spec: OptimizedEndpointSpec, refuse: techniques.Refuse) -> None:
    available = devices(spec.instance_type)
    if available is None:
        return
    unit = "NeuronCores" if is_neuron(spec.instance_type) else "GPUs"
    for technique in TECHNIQUES:
        for field, degree in technique.tensor_parallel_degrees(spec):
            if degree > available:
                refuse(
                    "tensor-parallel-devices",
                    field,
                    f"tensorParallelDegree {degree} exceeds the {available} {unit} of "
                    f"{spec.instance_type}",
                    [str(d) for d in range(1, available + 1) if available % d == 0],
                )
