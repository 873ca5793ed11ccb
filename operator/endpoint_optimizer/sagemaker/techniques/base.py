"""What every technique answers: the small interface the matrix, the plan and the exporter read.

A technique is a module-level instance of a `Technique` subclass. Every hook has a
default that does nothing, so a module writes only what its technique has: the
matrix rules it adds, the OptimizationConfigs element it writes, the environment the
candidate serves with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from endpoint_optimizer.api import OptimizedEndpointSpec
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker.instances import Accelerator, Backend
from endpoint_optimizer.sagemaker.training import QuantizationTrainingJob

# refuse(rule, field, message, allowed): records one matrix violation.
Refuse = Callable[[str, str, str, list[str]], None]


class TechniqueError(ValueError):
    """The spec asks for something the operator cannot build; the message names the field."""


@dataclass(frozen=True)
class Target:
    """Where the candidate would run, as the matrix sees it."""

    instance_type: str
    device: Accelerator | None
    engine: Backend


class Technique:
    """One optimization technique. Subclasses override the hooks their technique has."""

    # The spec's field name: the label in status.candidateTechniques, Events and metrics.
    label: ClassVar[str] = ""
    # Its matrix rules: id -> the reason a user reads in docs/crd-reference.md.
    rules: ClassVar[Mapping[str, str]] = {}
    # CreateOptimizationJob OptimizationConfigs members it writes (metrics label jobs by them).
    config_members: ClassVar[tuple[str, ...]] = ()
    # Whether its weights may come from a SageMaker training job (metrics label those).
    uses_training_jobs: ClassVar[bool] = False
    # Whether SageMaker offers it on Neuron (inf2, trn1), where it optimizes by compilation.
    runs_on_neuron: ClassVar[bool] = True

    def applies(self, spec: OptimizedEndpointSpec) -> bool:
        """Whether the spec asks for this technique."""
        raise NotImplementedError

    # -- matrix rules (sagemaker/matrix.py runs them, every technique's in table order) --

    def check_placement(self, spec: OptimizedEndpointSpec, target: Target, refuse: Refuse) -> None:
        """Refuse an instance or model SageMaker will not run this technique for."""

    def check_parameters(self, spec: OptimizedEndpointSpec, target: Target, refuse: Refuse) -> None:
        """Refuse settings of this technique that the target cannot take."""

    def tensor_parallel_degrees(self, spec: OptimizedEndpointSpec) -> list[tuple[str, int]]:
        """(field, degree) pairs the matrix checks against the instance's devices."""
        return []

    def compiles(self, spec: OptimizedEndpointSpec) -> bool:
        """Whether the candidate serves a compiled model (TensorRT-LLM image, engine)."""
        return False

    # -- building the candidate (pipeline/plan.py reads these) ---------------------------

    def environment(self, spec: OptimizedEndpointSpec) -> dict[str, str]:
        """Options the model is optimized and served with (the job's OptimizationEnvironment)."""
        return {}

    def job_configs(self, spec: OptimizedEndpointSpec) -> list[rq.OptimizationConfig]:
        """Its CreateOptimizationJob OptimizationConfigs elements; [] when it needs no job."""
        return []

    def trains(self, spec: OptimizedEndpointSpec) -> bool:
        """Whether it builds its weights in a SageMaker training job instead."""
        return False

    def training_job(
        self, spec: OptimizedEndpointSpec, name: str, network: rq.Network | None = None
    ) -> QuantizationTrainingJob | None:
        """The training job, named `name`; raises ValueError naming the field it cannot use."""
        return None

    def job_conflict(self, spec: OptimizedEndpointSpec, job_members: list[str]) -> str | None:
        """Why it cannot be built together with an optimization job writing `job_members`."""
        return None

    def serving_environment(self, spec: OptimizedEndpointSpec) -> dict[str, str]:
        """Options set at deployment, after the optimization job's own."""
        return {}
