"""Live per-variant series: what the CloudWatch reader returns and the judges and exporter read.

Plain per-period numbers in base units (seconds, counts, percent), one series per
variant role. A new live metric is a `LiveMetric` member and an `IntervalPoint` field
here, a row of `aws.cloudwatch.SOURCES`, and an exporter row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from endpoint_optimizer.analysis.live import LiveObservation, VariantInterval


class VariantRole(StrEnum):
    """The bounded `variant` label: which side of the comparison a figure belongs to."""

    BASELINE = "baseline"
    CANDIDATE = "candidate"


class LiveMetric(StrEnum):
    """The live metrics read per variant; the value is the query-id suffix and field name."""

    INVOCATIONS = "invocations"
    INVOCATIONS_PER_INSTANCE = "invocations_per_instance"
    MODEL_LATENCY = "model_latency_seconds"
    MODEL_LATENCY_P99 = "model_latency_p99_seconds"
    OVERHEAD_LATENCY = "overhead_latency_seconds"
    ERRORS_5XX = "errors_5xx"
    GPU_UTILIZATION = "gpu_utilization_percent"
    GPU_MEMORY_UTILIZATION = "gpu_memory_utilization_percent"


class IntervalPoint(BaseModel):
    """One variant's figures for one CloudWatch period; None where CloudWatch had no datapoint."""

    model_config = ConfigDict(frozen=True)

    start: float  # unix seconds, start of the period
    invocations: float | None = None
    invocations_per_instance: float | None = None
    model_latency_seconds: float | None = None
    model_latency_p99_seconds: float | None = None
    overhead_latency_seconds: float | None = None
    errors_5xx: float | None = None
    gpu_utilization_percent: float | None = None
    gpu_memory_utilization_percent: float | None = None

    def value(self, metric: LiveMetric) -> float | None:
        result: float | None = getattr(self, metric.value)
        return result

    @property
    def error_rate(self) -> float | None:
        """5XX errors per invocation in this period; None without invocations."""
        if not self.invocations or self.errors_5xx is None:
            return None
        return self.errors_5xx / self.invocations


class VariantSeries(BaseModel):
    """Per-period points of one variant, oldest first."""

    model_config = ConfigDict(frozen=True)

    role: VariantRole
    variant_name: str
    period_seconds: int
    points: tuple[IntervalPoint, ...] = ()
    complete: bool = True  # False when CloudWatch reported PartialData/InternalError/Forbidden

    def values(self, metric: LiveMetric) -> list[float | None]:
        """The plain per-period numbers of one metric, oldest first."""
        return [point.value(metric) for point in self.points]

    def latest(self) -> IntervalPoint | None:
        """The newest period that saw traffic, else the newest period at all."""
        for point in reversed(self.points):
            if point.invocations:
                return point
        return self.points[-1] if self.points else None


def variant_interval(series: VariantSeries | None) -> VariantInterval:
    """The newest period of one variant as the live judge's input (counts, p99 latency and
    the per-instance load: InvocationsPerInstance over the period, per second)."""
    point = series.latest() if series is not None else None
    if point is None or series is None:
        return VariantInterval(invocations=0)
    per_instance = point.invocations_per_instance
    return VariantInterval(
        invocations=round(point.invocations or 0.0),
        errors_5xx=round(point.errors_5xx or 0.0),
        latency_s=point.model_latency_p99_seconds,
        load_per_instance_s=(
            per_instance / series.period_seconds
            if per_instance is not None and math.isfinite(per_instance) and per_instance >= 0
            else None
        ),
    )


def live_observation(
    series: Mapping[VariantRole, VariantSeries], interval_end: datetime
) -> LiveObservation:
    """What `analysis.live.judge_interval` takes, from one `CloudWatchReader.read`.

    Read with `period_seconds` equal to the analysis interval, so the newest period
    with traffic is the interval being judged.
    """
    return LiveObservation(
        interval_end=interval_end,
        baseline=variant_interval(series.get(VariantRole.BASELINE)),
        candidate=variant_interval(series.get(VariantRole.CANDIDATE)),
    )
