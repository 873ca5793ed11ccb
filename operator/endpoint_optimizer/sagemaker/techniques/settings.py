"""Container settings: the free LMI options (max model length, batch size, memory share).

The first rung: no job, no new weights, only `OPTION_*` environment variables. They go
into the optimization job's OptimizationEnvironment too, so a quantized or compiled
model is built for the limits it will serve with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from endpoint_optimizer.api import OptimizedEndpointSpec
from endpoint_optimizer.sagemaker.instances import FP4_FAMILIES
from endpoint_optimizer.sagemaker.techniques.base import Refuse, Target, Technique


def container_environment(
    max_model_len: int | None = None,
    max_rolling_batch_size: int | None = None,
    gpu_memory_utilization: float | None = None,
    tensor_parallel_degree: int | None = None,
    dtype: str | None = None,
    kv_cache_dtype: str | None = None,
) -> dict[str, str]:
    """LMI `option.x` settings as `OPTION_X` environment variables (unset: container default)."""
    environment: dict[str, str] = {}
    if dtype is not None:
        environment["OPTION_DTYPE"] = dtype
    if kv_cache_dtype is not None:
        environment["OPTION_KV_CACHE_DTYPE"] = kv_cache_dtype
    if max_model_len is not None:
        environment["OPTION_MAX_MODEL_LEN"] = str(max_model_len)
    if max_rolling_batch_size is not None:
        environment["OPTION_MAX_ROLLING_BATCH_SIZE"] = str(max_rolling_batch_size)
    if gpu_memory_utilization is not None:
        environment["OPTION_GPU_MEMORY_UTILIZATION"] = f"{gpu_memory_utilization:g}"
    if tensor_parallel_degree is not None:
        environment["OPTION_TENSOR_PARALLEL_DEGREE"] = str(tensor_parallel_degree)
    return environment


class ContainerSettings(Technique):
    label = "containerSettings"
    rules: ClassVar[Mapping[str, str]] = {
        "nvfp4-kv-needs-blackwell": "An NVFP4 KV cache needs FP4 tensor cores (Blackwell: "
        "B200, RTX PRO 6000); fp8 runs on any GPU the container supports.",
    }

    def check_parameters(self, spec: OptimizedEndpointSpec, target: Target, refuse: Refuse) -> None:
        device = target.device
        if spec.container.kv_cache_dtype != "nvfp4" or device is None or device.fp4:
            return
        refuse(
            "nvfp4-kv-needs-blackwell",
            "spec.container.kvCacheDtype",
            f"{spec.instance_type} ({device.name}) has no FP4 tensor cores",
            ["kvCacheDtype: fp8"] + [f"ml.{f}.* for nvfp4" for f in FP4_FAMILIES],
        )

    def applies(self, spec: OptimizedEndpointSpec) -> bool:
        return bool(self.environment(spec))

    def environment(self, spec: OptimizedEndpointSpec) -> dict[str, str]:
        c = spec.container
        return container_environment(
            max_model_len=c.max_model_len,
            max_rolling_batch_size=c.max_rolling_batch_size,
            gpu_memory_utilization=c.gpu_memory_utilization,
            tensor_parallel_degree=c.tensor_parallel_degree,
            dtype=c.dtype,
            kv_cache_dtype=c.kv_cache_dtype,
        )

    def tensor_parallel_degrees(self, spec: OptimizedEndpointSpec) -> list[tuple[str, int]]:
        degree = spec.container.tensor_parallel_degree
        return [] if degree is None else [("spec.container.tensorParallelDegree", degree)]


SETTINGS = ContainerSettings()
