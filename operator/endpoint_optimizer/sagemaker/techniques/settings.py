"""Container settings: the free LMI options (max model length, batch size, memory share).

The first rung: no job, no new weights, only `OPTION_*` environment variables. They go
into the optimization job's OptimizationEnvironment too, so a quantized or compiled
model is built for the limits it will serve with.
"""

from __future__ import annotations

from endpoint_optimizer.api import OptimizedEndpointSpec
from endpoint_optimizer.sagemaker.techniques.base import Technique


def container_environment(
    max_model_len: int | None = None,
    max_rolling_batch_size: int | None = None,
    gpu_memory_utilization: float | None = None,
    tensor_parallel_degree: int | None = None,
    dtype: str | None = None,
) -> dict[str, str]:
    """LMI `option.x` settings as `OPTION_X` environment variables (unset: container default)."""
    environment: dict[str, str] = {}
    if dtype is not None:
        environment["OPTION_DTYPE"] = dtype
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
        )

    def tensor_parallel_degrees(self, spec: OptimizedEndpointSpec) -> list[tuple[str, int]]:
        degree = spec.container.tensor_parallel_degree
        return [] if degree is None else [("spec.container.tensorParallelDegree", degree)]


SETTINGS = ContainerSettings()
