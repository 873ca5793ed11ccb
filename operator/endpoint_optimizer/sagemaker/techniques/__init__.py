"""The optimization techniques, one module each, in the order the seed applies them.

Settings, then quantization, speculative decoding and compilation (sharding, which the
api model keeps apart from quantization and compilation, last). Each module owns what
the operator knows about its technique: whether a spec asks for it, the matrix rules
SageMaker would enforce late, its CreateOptimizationJob element or training job, the
environment the candidate serves with, and its label in status and metrics. The matrix
check (sagemaker/matrix.py), the plan (pipeline/plan.py) and the exporter read this
table; none of them names a technique. What a technique does to what a variant serves
is the sandbox's to model, from the requests alone (sandbox/techniques.py).

A new technique: its module here and its row in TECHNIQUES, its field in api/spec.py,
and its effect in sandbox/techniques.py.
"""

from __future__ import annotations

from endpoint_optimizer.api import OptimizedEndpointSpec
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker.instances import Backend, is_neuron
from endpoint_optimizer.sagemaker.techniques.base import (
    Refuse,
    Target,
    Technique,
    TechniqueError,
)
from endpoint_optimizer.sagemaker.techniques.compilation import COMPILATION
from endpoint_optimizer.sagemaker.techniques.quantization import QUANTIZATION
from endpoint_optimizer.sagemaker.techniques.settings import SETTINGS
from endpoint_optimizer.sagemaker.techniques.sharding import SHARDING
from endpoint_optimizer.sagemaker.techniques.speculative import SPECULATIVE

__all__ = [
    "CONFIG_LABELS",
    "TECHNIQUES",
    "TRAINING_LABELS",
    "Refuse",
    "Target",
    "Technique",
    "TechniqueError",
    "engine",
    "job_configs",
    "requested",
]

# In this order: the OptimizationConfigs elements, the candidate's environment and the
# matrix's violations come out in it.
TECHNIQUES: tuple[Technique, ...] = (SETTINGS, QUANTIZATION, SPECULATIVE, COMPILATION, SHARDING)

# OptimizationConfigs member -> the label of the technique that writes it.
CONFIG_LABELS: dict[str, str] = {
    member: technique.label for technique in TECHNIQUES for member in technique.config_members
}
# Labels of the techniques whose weights a training job builds.
TRAINING_LABELS: tuple[str, ...] = tuple(t.label for t in TECHNIQUES if t.uses_training_jobs)


def requested(spec: OptimizedEndpointSpec) -> list[Technique]:
    """The techniques the spec asks for, settings included, in table order."""
    return [technique for technique in TECHNIQUES if technique.applies(spec)]


def job_configs(spec: OptimizedEndpointSpec) -> list[rq.OptimizationConfig]:
    """Every OptimizationConfigs element the spec's techniques write; [] = no job."""
    return [config for technique in TECHNIQUES for config in technique.job_configs(spec)]


def engine(spec: OptimizedEndpointSpec) -> Backend:
    """The serving engine the candidate runs on."""
    if is_neuron(spec.instance_type):
        return Backend.NEURON
    if any(technique.compiles(spec) for technique in TECHNIQUES):
        return Backend.TRTLLM
    return Backend.VLLM
