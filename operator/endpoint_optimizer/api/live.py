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
    the baseline before the rollout (`calibrate_latency_noise`).

    Each value is c in var(log statistic of an interval) = c / invocations: the spread a
    single request contributes. With it the CloudWatch-only test knows its variance
    instead of learning it, which makes it several intervals faster.
    """

    average: float | None = Field(default=None, gt=0.0)
    p99: float | None = Field(default=None, gt=0.0)
    intervals: int = Field(ge=0, description="Baseline intervals the calibration rests on.")


class LiveState(CamelModel):
    """What the judge remembers between operator wake-ups (stored in status)."""

    noise: LatencyNoise | None = Field(
        default=None, description="Set once before the rollout from the baseline's history."
    )
    intervals: int = 0
    failures: int = 0
    no_data_intervals: int = 0
    last_interval_end: datetime | None = None
    updated_at: datetime | None = None
    # Location test: sum of (d_t - margin)/v_t and of 1/v_t over intervals.
    location_score: float = 0.0
    location_information: float = 0.0
    location_p_value: float = 1.0
    latency_log_lr: list[float] = Field(default_factory=list)
    error_log_lr: list[float] = Field(default_factory=list)
    latency_p_value: float = 1.0
    error_p_value: float = 1.0
    # Aggregate path: intervals, total weight, weighted sum and sum of squares of the
    # per-interval log-ratios.
    aggregate_n: int = 0
    aggregate_weight: float = 0.0
    aggregate_weighted_sum: float = 0.0
    aggregate_weighted_sum_sq: float = 0.0
    # Aggregate path with calibrated noise: sum of (d - margin)/v and of 1/v.
    aggregate_score: float = 0.0
    aggregate_information: float = 0.0
    decision: LiveDecision = LiveDecision.CONTINUE
