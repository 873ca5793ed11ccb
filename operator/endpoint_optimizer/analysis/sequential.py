"""The sequential benchmark judge: add rounds of requests per level until every gating
check is decided, with an error bound that holds however many rounds it takes.

Rule (docs/analysis.md §1b). Each latency check bounds q(candidate) / q(baseline) with
two distribution-free quantile confidence sequences (analysis/confseq.py), one per
variant at alpha / (2m), m the number of sequential checks in the call (Bonferroni):
the ratio lies in [L_c / U_b, U_c / L_b] at every sample size simultaneously with
probability at least 1 - alpha / m. Throughput uses a normal-mixture confidence sequence
on the difference of mean log window throughput (approximate: plug-in variance, raised
to its upper confidence bound). Because the intervals hold at every n, the pipeline may
look after each round and stop as soon as every gating check is decided (optional
stopping): P(any check wrongly Fails or wrongly Passes) <= alpha over the whole run.

Verdicts per check: Pass, Fail, Inconclusive and needs about N more requests per variant
(the projection from the interval's current width and the distance of the estimate from
the limit), or Inconclusive and final (budget spent, or a measurement it must refuse).

Which checks gate: the body quantiles (p10..p90) of ttft, tpot and e2e, mean throughput
and the objective always; a tail quantile (p95, p99) only when its projected need fits
the budget (`tailGating: whenDecidable`), else it is reported and does not hold the
decision; ITL never (its token gaps are correlated within a request, outside the
sequential guarantee): it is reported with a cluster-bootstrap interval, and TPOT
gates decode speed. A Fail always gates: a regression shown is shown.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from statistics import NormalDist
from typing import Protocol

import numpy as np

from endpoint_optimizer.analysis.benchmark import (
    CLUSTER_RESAMPLES,
    THROUGHPUT_METRIC,
    UNPRICED,
    BenchmarkPolicy,
    LevelSamples,
    objective_measure,
    stamp_note,
    stamp_widened_for,
    unusable,
)
from endpoint_optimizer.analysis.bootstrap import cluster_quantile_ratio_interval
from endpoint_optimizer.analysis.confseq import (
    count_bounds,
    gaussian_half_width,
    quantile_bounds,
    samples_to_bracket,
    sorted_array,
    tuned_rho2,
)
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.api.spec import Objective, TailGating

# Latency metrics the sequential judge bounds with quantile confidence sequences, in
# report order. ITL is judged apart (advisory).
SEQUENTIAL_LATENCIES = ("ttft_s", "tpot_s", "e2e_s")
_SHORT = {"ttft_s": "ttft", "itl_s": "itl", "tpot_s": "tpot", "e2e_s": "e2e"}
# Tail quantiles: fewer than this share of samples lies beyond them.
TAIL_SHARE = 0.1
# A projection multiplies the current width by sqrt(n / N); the confidence sequence's
# own growth (log log n) and the noise of the estimate ask for some slack.
PROJECTION_SLACK = 1.2
# Never project beyond this multiple of the budget: "far more than the budget" is the news.
PROJECTION_CAP = 1_000


class Outcome(StrEnum):
    """A sequential check's state after this round."""

    PASS = "Pass"
    FAIL = "Fail"
    NO_IMPROVEMENT = "NoImprovement"
    NEED_MORE = "NeedMore"  # Inconclusive; more requests would likely decide it
    FINAL = "InconclusiveFinal"  # Inconclusive; more requests will not be spent on it


class SequentialDecision(StrEnum):
    MEASURE_MORE = "MeasureMore"  # run `rounds`, then call the judge again
    DECIDED = "Decided"  # every gating check is decided, or one Failed / NoImprovement
    BUDGET_SPENT = "BudgetSpent"  # gating checks remain Inconclusive: onNoData applies


@dataclass(frozen=True)
class SequentialCheck:
    check: Check
    outcome: Outcome
    gating: bool
    concurrency: int
    more_requests: int = 0  # per variant, when outcome is NEED_MORE


@dataclass(frozen=True)
class LevelRound:
    """More requests to measure at one level, per variant, in the same run."""

    concurrency: int
    requests: int
    reason: str


@dataclass(frozen=True)
class SequentialJudgement:
    decision: SequentialDecision
    results: tuple[SequentialCheck, ...]
    rounds: tuple[LevelRound, ...]

    @property
    def checks(self) -> list[Check]:
        """The gating checks, objective included: what status.checks and the verdicts take."""
        return [r.check for r in self.results if r.gating]

    @property
    def advisory(self) -> list[Check]:
        """Reported with their reason, never holding or failing the candidate (gating False)."""
        return [r.check.model_copy(update={"gating": False}) for r in self.results if not r.gating]


@dataclass(frozen=True)
class _Bounds:
    point: float
    low: float  # may be 0.0 (no lower bound yet)
    high: float  # may be inf (no upper bound yet)
    baseline: float
    candidate: float


def _inverted(bounds: _Bounds, price_ratio: float = 1.0) -> _Bounds:
    """Bounds of 1/ratio (cost per token from throughput), each side per million, with the
    candidate's hourly price over the reference's applied to the candidate's side."""

    def inv(x: float, scale: float = 1.0) -> float:
        return math.inf if x <= 0 else (0.0 if math.isinf(x) else scale / x)

    return _Bounds(
        point=inv(bounds.point, price_ratio),
        low=inv(bounds.high, price_ratio),
        high=inv(bounds.low, price_ratio),
        baseline=inv(bounds.baseline, 1e6),
        candidate=inv(bounds.candidate, 1e6 * price_ratio),
    )


class _Result(Protocol):
    """The shape of `_regression`'s local result builder."""

    def __call__(
        self,
        verdict: Verdict,
        outcome: Outcome,
        reason: str,
        gating: bool = True,
        more: int = 0,
        bounds: _Bounds | None = None,
    ) -> SequentialCheck: ...


@dataclass(frozen=True)
class _Level:
    base: LevelSamples
    cand: LevelSamples
    requests: int
    left: int  # requests per variant the budget still allows (requests and wall time)
    out_of_time: bool


def judge_sequential(
    baseline: Sequence[LevelSamples],
    candidate: Sequence[LevelSamples],
    policy: BenchmarkPolicy | None = None,
    objective: Objective | str | None = None,
    min_improvement: float = 0.0,
    objective_concurrency: int | None = None,
    cost_ratio: float | None = 1.0,
) -> SequentialJudgement:
    """Judge all samples collected so far (every round, same run) and say what to do next.

    `objective` None skips the objective check; `objective_concurrency` None judges the
    objective at every level measured on both sides (each must show it).
    """
    policy = policy or BenchmarkPolicy()
    if not 0.0 <= min_improvement < 1.0:
        raise ValueError("minImprovement: must be a fraction in [0, 1), e.g. 0.1 for 10 %")
    by_level = {level.concurrency: level for level in baseline}
    levels = [
        _level(by_level[c.concurrency], c, policy)
        for c in sorted(candidate, key=lambda lv: lv.concurrency)
        if c.concurrency in by_level
    ]
    plan: list[tuple[_Level, str, float | None]] = []
    for level in levels:
        for metric in SEQUENTIAL_LATENCIES:
            if metric in policy.thresholds and (
                level.base.metric(metric) or level.cand.metric(metric)
            ):
                plan.extend((level, metric, q) for q in policy.quantiles)
        if THROUGHPUT_METRIC in policy.thresholds and (
            level.base.throughput_tok_s or level.cand.throughput_tok_s
        ):
            plan.append((level, THROUGHPUT_METRIC, None))
    alpha = (1.0 - policy.confidence) / max(1, len(plan))
    results = [_regression(level, metric, q, policy, alpha, len(plan)) for level, metric, q in plan]
    if objective is not None:
        judged = [
            lv
            for lv in levels
            if objective_concurrency is None or lv.base.concurrency == objective_concurrency
        ]
        results.append(
            _objective(Objective(objective), min_improvement, judged, policy, cost_ratio)
        )
    paired = {lv.base.concurrency for lv in levels}
    for alone in [*baseline, *candidate]:
        if alone.concurrency not in paired:
            paired.add(alone.concurrency)
            results.append(_one_sided(alone.concurrency))
    judgement = _decide(results, levels, policy)
    # ITL is reported, never gating, and its cluster bootstrap is the costly part: it is
    # computed once, when the gating checks are through.
    final = judgement.decision is not SequentialDecision.MEASURE_MORE
    advisory: list[SequentialCheck] = []
    for level in levels:
        if "itl_s" in policy.thresholds and (level.base.itl_s or level.cand.itl_s):
            rng = np.random.default_rng([policy.seed, level.base.concurrency])
            advisory.extend(_itl(level, q, policy, alpha, rng, final) for q in policy.quantiles)
    return replace(judgement, results=(*judgement.results, *advisory))


def _level(base: LevelSamples, cand: LevelSamples, policy: BenchmarkPolicy) -> _Level:
    requests = min(base.requests, cand.requests)
    left = max(0, policy.max_requests - requests)
    elapsed = max(base.elapsed_s or 0.0, cand.elapsed_s or 0.0)
    out_of_time = elapsed >= policy.max_duration_s
    if elapsed > 0 and requests > 0:
        # Requests fit in the time left at the pace measured so far.
        pace = requests / elapsed
        left = min(left, math.floor(pace * max(0.0, policy.max_duration_s - elapsed)))
    return _Level(base, cand, requests, 0 if out_of_time else left, out_of_time)


def requests_left(base: LevelSamples, cand: LevelSamples, policy: BenchmarkPolicy) -> int:
    """Requests per variant the level's budget (maxRequests, maxDuration at the pace
    measured so far) still allows."""
    return _level(base, cand, policy).left


def _decide(
    results: list[SequentialCheck], levels: list[_Level], policy: BenchmarkPolicy
) -> SequentialJudgement:
    gating = [r for r in results if r.gating]
    stop = any(r.outcome in (Outcome.FAIL, Outcome.NO_IMPROVEMENT) for r in gating)
    if stop or all(r.outcome is Outcome.PASS for r in gating):
        return SequentialJudgement(SequentialDecision.DECIDED, tuple(results), ())
    rounds = []
    for level in levels:
        wanting = [
            r
            for r in gating
            if r.outcome is Outcome.NEED_MORE and r.concurrency == level.base.concurrency
        ]
        if not wanting:
            continue
        most = max(r.more_requests for r in wanting)
        # At least a round's worth, at most doubling (a projection from few samples is
        # rough), never beyond the budget.
        size = min(max(most, policy.round_requests), max(level.requests, policy.round_requests))
        size = min(size, level.left)
        if size > 0:
            names = ", ".join(r.check.name for r in wanting)
            rounds.append(
                LevelRound(
                    level.base.concurrency,
                    size,
                    f"{names} undecided; about {most} more requests per variant would decide",
                )
            )
    if rounds:
        return SequentialJudgement(SequentialDecision.MEASURE_MORE, tuple(results), tuple(rounds))
    return SequentialJudgement(SequentialDecision.BUDGET_SPENT, tuple(results), ())


def _one_sided(concurrency: int) -> SequentialCheck:
    check = Check(
        name=f"level@c{concurrency}",
        kind=CheckKind.BENCHMARK,
        verdict=Verdict.INCONCLUSIVE,
        rule="baseline and candidate must be measured at the same concurrency",
        reason=(
            f"concurrency {concurrency} was measured on one variant only; "
            "re-run the benchmark on both"
        ),
    )
    return SequentialCheck(check, Outcome.FINAL, True, concurrency)


def _label(metric: str, quantile: float | None, concurrency: int) -> str:
    stat = "mean" if quantile is None else f"p{round(quantile * 100):d}"
    short = "throughput" if metric == THROUGHPUT_METRIC else _SHORT[metric]
    return f"{short}_{stat}@c{concurrency}"


def _is_tail(quantile: float | None) -> bool:
    return quantile is not None and min(quantile, 1.0 - quantile) < TAIL_SHARE


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _quantile_ratio(
    base_level: LevelSamples,
    cand_level: LevelSamples,
    metric: str,
    quantile: float,
    alpha_side: float,
    prior: float,
) -> _Bounds:
    """The ratio's confidence sequence, widened by the stamp brackets the guard could not
    vouch for (analysis/benchmark.stamp_widened)."""
    base, cand = base_level.metric(metric), cand_level.metric(metric)
    base_sorted, cand_sorted = sorted_array(base), sorted_array(cand)
    b_low, b_high = quantile_bounds(base_sorted, quantile, alpha_side, prior)
    c_low, c_high = quantile_bounds(cand_sorted, quantile, alpha_side, prior)
    b_point = float(base_sorted[min(len(base), max(1, math.ceil(quantile * len(base)))) - 1])
    c_point = float(cand_sorted[min(len(cand), max(1, math.ceil(quantile * len(cand)))) - 1])
    low = c_low / b_high if math.isfinite(b_high) and c_low > 0 else 0.0
    high = c_high / b_low if b_low > 0 and math.isfinite(c_high) else math.inf
    low, high = stamp_widened_for(
        low, high, b_point, c_point, (base_level, cand_level), metric, quantile
    )
    return _Bounds(c_point / b_point, low, high, b_point, c_point)


def _blur_straddles(
    bounds: _Bounds,
    base: LevelSamples,
    cand: LevelSamples,
    metric: str,
    quantile: float,
    limit: float,
) -> bool:
    """Whether the stamp brackets alone, with no sampling error left, straddle the limit:
    more requests would not decide the check, a client with more CPU would."""
    low, high = stamp_widened_for(
        bounds.point,
        bounds.point,
        bounds.baseline,
        bounds.candidate,
        (base, cand),
        metric,
        quantile,
    )
    return low <= limit < high


def _log_spread(values: list[float], quantile: float) -> float | None:
    """Per-sample standard deviation of log q-hat: sqrt(q(1-q)) * dlogQ/dq, by a spacing.

    None while the sample is too small to see both sides of the quantile.
    """
    n = len(values)
    spread = max(3, math.ceil(math.sqrt(n * quantile * (1.0 - quantile))))
    centre = quantile * n
    low, high = math.floor(centre - spread), math.ceil(centre + spread)
    if low < 1 or high > n:
        return None
    ordered = sorted_array(values)
    width = math.log(ordered[high - 1]) - math.log(ordered[low - 1])
    return math.sqrt(quantile * (1.0 - quantile)) * width * n / (high - low)


def _quantile_need(
    base: list[float],
    cand: list[float],
    quantile: float,
    room: float,
    alpha_side: float,
    prior: float,
    cap: int,
) -> int | None:
    """Requests per variant at which the ratio interval should fit between the estimate
    and the limit (`room`, log scale); None when the spread cannot be estimated yet."""
    spreads = [_log_spread(base, quantile), _log_spread(cand, quantile)]
    if spreads[0] is None or spreads[1] is None:
        return None
    total = spreads[0] + spreads[1]
    if room <= 0:
        return cap
    variance = quantile * (1.0 - quantile)

    def half_width(n: int) -> float:
        lowest, highest = count_bounds(n, quantile, alpha_side, prior)
        multiplier = (highest - lowest) / 2.0 / math.sqrt(n * variance)
        return PROJECTION_SLACK * multiplier * total / math.sqrt(n)

    high = max(len(base), len(cand), 2)
    while half_width(high) > room:
        if high >= cap:
            return cap
        high = min(cap, high * 2)
    low = max(1, high // 2)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if half_width(mid) <= room else (mid, high)
    return high


def _regression(
    level: _Level,
    metric: str,
    quantile: float | None,
    policy: BenchmarkPolicy,
    alpha: float,
    family: int,
) -> SequentialCheck:
    base, cand = level.base, level.cand
    concurrency = base.concurrency
    name = _label(metric, quantile, concurrency)
    threshold = policy.thresholds[metric]
    lower_is_better = metric != THROUGHPUT_METRIC
    limit = 1.0 + threshold if lower_is_better else 1.0 - threshold
    tail = _is_tail(quantile)
    unit = "tok/s" if metric == THROUGHPUT_METRIC else "ms"
    scale = 1.0 if metric == THROUGHPUT_METRIC else 1000.0
    stat = "mean" if quantile is None else f"p{round(quantile * 100):d}"
    alpha_side = alpha / 2.0
    rule = (
        f"confidence sequence of candidate/baseline {stat}, valid at every round: "
        + (
            "distribution-free quantile bounds (Howard & Ramdas 2022) per variant"
            if quantile is not None
            else "normal mixture on mean log window throughput (plug-in variance)"
        )
        + f", {100 * (1 - alpha):.3g} % over {family} checks (Bonferroni)"
    )
    base_values, cand_values = base.metric(metric), cand.metric(metric)
    fewest = min(len(base_values), len(cand_values))
    cap = PROJECTION_CAP * policy.max_requests
    # Said after every reason with an interval, once the stamp brackets widened it.
    note = "" if quantile is None else stamp_note(base, cand, metric, quantile)

    def result(
        verdict: Verdict,
        outcome: Outcome,
        reason: str,
        gating: bool = True,
        more: int = 0,
        bounds: _Bounds | None = None,
    ) -> SequentialCheck:
        check = Check(
            name=name,
            kind=CheckKind.BENCHMARK,
            verdict=verdict,
            baseline=None if bounds is None else bounds.baseline * scale,
            candidate=None if bounds is None else bounds.candidate * scale,
            threshold=limit,
            unit=unit,
            threshold_unit="ratio",
            interval_low=None if bounds is None else _finite(bounds.low),
            interval_high=None if bounds is None else _finite(bounds.high),
            samples=fewest,
            rule=rule,
            reason=f"{name}: {reason}" + ("" if bounds is None else note),
        )
        return SequentialCheck(check, outcome, gating, concurrency, more)

    refused = unusable(base, cand, metric)
    if refused is not None:
        return result(Verdict.INCONCLUSIVE, Outcome.FINAL, refused)
    if quantile is None:
        return _throughput(level, policy, alpha, limit, result)

    static_need = max(
        samples_to_bracket(quantile, alpha_side, policy.prior_size),
        math.ceil(policy.min_tail_samples / min(quantile, 1.0 - quantile) - 1e-9),
        policy.min_samples,
    )
    # What the level can still measure: the request budget, or the pace so far times the
    # time left, whichever is smaller.
    capacity = level.requests + level.left
    # A tail quantile whose need does not fit is reported, not gating (unless `always`).
    demotable = tail and policy.tail_gating is not TailGating.ALWAYS
    if tail and policy.tail_gating is TailGating.NEVER:
        tail_gates = False
    elif tail and policy.tail_gating is TailGating.WHEN_DECIDABLE:
        tail_gates = static_need <= capacity
    else:
        tail_gates = True
    if fewest < static_need:
        reason = f"{fewest} samples, {static_need} needed before {stat} can be bounded"
        if not tail_gates:
            return result(
                Verdict.INCONCLUSIVE,
                Outcome.FINAL,
                f"{reason}; the budget allows about {_count(capacity)} per level, so it is "
                "reported and does not gate (raise the budget to gate on it)",
                gating=False,
            )
        if level.left <= 0:
            return result(
                Verdict.INCONCLUSIVE,
                Outcome.FINAL,
                f"{reason}; {_spent(level)}" + (": reported, not gating" if demotable else ""),
                gating=not demotable,
            )
        return result(
            Verdict.INCONCLUSIVE,
            Outcome.NEED_MORE,
            f"{reason}; measuring more",
            more=static_need - fewest,
        )

    bounds = _quantile_ratio(base, cand, metric, quantile, alpha_side, policy.prior_size)
    ci = f"ratio {bounds.point:.3f} (CI {bounds.low:.3f}-{bounds.high:.3f})"
    side = "above" if lower_is_better else "below"
    if (bounds.low > limit) if lower_is_better else (bounds.high < limit):
        return result(
            Verdict.FAIL,
            Outcome.FAIL,
            f"regressed: {ci}, entirely {side} the limit {limit:.3f}",
            bounds=bounds,
        )
    if (bounds.high <= limit) if lower_is_better else (bounds.low >= limit):
        return result(
            Verdict.PASS, Outcome.PASS, f"within the limit {limit:.3f}: {ci}", bounds=bounds
        )
    said = f"undecided: {ci} straddles the limit {limit:.3f}"
    if _blur_straddles(bounds, base, cand, metric, quantile, limit):
        return result(
            Verdict.INCONCLUSIVE,
            Outcome.FINAL,
            f"{said}; the stamp brackets alone straddle it, so more requests would not "
            "decide it" + (": reported, not gating" if demotable else ""),
            gating=not demotable,
            bounds=bounds,
        )
    room = abs(math.log(limit) - math.log(bounds.point))
    need = _quantile_need(
        base_values, cand_values, quantile, room, alpha_side, policy.prior_size, cap
    )
    need = need if need is not None else static_need * 2
    gates = not demotable or (tail_gates and need <= capacity)
    if not gates:
        return result(
            Verdict.INCONCLUSIVE,
            Outcome.FINAL,
            f"{said}; about {_count(need)} requests per level would decide it, the budget "
            f"allows about {_count(capacity)}: reported, not gating (raise the budget to "
            "gate on it)",
            gating=False,
            bounds=bounds,
        )
    if level.left <= 0:
        # A tail quantile still open when the budget is spent has shown that its need does
        # not fit: reported, not gating, like one projected beyond the budget.
        return result(
            Verdict.INCONCLUSIVE,
            Outcome.FINAL,
            f"{said}; {_spent(level)} (about {_count(need)} requests would decide it)"
            + (": reported, not gating" if demotable else ""),
            gating=not demotable,
            bounds=bounds,
        )
    more = max(1, need - fewest)
    return result(
        Verdict.INCONCLUSIVE,
        Outcome.NEED_MORE,
        f"{said}; about {_count(more)} more requests per variant would decide",
        more=more,
        bounds=bounds,
    )


def _count(n: int) -> str:
    return f"{n:,}"


def _spent(level: _Level) -> str:
    if level.out_of_time:
        return f"the level's time budget is spent after {level.requests} requests"
    return f"the budget is spent at {level.requests} requests per variant"


def _log_mean_sd(values: list[float]) -> tuple[float, float, int]:
    logs = np.log(np.asarray(values, dtype=np.float64))
    k = int(logs.size)
    sd = float(logs.std(ddof=1)) if k > 1 else math.inf
    return float(logs.mean()), sd, k


def _sd_upper(sd: float, k: int, confidence: float) -> float:
    """One-sided upper confidence bound of a standard deviation from k values
    (Wilson-Hilferty chi-square quantile): few windows err towards a wider interval."""
    dof = k - 1
    if dof < 1 or not math.isfinite(sd):
        return math.inf
    z = NormalDist().inv_cdf(1.0 - confidence)
    lower_chi = dof * (1.0 - 2.0 / (9.0 * dof) + z * math.sqrt(2.0 / (9.0 * dof))) ** 3
    return sd * math.sqrt(dof / max(lower_chi, 1e-9))


def _mean_log_ratio(
    base: list[float], cand: list[float], alpha: float, design_windows: float
) -> tuple[_Bounds, float, float]:
    """Normal-mixture CS of mean log(candidate) - mean log(baseline).

    Returns the ratio bounds, the per-window spread used and the effective windows."""
    b_mean, b_sd, k_b = _log_mean_sd(base)
    c_mean, c_sd, k_c = _log_mean_sd(cand)
    spread = max(_sd_upper(b_sd, k_b, 1.0 - alpha), _sd_upper(c_sd, k_c, 1.0 - alpha), 1e-6)
    effective = 1.0 / (1.0 / k_b + 1.0 / k_c)
    # Standardised scale: information = effective windows; the mixture is tuned to the
    # windows a full budget would give, fixed before any data.
    half = spread * gaussian_half_width(effective, alpha, tuned_rho2(design_windows, alpha))
    d = c_mean - b_mean
    bounds = _Bounds(
        math.exp(d),
        math.exp(d - half),
        math.exp(d + half),
        float(np.exp(b_mean)),
        float(np.exp(c_mean)),
    )
    return bounds, spread, effective


def _window_requests(level: _Level, policy: BenchmarkPolicy, fewest: int) -> int:
    """Requests a round needs for the throughput windows still missing: a window is a
    wave of `concurrency` completions after the round's first (pipeline/assess
    throughput_windows), so the missing waves plus the start-up one."""
    wave = max(1, level.base.concurrency)
    return max(policy.round_requests, wave * (policy.min_throughput_windows - fewest + 1))


def _throughput(
    level: _Level,
    policy: BenchmarkPolicy,
    alpha: float,
    limit: float,
    result: _Result,
) -> SequentialCheck:
    base, cand = level.base.throughput_tok_s, level.cand.throughput_tok_s
    fewest = min(len(base), len(cand))
    if fewest < policy.min_throughput_windows:
        reason = f"{fewest} throughput windows, {policy.min_throughput_windows} needed"
        if level.left <= 0:
            return result(Verdict.INCONCLUSIVE, Outcome.FINAL, f"{reason}; {_spent(level)}")
        return result(
            Verdict.INCONCLUSIVE,
            Outcome.NEED_MORE,
            f"{reason}; measuring more",
            more=_window_requests(level, policy, fewest),
        )
    per_window = max(1.0, level.requests / fewest)
    design = max(float(fewest), policy.max_requests / per_window / 2.0)
    bounds, _, effective = _mean_log_ratio(base, cand, alpha, design)
    ci = f"ratio {bounds.point:.3f} (CI {bounds.low:.3f}-{bounds.high:.3f})"
    if bounds.high < limit:
        return result(
            Verdict.FAIL,
            Outcome.FAIL,
            f"regressed: {ci}, entirely below the limit {limit:.3f}",
            bounds=bounds,
        )
    if bounds.low >= limit:
        return result(
            Verdict.PASS, Outcome.PASS, f"within the limit {limit:.3f}: {ci}", bounds=bounds
        )
    said = f"undecided: {ci} straddles the limit {limit:.3f}"
    if level.left <= 0:
        return result(
            Verdict.INCONCLUSIVE, Outcome.FINAL, f"{said}; {_spent(level)}", bounds=bounds
        )
    room = abs(math.log(limit) - math.log(bounds.point))
    half = (math.log(bounds.high) - math.log(bounds.low)) / 2.0
    factor = (PROJECTION_SLACK * half / room) ** 2 if room > 0 else float(PROJECTION_CAP)
    more = max(1, math.ceil(level.requests * (min(factor, PROJECTION_CAP) - 1.0)))
    return result(
        Verdict.INCONCLUSIVE,
        Outcome.NEED_MORE,
        f"{said}; about {_count(more)} more requests per variant would decide "
        f"({effective:.1f} effective windows so far)",
        more=more,
        bounds=bounds,
    )


def _itl(
    level: _Level,
    quantile: float,
    policy: BenchmarkPolicy,
    alpha: float,
    rng: np.random.Generator,
    final: bool,
) -> SequentialCheck:
    """ITL, reported only: a cluster bootstrap at the last round's samples (not sequential)."""
    base, cand = level.base, level.cand
    name = _label("itl_s", quantile, base.concurrency)
    limit = 1.0 + policy.thresholds["itl_s"]
    stat = f"p{round(quantile * 100):d}"
    rule = (
        f"advisory: cluster bootstrap (requests resampled with their gaps) of candidate/"
        f"baseline ITL {stat} at this round, {100 * (1 - alpha):.3g} %; token gaps are "
        "correlated within a request, outside the sequential guarantee: tpot gates decode speed"
    )

    def check(verdict: Verdict, reason: str, **values: float | None) -> SequentialCheck:
        made = Check(
            name=name,
            kind=CheckKind.BENCHMARK,
            verdict=verdict,
            threshold=limit,
            unit="ms",
            threshold_unit="ratio",
            samples=min(len(base.itl_s), len(cand.itl_s)),
            rule=rule,
            reason=f"{name}: {reason} (advisory, does not gate)",
            **values,
        )
        return SequentialCheck(made, Outcome.FINAL, False, base.concurrency)

    refused = unusable(base, cand, "itl_s")
    if refused is not None:
        return check(Verdict.INCONCLUSIVE, refused)
    if not final:
        return check(Verdict.INCONCLUSIVE, "judged when the gating checks are through")
    if not (base.itl_request_sizes and cand.itl_request_sizes):
        return check(
            Verdict.INCONCLUSIVE,
            "no itlRequestSizes: gaps cannot be resampled with their requests",
        )
    requests = min(len(base.itl_request_sizes), len(cand.itl_request_sizes))
    if requests < policy.min_samples:
        return check(Verdict.INCONCLUSIVE, f"{requests} requests, {policy.min_samples} needed")
    interval = cluster_quantile_ratio_interval(
        (base.itl_s, base.itl_request_sizes),
        (cand.itl_s, cand.itl_request_sizes),
        quantile,
        alpha,
        min(policy.resamples, CLUSTER_RESAMPLES),
        rng,
    )
    ci = f"ratio {interval.point:.3f} (CI {interval.low:.3f}-{interval.high:.3f})"
    if interval.low > limit:
        verdict, said = Verdict.FAIL, f"regressed: {ci}, entirely above the limit {limit:.3f}"
    elif interval.high <= limit:
        verdict, said = Verdict.PASS, f"within the limit {limit:.3f}: {ci}"
    else:
        verdict, said = Verdict.INCONCLUSIVE, f"undecided: {ci}"
    return check(
        verdict,
        said,
        baseline=interval.baseline * 1000.0,
        candidate=interval.candidate * 1000.0,
        interval_low=_finite(interval.low),
        interval_high=_finite(interval.high),
    )


def _objective(
    objective: Objective,
    min_improvement: float,
    levels: list[_Level],
    policy: BenchmarkPolicy,
    cost_ratio: float | None = 1.0,
) -> SequentialCheck:
    """Pass when every judged level shows the improvement; NoImprovement as soon as one
    level shows it cannot reach it, or when the budget ends before it is shown."""
    measure = objective_measure(objective, policy)
    metric, quantile = measure.metric, measure.quantile
    # "latency" below: lower is better (a latency, or cost per token as 1 / throughput).
    latency = measure.lower_is_better
    target = 1.0 - min_improvement if latency else 1.0 + min_improvement
    alpha = 1.0 - policy.confidence
    stat = "mean" if quantile is None else f"p{round(quantile * 100):d}"
    short = _SHORT.get(metric, "throughput")
    what = f"1/{short} {stat} (cost per token)" if measure.inverted else f"{short} {stat}"
    name = f"objective_{objective.value}"
    rule = (
        f"confidence sequence ({100 * policy.confidence:.3g} %, valid at every round) of "
        f"candidate/baseline {what} at every judged level must "
        f"{'stay <=' if latency else 'reach >='} {target:.3f}"
    )
    ratio = cost_ratio if measure.inverted else 1.0
    if ratio is not None and ratio != 1.0:
        rule += f" (candidate's cost x the hourly price ratio {ratio:.3f})"
    concurrency = levels[0].base.concurrency if levels else 0

    def result(
        verdict: Verdict,
        outcome: Outcome,
        reason: str,
        more: int = 0,
        bounds: _Bounds | None = None,
        samples: int = 0,
    ) -> SequentialCheck:
        scale = 1000.0 if quantile is not None else 1.0
        check = Check(
            name=name,
            kind=CheckKind.OBJECTIVE,
            verdict=verdict,
            baseline=None if bounds is None else bounds.baseline * scale,
            candidate=None if bounds is None else bounds.candidate * scale,
            threshold=target,
            unit=measure.unit,
            threshold_unit="ratio",
            interval_low=None if bounds is None else _finite(bounds.low),
            interval_high=None if bounds is None else _finite(bounds.high),
            samples=samples,
            rule=rule,
            reason=reason,
        )
        return SequentialCheck(check, outcome, True, concurrency, more)

    if not levels:
        return result(
            Verdict.INCONCLUSIVE,
            Outcome.FINAL,
            f"{name}: no concurrency level to judge it at was measured on both variants",
        )
    if ratio is None:
        return result(Verdict.INCONCLUSIVE, Outcome.FINAL, f"{name}: {UNPRICED}")
    worst: tuple[float, _Bounds, _Level] | None = None
    wanting: list[tuple[int, _Level]] = []
    for level in levels:
        base, cand = level.base.metric(metric), level.cand.metric(metric)
        fewest = min(len(base), len(cand))
        refused = unusable(level.base, level.cand, metric)
        if refused is not None:
            return result(Verdict.INCONCLUSIVE, Outcome.FINAL, f"{name}: {refused}")
        if quantile is None:
            if fewest < policy.min_throughput_windows:
                wanting.append((_window_requests(level, policy, fewest), level))
                continue
            per_window = max(1.0, level.requests / fewest)
            design = max(float(fewest), policy.max_requests / per_window / 2.0)
            bounds, _, _ = _mean_log_ratio(base, cand, alpha, design)
            if measure.inverted:
                bounds = _inverted(bounds, ratio)
        else:
            if fewest < policy.min_samples:
                wanting.append((policy.min_samples - fewest, level))
                continue
            bounds = _quantile_ratio(
                level.base, level.cand, metric, quantile, alpha / 2.0, policy.prior_size
            )
        # Latency: the level whose upper bound is highest; throughput: lowest lower bound.
        key = bounds.high if latency else -bounds.low
        if worst is None or key > worst[0]:
            worst = (key, bounds, level)
        shown_short = bounds.low > target if latency else bounds.high < target
        if shown_short:
            gain = (1.0 - bounds.high) if latency else (bounds.low - 1.0)
            return result(
                Verdict.NO_IMPROVEMENT,
                Outcome.NO_IMPROVEMENT,
                f"{objective.value} at concurrency {level.base.concurrency} cannot reach the "
                f"{100 * min_improvement:.1f} % the spec needs: ratio {bounds.point:.3f} (CI "
                f"{bounds.low:.3f}-{bounds.high:.3f}), at best {100 * gain:.1f} %; the "
                "candidate is not promoted",
                bounds=bounds,
                samples=level.requests,
            )
        undecided = bounds.high > target if latency else bounds.low < target
        if undecided:
            room = abs(math.log(target) - math.log(bounds.point))
            half = (math.log(bounds.high) - math.log(max(bounds.low, 1e-300))) / 2.0
            if quantile is not None:
                need = _quantile_need(
                    base,
                    cand,
                    quantile,
                    room,
                    alpha / 2.0,
                    policy.prior_size,
                    PROJECTION_CAP * policy.max_requests,
                )
                more = (need - fewest) if need is not None else fewest
            else:
                factor = (PROJECTION_SLACK * half / room) ** 2 if room > 0 else PROJECTION_CAP
                more = math.ceil(level.requests * (min(factor, PROJECTION_CAP) - 1.0))
            wanting.append((max(1, more), level))
    if not wanting and worst is not None:
        _, bounds, level = worst
        gain = (1.0 - bounds.point) if latency else (bounds.point - 1.0)
        bound_gain = (1.0 - bounds.high) if latency else (bounds.low - 1.0)
        return result(
            Verdict.PASS,
            Outcome.PASS,
            f"{objective.value} improves by {100 * gain:.1f} % at concurrency "
            f"{level.base.concurrency} (at least {100 * bound_gain:.1f} % with confidence; "
            f"needed {100 * min_improvement:.1f} %)",
            bounds=bounds,
            samples=level.requests,
        )
    more, level = max(wanting, key=lambda item: item[0])
    shown = ""
    if worst is not None:
        bounds = worst[1]
        gain = (1.0 - bounds.point) if latency else (bounds.point - 1.0)
        bound_gain = (1.0 - bounds.high) if latency else (bounds.low - 1.0)
        shown = f" improvement {100 * gain:.1f} %, only {100 * bound_gain:.1f} % with confidence"
    if any(lv.left <= 0 for _, lv in wanting):
        return result(
            Verdict.NO_IMPROVEMENT,
            Outcome.NO_IMPROVEMENT,
            f"{objective.value}:{shown or ' not measured enough'} when {_spent(level)}; the spec "
            f"needs {100 * min_improvement:.1f} %, so the candidate is not promoted",
            bounds=None if worst is None else worst[1],
            samples=level.requests,
        )
    return result(
        Verdict.INCONCLUSIVE,
        Outcome.NEED_MORE,
        f"{objective.value} undecided at concurrency {level.base.concurrency}:{shown}; about "
        f"{_count(more)} more requests per variant would decide",
        more=more,
        bounds=None if worst is None else worst[1],
        samples=level.requests,
    )
