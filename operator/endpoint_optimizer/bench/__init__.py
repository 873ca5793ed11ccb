"""Load generator over InvokeEndpointWithResponseStream: TTFT, ITL, throughput."""

from endpoint_optimizer.bench.models import (
    BenchConfig,
    BenchReport,
    BenchTarget,
    LevelReport,
    RequestFormat,
    RequestSample,
    Slo,
)
from endpoint_optimizer.bench.runner import run_benchmark

__all__ = [
    "BenchConfig",
    "BenchReport",
    "BenchTarget",
    "LevelReport",
    "RequestFormat",
    "RequestSample",
    "Slo",
    "run_benchmark",
]
