"""The live judge's memory between wake-ups, as status stores it (status.rollout.liveJudge).

The judge itself (`analysis.live.judge_interval`) is a pure fold: state in, state out.
The state is part of the resource's status, so its type lives here with the status.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from endpoint_optimizer.api.camel import CamelModel


class LiveDecision(StrEnum):
    CONTINUE = "Continue"  # keep the step's clock running
    HOLD = "Hold"  # no data: the step's clock does not advance
    ROLLBACK = "Rollback"


class LatencyNoise(CamelModel):
    """How much a variant's per-interval latency statistic moves on its own, measured on
    the baseline before the rollout.

    Each value is c in var(log statistic of an interval) = c / invocations: the spread a
    single request contributes. With it the CloudWatch-only test knows its variance
    instead of learning it, which makes it several intervals faster.
    """

    average: float | None = Field(
        default=None, gt=0.0, description="c for the interval's Average latency."
    )
    p99: float | None = Field(default=None, gt=0.0, description="c for the interval's p99.")
    intervals: int = Field(ge=0, description="Baseline intervals the calibration rests on.")


class LiveState(CamelModel):
    """What the judge remembers between operator wake-ups (stored in status)."""

    noise: LatencyNoise | None = Field(
        default=None, description="Set once before the rollout from the baseline's history."
    )
    intervals: int = Field(default=0, ge=0, description="Intervals judged.")
    failures: int = Field(default=0, ge=0, description="Intervals that failed a check.")
    no_data_intervals: int = Field(default=0, ge=0, description="Intervals without traffic.")
    last_interval_end: datetime | None = Field(
        default=None, description="End of the newest interval judged."
    )
    updated_at: datetime | None = Field(default=None, description="When last judged.")
    location_score: float = Field(
        default=0.0, description="Location test: sum of (d - margin)/v over intervals."
    )
    location_information: float = Field(
        default=0.0, description="Location test: sum of 1/v over intervals."
    )
    location_p_value: float = Field(default=1.0, description="Location test's p-value.")
    latency_log_lr: list[float] = Field(
        default_factory=list, description="Tail test: log likelihood ratios per alternative."
    )
    error_log_lr: list[float] = Field(
        default_factory=list, description="Error-rate test: log likelihood ratios."
    )
    latency_p_value: float = Field(default=1.0, description="Tail test's always-valid p-value.")
    error_p_value: float = Field(default=1.0, description="Error-rate test's p-value.")
    aggregate_n: int = Field(default=0, ge=0, description="Aggregate path: intervals.")
    aggregate_weight: float = Field(default=0.0, description="Aggregate path: total weight.")
    aggregate_weighted_sum: float = Field(
        default=0.0, description="Aggregate path: weighted sum of per-interval log-ratios."
    )
    aggregate_weighted_sum_sq: float = Field(
        default=0.0, description="Aggregate path: weighted sum of squared log-ratios."
    )
    aggregate_score: float = Field(
        default=0.0, description="Calibrated aggregate path: sum of (d - margin)/v."
    )
    aggregate_information: float = Field(
        default=0.0, description="Calibrated aggregate path: sum of 1/v."
    )
    decision: LiveDecision = Field(
        default=LiveDecision.CONTINUE, description="Continue, Hold or Rollback."
    )
