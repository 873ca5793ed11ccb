"""benchmark.slo's latency limits as checks: is the candidate's p99 within the limit?

One sample, one limit: the distribution-free confidence bounds of a quantile from order
statistics. With n requests, the k-th smallest value is an upper bound of the p99 with
probability P(Bin(n, 0.99) <= k - 1), a lower bound with P(Bin(n, 0.99) >= k); the check
takes the tightest ranks at one-sided level alpha / m (Bonferroni over the m limits).

- Fail when the lower bound is above the limit: the p99 is over it, with confidence.
- Pass when the upper bound is within it.
- Otherwise Inconclusive, saying how many requests an upper bound needs at all
  (ceil(log(alpha) / log(0.99)): 299 at alpha 0.05).

ITL's token gaps are correlated within a request, so their p99 is bounded as if each
request gave one observation: the ranks are computed for n = requests and placed at the
same fractions of the sorted gaps (conservative: the bounds are as wide as the number of
requests, not of gaps, allows).

The limits hold at the judged concurrency (objective.concurrency, else the highest).

Under the sequential judge (`anytime=True`) the rounds stop when the other checks are
decided, so the candidate's sample size is chosen by data that is correlated with its
p99; a fixed-n bound read at that moment is not a fixed-n bound any more (looked at
after each of 40 rounds of 50, a p99 exactly at the limit read as Fail in 18.8 % of
runs at a stated 5 %; tests/unit/analysis/test_slo.py). The bounds then come from the same
distribution-free confidence sequence as the sequential judge's quantiles
(analysis/confseq.py, Howard & Ramdas 2022), which holds at every n at once: wider (an
upper bound of a p99 needs 429 requests at alpha 0.05 instead of 299), valid
however many rounds were run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import binom

from endpoint_optimizer.analysis.admissible import bad_values
from endpoint_optimizer.analysis.benchmark import LevelSamples, stamp_bracket
from endpoint_optimizer.analysis.confseq import DEFAULT_PRIOR_SIZE, count_bounds, samples_to_bracket
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict

QUANTILE = 0.99
_LIMITS = (("ttft", "ttft_s"), ("itl", "itl_s"), ("e2e", "e2e_s"))


def bound_ranks(n: int, quantile: float, alpha: float) -> tuple[int | None, int | None]:
    """1-based ranks (lower, upper) of the order statistics that bound `quantile` at
    one-sided level `alpha` each; None where n samples give no such bound."""
    if n < 1:
        return None, None
    k = np.arange(1, n + 1)
    below = binom.cdf(k - 1, n, quantile)  # P(X_(k) >= q-quantile)
    upper = k[below >= 1.0 - alpha]
    lower = k[1.0 - below >= 1.0 - alpha]  # P(X_(k) <= q-quantile)
    return (int(lower[-1]) if lower.size else None, int(upper[0]) if upper.size else None)


def anytime_ranks(
    n: int, quantile: float, alpha: float, prior_size: float = DEFAULT_PRIOR_SIZE
) -> tuple[int | None, int | None]:
    """1-based ranks (lower, upper) bounding `quantile` by the confidence sequence at
    `alpha`: valid at every n at once; None where n samples give no such bound yet."""
    if n < 1:
        return None, None
    lowest, highest = count_bounds(n, quantile, alpha, prior_size)
    return (lowest if lowest >= 1 else None, highest + 1 if highest + 1 <= n else None)


def requests_needed(quantile: float, alpha: float, anytime: bool = False) -> int:
    """The fewest requests for which a bound of the quantile from above exists."""
    if anytime:
        return samples_to_bracket(quantile, alpha, DEFAULT_PRIOR_SIZE)
    return math.ceil(math.log(alpha) / math.log(quantile))


def requests_for(
    limits_ms: dict[str, float | None], confidence: float = 0.95, anytime: bool = True
) -> int:
    """Requests an upper bound of every set limit's p99 needs at all (0: none set)."""
    m = sum(1 for short, _ in _LIMITS if limits_ms.get(short) is not None)
    return requests_needed(QUANTILE, (1.0 - confidence) / m, anytime) if m else 0


def slo_checks(
    candidate: Sequence[LevelSamples],
    limits_ms: dict[str, float | None],
    concurrency: int,
    confidence: float = 0.95,
    anytime: bool = False,
) -> list[Check]:
    """One check per set limit ("ttft", "itl", "e2e": p99 in ms) at `concurrency`.

    `anytime`: bounds valid at every sample size (the sequential judge's rounds).
    """
    wanted = [(s, f, limits_ms.get(s)) for s, f in _LIMITS if limits_ms.get(s) is not None]
    if not wanted:
        return []
    alpha = (1.0 - confidence) / len(wanted)
    level = next((lv for lv in candidate if lv.concurrency == concurrency), None)
    return [
        _one(level, short, field, float(limit), concurrency, alpha, anytime)
        for short, field, limit in wanted
        if limit is not None
    ]


def _one(
    level: LevelSamples | None,
    short: str,
    field: str,
    limit: float,
    concurrency: int,
    alpha: float,
    anytime: bool,
) -> Check:
    name = f"slo_{short}_p99@c{concurrency}"
    bound = (
        f"two-sided {100 * (1 - alpha):.3g} % confidence-sequence bounds (valid at every "
        "sample size: the sequential judge's rounds)"
        if anytime
        else f"one-sided {100 * (1 - alpha):.3g} % order-statistic bound"
    )
    base = Check(
        name=name,
        kind=CheckKind.BENCHMARK,
        verdict=Verdict.INCONCLUSIVE,
        threshold=limit,
        unit="ms",
        threshold_unit="ms",
        rule=(
            f"{bound} of the candidate's "
            f"{short} p99 at concurrency {concurrency} against benchmark.slo's {limit:g} ms"
        ),
        reason="",
    )
    if level is None:
        return base.model_copy(update={"reason": f"{name}: concurrency {concurrency} not measured"})
    if not level.valid:
        return base.model_copy(update={"reason": f"{name}: {level.invalid_reason()}"})
    values = np.sort(np.asarray(level.metric(field), dtype=float))
    bad = bad_values(list(values))
    if bad.count or values.size == 0:
        said = bad.describe(f"candidate {short}") if bad.count else f"no {short} samples"
        return base.model_copy(update={"reason": f"{name}: {said}"})
    n = level.requests if field == "itl_s" and level.requests else int(values.size)
    lower, upper = anytime_ranks(n, QUANTILE, alpha) if anytime else bound_ranks(n, QUANTILE, alpha)
    low, high = _at(values, n, lower), _at(values, n, upper)
    # The true p99 lies within the guard's stamp bracket of the measured one.
    blur = stamp_bracket(level, field, QUANTILE) * 1000.0
    if blur > 0.0:
        low = None if low is None else max(0.0, low - blur)
        high = None if high is None else high + blur
    point = float(np.quantile(values, QUANTILE)) * 1000.0
    if low is not None and low > limit:
        verdict = Verdict.FAIL
        said = (
            f"p99 {point:.0f} ms, at least {low:.0f} ms with confidence: over the limit "
            f"{limit:g} ms"
        )
    elif high is not None and high <= limit:
        verdict = Verdict.PASS
        said = f"p99 {point:.0f} ms, at most {high:.0f} ms with confidence: within {limit:g} ms"
    else:
        verdict = Verdict.INCONCLUSIVE
        more = (
            f"an upper bound needs at least {requests_needed(QUANTILE, alpha, anytime)} requests "
            f"({n} measured)"
            if high is None
            else f"its bounds ({low or 0:.0f}-{high:.0f} ms) straddle the limit"
        )
        said = (
            f"p99 {point:.0f} ms against {limit:g} ms undecided: {more}; raise benchmark.requests"
        )
    if blur > 0.0:
        said += (
            f" (bounds widened by the client's {blur:.1f} ms stamp bracket: lower the "
            "concurrency or give the client more CPU)"
        )
    return base.model_copy(
        update={
            "verdict": verdict,
            "reason": f"{name}: {said}",
            "candidate": point,
            "interval_low": low,
            "interval_high": high,
            "samples": n,
        }
    )


def _at(values: np.ndarray, n: int, rank: int | None) -> float | None:
    """The value at `rank` of n (in ms), placed at the same fraction of the sorted values."""
    if rank is None:
        return None
    index = min(values.size, max(1, math.ceil(rank / n * values.size))) - 1
    return float(values[index]) * 1000.0
