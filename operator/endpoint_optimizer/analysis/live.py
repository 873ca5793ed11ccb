"""The live judge for canary steps: sequential tests checked every interval.

State lives in the resource's status between wake-ups; `judge_interval` is a pure
function from (state, one interval's observation, policy, now) to the next state,
the interval's checks and a decision. The rule (docs/analysis.md §2) is a mixture
sequential probability ratio test (mSPRT): the running likelihood ratio Λ of
"candidate worse" against "not worse" is a non-negative supermartingale under the
null, so by Ville's inequality P(Λ ever reaches 1/α) <= α however often it is
checked. Three tests share α (Bonferroni), so one rollout's false-rollback rate
from the tests is at most α:

- location: Gaussian mSPRT on each interval's difference of mean log latency
  (candidate - baseline), with the interval's pooled variance, or an ANCOVA on log
  prompt tokens when every sample carries them; approximate (normal means);
- tail: pool baseline samples with candidate samples divided by (1 + margin), take
  the pooled `tail_quantile`, count how many of the K samples above it are the
  candidate's. Under the null that count is hypergeometric, dominated in convex
  order by Binomial(K, n_c/N), so a binomial likelihood ratio on it stays a
  supermartingale: exact and distribution-free;
- errors: the same exact test on which variant each 5XX came from.

With CloudWatch aggregates only (no samples), latency is a sequential t-test on the
per-interval log-ratio of the statistic: a Bayes factor with a right-Haar prior on the
unknown spread, an e-process without guessing the variance (valid for normal
log-ratios; the p99 of a few requests is not quite normal, see the benchmark).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from pydantic import Field

from endpoint_optimizer.analysis.bootstrap import FloatArray, as_array, sample_quantile
from endpoint_optimizer.api import NoDataPolicy
from endpoint_optimizer.api.camel import CamelModel
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.api.live import LiveDecision, LiveState


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
    input_tokens: list[int] = Field(
        default_factory=list,
        description="Prompt tokens of each latency sample (same order); optional covariate.",
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
    # Location test: log-scale slowdowns (beyond the margin) the mixture spreads its bet over.
    location_grid: list[float] = Field(default_factory=lambda: [0.03, 0.06, 0.12, 0.25, 0.5])
    # Aggregate-only latency: per-request standardised slowdowns (log-ratio / per-request
    # spread) the sequential t-test mixes over.
    aggregate_effect_grid: list[float] = Field(
        default_factory=lambda: [0.1, 0.2, 0.4, 0.8, 1.6, 3.2]
    )
    rollback_on_rejection: bool = Field(
        default=True,
        description="A sequential rejection is already error-controlled: roll back at once.",
    )


@dataclass(frozen=True)
class LiveJudgement:
    state: LiveState
    checks: list[Check]
    decision: LiveDecision


_RULE_LOCATION = (
    "Gaussian mSPRT on each interval's mean log-latency difference (candidate - baseline) "
    "minus log(1+{m}), variance from the interval's pooled samples; reject when the "
    "mixture likelihood ratio reaches {inv:.0f} (alpha {a:.3g}, always valid)"
)
_RULE_TAIL = (
    "mSPRT on which variant the pooled tail (>p{q}) samples come from, candidate scaled by "
    "1/(1+{m}); reject when the mixture likelihood ratio reaches {inv:.0f} (alpha {a:.3g}, "
    "always valid)"
)
_RULE_ERRORS = (
    "mSPRT on which variant the 5XX responses come from; reject when the mixture likelihood "
    "ratio reaches {inv:.0f} (alpha {a:.3g}, always valid)"
)
_RULE_CALIBRATED = (
    "Gaussian mSPRT on per-interval log(candidate/baseline {stat}) minus log(1+{m}), "
    "variance from {k} pre-rollout baseline intervals; reject at {inv:.0f} (alpha {a:.3g}, "
    "always valid if the calibration holds)"
)
_RULE_AGGREGATE = (
    "sequential t-test (Bayes factor, right-Haar prior on the spread) on per-interval "
    "log(candidate/baseline) minus log(1+{m}); needs 2 intervals; reject at {inv:.0f} "
    "(alpha {a:.3g}, always valid for normal log-ratios)"
)


def _log_mixture(log_lr: list[float]) -> float:
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
    if not previous:
        return increment
    return [a + b for a, b in zip(previous, increment, strict=True)]


def _has_latency(variant: VariantInterval) -> bool:
    return (
        bool(variant.latency_samples_s)
        or variant.latency_s is not None
        or variant.latency_mean_s is not None
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
    # Bonferroni over the three tests (location, tail, errors) keeps the union at alpha.
    # A rollout is expected to feed one latency path throughout (samples or CloudWatch);
    # switching paths mid-rollout runs a fourth test and the bound becomes 4/3 alpha.
    test_alpha = policy.alpha / 3.0
    threshold = math.log(1.0 / test_alpha)

    fewest = min(base.invocations, cand.invocations)
    if fewest < policy.min_invocations or not (_has_latency(base) and _has_latency(cand)):
        return _no_data(new, policy, fewest)

    checks: list[Check] = []
    rejected = False

    # Latency.
    if base.latency_samples_s and cand.latency_samples_s:
        location = _location_test(base, cand, new, policy, threshold)
        rejected |= location.verdict is Verdict.FAIL
        checks.append(location)
        check, log_lr = _tail_test(base, cand, new.latency_log_lr, policy, threshold)
        new.latency_log_lr = log_lr
    else:
        check = _aggregate_test(base, cand, new, policy, threshold)
    new.latency_p_value = min(new.latency_p_value, check.p_value or 1.0)
    check.p_value = new.latency_p_value
    rejected |= check.verdict is Verdict.FAIL
    checks.append(check)

    # 5XX errors.
    errors = base.errors_5xx + cand.errors_5xx
    p0 = cand.invocations / (base.invocations + cand.invocations)
    if errors:
        new.error_log_lr = _accumulate(
            new.error_log_lr, _binomial_log_lr(cand.errors_5xx, errors, p0, policy.odds_grid)
        )
    log_lambda = _log_mixture(new.error_log_lr)
    new.error_p_value = min(new.error_p_value, math.exp(-max(0.0, log_lambda)))
    error_fail = log_lambda >= threshold
    rejected |= error_fail
    checks.append(
        Check(
            name="live_errors_5xx",
            kind=CheckKind.LIVE,
            verdict=Verdict.FAIL if error_fail else Verdict.PASS,
            baseline=base.errors_5xx / base.invocations,
            candidate=cand.errors_5xx / cand.invocations,
            threshold=test_alpha,
            unit="ratio",
            threshold_unit="p-value",
            samples=base.invocations + cand.invocations,
            p_value=new.error_p_value,
            rule=_RULE_ERRORS.format(inv=1.0 / test_alpha, a=test_alpha),
            reason=(
                f"5XX rate {100 * cand.errors_5xx / cand.invocations:.2f} % vs baseline "
                f"{100 * base.errors_5xx / base.invocations:.2f} %, always-valid p "
                f"{new.error_p_value:.3g}"
                + ("; candidate errors more, roll back" if error_fail else "")
            ),
        )
    )

    if rejected:
        new.failures += policy.failure_limit if policy.rollback_on_rejection else 1
    new.decision = (
        LiveDecision.ROLLBACK if new.failures >= policy.failure_limit else LiveDecision.CONTINUE
    )
    return LiveJudgement(new, checks, new.decision)


def _no_data(state: LiveState, policy: LivePolicy, fewest: int) -> LiveJudgement:
    state.no_data_intervals += 1
    verdict = {
        NoDataPolicy.PAUSE: Verdict.INCONCLUSIVE,
        NoDataPolicy.FAIL: Verdict.FAIL,
        NoDataPolicy.PASS: Verdict.PASS,
    }[policy.on_no_data]
    if verdict is Verdict.FAIL:
        state.failures += 1
    if state.failures >= policy.failure_limit:
        state.decision = LiveDecision.ROLLBACK
    elif policy.on_no_data is NoDataPolicy.PAUSE:
        state.decision = LiveDecision.HOLD
    else:
        state.decision = LiveDecision.CONTINUE
    check = Check(
        name="live_canary",
        kind=CheckKind.LIVE,
        verdict=verdict,
        threshold=float(policy.min_invocations),
        threshold_unit="invocations",
        samples=fewest,
        rule=f"at least {policy.min_invocations} invocations and a latency per variant",
        reason=(
            f"no data: {fewest} invocations on the quieter variant (need "
            f"{policy.min_invocations}) or no latency; onNoData={policy.on_no_data.value}"
            f" ({state.failures}/{policy.failure_limit} failures)"
        ),
    )
    return LiveJudgement(state, [check], state.decision)


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


def _location_test(
    base: VariantInterval,
    cand: VariantInterval,
    state: LiveState,
    policy: LivePolicy,
    threshold: float,
) -> Check:
    log_base = np.log(np.maximum(as_array(base.latency_samples_s), 1e-9))
    log_cand = np.log(np.maximum(as_array(cand.latency_samples_s), 1e-9))
    n_b, n_c = log_base.size, log_cand.size
    d, variance = _log_difference(log_base, log_cand, base.input_tokens, cand.input_tokens)
    state.location_score += (d - math.log1p(policy.latency_margin)) / variance
    state.location_information += 1.0 / variance
    score, info = state.location_score, state.location_information
    log_lambda = _log_mixture([g * score - 0.5 * g * g * info for g in policy.location_grid])
    state.location_p_value = min(state.location_p_value, math.exp(-max(0.0, log_lambda)))
    failed = log_lambda >= threshold
    alpha = math.exp(-threshold)
    ratio = math.exp(score / info + math.log1p(policy.latency_margin)) if info else 1.0
    return Check(
        name="live_latency",
        kind=CheckKind.LIVE,
        verdict=Verdict.FAIL if failed else Verdict.PASS,
        baseline=float(np.exp(log_base.mean())) * 1000.0,
        candidate=float(np.exp(log_cand.mean())) * 1000.0,
        threshold=alpha,
        unit="ms",
        threshold_unit="p-value",
        samples=n_b + n_c,
        p_value=state.location_p_value,
        rule=_RULE_LOCATION.format(m=policy.latency_margin, inv=1 / alpha, a=alpha),
        reason=(
            f"geometric-mean latency {1000 * math.exp(log_cand.mean()):.1f} ms vs baseline "
            f"{1000 * math.exp(log_base.mean()):.1f} ms this interval; x{ratio:.3f} over the "
            f"rollout, always-valid p {state.location_p_value:.3g}"
            + ("; candidate is slower, roll back" if failed else "")
        ),
    )


def _tail_test(
    base: VariantInterval,
    cand: VariantInterval,
    previous: list[float],
    policy: LivePolicy,
    threshold: float,
) -> tuple[Check, list[float]]:
    base_s = as_array(base.latency_samples_s)
    cand_scaled = as_array(cand.latency_samples_s) / (1.0 + policy.latency_margin)
    pooled = np.sort(np.concatenate([base_s, cand_scaled]))
    cut = sample_quantile(pooled, policy.tail_quantile)
    tail = int((pooled > cut).sum())
    cand_tail = int((cand_scaled > cut).sum())
    p0 = cand_scaled.size / pooled.size
    log_lr = previous
    if tail:
        log_lr = _accumulate(previous, _binomial_log_lr(cand_tail, tail, p0, policy.odds_grid))
    log_lambda = _log_mixture(log_lr)
    failed = log_lambda >= threshold
    q = round(policy.tail_quantile * 100)
    base_q = sample_quantile(np.sort(base_s), policy.tail_quantile)
    cand_q = sample_quantile(np.sort(as_array(cand.latency_samples_s)), policy.tail_quantile)
    test_alpha = math.exp(-threshold)
    p_value = math.exp(-max(0.0, log_lambda))
    check = Check(
        name="live_latency_tail",
        kind=CheckKind.LIVE,
        verdict=Verdict.FAIL if failed else Verdict.PASS,
        baseline=base_q * 1000.0,
        candidate=cand_q * 1000.0,
        threshold=test_alpha,
        unit="ms",
        threshold_unit="p-value",
        samples=int(pooled.size),
        p_value=p_value,
        rule=_RULE_TAIL.format(q=q, m=policy.latency_margin, inv=1 / test_alpha, a=test_alpha),
        reason=(
            f"p{q} latency {1000 * cand_q:.1f} ms vs baseline {1000 * base_q:.1f} ms; "
            f"{cand_tail}/{tail} tail samples from the candidate (expected "
            f"{tail * p0:.1f})" + ("; candidate is slower, roll back" if failed else "")
        ),
    )
    return check, log_lr


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


def _statistic(variant: VariantInterval, use_mean: bool) -> float:
    if use_mean and variant.latency_mean_s is not None:
        return variant.latency_mean_s
    if variant.latency_s is not None:
        return variant.latency_s
    # Samples on one side only: the other side's statistic is compared with their mean.
    return float(np.mean(variant.latency_samples_s)) if variant.latency_samples_s else 0.0


def _aggregate_test(
    base: VariantInterval,
    cand: VariantInterval,
    state: LiveState,
    policy: LivePolicy,
    threshold: float,
) -> Check:
    # The mean is far less noisy than a p99 of a few dozen requests: prefer it.
    use_mean = base.latency_mean_s is not None and cand.latency_mean_s is not None
    base_value = _statistic(base, use_mean)
    cand_value = _statistic(cand, use_mean)
    d = math.log(max(cand_value, 1e-9) / max(base_value, 1e-9)) - math.log1p(policy.latency_margin)
    # Effective request count of a two-sample comparison: the harmonic combination.
    weight = base.invocations * cand.invocations / (base.invocations + cand.invocations)
    state.aggregate_n += 1
    state.aggregate_weight += weight
    state.aggregate_weighted_sum += weight * d
    state.aggregate_weighted_sum_sq += weight * d * d
    n = state.aggregate_n
    noise = state.noise
    per_request = None if noise is None else (noise.average if use_mean else noise.p99)
    if per_request is not None:
        # Calibrated: a Gaussian mSPRT with known variance, like the samples path.
        variance = per_request / weight
        state.aggregate_score += d / variance
        state.aggregate_information += 1.0 / variance
        log_lambda = _log_mixture(
            [
                g * state.aggregate_score - 0.5 * g * g * state.aggregate_information
                for g in policy.location_grid
            ]
        )
        rule = _RULE_CALIBRATED
    else:
        log_lambda = _log_t_bayes_factor(
            n,
            state.aggregate_weight,
            state.aggregate_weighted_sum,
            state.aggregate_weighted_sum_sq,
            policy.aggregate_effect_grid,
        )
        rule = _RULE_AGGREGATE
    failed = log_lambda >= threshold
    alpha = math.exp(-threshold)
    ratio = math.exp(
        state.aggregate_weighted_sum / state.aggregate_weight + math.log1p(policy.latency_margin)
    )
    return Check(
        name="live_latency",
        kind=CheckKind.LIVE,
        verdict=Verdict.FAIL if failed else Verdict.PASS,
        baseline=base_value * 1000.0,
        candidate=cand_value * 1000.0,
        threshold=alpha,
        unit="ms",
        threshold_unit="p-value",
        samples=n,
        p_value=math.exp(-max(0.0, log_lambda)),
        rule=rule.format(
            m=policy.latency_margin,
            inv=1 / alpha,
            a=alpha,
            stat="average" if use_mean else "p99",
            k=0 if noise is None else noise.intervals,
        ),
        reason=(
            f"latency {1000 * cand_value:.1f} ms vs baseline {1000 * base_value:.1f} ms; "
            f"x{ratio:.3f} on average over {n} intervals"
            + ("; candidate is slower, roll back" if failed else "")
        ),
    )
