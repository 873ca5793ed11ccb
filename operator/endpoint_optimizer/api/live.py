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


class GaussianTest(CamelModel):
    """A Gaussian mSPRT's running sums: sum of (d - margin) / v and of 1 / v."""

    score: float = Field(default=0.0, description="Sum of (d - margin) / v.")
    information: float = Field(default=0.0, description="Sum of 1 / v.")
    intervals: int = Field(default=0, ge=0, description="Intervals folded in.")
    p_value: float = Field(default=1.0, description="Always-valid p-value so far.")


class CloudWatchTest(CamelModel):
    """A CloudWatch statistic's running sums (the t-test's and the calibrated mSPRT's)."""

    n: int = Field(default=0, ge=0, description="Intervals folded in.")
    weight: float = Field(default=0.0, description="Total weight (effective requests).")
    weighted_sum: float = Field(default=0.0, description="Weighted sum of log-ratios.")
    weighted_sum_sq: float = Field(default=0.0, description="Weighted sum of squared log-ratios.")
    score: float = Field(default=0.0, description="Calibrated path: sum of (d - margin)/v.")
    information: float = Field(default=0.0, description="Calibrated path: sum of 1/v.")
    p_value: float = Field(default=1.0, description="Always-valid p-value so far.")


class AcceptanceEstimate(CamelModel):
    """One variant's speculative acceptance over one live interval, from the container's
    log lines (accepted and drafted token counters, summed over lines and instances)."""

    drafted: int = Field(ge=0, description="Draft tokens proposed in the interval.")
    accepted: int = Field(ge=0, description="Draft tokens the target model accepted.")
    lines: int = Field(ge=0, description="Log lines (engine reports) the counts come from.")
    rate: float | None = Field(
        default=None, ge=0.0, le=1.0, description="accepted / drafted; None without drafts."
    )
    low: float | None = Field(default=None, ge=0.0, le=1.0, description="Lower bound.")
    high: float | None = Field(default=None, ge=0.0, le=1.0, description="Upper bound.")
    effective_samples: float = Field(
        default=0.0,
        ge=0.0,
        description="Independent draws the bounds rest on: drafts (steps), not tokens.",
    )
    interval_end: datetime | None = Field(default=None, description="End of the interval.")


class StreamTotal(CamelModel):
    """A log stream's last running totals (vLLM V0 prints totals since the engine started)."""

    stream: str = Field(description="`<variant>/<instance-id>`.")
    accepted: int = Field(ge=0, description="Accepted draft tokens since the engine started.")
    drafted: int = Field(ge=0, description="Drafted tokens since the engine started.")


class ErrorLook(CamelModel):
    """One judged interval of the canary's 5XX test (analysis/live_errors.py)."""

    errors: int = Field(ge=0, description="5XX of both variants in the interval.")
    candidate: int = Field(ge=0, description="Of those, the candidate's.")
    share: float = Field(
        ge=0.0, le=1.0, description="The candidate's share of the interval's invocations."
    )


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
        default=0.0, description="Per-request samples: sum of (d - margin)/v."
    )
    location_information: float = Field(default=0.0, description="Per-request samples: sum of 1/v.")
    location_p_value: float = Field(default=1.0, description="Location test's p-value.")
    latency_log_lr: list[float] = Field(
        default_factory=list, description="Tail test: log likelihood ratios per bet."
    )
    error_log_lr: list[float] = Field(
        default_factory=list,
        description="Bake error-rate test (against the canary's rate): log likelihood "
        "ratios per bet.",
    )
    error_looks: list[ErrorLook] = Field(
        default_factory=list,
        description="Canary error-rate test: each judged interval's 5XX counts, from which "
        "its group-sequential boundaries are recomputed.",
    )
    latency_p_value: float = Field(default=1.0, description="Tail test's p-value.")
    error_p_value: float = Field(default=1.0, description="Error-rate test's p-value.")
    aggregate_n: int = Field(
        default=0, ge=0, description="CloudWatch Average (else p99): intervals."
    )
    aggregate_weight: float = Field(default=0.0, description="CloudWatch path: total weight.")
    aggregate_weighted_sum: float = Field(
        default=0.0, description="CloudWatch path: weighted sum of per-interval log-ratios."
    )
    aggregate_weighted_sum_sq: float = Field(
        default=0.0, description="CloudWatch path: weighted sum of squared log-ratios."
    )
    aggregate_score: float = Field(
        default=0.0, description="Calibrated CloudWatch path: sum of (d - margin)/v."
    )
    aggregate_information: float = Field(
        default=0.0, description="Calibrated CloudWatch path: sum of 1/v."
    )
    probe_ttft: GaussianTest = Field(
        default_factory=GaussianTest, description="Probe requests: TTFT location test."
    )
    probe_tpot: GaussianTest = Field(
        default_factory=GaussianTest, description="Probe requests: TPOT location test."
    )
    probe_ttft_tail_log_lr: list[float] = Field(
        default_factory=list, description="Probe requests: TTFT tail bets."
    )
    probe_tpot_tail_log_lr: list[float] = Field(
        default_factory=list, description="Probe requests: TPOT tail bets."
    )
    p99: CloudWatchTest = Field(
        default_factory=CloudWatchTest,
        description="CloudWatch p99 as a tail member, when the Average carries the location.",
    )
    location_members: int = Field(
        default=0, ge=0, description="Sources the location check splits alpha over."
    )
    tail_members: int = Field(
        default=0, ge=0, description="Sources the tail check splits alpha over."
    )
    tail_p_value: float = Field(default=1.0, description="Tail check's p-value.")
    decision: LiveDecision = Field(
        default=LiveDecision.CONTINUE, description="Continue, Hold or Rollback."
    )
    candidate_acceptance: AcceptanceEstimate | None = Field(
        default=None, description="The candidate's acceptance in the newest interval with lines."
    )
    baseline_acceptance: AcceptanceEstimate | None = Field(
        default=None, description="The baseline's, when it speculates too."
    )
    acceptance_below_floor: int = Field(
        default=0, ge=0, description="Intervals whose acceptance was confidently below the floor."
    )
    stream_totals: list[StreamTotal] = Field(
        default_factory=list, description="Cumulative-counter streams' last totals (vLLM V0)."
    )


class IntervalSpread(CamelModel):
    """How much one probe metric's interval mean moved from interval to interval (log
    scale), over every usable interval of the baseline: sufficient statistics, so status
    stays small.

    During the canary both variants share each minute (its load, its traffic mix) and only
    the instances differ; the bake compares the promoted variant with a frozen reference,
    and nothing is shared, so each bake interval varies as much as the baseline's did.
    Latency follows the load, so the intervals are grouped by per-instance load (a canary
    step each) and the spread is taken within the groups, pooled
    (`analysis.live.add_to_spread`, `analysis.live.between_variance`).
    """

    intervals: int = Field(default=0, ge=0, description="Intervals added.")
    degrees: int = Field(default=0, ge=0, description="Degrees of freedom of closed groups.")
    squares: float = Field(
        default=0.0, ge=0.0, description="Closed groups' sum of squared deviations."
    )
    within_sum: float = Field(
        default=0.0,
        ge=0.0,
        description="Sum of each interval's sampling variance of its mean log (its samples' "
        "variance over their count): the part of the spread that the samples explain.",
    )
    group_load: float | None = Field(
        default=None, description="The open group's per-instance load (geometric mean)."
    )
    group_intervals: int = Field(default=0, ge=0, description="Intervals in the open group.")
    group_sum: float = Field(default=0.0, description="The open group's sum of mean logs.")
    group_square_sum: float = Field(
        default=0.0, ge=0.0, description="The open group's sum of squared mean logs."
    )


# Probe samples one reference keeps per metric (spec.rollout.analysis.probes.perInterval
# is at most 600): status stays small whatever the interval.
MAX_REFERENCE_SAMPLES = 600


class LiveFigures(CamelModel):
    """One variant's last measured live figures, as the live judge read them.

    During the canary, the baseline's newest interval that the judge could use, per
    source (CloudWatch's statistics, the probes); frozen at the promotion, it is what the
    bake compares the promoted variant with, the baseline no longer serving.
    """

    interval_end: datetime | None = Field(
        default=None, description="End of the newest interval these figures come from."
    )
    invocations: int = Field(default=0, ge=0, description="CloudWatch Invocations.")
    errors_5xx: int = Field(default=0, ge=0, description="CloudWatch Invocation5XXErrors.")
    invocations_total: int = Field(
        default=0,
        ge=0,
        description="Invocations summed over every interval of the canary the judge could "
        "use: the bake's error reference (one interval's count is too noisy to reuse).",
    )
    errors_5xx_total: int = Field(
        default=0, ge=0, description="5XX summed over the same intervals."
    )
    latency_mean_s: float | None = Field(
        default=None, gt=0.0, description="CloudWatch Average ModelLatency, seconds."
    )
    latency_p99_s: float | None = Field(
        default=None, gt=0.0, description="CloudWatch p99 ModelLatency, seconds."
    )
    mean_log_sum: float = Field(
        default=0.0,
        description="Sum of log Average over the canary's usable intervals: the bake compares "
        "with their geometric mean, so one interval's load does not set the reference.",
    )
    mean_intervals: int = Field(default=0, ge=0, description="Intervals in mean_log_sum.")
    p99_log_sum: float = Field(default=0.0, description="Sum of log p99, likewise.")
    p99_intervals: int = Field(default=0, ge=0, description="Intervals in p99_log_sum.")
    probe_requests: int = Field(default=0, ge=0, description="Probes sent in that interval.")
    probe_errors: int = Field(default=0, ge=0, description="Probes that failed.")
    probe_ttft_s: list[float] = Field(
        default_factory=list,
        max_length=MAX_REFERENCE_SAMPLES,
        description="The probes' time to first token, seconds: the newest samples of the "
        "canary's usable intervals, pooled (newest last).",
    )
    probe_tpot_s: list[float] = Field(
        default_factory=list,
        max_length=MAX_REFERENCE_SAMPLES,
        description="The probes' mean inter-token latency, seconds, pooled likewise.",
    )
    probe_ttft_spread: IntervalSpread = Field(
        default_factory=IntervalSpread,
        description="Interval-to-interval spread of the baseline's probe TTFT over every "
        "probed canary interval, within each load step: the bake's per-interval variance (a "
        "frozen reference shares no minute with the promoted variant).",
    )
    probe_tpot_spread: IntervalSpread = Field(
        default_factory=IntervalSpread, description="The same for the probes' TPOT."
    )
    probe_input_tokens: int | None = Field(default=None, ge=1, description="Probe prompt size.")
    probe_output_tokens: int | None = Field(default=None, ge=1, description="Probe max_tokens.")
    load_per_instance_s: float | None = Field(
        default=None,
        ge=0.0,
        description="The per-instance load (CloudWatch InvocationsPerInstance per second) the "
        "latency figures above were measured at: the geometric mean over their intervals. "
        "The latency pools keep only the intervals at about the highest load the canary "
        "showed the baseline with the most sources (a higher one with as many sources "
        "starts them afresh, a much lower one is left out unless it brings a source they "
        "lack), and the bake compares latency only at a comparable load. None: not published.",
    )
    load_intervals: int = Field(default=0, ge=0, description="Intervals in load_per_instance_s.")

    @property
    def empty(self) -> bool:
        """Nothing to compare with: neither CloudWatch statistics nor probe samples."""
        return (
            self.latency_mean_s is None
            and self.latency_p99_s is None
            and not self.probe_ttft_s
            and not self.probe_tpot_s
        )
