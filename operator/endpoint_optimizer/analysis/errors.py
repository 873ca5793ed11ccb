"""Errors are evidence: a candidate that fails requests is judged on its failures, and a
measurement made of errors is no measurement.

Latency checks read successful requests only, so without this a candidate failing
every request would leave every latency check without data (Inconclusive) and could be
promoted with `onNoData: pass`. Here the failures themselves are judged:

- against the SLO (`benchmark.slo.maxErrorRate`): Fail when the candidate's error rate
  is above it with confidence (the one-sided Clopper-Pearson lower bound exceeds it);
- against the baseline, same run: Fail when the candidate fails more often with
  confidence (one-sided Fisher exact test) by more than `margin` (absolute);
- Pass otherwise. There is no Inconclusive: zero errors on both sides is a Pass, and a
  count of errors is always data.

A side whose successful requests are too few to say anything about latency is not a
measurement of latency at all (`unmeasured`); the baseline is then not recorded as
measured, and a candidate in that state fails on its errors instead.
"""

from __future__ import annotations

import math

from endpoint_optimizer.api import Check, CheckKind, Verdict

# Absolute error-rate increase over the baseline tolerated before it counts against the
# candidate: sampling alone makes one extra failure in a few hundred requests common.
DEFAULT_MARGIN = 0.01
# At least this share of a level's requests must succeed for its latency to mean anything.
MIN_SUCCESS_FRACTION = 0.5
# ... and at least this many of them.
MIN_SUCCESSES = 5

_RULE = (
    "errors judged as evidence: Fail if the candidate's error rate exceeds "
    "benchmark.slo.maxErrorRate with confidence (one-sided Clopper-Pearson), or exceeds the "
    "baseline's by more than {margin:.0%} with confidence (one-sided Fisher exact test, "
    "same run); else Pass"
)


def _log_binomial(n: int, k: int, p: float) -> float:
    if p <= 0.0:
        return 0.0 if k == 0 else -math.inf
    if p >= 1.0:
        return 0.0 if k == n else -math.inf
    return (
        math.lgamma(n + 1)
        - math.lgamma(k + 1)
        - math.lgamma(n - k + 1)
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
    )


def binomial_upper_tail(n: int, k: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    return min(1.0, sum(math.exp(_log_binomial(n, i, p)) for i in range(k, n + 1)))


def lower_bound(errors: int, total: int, alpha: float) -> float:
    """One-sided (1 - alpha) Clopper-Pearson lower bound of an error rate."""
    if errors <= 0 or total <= 0:
        return 0.0
    low, high = 0.0, errors / total
    for _ in range(60):
        mid = (low + high) / 2
        if binomial_upper_tail(total, errors, mid) > alpha:
            high = mid
        else:
            low = mid
    return low


def fisher_greater(a_errors: int, a_total: int, b_errors: int, b_total: int) -> float:
    """One-sided Fisher exact p-value that side a fails more often than side b."""
    errors = a_errors + b_errors
    total = a_total + b_total
    if errors == 0 or a_total == 0 or b_total == 0:
        return 1.0

    def log_hyper(k: int) -> float:
        return (
            _log_choose(errors, k)
            + _log_choose(total - errors, a_total - k)
            - _log_choose(total, a_total)
        )

    top = min(errors, a_total)
    return min(1.0, sum(math.exp(log_hyper(k)) for k in range(a_errors, top + 1)))


def _log_choose(n: int, k: int) -> float:
    if k < 0 or k > n:
        return -math.inf
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def error_rate_check(
    name: str,
    baseline_errors: int,
    baseline_total: int,
    candidate_errors: int,
    candidate_total: int,
    max_error_rate: float | None = None,
    alpha: float = 0.05,
    margin: float = DEFAULT_MARGIN,
) -> Check:
    """The candidate's failed requests against the SLO and against the baseline's."""
    base_rate = baseline_errors / baseline_total if baseline_total else 0.0
    cand_rate = candidate_errors / candidate_total if candidate_total else 0.0
    low = lower_bound(candidate_errors, candidate_total, alpha)
    p_value = fisher_greater(candidate_errors, candidate_total, baseline_errors, baseline_total)
    common = {
        "name": name,
        "kind": CheckKind.ERRORS,
        "baseline": round(base_rate, 6),
        "candidate": round(cand_rate, 6),
        "unit": "fraction",
        "threshold_unit": "fraction",
        "interval_low": round(low, 6),
        "samples": candidate_total,
        "p_value": round(p_value, 6),
        "rule": _RULE.format(margin=margin),
        "source": "benchmark requests (errors and successes)",
    }
    if candidate_total == 0:
        return Check(
            **common,
            verdict=Verdict.FAIL,
            reason=f"{name}: the candidate completed no request at all",
        )
    if max_error_rate is not None and low > max_error_rate:
        return Check(
            **common,
            verdict=Verdict.FAIL,
            threshold=max_error_rate,
            reason=(
                f"{name}: {candidate_errors}/{candidate_total} candidate requests failed "
                f"({cand_rate:.1%}); at least {low:.1%} with confidence, above "
                f"benchmark.slo.maxErrorRate {max_error_rate:.1%}"
            ),
        )
    if p_value < alpha and cand_rate - base_rate > margin:
        return Check(
            **common,
            verdict=Verdict.FAIL,
            threshold=base_rate + margin,
            reason=(
                f"{name}: the candidate failed {candidate_errors}/{candidate_total} requests "
                f"({cand_rate:.1%}), the baseline {baseline_errors}/{baseline_total} "
                f"({base_rate:.1%}) in the same run (p={p_value:.2g})"
            ),
        )
    return Check(
        **common,
        verdict=Verdict.PASS,
        threshold=max_error_rate if max_error_rate is not None else base_rate + margin,
        reason=(
            f"{name}: {candidate_errors}/{candidate_total} candidate requests failed, "
            f"{baseline_errors}/{baseline_total} baseline requests"
        ),
    )


def unmeasured(errors: int, total: int) -> str:
    """Why a level with these counts measured no latency; empty when it did."""
    successes = total - errors
    if total == 0:
        return "no request was made"
    if successes < MIN_SUCCESSES or successes < MIN_SUCCESS_FRACTION * total:
        return (
            f"{errors} of {total} requests failed: latency measured on the "
            f"{successes} that succeeded would describe a broken endpoint"
        )
    return ""
