"""The shadow strategy's objective check: a Student-t bound on the live judge's intervals.

A shadow variant cannot be invoked with TargetVariant, so its objective is judged on the
per-interval CloudWatch log-ratios the live judge folds into LiveState.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.api.live import LiveState


def student_t_quantile(p: float, df: int) -> float:
    """Student's t quantile without scipy (a test-only dependency; the operator's image has
    none): exact for 1 and 2 degrees of freedom, the Cornish-Fisher expansion in 1/df
    (Abramowitz & Stegun 26.7.5) above: within 0.05 % of the exact value at the 95 % used
    here, 0.4 % at 99 % with 3 degrees of freedom."""
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    v = float(df)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4)
    )


def shadow_objective_check(
    live: LiveState, metric: str, latency: bool, min_improvement: float, latency_margin: float
) -> Check:
    """The objective judged on what a shadow has: per-interval CloudWatch ModelLatency.

    A shadow cannot be invoked with TargetVariant, so there are no per-request samples of
    it; the live judge's intervals carry log(candidate/baseline latency), weighted by the
    invocations behind them (variance of an interval taken as c / weight, c estimated from
    the intervals). The one-sided Student-t bound on the weighted mean is the rule. The
    shadow answers copies of the same requests, so for throughput the per-request token
    rate ratio (baseline latency / candidate latency) stands in for tokens per second.
    """
    margin = min_improvement
    confidence = 0.95
    target = 1.0 - margin if latency else 1.0 + margin
    name = f"objective_{metric}_shadow"
    source = "CloudWatch ModelLatency per variant (shadow copies of production requests)"
    rule = (
        f"one-sided {100 * confidence:.3g} % Student-t bound of the invocation-weighted mean "
        "per-interval log(candidate/baseline ModelLatency) "
        + (
            f"must give candidate/baseline <= {target:.3f}"
            if latency
            else f"must give baseline/candidate (per-request token rate) >= {target:.3f}"
        )
    )
    n = live.aggregate_n
    weight = live.aggregate_weight
    if n < 2 or weight <= 0:
        return Check(
            name=name,
            kind=CheckKind.OBJECTIVE,
            verdict=Verdict.INCONCLUSIVE,
            threshold=target,
            threshold_unit="ratio",
            samples=n,
            rule=rule,
            source=source,
            reason=(
                f"{name}: {n} judged shadow intervals, 2 needed; lengthen rollout.steps[].pause "
                "or lower rollout.analysis.minInvocations"
            ),
        )
    # The live judge stores d - log(1 + latencyMargin); the objective wants d itself.
    shift = math.log1p(latency_margin)
    mean = live.aggregate_weighted_sum / weight + shift
    spread = max(0.0, live.aggregate_weighted_sum_sq / weight - (mean - shift) ** 2)
    # Weighted spread of the intervals / (n - 1): the weighted mean's variance when an
    # interval's variance is c / weight.
    stderr = math.sqrt(spread / (n - 1))
    t = student_t_quantile(confidence, n - 1)
    low, high = math.exp(mean - t * stderr), math.exp(mean + t * stderr)
    if latency:
        ratio, bound, passed = math.exp(mean), high, high <= target
        said = f"candidate/baseline latency x{ratio:.3f}, upper bound x{bound:.3f}"
        interval = (low, high)
    else:
        ratio, bound, passed = math.exp(-mean), 1.0 / high, 1.0 / high >= target
        said = f"baseline/candidate latency (token rate) x{ratio:.3f}, lower bound x{bound:.3f}"
        interval = (1.0 / high, 1.0 / low)
    return Check(
        name=name,
        kind=CheckKind.OBJECTIVE,
        verdict=Verdict.PASS if passed else Verdict.NO_IMPROVEMENT,
        baseline=1.0,
        candidate=round(ratio, 4),
        threshold=target,
        unit="ratio",
        threshold_unit="ratio",
        interval_low=round(interval[0], 4),
        interval_high=round(interval[1], 4),
        samples=n,
        rule=rule,
        source=source,
        reason=(
            f"{said} over {n} intervals; objective {metric} needs "
            f"{'<=' if latency else '>='} {target:.3f}"
            + ("" if passed else " (the candidate does not improve it by minImprovement)")
        ),
    )
