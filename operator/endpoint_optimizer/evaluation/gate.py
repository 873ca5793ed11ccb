"""The eval gate: paired comparison of candidate and baseline scores on the same items.

Rule (docs/analysis.md §3): non-inferiority on the per-item difference
d_i = candidate_i - baseline_i. Pass when the one-sided lower confidence bound of
mean(d) is at least -maxAbsoluteDrop, Fail when the upper bound is below it,
Inconclusive otherwise (too few items to tell). Binary scorers use Tango's score
interval for a difference of paired proportions (Tango 1998), with a half-count
continuity correction: at a true drop exactly equal to the margin it passes at most
1 - confidence of candidates (measured in benchmarks/bench_judges.py over 10,000-trial
cells), where the Wald form it replaces passed up to 6.5 % at a documented 5 %. McNemar's
exact p-value is reported. Continuous scorers (ROUGE-L) use a paired bootstrap of mean(d).
Refusals: Fail only when the candidate's refusal rate rises by more than
maxRefusalRateIncrease with confidence; the reason states the interval, so
"unchanged" always comes with its resolution. Scores that are NaN, infinite or outside
[0, 1] are refused (Inconclusive), never judged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from endpoint_optimizer.analysis.bootstrap import as_array, bootstrap_means
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.evaluation.scorers import BINARY_SCORERS

DEFAULT_MAX_ABSOLUTE_DROP = 0.01


@dataclass(frozen=True)
class PairedDifference:
    """mean(candidate - baseline) over paired items, with one-sided bounds."""

    items: int
    baseline: float
    candidate: float
    difference: float
    low: float
    high: float
    # Binary scores only: baseline-right/candidate-wrong and the reverse.
    baseline_only: int = 0
    candidate_only: int = 0
    p_value: float | None = None


def mcnemar_exact_p(baseline_only: int, candidate_only: int) -> float:
    """Two-sided exact McNemar p-value: binomial test of the discordant split at 1/2."""
    m = baseline_only + candidate_only
    if m == 0:
        return 1.0
    k = min(baseline_only, candidate_only)
    log_half = m * math.log(0.5)
    tail = sum(
        math.exp(math.lgamma(m + 1) - math.lgamma(i + 1) - math.lgamma(m - i + 1) + log_half)
        for i in range(k + 1)
    )
    return min(1.0, 2.0 * tail)


def _check_pairs(baseline: Sequence[float], candidate: Sequence[float]) -> None:
    if len(baseline) != len(candidate):
        raise ValueError(
            f"eval scores are not paired: {len(baseline)} baseline vs {len(candidate)} "
            "candidate; score both variants on the same items"
        )


# Half an item: the continuity correction that keeps Tango's one-sided error at the margin
# at or below its nominal level for every discordance and size measured (§5).
TANGO_CORRECTION = 0.5


def _tango_statistic(
    baseline_only: int, candidate_only: int, n: int, delta: float, correction: float
) -> float:
    """Tango's score statistic for H0: p(candidate) - p(baseline) = delta (paired).

    The restricted maximum-likelihood estimate of the baseline-only cell under H0 is the
    root of a quadratic (Tango 1998, eq. 4); the statistic is the standardised distance of
    the observed discordant difference from n * delta, shrunk towards zero by `correction`.
    """
    b, c = float(baseline_only), float(candidate_only)
    a = 2.0 * n
    slope = -b - c + (2.0 * n - c + b) * delta
    constant = -b * delta * (1.0 - delta)
    p_b = (math.sqrt(max(slope * slope - 4.0 * a * constant, 0.0)) - slope) / (2.0 * a)
    variance = n * (2.0 * p_b + delta * (1.0 - delta))
    excess = c - b - n * delta
    excess = math.copysign(max(abs(excess) - correction, 0.0), excess)
    if variance <= 0:
        return math.copysign(math.inf, excess) if excess else 0.0
    return excess / math.sqrt(variance)


def tango_bound(
    baseline_only: int,
    candidate_only: int,
    n: int,
    confidence: float,
    lower: bool,
    correction: float = TANGO_CORRECTION,
) -> float:
    """One-sided `confidence` bound of p(candidate) - p(baseline) from a paired 2x2 table.

    The statistic decreases in delta, so the bound is found by bisection on [-1, 1]: the
    lower bound is where it equals z, the upper where it equals -z.
    """
    z = NormalDist().inv_cdf(confidence)
    target = z if lower else -z
    low, high = -1.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2.0
        if _tango_statistic(baseline_only, candidate_only, n, mid, correction) > target:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0


def paired_difference(
    baseline: Sequence[float],
    candidate: Sequence[float],
    binary: bool,
    confidence: float = 0.95,
    resamples: int = 4000,
    seed: int = 0,
) -> PairedDifference:
    """Bounds of mean(candidate - baseline), each one-sided at `confidence`."""
    _check_pairs(baseline, candidate)
    n = len(baseline)
    if n == 0:
        return PairedDifference(0, math.nan, math.nan, math.nan, -math.inf, math.inf)
    base, cand = as_array(baseline), as_array(candidate)
    diff = cand - base
    mean = float(diff.mean())
    if binary:
        b = int(((base >= 0.5) & (cand < 0.5)).sum())
        c = int(((base < 0.5) & (cand >= 0.5)).sum())
        return PairedDifference(
            items=n,
            baseline=float(base.mean()),
            candidate=float(cand.mean()),
            difference=mean,
            low=tango_bound(b, c, n, confidence, lower=True),
            high=tango_bound(b, c, n, confidence, lower=False),
            baseline_only=b,
            candidate_only=c,
            p_value=mcnemar_exact_p(b, c),
        )
    rng = np.random.default_rng(seed)
    star = bootstrap_means(diff, resamples, rng)
    low, high = np.quantile(star, [1.0 - confidence, confidence], method="inverted_cdf")
    return PairedDifference(
        items=n,
        baseline=float(base.mean()),
        candidate=float(cand.mean()),
        difference=mean,
        low=float(low),
        high=float(high),
    )


def unusable_scores(baseline: Sequence[float], candidate: Sequence[float]) -> str | None:
    """Why these paired scores cannot be judged (NaN, infinite or outside [0, 1]); else None."""
    for side, scores in (("baseline", baseline), ("candidate", candidate)):
        data = np.asarray(scores, dtype=np.float64)
        broken = int((~np.isfinite(data)).sum())
        outside = int((np.isfinite(data) & ((data < 0.0) | (data > 1.0))).sum())
        if broken or outside:
            kinds = ", ".join(
                text
                for count, text in (
                    (broken, f"{broken} NaN or infinite"),
                    (outside, f"{outside} outside [0, 1]"),
                )
                if count
            )
            return (
                f"{side} scores: {kinds} of {data.size}; the scorer failed on those items: "
                "fix the scorer or the items (evaluation.dataset) before judging"
            )
    return None


def _is_binary(metric: str, *scores: Sequence[float]) -> bool:
    """McNemar applies when every score is 0 or 1 (an item's own scorer may be ROUGE-L)."""
    return metric in BINARY_SCORERS and all(x in (0.0, 1.0) for group in scores for x in group)


def _rule(metric: str, binary: bool, confidence: float) -> str:
    method = (
        "Tango score interval for paired proportions, half-count continuity correction "
        "(McNemar exact p reported)"
        if binary
        else "paired bootstrap of the mean difference"
    )
    return f"{metric}: one-sided {100 * confidence:.3g} % {method}, non-inferiority"


def eval_check(
    baseline_scores: Sequence[float],
    candidate_scores: Sequence[float],
    metric: str,
    max_absolute_drop: float = DEFAULT_MAX_ABSOLUTE_DROP,
    confidence: float = 0.95,
    min_items: int = 30,
    seed: int = 0,
) -> Check:
    """The candidate's score must not drop by more than `max_absolute_drop` (a fraction)."""
    if max_absolute_drop < 0:
        raise ValueError("evaluation.maxAbsoluteDrop: must be >= 0, e.g. 0.01 for one point")
    binary = _is_binary(metric, baseline_scores, candidate_scores)
    rule = _rule(metric, binary, confidence)
    name = f"eval_{metric}"
    _check_pairs(baseline_scores, candidate_scores)
    n = len(baseline_scores)
    refused = unusable_scores(baseline_scores, candidate_scores)
    if refused is None and n < min_items:
        refused = f"{n} paired items, {min_items} needed; add items to the dataset"
    if refused is not None:
        return Check(
            name=name,
            kind=CheckKind.EVAL,
            verdict=Verdict.INCONCLUSIVE,
            threshold=-max_absolute_drop,
            unit="score",
            threshold_unit="score difference",
            samples=n,
            rule=rule,
            reason=f"{name}: {refused}",
        )
    result = paired_difference(baseline_scores, candidate_scores, binary, confidence, seed=seed)
    ci = (
        f"{100 * result.difference:+.2f} points (CI {100 * result.low:+.2f} to "
        f"{100 * result.high:+.2f}) over {n} items"
    )
    if result.low >= -max_absolute_drop:
        verdict = Verdict.PASS
        reason = f"{name} within {100 * max_absolute_drop:.1f} points of baseline: {ci}"
    elif result.high < -max_absolute_drop:
        verdict = Verdict.FAIL
        reason = f"{name} dropped more than {100 * max_absolute_drop:.1f} points: {ci}"
    else:
        verdict = Verdict.INCONCLUSIVE
        needed = _items_needed(result, max_absolute_drop)
        reason = (
            f"{name} undecided: {ci} straddles -{100 * max_absolute_drop:.1f} points; "
            f"about {needed} items would resolve it"
        )
    return _paired_check(
        name, CheckKind.EVAL, verdict, result, -max_absolute_drop, "score difference", rule, reason
    )


def _paired_check(
    name: str,
    kind: CheckKind,
    verdict: Verdict,
    result: PairedDifference,
    threshold: float,
    threshold_unit: str,
    rule: str,
    reason: str,
    unit: str = "score",
) -> Check:
    """A check that carries a paired comparison: both means, its interval and p-value."""
    return Check(
        name=name,
        kind=kind,
        verdict=verdict,
        baseline=result.baseline,
        candidate=result.candidate,
        threshold=threshold,
        unit=unit,
        threshold_unit=threshold_unit,
        interval_low=result.low,
        interval_high=result.high,
        samples=result.items,
        p_value=result.p_value,
        rule=rule,
        reason=reason,
    )


def _items_needed(result: PairedDifference, margin: float) -> int:
    """Items for the lower bound's half-width to fit between the estimate and -margin."""
    half = max(result.difference - result.low, 1e-12)
    room = result.difference + margin
    if room <= 0:
        return result.items
    return math.ceil(result.items * (half / room) ** 2)


def refusal_check(
    baseline_refusals: Sequence[bool],
    candidate_refusals: Sequence[bool],
    max_increase: float = 0.0,
    confidence: float = 0.95,
) -> Check:
    """Fail when the candidate refuses more than `max_increase` (fraction) more often."""
    _check_pairs(baseline_refusals, candidate_refusals)
    base = [float(x) for x in baseline_refusals]
    cand = [float(x) for x in candidate_refusals]
    n = len(base)
    rule = (
        f"paired refusal-rate increase, one-sided {100 * confidence:.3g} % Tango score bound; "
        f"fail when the lower bound exceeds {100 * max_increase:.1f} points"
    )
    if n == 0:
        return Check(
            name="refusal_rate",
            kind=CheckKind.REFUSAL,
            verdict=Verdict.INCONCLUSIVE,
            threshold=max_increase,
            rule=rule,
            reason="refusal_rate: no paired answers to compare",
        )
    result = paired_difference(base, cand, binary=True, confidence=confidence)
    failed = result.low > max_increase
    ci = (
        f"{100 * result.difference:+.2f} points (CI {100 * result.low:+.2f} to "
        f"{100 * result.high:+.2f}) over {n} items"
    )
    reason = (
        f"refusal rate rose beyond {100 * max_increase:.1f} points: {ci}"
        if failed
        else f"refusal rate not shown to rise beyond {100 * max_increase:.1f} points: {ci}"
    )
    return _paired_check(
        "refusal_rate",
        CheckKind.REFUSAL,
        Verdict.FAIL if failed else Verdict.PASS,
        result,
        max_increase,
        "rate difference",
        rule,
        reason,
        unit="ratio",
    )
