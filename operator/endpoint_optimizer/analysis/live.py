"""The live judge for canary steps: sequential tests checked every interval.

State lives in the resource's status between wake-ups; `judge_interval` is a pure
function from (state, one interval's observation, policy, now) to the next state,
the interval's checks and a decision. Every latency test is an e-process: a running evidence
ratio E of "candidate worse" against "not worse" that, under the null, reaches 1/a with
probability at most a however often it is checked (Ville's inequality), so checking
every interval is safe. Three checks share alpha (Bonferroni, alpha/3 each); inside a
check, its k members share that again (a member rejects at k / (alpha/3)):

- `live_latency` (location): a Gaussian mSPRT on each interval's difference of mean log
  latency per source: probe TTFT and probe TPOT (`ProbeSamples`: a low rate of streamed
  requests pinned to each variant), our own per-request samples (with an ANCOVA on prompt
  tokens when given), or, without samples, CloudWatch's per-interval Average (else p99):
  a sequential t-test that learns the spread, or a Gaussian mSPRT with the spread
  calibrated on the baseline's history;
- `live_latency_tail`: per source of samples, an exact rank test on which variant the
  pooled tail (above `tailQuantile`) comes from, drawn from the top like an urn: under the
  null every order of labels is equally likely, so each draw's likelihood ratio has
  expectation one and the product is a test martingale, distribution-free. The candidate
  is first aligned on the baseline's median (and scaled by the margin), so a minute on a
  slightly slower instance is not read as a fatter tail: the test asks whether the tail
  is heavier than the body, the location test answers for the body; the alignment makes
  it approximate. It scales a faster candidate up by at most 5 % (an instance's noise),
  so a tail far below the baseline's is no regression, however wide the body
  (speculative decoding's is). CloudWatch p99 (when the Average carries the location),
  like the Average;
- `live_errors_5xx`: an exact group-sequential test on which variant each 5XX came from,
  with alpha spent over the intervals (analysis/live_errors.py); the bake tests the
  promoted variant's rate against the canary's with an e-process instead.

Every input is screened first (analysis/admissible.py): a NaN, infinite, zero or negative
latency statistic or sample, or more 5XX than invocations, is refused for that interval
with the reason, never judged, so the stored state stays finite (valid JSON).
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from pydantic import Field
from scipy.stats import chi2

from endpoint_optimizer.analysis import live_errors
from endpoint_optimizer.analysis.admissible import bad_values, positive_finite
from endpoint_optimizer.analysis.bootstrap import FloatArray, as_array, sample_quantile
from endpoint_optimizer.analysis.errors import lower_bound
from endpoint_optimizer.analysis.live_acceptance import acceptance_live_check, estimate
from endpoint_optimizer.analysis.speclog import SpecLine, interval_counts
from endpoint_optimizer.api import NoDataPolicy
from endpoint_optimizer.api.camel import CamelModel
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.api.live import (
    AcceptanceEstimate,
    CloudWatchTest,
    ErrorLook,
    GaussianTest,
    IntervalSpread,
    LiveDecision,
    LiveState,
    StreamTotal,
)


class ProbeSamples(CamelModel):
    """Probe requests pinned to one variant (TargetVariant) during one interval.

    A low, bounded rate of streamed requests of one fixed shape, sent to each variant
    alike, so the two are compared on the same requests whatever the canary weight and
    the production prompt mix. One entry per successful probe; failed probes are counted
    by CloudWatch's 5XX like any invocation, and here in `errors` for the record.
    """

    requests: int = Field(ge=0, description="Probes sent to the variant in the interval.")
    errors: int = Field(default=0, ge=0, description="Probes that failed (5XX, stream error).")
    ttft_s: list[float] = Field(default_factory=list, description="Time to first token, s.")
    tpot_s: list[float] = Field(
        default_factory=list, description="Mean inter-token latency per probe, s (decode speed)."
    )
    input_tokens: int | None = Field(default=None, ge=1, description="The probes' prompt size.")
    output_tokens: int | None = Field(default=None, ge=1, description="The probes' max_tokens.")


class VariantInterval(CamelModel):
    """One variant's traffic in one analysis interval."""

    invocations: int = Field(ge=0)
    errors_5xx: int = Field(default=0, ge=0)
    latency_samples_s: list[float] = Field(
        default_factory=list, description="Per-request latency (our own client), seconds."
    )
    latency_s: float | None = Field(
        default=None, description="CloudWatch statistic (e.g. p99 ModelLatency), seconds."
    )
    latency_mean_s: float | None = Field(
        default=None, description="CloudWatch Average ModelLatency, seconds (preferred)."
    )
    load_per_instance_s: float | None = Field(
        default=None,
        description="CloudWatch InvocationsPerInstance over the interval, per second: the "
        "load each of the variant's instances carried (None: not published).",
    )
    input_tokens: list[int] = Field(
        default_factory=list,
        description="Prompt tokens of each latency sample (same order); optional covariate.",
    )
    probes: ProbeSamples | None = Field(
        default=None, description="Probe requests pinned to this variant in the interval."
    )
    spec_lines: list[SpecLine] = Field(
        default_factory=list,
        description="The container's speculative-decoding log lines in the interval.",
    )


class LiveObservation(CamelModel):
    interval_end: datetime
    baseline: VariantInterval
    candidate: VariantInterval


class LivePolicy(CamelModel):
    on_no_data: NoDataPolicy = NoDataPolicy.PAUSE
    min_invocations: int = Field(default=20, ge=1, description="Per variant per interval.")
    failure_limit: int = Field(default=2, ge=1)
    alpha: float = Field(default=0.01, gt=0.0, lt=0.5, description="False-rollback bound.")
    latency_margin: float = Field(
        default=0.0,
        ge=0.0,
        description="Tolerated relative latency increase; 0: an optimization must not be slower.",
    )
    tail_quantile: float = Field(default=0.9, gt=0.0, lt=1.0)
    # Odds ratios of "a tail sample / an error comes from the candidate" that the mixture
    # spreads its bet over; equal weights. Small ones catch slow drifts, big ones outages.
    odds_grid: list[float] = Field(default_factory=lambda: [1.25, 1.5, 2.0, 3.0, 5.0])
    tail_depths: list[float] = Field(
        default_factory=lambda: [0.1, 0.2, 0.5, 1.0],
        description="Shares of the tail (from the top) the tail tests bet on; 1: all of it. "
        "With tailQuantile 0.9: the slowest 1 %, 2 %, 5 % and 10 %.",
    )
    error_odds_grid: list[float] = Field(
        default_factory=lambda: [2.0, 3.0, 4.0, 6.0],
        description="Odds ratios the bake's 5XX test (against the canary's rate) bets on: an "
        "error rate that less than doubles is not worth a rollback, and fewer bets reject "
        "sooner.",
    )
    error_spending_intervals: float = Field(
        default=4.0,
        gt=0.0,
        description="The canary's 5XX test spends its alpha as alpha * (1 - exp(-t / this)) "
        "by interval t (analysis/live_errors.py): about 70 % of it within 5 intervals, all "
        "of it in the limit.",
    )
    # Location test: log-scale slowdowns (beyond the margin) the mixture spreads its bet over.
    location_grid: list[float] = Field(default_factory=lambda: [0.03, 0.06, 0.12, 0.25, 0.5])
    # Aggregate-only latency: per-request standardised slowdowns (log-ratio / per-request
    # spread) the sequential t-test mixes over.
    aggregate_effect_grid: list[float] = Field(
        default_factory=lambda: [0.1, 0.2, 0.4, 0.8, 1.6, 3.2]
    )
    interval_noise: float = Field(
        default=0.05,
        ge=0.0,
        description="Log-scale spread of one variant's interval mean that no sample count "
        "removes (instance-to-instance and minute-to-minute differences): added to the "
        "probes' per-interval variance so a few dozen fixed-shape probes are not over-trusted.",
    )
    interval_variance: dict[str, float] = Field(
        default_factory=dict,
        description="The bake: per probe metric ('ttft', 'tpot'), the log-scale variance of an "
        "interval's mean beyond its samples' own, measured over the reference's intervals. "
        "In the canary both variants share each minute and only instance noise is left "
        "(interval_noise); against a frozen reference nothing is shared. Never below "
        "twice interval_noise squared.",
    )
    min_probes: int = Field(
        default=5, ge=2, description="Probe samples per variant an interval needs to be used."
    )
    error_reference: tuple[int, int] | None = Field(
        default=None,
        description="The bake: the baseline's (5XX, invocations) over the canary, a fixed "
        "reference. The candidate's 5XX rate is then tested against the reference rate's "
        "upper confidence bound (at alpha) instead of against a baseline interval.",
    )
    reference_load_s: float | None = Field(
        default=None,
        description="The bake: the per-instance load (invocations per second per instance) "
        "the reference's latency was measured at; None: latency is compared whatever the "
        "load (the canary, whose variants are side by side).",
    )
    load_tolerance: float = Field(
        default=0.125,
        ge=0.0,
        description="The bake compares latency only while the promoted variant's per-instance "
        "load is at most (1 + this) x the reference's: latency rises with load (queueing, "
        "bigger batches), and a frozen reference cannot tell that from a regression.",
    )
    rollback_on_rejection: bool = Field(
        default=True,
        description="A sequential rejection is already error-controlled: roll back at once.",
    )
    acceptance_floor: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Speculative candidates: minAcceptanceRate; None: acceptance not judged.",
    )
    speculative_tokens: int = Field(
        default=5, ge=1, description="Draft tokens per step (the design effect of a step)."
    )
    min_drafted_tokens: int = Field(
        default=200, ge=1, description="Drafted tokens an interval needs for a verdict."
    )
    acceptance_gates: bool = Field(
        default=True,
        description="True (onAcceptanceDrift: rollback): a confident fall below the floor is a "
        "failed interval; False (alert): reported only.",
    )


@dataclass(frozen=True)
class LiveJudgement:
    state: LiveState
    checks: list[Check]
    decision: LiveDecision
    # False when the interval's latency was not compared: the promoted variant carried more
    # load per instance than the bake's reference was measured at (`unmatched_load`).
    latency_compared: bool = True


def load_step(load: float, current: float, tolerance: float) -> int:
    """Where a per-instance `load` stands against `current`: -1 lighter by more than the
    tolerance, +1 heavier by more, 0 within it (latency is comparable)."""
    widen = 1.0 + tolerance
    return -1 if load * widen < current else 1 if load > current * widen else 0


def geometric_running(current: float, count: int, value: float) -> float:
    """The geometric mean of `count` values whose mean is `current`, with `value` added."""
    return math.exp((count * math.log(current) + math.log(value)) / (count + 1))


def add_to_spread(
    spread: IntervalSpread, log_values: Sequence[float], load: float | None, tolerance: float
) -> None:
    """Add one interval's log samples to `spread`: a load outside the open group's
    tolerance (`load_step`) closes the group first; an unknown load joins it."""
    values = np.asarray(log_values, dtype=np.float64)
    if load is not None and load > 0:
        if spread.group_load is not None and load_step(load, spread.group_load, tolerance):
            k = spread.group_intervals
            spread.degrees += k - 1
            spread.squares += max(0.0, spread.group_square_sum - spread.group_sum**2 / k)
            spread.group_intervals, spread.group_sum, spread.group_square_sum = 0, 0.0, 0.0
            spread.group_load = None
        previous = load if spread.group_load is None else spread.group_load
        spread.group_load = geometric_running(previous, spread.group_intervals, load)
    mean = float(values.mean())
    spread.intervals += 1
    spread.within_sum += float(values.var(ddof=1)) / values.size
    spread.group_intervals += 1
    spread.group_sum += mean
    spread.group_square_sum += mean * mean


def between_variance(spread: IntervalSpread, confidence: float = 0.0) -> float | None:
    """The variance of an interval's mean log beyond its own samples' (method of moments:
    the pooled within-group spread of the interval means less their mean sampling
    variance); None without a degree of freedom.

    With `confidence` above 0 the pooled spread is its one-sided upper confidence bound
    (pooled x degrees / the chi-square quantile at 1 - confidence): a spread estimated from
    a few intervals that came out low would make a test surer than its data."""
    k = spread.group_intervals
    open_squares = max(0.0, spread.group_square_sum - spread.group_sum**2 / k) if k else 0.0
    degrees = spread.degrees + max(0, k - 1)
    if degrees < 1:
        return None
    pooled = (spread.squares + open_squares) / degrees
    if confidence > 0.0:
        pooled *= degrees / float(chi2.ppf(1.0 - confidence, degrees))
    return max(0.0, pooled - spread.within_sum / spread.intervals)


def unmatched_load(candidate: VariantInterval, policy: LivePolicy) -> str:
    """Why the candidate's latency is not comparable with a frozen reference: it carried
    more load per instance than the reference was measured at; "" when comparable (or when
    either load is unknown)."""
    reference, load = policy.reference_load_s, candidate.load_per_instance_s
    if reference is None or load is None or not positive_finite(reference):
        return ""
    if not math.isfinite(load) or load_step(load, reference, policy.load_tolerance) <= 0:
        return ""
    return (
        f"the promoted variant carried {load:.3g} invocations/s per instance against the "
        f"reference's {reference:.3g} ({load / reference:.2f}x, above "
        f"{1.0 + policy.load_tolerance:g}x): latency rises with load, so it is not compared "
        "with the baseline's figures this interval; errors and acceptance still are (to "
        "measure the baseline at nearly full load, give the canary a first step of 5-10 %)"
    )


@dataclass(frozen=True)
class _Member:
    """One member test's evidence after this interval."""

    source: str  # e.g. "probe ttft", "CloudWatch average"
    log_lambda: float  # log of the member's e-value (mixture likelihood ratio)
    baseline: float  # what to show: seconds (or a ratio for counts)
    candidate: float
    samples: int
    summary: str  # one clause: the member's estimate and p


_RULE_LOCATION = (
    "location: per source, a sequential test of candidate/baseline latency above 1+{m} "
    "(Gaussian mSPRT on per-interval mean log latency; CloudWatch-only: a sequential "
    "t-test, or a calibrated mSPRT); {k} source(s) share alpha {a:.3g} (each rejects at "
    "{inv:.0f}); always valid"
)
_RULE_TAIL = (
    "tail: per source of samples, an exact rank test (drawn from the top like an urn) on "
    "which variant the pooled samples above p{q} come from, candidate aligned on the "
    "baseline's median and scaled by 1/(1+{m}); "
    "CloudWatch p99 like the Average; {k} source(s) share alpha {a:.3g} (each rejects at "
    "{inv:.0f}); always valid"
)
_RULE_ERRORS_CANARY = (
    "exact group-sequential test of the candidate's 5XX count (binomial by its share of "
    "invocations, given each interval's total), alpha {a:.3g} spent as "
    "alpha * (1 - exp(-t / {tau:g})) by interval t; valid at every interval"
)
_RULE_ERRORS = (
    "mSPRT on which variant the 5XX responses come from; reject when the mixture likelihood "
    "ratio reaches {inv:.0f} (alpha {a:.3g}, always valid)"
)


def _log_mixture(log_lr: Sequence[float]) -> float:
    if not log_lr:
        return 0.0
    values = np.asarray(log_lr)
    top = float(values.max())
    return top + math.log(float(np.exp(values - top).mean()))


def _binomial_log_lr(successes: int, trials: int, p0: float, odds: list[float]) -> list[float]:
    """Log likelihood ratio of each odds-ratio alternative against p0, for one interval."""
    out = []
    for psi in odds:
        p1 = psi * p0 / (psi * p0 + 1.0 - p0)
        out.append(
            successes * math.log(p1 / p0) + (trials - successes) * math.log((1 - p1) / (1 - p0))
        )
    return out


def _accumulate(previous: list[float], increment: list[float]) -> list[float]:
    # A different length is state from another grid (an operator upgrade mid-rollout):
    # starting over loses evidence, it never invents any.
    if len(previous) != len(increment):
        return increment
    return [a + b for a, b in zip(previous, increment, strict=True)]


def _p_value(log_lambda: float) -> float:
    return math.exp(-max(0.0, log_lambda))


@dataclass(frozen=True)
class _Usable:
    """What one variant's interval offers a judge, after screening."""

    samples: FloatArray | None
    ttft: FloatArray | None
    tpot: FloatArray | None
    mean: float | None
    p99: float | None
    refused: tuple[str, ...]


def _screen(variant: VariantInterval, side: str, policy: LivePolicy) -> _Usable:
    refused: list[str] = []

    def series(values: list[float], what: str, fewest: int) -> FloatArray | None:
        if len(values) < fewest:
            return None
        bad = bad_values(values)
        if bad.count:
            refused.append(
                bad.describe(f"{side} {what}") + ": a latency must be a finite time above zero; "
                "fix the client that measured it"
            )
            return None
        return as_array(values)

    def statistic(value: float | None, what: str) -> float | None:
        if value is None:
            return None
        if not positive_finite(value):
            refused.append(
                f"{side} CloudWatch {what} is {value!r}: not a latency; the interval's "
                "statistic is skipped (check the metric query and its period)"
            )
            return None
        return value

    probes = variant.probes
    return _Usable(
        samples=series(variant.latency_samples_s, "latency samples", 1),
        ttft=None if probes is None else series(probes.ttft_s, "probe ttft", policy.min_probes),
        tpot=None if probes is None else series(probes.tpot_s, "probe tpot", policy.min_probes),
        mean=statistic(variant.latency_mean_s, "Average"),
        p99=statistic(variant.latency_s, "p99"),
        refused=tuple(refused),
    )


def judge_interval(
    state: LiveState,
    observation: LiveObservation,
    policy: LivePolicy,
    now: datetime,
) -> LiveJudgement:
    """Fold one interval into the sequential tests; idempotent for an interval seen before."""
    if state.last_interval_end is not None and observation.interval_end <= state.last_interval_end:
        return LiveJudgement(state, [], state.decision)
    if state.decision is LiveDecision.ROLLBACK:
        check = Check(
            name="live_canary",
            kind=CheckKind.LIVE,
            verdict=Verdict.FAIL,
            rule="rollback already decided",
            reason="the candidate was already judged worse; roll back to the baseline",
        )
        return LiveJudgement(state, [check], state.decision)
    base, cand = observation.baseline, observation.candidate
    new = state.model_copy(deep=True)
    new.last_interval_end = observation.interval_end
    new.updated_at = now
    new.intervals += 1
    family_alpha = policy.alpha / 3.0
    b_use, c_use = _screen(base, "baseline", policy), _screen(cand, "candidate", policy)
    refused = [*b_use.refused, *c_use.refused]
    samples = b_use.samples is not None and c_use.samples is not None
    ttft = b_use.ttft is not None and c_use.ttft is not None
    tpot = b_use.tpot is not None and c_use.tpot is not None
    mean = b_use.mean is not None and c_use.mean is not None
    p99 = b_use.p99 is not None and c_use.p99 is not None
    acceptance = judge_acceptance(new, observation, policy)
    fewest = min(base.invocations, cand.invocations)
    if fewest < policy.min_invocations:
        # Too little traffic for CloudWatch's statistics; probes of their own (pinned,
        # fixed shape, min_probes each) are still judged.
        samples = mean = p99 = False
    if not (samples or ttft or tpot or mean or p99):
        quiet = _no_data(new, policy, fewest, refused)
        if acceptance is None:
            return quiet
        return LiveJudgement(quiet.state, [*quiet.checks, acceptance], quiet.decision)
    if unmatched := unmatched_load(cand, policy):
        return _unmatched(new, base, cand, policy, family_alpha, acceptance, unmatched)

    location: list[_Member] = []
    tail: list[_Member] = []
    if samples:
        assert b_use.samples is not None and c_use.samples is not None
        location.append(_samples_location(b_use.samples, c_use.samples, base, cand, new, policy))
        member, new.latency_log_lr = _urn_member(
            "samples", b_use.samples, c_use.samples, new.latency_log_lr, policy, observation
        )
        tail.append(member)
    for metric, on, b_val, c_val in (
        ("ttft", ttft, b_use.ttft, c_use.ttft),
        ("tpot", tpot, b_use.tpot, c_use.tpot),
    ):
        if not on or b_val is None or c_val is None:
            continue
        test = new.probe_ttft if metric == "ttft" else new.probe_tpot
        location.append(_probe_location(metric, b_val, c_val, test, policy))
        previous = new.probe_ttft_tail_log_lr if metric == "ttft" else new.probe_tpot_tail_log_lr
        member, log_lr = _urn_member(f"probe {metric}", b_val, c_val, previous, policy, observation)
        if metric == "ttft":
            new.probe_ttft_tail_log_lr = log_lr
        else:
            new.probe_tpot_tail_log_lr = log_lr
        tail.append(member)
    if not samples and (mean or p99):
        # The Average is far less noisy than a p99 of a few dozen requests: prefer it.
        b_stat = b_use.mean if mean else b_use.p99
        c_stat = c_use.mean if mean else c_use.p99
        assert b_stat is not None and c_stat is not None
        location.append(_primary_aggregate(b_stat, c_stat, base, cand, mean, new, policy))
        if mean and p99 and b_use.p99 is not None and c_use.p99 is not None:
            tail.append(_p99_aggregate(b_use.p99, c_use.p99, base, cand, new, policy))
    new.location_members = max(new.location_members, len(location))
    new.tail_members = max(new.tail_members, len(tail))

    checks: list[Check] = []
    rejected = False
    latency = _family_check(
        "live_latency", location, new.location_members, family_alpha, policy, new.latency_p_value
    )
    new.latency_p_value = latency.p_value if latency.p_value is not None else 1.0
    rejected |= latency.verdict is Verdict.FAIL
    checks.append(latency)
    if tail:
        tail_check = _family_check(
            "live_latency_tail", tail, new.tail_members, family_alpha, policy, new.tail_p_value
        )
        new.tail_p_value = tail_check.p_value if tail_check.p_value is not None else 1.0
        rejected |= tail_check.verdict is Verdict.FAIL
        checks.append(tail_check)
    errors = _errors_check(base, cand, new, policy, family_alpha)
    rejected |= errors.verdict is Verdict.FAIL
    checks.append(errors)
    if acceptance is not None:
        checks.append(acceptance)
    if refused:
        for check in checks:
            check.reason += f" (refused: {'; '.join(refused)})"

    _decide(new, policy, rejected)
    return LiveJudgement(new, checks, new.decision)


def _decide(state: LiveState, policy: LivePolicy, rejected: bool) -> None:
    """Count a rejected interval (at once to the limit where a sequential rejection rolls
    back) and set the decision."""
    if rejected:
        state.failures += policy.failure_limit if policy.rollback_on_rejection else 1
    state.decision = (
        LiveDecision.ROLLBACK if state.failures >= policy.failure_limit else LiveDecision.CONTINUE
    )


def judge_acceptance(
    state: LiveState, observation: LiveObservation, policy: LivePolicy
) -> Check | None:
    """Fold the interval's log lines into per-variant estimates; the candidate's check.

    A confident fall below the floor counts one failure when acceptance gates (each
    interval is a new sample, not an always-valid test: failureLimit such intervals roll
    back); without lines or floor nothing is said.
    """
    totals = {t.stream: (t.accepted, t.drafted) for t in state.stream_totals}
    found: dict[str, AcceptanceEstimate] = {}
    for side, variant in (("baseline", observation.baseline), ("candidate", observation.candidate)):
        if not variant.spec_lines:
            continue
        counts, totals = interval_counts(variant.spec_lines, totals)
        found[side] = estimate(
            counts, policy.speculative_tokens, policy.alpha, observation.interval_end
        )
    state.stream_totals = [
        StreamTotal(stream=name, accepted=a, drafted=d) for name, (a, d) in sorted(totals.items())
    ]
    if "baseline" in found:
        state.baseline_acceptance = found["baseline"]
    if "candidate" in found:
        state.candidate_acceptance = found["candidate"]
    if policy.acceptance_floor is None:
        return None
    candidate = found.get("candidate") or AcceptanceEstimate(
        drafted=0, accepted=0, lines=0, interval_end=observation.interval_end
    )
    check = acceptance_live_check(
        candidate,
        policy.acceptance_floor,
        policy.min_drafted_tokens,
        policy.acceptance_gates,
        policy.alpha,
    )
    if check.verdict is Verdict.FAIL:
        state.acceptance_below_floor += 1
        if policy.acceptance_gates:
            state.failures += 1
    return check


def _family_check(
    name: str,
    members: list[_Member],
    count: int,
    family_alpha: float,
    policy: LivePolicy,
    previous_p: float,
) -> Check:
    """Bonferroni inside the check: a member rejects at count / family_alpha."""
    count = max(1, count)
    threshold = math.log(count / family_alpha)
    lead = max(members, key=lambda m: m.log_lambda)
    failed = lead.log_lambda >= threshold
    # The check's always-valid p-value: the smallest member p, times the members.
    p_value = min(previous_p, min(1.0, count * _p_value(lead.log_lambda)))
    member_alpha = family_alpha / count
    rule = (_RULE_LOCATION if name == "live_latency" else _RULE_TAIL).format(
        m=policy.latency_margin,
        k=count,
        a=family_alpha,
        inv=1.0 / member_alpha,
        q=round(100 * policy.tail_quantile),
    )
    said = "; ".join(m.summary for m in members)
    return Check(
        name=name,
        kind=CheckKind.LIVE,
        verdict=Verdict.FAIL if failed else Verdict.PASS,
        baseline=lead.baseline * 1000.0,
        candidate=lead.candidate * 1000.0,
        threshold=family_alpha,
        unit="ms",
        threshold_unit="p-value",
        samples=lead.samples,
        p_value=p_value,
        rule=rule,
        source=lead.source,
        reason=(
            f"{said}; always-valid p {p_value:.3g}"
            + (f"; {lead.source}: candidate is slower, roll back" if failed else "")
        ),
    )


def _unmatched(
    state: LiveState,
    base: VariantInterval,
    cand: VariantInterval,
    policy: LivePolicy,
    family_alpha: float,
    acceptance: Check | None,
    why: str,
) -> LiveJudgement:
    """An interval whose latency is not comparable (unmatched_load): latency is undecided
    (never a Pass, never a failure), the errors and acceptance are judged as usual."""
    latency = Check(
        name="live_latency",
        kind=CheckKind.LIVE,
        verdict=Verdict.INCONCLUSIVE,
        threshold=policy.reference_load_s,
        threshold_unit="invocations/s per instance",
        samples=cand.invocations,
        rule=f"latency compared at most at {1.0 + policy.load_tolerance:g}x the reference's "
        "per-instance load",
        reason=why,
    )
    errors = _errors_check(base, cand, state, policy, family_alpha)
    _decide(state, policy, errors.verdict is Verdict.FAIL)
    checks = [latency, errors, *([acceptance] if acceptance is not None else [])]
    return LiveJudgement(state, checks, state.decision, latency_compared=False)


def _no_data(
    state: LiveState, policy: LivePolicy, fewest: int, refused: list[str]
) -> LiveJudgement:
    state.no_data_intervals += 1
    # onNoData: pass lets the rollout go on; the interval is still undecided, never a Pass.
    verdict = Verdict.FAIL if policy.on_no_data is NoDataPolicy.FAIL else Verdict.INCONCLUSIVE
    if verdict is Verdict.FAIL:
        state.failures += 1
    if state.failures >= policy.failure_limit:
        state.decision = LiveDecision.ROLLBACK
    elif policy.on_no_data is NoDataPolicy.PAUSE:
        state.decision = LiveDecision.HOLD
    else:
        state.decision = LiveDecision.CONTINUE
    why = (
        f"{'; '.join(refused)}; no usable latency"
        if refused
        else (
            f"{fewest} invocations on the quieter variant (need {policy.min_invocations}) "
            "or no latency"
        )
    )
    check = Check(
        name="live_canary",
        kind=CheckKind.LIVE,
        verdict=verdict,
        threshold=float(policy.min_invocations),
        threshold_unit="invocations",
        samples=fewest,
        rule=f"at least {policy.min_invocations} invocations and a latency per variant",
        reason=(
            f"no data: {why}; onNoData={policy.on_no_data.value}"
            f" ({state.failures}/{policy.failure_limit} failures)"
        ),
    )
    return LiveJudgement(state, [check], state.decision)


def _gaussian_member(
    test_score: float, test_information: float, policy: LivePolicy
) -> tuple[float, float]:
    """log of the location mixture likelihood ratio, and the rollout's slowdown estimate."""
    log_lambda = _log_mixture(
        [g * test_score - 0.5 * g * g * test_information for g in policy.location_grid]
    )
    shift = test_score / test_information if test_information > 0 else 0.0
    return log_lambda, math.exp(shift + math.log1p(policy.latency_margin))


def _pooled_variance(log_base: FloatArray, log_cand: FloatArray) -> float:
    n_b, n_c = log_base.size, log_cand.size
    spread = float(
        ((log_base - log_base.mean()) ** 2).sum() + ((log_cand - log_cand.mean()) ** 2).sum()
    )
    pooled = max(spread / max(1, n_b + n_c - 2), 1e-6)
    return pooled * (1.0 / n_b + 1.0 / n_c)


def _samples_location(
    base_s: FloatArray,
    cand_s: FloatArray,
    base: VariantInterval,
    cand: VariantInterval,
    state: LiveState,
    policy: LivePolicy,
) -> _Member:
    log_base, log_cand = np.log(base_s), np.log(cand_s)
    d, variance = _log_difference(log_base, log_cand, base.input_tokens, cand.input_tokens)
    state.location_score += (d - math.log1p(policy.latency_margin)) / variance
    state.location_information += 1.0 / variance
    log_lambda, ratio = _gaussian_member(state.location_score, state.location_information, policy)
    state.location_p_value = min(state.location_p_value, _p_value(log_lambda))
    b_geo, c_geo = float(np.exp(log_base.mean())), float(np.exp(log_cand.mean()))
    return _Member(
        source="per-request samples",
        log_lambda=log_lambda,
        baseline=b_geo,
        candidate=c_geo,
        samples=int(base_s.size + cand_s.size),
        summary=(
            f"samples: geometric-mean latency {1000 * c_geo:.1f} ms vs baseline "
            f"{1000 * b_geo:.1f} ms this interval, x{ratio:.3f} over the rollout "
            f"(p {state.location_p_value:.3g})"
        ),
    )


def _probe_location(
    metric: str, base_s: FloatArray, cand_s: FloatArray, test: GaussianTest, policy: LivePolicy
) -> _Member:
    log_base, log_cand = np.log(base_s), np.log(cand_s)
    d = float(log_cand.mean() - log_base.mean())
    # Fixed-shape probes vary little within an interval; what an interval shares (the
    # instance, the minute's load) is added so that it is not mistaken for the variant.
    # In the bake the minute is not shared with the reference: its measured spread.
    between = max(2.0 * policy.interval_noise**2, policy.interval_variance.get(metric, 0.0))
    variance = _pooled_variance(log_base, log_cand) + between
    test.score += (d - math.log1p(policy.latency_margin)) / variance
    test.information += 1.0 / variance
    test.intervals += 1
    log_lambda, ratio = _gaussian_member(test.score, test.information, policy)
    test.p_value = min(test.p_value, _p_value(log_lambda))
    b_geo, c_geo = float(np.exp(log_base.mean())), float(np.exp(log_cand.mean()))
    return _Member(
        source=f"probe {metric}",
        log_lambda=log_lambda,
        baseline=b_geo,
        candidate=c_geo,
        samples=int(base_s.size + cand_s.size),
        summary=(
            f"probe {metric} {1000 * c_geo:.1f} ms vs {1000 * b_geo:.1f} ms, x{ratio:.3f} "
            f"over {test.intervals} intervals (p {test.p_value:.3g})"
        ),
    )


def _tie_order(observation: LiveObservation, source: str, size: int) -> FloatArray:
    """A fixed pseudo-random key per sample: ties are broken without favouring a variant,
    and the same interval always breaks them the same way (the fold is idempotent)."""
    digest = hashlib.sha256(f"{observation.interval_end.isoformat()}|{source}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "big"))
    return rng.random(size)


def _urn_log_lr(
    base_s: FloatArray,
    cand_s: FloatArray,
    policy: LivePolicy,
    tie_key: FloatArray,
) -> tuple[list[float], int, int]:
    """Per (odds ratio, depth): log likelihood ratio of the labels of the pooled tail, drawn
    from the top. Exact when the two samples are exchangeable. Returns the log ratios, the
    tail size and how many of it are the candidate's."""
    pooled = np.concatenate([base_s, cand_s])
    labels = np.concatenate([np.zeros(base_s.size), np.ones(cand_s.size)])
    order = np.lexsort((tie_key, -pooled))
    cut = sample_quantile(np.sort(pooled), policy.tail_quantile)
    tail = int((pooled > cut).sum())
    drawn = labels[order][:tail]
    # Before draw j: candidate samples left and samples left.
    left_cand = cand_s.size - np.concatenate([[0.0], np.cumsum(drawn)[:-1]]) if tail else drawn
    left_all = pooled.size - np.arange(tail, dtype=np.float64)
    share = left_cand / left_all
    out: list[float] = []
    for psi in policy.odds_grid:
        tilted = psi * share / (psi * share + 1.0 - share)
        with np.errstate(divide="ignore", invalid="ignore"):
            factor = np.where(
                drawn == 1.0,
                np.log(np.where(share > 0, tilted / np.maximum(share, 1e-300), 1.0)),
                np.log(np.where(share < 1, (1.0 - tilted) / np.maximum(1.0 - share, 1e-300), 1.0)),
            )
        running = np.concatenate([[0.0], np.cumsum(factor)])
        # Each depth bets only on the top share of the tail: a regression of the slowest
        # few per cent reorders the very top and leaves the rest of the tail alone.
        out.extend(float(running[math.ceil(depth * tail)]) for depth in policy.tail_depths)
    return out, tail, int(drawn.sum())


# How far the tail test's alignment may scale a candidate up: an instance's noise (the
# benchmarks model 3-8 %), not a faster body (docs/analysis.md §2).
_ALIGN_UP = 1.05


def _urn_member(
    source: str,
    base_s: FloatArray,
    cand_s: FloatArray,
    previous: list[float],
    policy: LivePolicy,
    observation: LiveObservation,
) -> tuple[_Member, list[float]]:
    # An instance a few per cent slower this minute shifts every candidate sample, which
    # the tail of a narrow metric (TPOT) would read as a regression: the candidate is
    # aligned on the baseline's median first, so this test asks only whether its tail is
    # heavier than its body (the location test answers for the body). Aligning down is
    # unbounded (a slower body is the location test's); aligning up follows an instance's
    # noise only (_ALIGN_UP): a speculating candidate's body is both faster and wider (a
    # request whose drafts are rejected decodes at the plain pace), and scaled up onto
    # the baseline's median its tail read as a regression while it sat far below the
    # baseline's.
    aligned = min(float(np.median(base_s)) / float(np.median(cand_s)), _ALIGN_UP)
    increment, tail, from_candidate = _urn_log_lr(
        base_s,
        cand_s * aligned / (1.0 + policy.latency_margin),
        policy,
        _tie_order(observation, source, base_s.size + cand_s.size),
    )
    log_lr = _accumulate(previous, increment) if tail else previous
    log_lambda = _log_mixture(log_lr)
    q = round(policy.tail_quantile * 100)
    base_q = sample_quantile(np.sort(base_s), policy.tail_quantile)
    cand_q = sample_quantile(np.sort(cand_s), policy.tail_quantile)
    expected = tail * cand_s.size / (base_s.size + cand_s.size)
    member = _Member(
        source=source,
        log_lambda=log_lambda,
        baseline=base_q,
        candidate=cand_q,
        samples=int(base_s.size + cand_s.size),
        summary=(
            f"{source} p{q} {1000 * cand_q:.1f} ms vs {1000 * base_q:.1f} ms, "
            f"{from_candidate}/{tail} of the pooled tail from the candidate (expected "
            f"{expected:.1f}; p {_p_value(log_lambda):.3g})"
        ),
    )
    return member, log_lr


def _aggregate_update(
    test: CloudWatchTest,
    base_value: float,
    cand_value: float,
    base: VariantInterval,
    cand: VariantInterval,
    per_request_noise: float | None,
    policy: LivePolicy,
) -> tuple[float, float]:
    """Fold one interval's log(candidate/baseline statistic); the log e-value and x ratio."""
    d = math.log(cand_value / base_value) - math.log1p(policy.latency_margin)
    # Effective request count of a two-sample comparison: the harmonic combination.
    weight = base.invocations * cand.invocations / (base.invocations + cand.invocations)
    test.n += 1
    test.weight += weight
    test.weighted_sum += weight * d
    test.weighted_sum_sq += weight * d * d
    if per_request_noise is not None:
        # Calibrated: a Gaussian mSPRT with known variance, like the samples path.
        variance = per_request_noise / weight
        test.score += d / variance
        test.information += 1.0 / variance
        log_lambda = _log_mixture(
            [g * test.score - 0.5 * g * g * test.information for g in policy.location_grid]
        )
    else:
        log_lambda = _log_t_bayes_factor(
            test.n,
            test.weight,
            test.weighted_sum,
            test.weighted_sum_sq,
            policy.aggregate_effect_grid,
        )
    test.p_value = min(test.p_value, _p_value(log_lambda))
    ratio = math.exp(test.weighted_sum / test.weight + math.log1p(policy.latency_margin))
    return log_lambda, ratio


def _primary_aggregate(
    base_value: float,
    cand_value: float,
    base: VariantInterval,
    cand: VariantInterval,
    use_mean: bool,
    state: LiveState,
    policy: LivePolicy,
) -> _Member:
    noise = state.noise
    per_request = None if noise is None else (noise.average if use_mean else noise.p99)
    test = CloudWatchTest(
        n=state.aggregate_n,
        weight=state.aggregate_weight,
        weighted_sum=state.aggregate_weighted_sum,
        weighted_sum_sq=state.aggregate_weighted_sum_sq,
        score=state.aggregate_score,
        information=state.aggregate_information,
    )
    log_lambda, ratio = _aggregate_update(
        test, base_value, cand_value, base, cand, per_request, policy
    )
    state.aggregate_n, state.aggregate_weight = test.n, test.weight
    state.aggregate_weighted_sum = test.weighted_sum
    state.aggregate_weighted_sum_sq = test.weighted_sum_sq
    state.aggregate_score, state.aggregate_information = test.score, test.information
    stat = "average" if use_mean else "p99"
    how = "calibrated" if per_request is not None else "t-test"
    return _Member(
        source=f"CloudWatch {stat}",
        log_lambda=log_lambda,
        baseline=base_value,
        candidate=cand_value,
        samples=test.n,
        summary=(
            f"CloudWatch {stat} {1000 * cand_value:.1f} ms vs {1000 * base_value:.1f} ms, "
            f"x{ratio:.3f} on average over {test.n} intervals ({how}, p "
            f"{_p_value(log_lambda):.3g})"
        ),
    )


def _p99_aggregate(
    base_value: float,
    cand_value: float,
    base: VariantInterval,
    cand: VariantInterval,
    state: LiveState,
    policy: LivePolicy,
) -> _Member:
    # Always the t-test: a p99 of a few dozen requests does not scale as c / invocations,
    # so a calibration would understate its spread (benchmarks: false rollbacks).
    log_lambda, ratio = _aggregate_update(
        state.p99, base_value, cand_value, base, cand, None, policy
    )
    how = "t-test"
    return _Member(
        source="CloudWatch p99",
        log_lambda=log_lambda,
        baseline=base_value,
        candidate=cand_value,
        samples=state.p99.n,
        summary=(
            f"CloudWatch p99 {1000 * cand_value:.1f} ms vs {1000 * base_value:.1f} ms, "
            f"x{ratio:.3f} on average over {state.p99.n} intervals ({how}, p "
            f"{_p_value(log_lambda):.3g})"
        ),
    )


def _errors_check(
    base: VariantInterval,
    cand: VariantInterval,
    state: LiveState,
    policy: LivePolicy,
    test_alpha: float,
) -> Check:
    if policy.error_reference is not None:
        rule = _RULE_ERRORS.format(inv=1.0 / test_alpha, a=test_alpha)
    else:
        rule = _RULE_ERRORS_CANARY.format(a=test_alpha, tau=policy.error_spending_intervals)
    over = [
        f"{side} reports {v.errors_5xx} 5XX for {v.invocations} invocations"
        for side, v in (("baseline", base), ("candidate", cand))
        if v.errors_5xx > v.invocations
    ]
    if over:
        return Check(
            name="live_errors_5xx",
            kind=CheckKind.LIVE,
            verdict=Verdict.PASS if state.error_p_value > test_alpha else Verdict.FAIL,
            threshold=test_alpha,
            unit="ratio",
            threshold_unit="p-value",
            p_value=state.error_p_value,
            rule=rule,
            reason=(
                f"{'; '.join(over)}: counts from different periods or queries; this interval's "
                f"errors are not judged (p so far {state.error_p_value:.3g})"
            ),
        )
    if policy.error_reference is not None:
        return _errors_against_reference(cand, state, policy, test_alpha, rule)
    errors = base.errors_5xx + cand.errors_5xx
    if min(base.invocations, cand.invocations) == 0:
        # A side without invocations this interval (probes judged before CloudWatch has
        # published the period): no split to test the errors against.
        errors = 0
    share = cand.invocations / max(1, base.invocations + cand.invocations)
    state.error_looks = [
        *state.error_looks,
        ErrorLook(errors=errors, candidate=cand.errors_5xx if errors else 0, share=share),
    ]
    tau = policy.error_spending_intervals
    path = live_errors.walk(state.error_looks, test_alpha, tau)
    failed = path.rejected_at is not None
    if errors or failed:
        state.error_p_value = min(
            state.error_p_value,
            test_alpha if failed else 1.0,
            live_errors.p_value(state.error_looks, tau),
        )
    count = sum(look.candidate for look in state.error_looks)
    total = sum(look.errors for look in state.error_looks)
    where = (
        f"; the candidate's {count} of {total} 5XX so far reached the boundary at interval "
        f"{path.rejected_at}: it errors more, roll back"
        if failed
        else f"; the candidate's {count} of {total} 5XX so far"
        + ("" if path.boundary is None else f", rollback at {path.boundary} or more")
    )
    return Check(
        name="live_errors_5xx",
        kind=CheckKind.LIVE,
        verdict=Verdict.FAIL if failed else Verdict.PASS,
        baseline=base.errors_5xx / max(1, base.invocations),
        candidate=cand.errors_5xx / max(1, cand.invocations),
        threshold=test_alpha,
        unit="ratio",
        threshold_unit="p-value",
        samples=base.invocations + cand.invocations,
        p_value=state.error_p_value,
        rule=rule,
        reason=(
            f"5XX rate {100 * cand.errors_5xx / max(1, cand.invocations):.2f} % vs baseline "
            f"{100 * base.errors_5xx / max(1, base.invocations):.2f} %, p "
            f"{state.error_p_value:.3g}" + where
        ),
    )


def _errors_against_reference(
    cand: VariantInterval,
    state: LiveState,
    policy: LivePolicy,
    test_alpha: float,
    rule: str,
) -> Check:
    """The bake: the promoted variant's 5XX against a fixed reference rate.

    The reference (the baseline's 5XX over the canary) is one sample reused in every
    interval, so its own noise would repeat in each comparison; the candidate is tested
    instead against the reference rate's one-sided Clopper-Pearson upper bound at alpha,
    a one-sample mixture SPRT over the same odds ratios. The false-rollback bound is then
    alpha for the reference plus alpha for the test."""
    assert policy.error_reference is not None
    ref_errors, ref_total = policy.error_reference
    p0 = min(max(reference_upper_bound(ref_errors, ref_total, policy.alpha), 1e-9), 0.5)
    if cand.invocations:
        state.error_log_lr = _accumulate(
            state.error_log_lr,
            _binomial_log_lr(cand.errors_5xx, cand.invocations, p0, policy.error_odds_grid),
        )
    log_lambda = _log_mixture(state.error_log_lr)
    state.error_p_value = min(state.error_p_value, _p_value(log_lambda))
    failed = log_lambda >= math.log(1.0 / test_alpha)
    rate = cand.errors_5xx / max(1, cand.invocations)
    return Check(
        name="live_errors_5xx",
        kind=CheckKind.LIVE,
        verdict=Verdict.FAIL if failed else Verdict.PASS,
        baseline=ref_errors / max(1, ref_total),
        candidate=rate,
        threshold=test_alpha,
        unit="ratio",
        threshold_unit="p-value",
        samples=cand.invocations,
        p_value=state.error_p_value,
        rule=rule + "; against the baseline's canary rate at its upper confidence bound",
        reason=(
            f"5XX rate {100 * rate:.2f} % vs the baseline's {ref_errors}/{ref_total} over the "
            f"canary (upper bound {100 * p0:.2f} %), always-valid p {state.error_p_value:.3g}"
            + ("; the promoted variant errors more, roll back" if failed else "")
        ),
    )


@functools.lru_cache(maxsize=256)
def reference_upper_bound(errors: int, total: int, alpha: float) -> float:
    """One-sided (1 - alpha) Clopper-Pearson upper bound of a reference error rate."""
    if total <= 0:
        return 1.0
    return 1.0 - lower_bound(total - min(errors, total), total, alpha)


def _log_difference(
    log_base: FloatArray, log_cand: FloatArray, base_tokens: list[int], cand_tokens: list[int]
) -> tuple[float, float]:
    """Candidate-minus-baseline mean log latency and its variance for one interval.

    With prompt lengths for every sample, an ANCOVA (log latency on log prompt tokens
    plus a variant indicator) removes the spread that prompt length causes, which on
    mixed traffic is most of it. Without them, a two-sample difference of means. The
    variance is pooled over both variants: under the null they share one spread, and
    pooling keeps a 10-request canary from under-estimating it.
    """
    n_b, n_c = log_base.size, log_cand.size
    dof = n_b + n_c - 2
    if len(base_tokens) == n_b and len(cand_tokens) == n_c and dof > 1:
        tokens = np.log(np.maximum(as_array([*base_tokens, *cand_tokens]), 1.0))
        if float(tokens.std()) > 0:
            design = np.column_stack(
                [np.ones(n_b + n_c), tokens, np.r_[np.zeros(n_b), np.ones(n_c)]]
            )
            target = np.r_[log_base, log_cand]
            coef, _, rank, _ = np.linalg.lstsq(design, target, rcond=None)
            if rank == 3:
                residual = target - design @ coef
                sigma2 = max(float(residual @ residual) / (dof - 1), 1e-6)
                covariance = sigma2 * np.linalg.inv(design.T @ design)
                return float(coef[2]), float(covariance[2, 2])
    d = float(log_cand.mean() - log_base.mean())
    spread = float(
        ((log_base - log_base.mean()) ** 2).sum() + ((log_cand - log_cand.mean()) ** 2).sum()
    )
    pooled = max(spread / max(1, dof), 1e-6)
    return d, pooled * (1.0 / n_b + 1.0 / n_c)


def _log_t_bayes_factor(
    n: int, weight: float, weighted_sum: float, weighted_sum_sq: float, effects: list[float]
) -> float:
    """Log of the mixture sequential t-test Bayes factor for "mean > 0" after n intervals.

    Model: d_t ~ N(theta, sigma^2 / w_t) with known weights w_t (the interval's effective
    request count) and unknown sigma. Right-Haar prior 1/sigma and Zellner's
    theta ~ N(0, g sigma^2 / sum w) with g = effect^2 * sum w, i.e. N(0, effect^2) on the
    per-request standardised slowdown theta / sigma. The Bayes factor is then
    (1 + g)^(-1/2) (1 - g/(1+g) R^2)^(-n/2), R^2 = (sum w d)^2 / (sum w * sum w d^2)
    (Liang et al. 2008), averaged over `effects`. With the right-Haar prior it is an
    e-process for the scale-invariant filtration (Perez-Ortiz, Lardy, de Heide, Grunwald
    2022), so the spread need not be known or guessed.
    """
    if n < 2 or weight <= 0 or weighted_sum <= 0:
        return 0.0
    r2 = weighted_sum * weighted_sum / (weight * weighted_sum_sq) if weighted_sum_sq > 0 else 1.0
    r2 = min(r2, 1.0)
    terms = []
    for effect in effects:
        g = effect * effect * weight
        terms.append(-0.5 * math.log1p(g) - 0.5 * n * math.log1p(-g / (1.0 + g) * r2))
    return _log_mixture(terms)
