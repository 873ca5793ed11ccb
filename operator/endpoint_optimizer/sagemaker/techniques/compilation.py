"""Compilation: TensorRT-LLM on GPU, the Neuron SDK on inf2/trn1; applied last.

An optimization job compiles (ModelCompilationConfig); the candidate then serves with
the compiled engine's image. SageMaker refuses GPU compilation of Llama 3.1 and later.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from endpoint_optimizer.api import OptimizedEndpointSpec
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker.techniques.base import Refuse, Target, Technique

CONFIG_MEMBER = "ModelCompilationConfig"

# The SDK refuses GPU compilation of Llama 3.1 and later (serve/validations/optimization.py).
_LLAMA_31_PLUS = re.compile(r"llama-3[.-][1-9]", re.IGNORECASE)


class Compilation(Technique):
    label = "compilation"
    config_members = (CONFIG_MEMBER,)
    rules: ClassVar[Mapping[str, str]] = {
        "compilation-llama-3.1": "SageMaker does not compile Llama 3.1 and later for GPU "
        "(TensorRT-LLM).",
    }

    def applies(self, spec: OptimizedEndpointSpec) -> bool:
        return spec.optimizations.compilation is not None

    def compiles(self, spec: OptimizedEndpointSpec) -> bool:
        return self.applies(spec)

    def check_placement(self, spec: OptimizedEndpointSpec, target: Target, refuse: Refuse) -> None:
        if target.device is None or target.device.kind != "gpu" or not self.applies(spec):
            return
        model = spec.model.jump_start_model_id or spec.model.hf_model_id or spec.model.s3_uri or ""
        if _LLAMA_31_PLUS.search(model):
            refuse(
                "compilation-llama-3.1",
                "spec.optimizations.compilation",
                "SageMaker does not compile Llama 3.1 and later for GPU (TensorRT-LLM)",
                ["optimizations.quantization without compilation", "speculativeDecoding"],
            )

    def tensor_parallel_degrees(self, spec: OptimizedEndpointSpec) -> list[tuple[str, int]]:
        compilation = spec.optimizations.compilation
        if compilation is None or compilation.tensor_parallel_degree is None:
            return []
        return [
            (
                "spec.optimizations.compilation.tensorParallelDegree",
                compilation.tensor_parallel_degree,
            )
        ]

    def job_configs(self, spec: OptimizedEndpointSpec) -> list[rq.OptimizationConfig]:
        compilation = spec.optimizations.compilation
        if compilation is None:
            return []
        tp = compilation.tensor_parallel_degree
        return [
            rq.container_config(
                CONFIG_MEMBER,
                image=compilation.image,
                override_environment={"OPTION_TENSOR_PARALLEL_DEGREE": str(tp)} if tp else {},
            )
        ]


COMPILATION = Compilation()
