"""Pre-sharding for SageMaker's fast model loader (ModelShardingConfig).

An optimization job writes the weights split for the tensor-parallel degree the
candidate then serves with; the api model refuses it next to quantization or compilation.
"""

from __future__ import annotations

from endpoint_optimizer.api import OptimizedEndpointSpec
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker.techniques.base import Technique

CONFIG_MEMBER = "ModelShardingConfig"


class Sharding(Technique):
    label = "sharding"
    config_members = (CONFIG_MEMBER,)

    def applies(self, spec: OptimizedEndpointSpec) -> bool:
        return spec.optimizations.sharding is not None

    def tensor_parallel_degrees(self, spec: OptimizedEndpointSpec) -> list[tuple[str, int]]:
        sharding = spec.optimizations.sharding
        if sharding is None:
            return []
        return [
            ("spec.optimizations.sharding.tensorParallelDegree", sharding.tensor_parallel_degree)
        ]

    def job_configs(self, spec: OptimizedEndpointSpec) -> list[rq.OptimizationConfig]:
        sharding = spec.optimizations.sharding
        if sharding is None:
            return []
        return [
            rq.container_config(
                CONFIG_MEMBER,
                image=sharding.image,
                override_environment={
                    "OPTION_TENSOR_PARALLEL_DEGREE": str(sharding.tensor_parallel_degree)
                },
            )
        ]


SHARDING = Sharding()
