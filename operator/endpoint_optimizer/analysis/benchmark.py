"""The benchmark judge and the objective check: candidate vs baseline from the same run.

Rule (docs/analysis.md §1): per concurrency level, metric and quantile, a
percentile-bootstrap interval of the ratio candidate/baseline, each side one-sided
at alpha / m (Bonferroni over the m checks of one call). Latency fails when the
lower bound exceeds 1 + threshold and passes when the upper bound is within it;
throughput mirrors that with 1 - threshold. Anything else, or too few samples, is
Inconclusive. The objective check asks the opposite question: does the interval
show the improvement the spec buys; if not, the verdict is NoImprovement.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from pydantic import Field, field_validator, model_validator

from endpoint_optimizer.analysis.admissible import bad_values
from endpoint_optimizer.analysis.bootstrap import (
    RatioInterval,
    cluster_quantile_ratio_interval,
    mean_ratio_interval,
    quantile_ratio_interval,
)
from endpoint_optimizer.analysis.confseq import DEFAULT_PRIOR_SIZE
from endpoint_optimizer.api.camel import CamelModel
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.api.spec import Objective, TailGating

LATENCY_METRICS = ("ttft_s", "itl_s", "tpot_s", "e2e_s")
# A cluster-bootstrap replicate costs a (requests x bins) product; 1,000 keep an ITL check
# near a tenth of a second on 1,000 requests of 255 gaps.
CLUSTER_RESAMPLES = 1_000
THROUGHPUT_METRIC = "throughput_tok_s"

_SHORT = {
    "ttft_s": "ttft",
    "itl_s": "itl",
    "tpot_s": "tpot",
    "e2e_s": "e2e",
    THROUGHPUT_METRIC: "throughput",
}


class LevelSamples(CamelModel):
    """Raw samples of one variant at one concurrency level, from one benchmark run.

    Latencies are per request in seconds (itl_s is per token gap); throughput is one
    value per measurement window (output tokens per second), so it has a spread too.
    """

    concurrency: int = Field(ge=1)
    ttft_s: list[float] = Field(default_factory=list)
    itl_s: list[float] = Field(default_factory=list)
    tpot_s: list[float] = Field(default_factory=list)
    e2e_s: list[float] = Field(default_factory=list)
    throughput_tok_s: list[float] = Field(default_factory=list)
    itl_request_sizes: list[int] = Field(
        default_factory=list,
        description="Token gaps per request, in the order of itl_s (sums to len(itl_s)); "
        "lets ITL intervals resample requests instead of correlated gaps.",
    )
    valid: bool = Field(
        default=True, description="False when the bench guard marked the level invalid."
    )
    invalid_reasons: list[str] = Field(
        default_factory=list, description="The guard's reasons (bench LevelReport.validity)."
    )
    elapsed_s: float | None = Field(
        default=None,
        ge=0.0,
        description="Wall time this level has taken so far, all rounds (the budget's clock).",
    )
    blurred_s: dict[str, float] = Field(
        default_factory=dict,
        description="Figures the bench guard could bracket only more widely than it allows "
        "(ttft_p99 -> seconds; bench Validity.blurredS): the true quantile lies within that "
        "of the measured one, and the judges widen the check's interval by it.",
    )

    @model_validator(mode="after")
    def _sizes_match_gaps(self) -> LevelSamples:
        if self.itl_request_sizes and sum(self.itl_request_sizes) != len(self.itl_s):
            raise ValueError(
                f"itlRequestSizes: sums to {sum(self.itl_request_sizes)} but itlS has "
                f"{len(self.itl_s)} gaps; give one size per request, in the order of itlS"
            )
        if any(size < 0 for size in self.itl_request_sizes):
            raise ValueError("itlRequestSizes: a request cannot have a negative gap count")
        return self

    def metric(self, name: str) -> list[float]:
        values: list[float] = getattr(self, name)
        return values

    @property
    def requests(self) -> int:
        """Measured requests behind this level (the most samples any per-request metric has)."""
        return max(len(self.ttft_s), len(self.tpot_s), len(self.e2e_s), len(self.itl_request_sizes))

    def invalid_reason(self) -> str:
        """Why the guard refused this level, and what to change."""
        said = "; ".join(self.invalid_reasons) or "the bench guard marked it invalid"
        return (
            f"concurrency {self.concurrency}: {said}; the client, not the endpoint, was "
            "measured: re-run the level with more client capacity (fewer requests per "
            "client process, more processes) or a lower concurrency"
        )


@dataclass(frozen=True)
class ObjectiveMeasure:
    """What an objective is judged on: a LevelSamples field and its statistic.

    quantile None is the mean (throughput windows). inverted: the objective is the
    reciprocal of the field (cost per token = 1 / throughput on the same instance), so
    its ratio interval is the field's, inverted; it is reported in instance-seconds per
    million output tokens.
    """

    metric: str
    quantile: float | None
    inverted: bool = False

    @property
    def lower_is_better(self) -> bool:
        return self.quantile is not None or self.inverted

    @property
    def unit(self) -> str:
        if self.inverted:
            return "s/Mtok"
        return "ms" if self.quantile is not None else "tok/s"

    @property
    def label(self) -> str:
        """The benchmark check's name prefix for this statistic at a level (`e2e_p50@c`)."""
        stat = "mean" if self.quantile is None else f"p{round(self.quantile * 100):d}"
        return f"{_SHORT[self.metric]}_{stat}@c"

    def gain(self, ratio: float) -> float:
        """Relative gain from candidate/baseline of the *field* (not yet inverted)."""
        if self.inverted:
            return 1.0 - 1.0 / ratio
        return (1.0 - ratio) if self.quantile is not None else (ratio - 1.0)


def objective_measure(objective: Objective | str, policy: BenchmarkPolicy) -> ObjectiveMeasure:
    """The field and statistic `objective` is judged on. `latency` keeps the policy's
    statistic (e2e p50 by default); ITL p50 is judged on each request's mean token gap
    (TPOT), one sample per request, so the gaps of one request are not counted as
    independent evidence."""
    objective = Objective(objective)
    if objective is Objective.LATENCY:
        return ObjectiveMeasure(policy.objective_metric, policy.objective_quantile)
    return {
        Objective.E2E_P50: ObjectiveMeasure("e2e_s", 0.5),
        Objective.TTFT_P99: ObjectiveMeasure("ttft_s", 0.99),
        Objective.ITL_P50: ObjectiveMeasure("tpot_s", 0.5),
        Objective.THROUGHPUT: ObjectiveMeasure(THROUGHPUT_METRIC, None),
        Objective.COST: ObjectiveMeasure(THROUGHPUT_METRIC, None, inverted=True),
    }[objective]


UNPRICED = (
    "the candidate runs on another instance type or count than its reference, and the "
    "price of one of them is unknown: set spec.search.usdPerInstanceHour (or the "
    "instanceTypes alternative's), the chart's pricing.usdPerInstanceHour, or allow "
    "pricing:GetProducts"
)


def priced(interval: RatioInterval, ratio: float) -> RatioInterval:
    """A cost interval with the candidate's hourly price over the reference's applied: the
    candidate's cost in the reference's instance-seconds per million tokens."""
    return RatioInterval(
        point=interval.point * ratio,
        low=interval.low * ratio,
        high=interval.high * ratio,
        baseline=interval.baseline,
        candidate=interval.candidate * ratio,
    )


def invert(interval: RatioInterval) -> RatioInterval:
    """The interval of 1/ratio, with each side's value per million (cost per 1M tokens in
    instance-seconds from tokens per second)."""
    return RatioInterval(
        point=1.0 / interval.point if interval.point > 0 else math.inf,
        low=1.0 / interval.high if interval.high > 0 else math.inf,
        high=1.0 / interval.low if interval.low > 0 else math.inf,
        baseline=1e6 / interval.baseline if interval.baseline > 0 else math.inf,
        candidate=1e6 / interval.candidate if interval.candidate > 0 else math.inf,
    )


class BenchmarkPolicy(CamelModel):
    """How strict the benchmark judge is. Defaults suit a 160-1,000 request benchmark."""

    thresholds: dict[str, float] = Field(
        default_factory=lambda: {
            "ttft_s": 0.10,
            "itl_s": 0.10,
            "tpot_s": 0.10,
            "e2e_s": 0.10,
            THROUGHPUT_METRIC: 0.05,
        },
        description="Largest tolerated relative regression per metric (0.10 = 10 %).",
    )
    quantiles: list[float] = Field(default_factory=lambda: [0.5, 0.99])
    min_samples: int = Field(default=30, ge=2, description="Fewest samples per side per metric.")
    min_tail_samples: int = Field(
        default=5,
        ge=1,
        description="Fewest samples beyond a quantile: p99 needs 100x this many samples.",
    )
    min_throughput_windows: int = Field(default=5, ge=2)
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    resamples: int = Field(default=4000, ge=200)
    seed: int = 0
    # The objective check: which latency statistic "latency" means.
    objective_metric: str = "e2e_s"
    objective_quantile: float = Field(default=0.5, gt=0.0, lt=1.0)
    # The sequential judge's budget per concurrency level (analysis/sequential.py).
    max_requests: int = Field(
        default=2_000,
        ge=1,
        description="Budget: most measured requests per variant per level, all rounds.",
    )
    max_duration_s: float = Field(
        default=1_800.0, gt=0.0, description="Budget: most wall time per level, all rounds."
    )
    round_requests: int = Field(
        default=64, ge=1, description="Fewest requests per variant a further round adds."
    )
    tail_gating: TailGating = Field(
        default=TailGating.WHEN_DECIDABLE,
        description="Tail quantiles gate only when their projected sample need fits the budget.",
    )
    prior_size: float = Field(
        default=DEFAULT_PRIOR_SIZE,
        gt=0.0,
        description="Beta mixing prior's size in the quantile confidence sequence.",
    )

    @field_validator("thresholds")
    @classmethod
    def _known_metrics(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = set(value) - {*LATENCY_METRICS, THROUGHPUT_METRIC}
        if unknown:
            raise ValueError(
                f"thresholds: unknown metric(s) {sorted(unknown)}; use "
                f"{[*LATENCY_METRICS, THROUGHPUT_METRIC]}"
            )
        if any(v < 0 for v in value.values()):
            raise ValueError("thresholds: relative thresholds must be >= 0")
        return value


def _required(policy: BenchmarkPolicy, quantile: float | None) -> int:
    if quantile is None:
        return policy.min_samples
    tail = min(quantile, 1.0 - quantile)
    return max(policy.min_samples, math.ceil(policy.min_tail_samples / tail - 1e-9))


_ADVICE = {
    "itl_s": (
        "a zero or negative token gap means timestamps coarser than the gaps: stamp chunks "
        "with a high-resolution monotonic clock, or judge tpot"
    ),
    THROUGHPUT_METRIC: "a window without tokens or time measures nothing: drop it",
}


def unusable(base: LevelSamples, cand: LevelSamples, metric: str) -> str | None:
    """Why `metric` at this level cannot be judged, and what to change; None when it can."""
    short = _SHORT[metric]
    for side, level in (("baseline", base), ("candidate", cand)):
        if not level.valid:
            return f"{side} {level.invalid_reason()}"
    for side, level in (("baseline", base), ("candidate", cand)):
        values = level.metric(metric)
        if not values:
            return (
                f"no {short} samples from the {side} at concurrency {level.concurrency}; "
                "measure both variants in the same run"
            )
        bad = bad_values(values)
        if bad.count:
            advice = _ADVICE.get(
                metric,
                "a latency must be a finite time above zero: fix the benchmark client's "
                "clock or parsing, or drop the broken requests",
            )
            return f"{bad.describe(f'{side} {short} at concurrency {level.concurrency}')}; {advice}"
    return None


# The figures the bench guard brackets (bench/guard.stamp_errors), by LevelSamples field.
_BRACKETED = {"ttft_s": "ttft", "tpot_s": "tpot"}
_BRACKET_QUANTILES = (0.5, 0.9, 0.95, 0.99)


def stamp_bracket(level: LevelSamples, metric: str, quantile: float) -> float:
    """Seconds within which the level's measured `quantile` of `metric` lies of the true one,
    where the guard found that wider than its allowance; 0.0 where it vouched for it.

    The guard brackets p50, p90, p95 and p99: a quantile between takes the bracket of the
    next one up (a lagging client blurs the slow end most), one beyond p99 takes p99's."""
    prefix = _BRACKETED.get(metric)
    if prefix is None or not level.blurred_s:
        return 0.0
    at = next((q for q in _BRACKET_QUANTILES if q >= quantile - 1e-9), _BRACKET_QUANTILES[-1])
    return level.blurred_s.get(f"{prefix}_p{round(at * 100)}", 0.0)


def stamp_widened(
    low: float, high: float, base_point: float, cand_point: float, base_w: float, cand_w: float
) -> tuple[float, float]:
    """A candidate/baseline ratio interval widened by each side's stamp bracket (seconds).

    Each true quantile lies within its bracket of the measured one, so the ratio of the true
    quantiles lies between low x (1 - cw/c) / (1 + bw/b) and high x (1 + cw/c) / (1 - bw/b);
    a bracket as wide as the baseline's figure leaves no upper bound."""
    if base_w <= 0.0 and cand_w <= 0.0:
        return low, high
    c_rel = cand_w / cand_point if cand_point > 0 else math.inf
    b_rel = base_w / base_point if base_point > 0 else math.inf
    widened_low = low * max(0.0, 1.0 - c_rel) / (1.0 + b_rel)
    widened_high = high * (1.0 + c_rel) / (1.0 - b_rel) if b_rel < 1.0 else math.inf
    return widened_low, widened_high


def stamp_widened_for(
    low: float,
    high: float,
    base_point: float,
    cand_point: float,
    levels: tuple[LevelSamples, LevelSamples],
    metric: str,
    quantile: float,
) -> tuple[float, float]:
    """`stamp_widened` with each side's bracket taken from its level (`stamp_bracket`)."""
    base, cand = levels
    return stamp_widened(
        low,
        high,
        base_point,
        cand_point,
        stamp_bracket(base, metric, quantile),
        stamp_bracket(cand, metric, quantile),
    )


def stamp_note(base: LevelSamples, cand: LevelSamples, metric: str, quantile: float) -> str:
    """What a check's reason says when its interval was widened by the stamp brackets."""
    widths = [
        f"{side} {1000 * w:.1f} ms"
        for side, level in (("baseline", base), ("candidate", cand))
        if (w := stamp_bracket(level, metric, quantile)) > 0.0
    ]
    if not widths:
        return ""
    return (
        "; widened by the client's stamp brackets (" + ", ".join(widths) + "): token frames "
        "waited in the socket for a busy client; lower the concurrency or give the client "
        "more CPU"
    )


def _label(metric: str, quantile: float | None, concurrency: int) -> str:
    stat = "mean" if quantile is None else f"p{round(quantile * 100):d}"
    return f"{_SHORT[metric]}_{stat}@c{concurrency}"


def _pairs(
    baseline: Sequence[LevelSamples], candidate: Sequence[LevelSamples]
) -> list[tuple[LevelSamples, LevelSamples]]:
    by_level = {level.concurrency: level for level in baseline}
    return [
        (by_level[level.concurrency], level)
        for level in sorted(candidate, key=lambda lv: lv.concurrency)
        if level.concurrency in by_level
    ]


def judge_benchmark(
    baseline: Sequence[LevelSamples],
    candidate: Sequence[LevelSamples],
    policy: BenchmarkPolicy | None = None,
) -> list[Check]:
    """One Check per (concurrency level, metric, quantile) present on both sides.

    A level measured on one side only gives an Inconclusive check named `level@cN`.
    """
    policy = policy or BenchmarkPolicy()
    rng = np.random.default_rng(policy.seed)
    plan: list[tuple[LevelSamples, LevelSamples, str, float | None]] = []
    pairs = _pairs(baseline, candidate)
    for base, cand in pairs:
        for metric in LATENCY_METRICS:
            if metric not in policy.thresholds:
                continue
            if not base.metric(metric) and not cand.metric(metric):
                continue
            plan.extend((base, cand, metric, q) for q in policy.quantiles)
        if THROUGHPUT_METRIC in policy.thresholds and (
            base.throughput_tok_s or cand.throughput_tok_s
        ):
            plan.append((base, cand, THROUGHPUT_METRIC, None))
    alpha = (1.0 - policy.confidence) / max(1, len(plan))
    checks = [
        _judge_one(b, c, metric, q, policy, alpha, len(plan), rng) for b, c, metric, q in plan
    ]
    paired = {c.concurrency for _, c in pairs}
    for level in [*baseline, *candidate]:
        if level.concurrency not in paired:
            paired.add(level.concurrency)
            checks.append(
                Check(
                    name=f"level@c{level.concurrency}",
                    kind=CheckKind.BENCHMARK,
                    verdict=Verdict.INCONCLUSIVE,
                    rule="baseline and candidate must be measured at the same concurrency",
                    reason=(
                        f"concurrency {level.concurrency} was measured on one variant only; "
                        "re-run the benchmark on both"
                    ),
                )
            )
    return checks


def _judge_one(
    base: LevelSamples,
    cand: LevelSamples,
    metric: str,
    quantile: float | None,
    policy: BenchmarkPolicy,
    alpha: float,
    checks_in_family: int,
    rng: np.random.Generator,
) -> Check:
    threshold = policy.thresholds[metric]
    name = _label(metric, quantile, base.concurrency)
    base_values, cand_values = base.metric(metric), cand.metric(metric)
    lower_is_better = metric != THROUGHPUT_METRIC
    limit = 1.0 + threshold if lower_is_better else 1.0 - threshold
    need = policy.min_throughput_windows if quantile is None else _required(policy, quantile)
    rule_stat = "mean" if quantile is None else f"p{round(quantile * 100):d}"
    rule = (
        f"percentile bootstrap ({policy.resamples} resamples) of candidate/baseline {rule_stat}, "
        f"one-sided {100 * (1 - alpha):.3g} % bounds (Bonferroni over {checks_in_family} checks)"
    )
    unit = "tok/s" if metric == THROUGHPUT_METRIC else "ms"
    scale = 1.0 if metric == THROUGHPUT_METRIC else 1000.0
    fewest = min(len(base_values), len(cand_values))
    clustered = metric == "itl_s" and bool(base.itl_request_sizes and cand.itl_request_sizes)
    if metric == "itl_s":
        rule += (
            "; requests resampled with their gaps (cluster bootstrap)"
            if clustered
            else "; gaps resampled as if independent (no itlRequestSizes): too narrow"
        )
    refused = unusable(base, cand, metric)
    if refused is None and fewest < need:
        refused = f"{fewest} samples, {need} needed for {rule_stat}; raise benchmark.requests"
        if quantile is None:
            # Throughput: one window per wave of `concurrency` completions after the first.
            refused = (
                f"{fewest} throughput windows, {need} needed: a window is a wave of "
                f"{base.concurrency} completions after the first, so raise benchmark.requests "
                f"to at least {(need + 1) * base.concurrency}"
            )
    if refused is not None:
        return Check(
            name=name,
            kind=CheckKind.BENCHMARK,
            verdict=Verdict.INCONCLUSIVE,
            threshold=limit,
            unit=unit,
            threshold_unit="ratio",
            samples=fewest,
            rule=rule,
            reason=f"{name}: {refused}",
        )
    if quantile is None:
        interval = mean_ratio_interval(base_values, cand_values, alpha, policy.resamples, rng)
    elif clustered:
        interval = cluster_quantile_ratio_interval(
            (base_values, base.itl_request_sizes),
            (cand_values, cand.itl_request_sizes),
            quantile,
            alpha,
            min(policy.resamples, CLUSTER_RESAMPLES),
            rng,
        )
    else:
        interval = quantile_ratio_interval(
            base_values, cand_values, quantile, alpha, policy.resamples, rng
        )
    note = ""
    if quantile is not None:
        low, high = stamp_widened_for(
            interval.low,
            interval.high,
            interval.baseline,
            interval.candidate,
            (base, cand),
            metric,
            quantile,
        )
        interval = replace(interval, low=low, high=high)
        note = stamp_note(base, cand, metric, quantile)
    verdict = _regression_verdict(interval, limit, lower_is_better)
    return Check(
        name=name,
        kind=CheckKind.BENCHMARK,
        verdict=verdict,
        baseline=interval.baseline * scale,
        candidate=interval.candidate * scale,
        threshold=limit,
        unit=unit,
        threshold_unit="ratio",
        interval_low=interval.low,
        interval_high=interval.high,
        samples=fewest,
        rule=rule,
        reason=_regression_reason(name, verdict, interval, limit, lower_is_better) + note,
    )


def _regression_verdict(interval: RatioInterval, limit: float, lower_is_better: bool) -> Verdict:
    if lower_is_better:
        if interval.low > limit:
            return Verdict.FAIL
        if interval.high <= limit:
            return Verdict.PASS
        return Verdict.INCONCLUSIVE
    if interval.high < limit:
        return Verdict.FAIL
    if interval.low >= limit:
        return Verdict.PASS
    return Verdict.INCONCLUSIVE


def _regression_reason(
    name: str, verdict: Verdict, interval: RatioInterval, limit: float, lower_is_better: bool
) -> str:
    ci = f"ratio {interval.point:.3f} (CI {interval.low:.3f}-{interval.high:.3f})"
    side = "above" if lower_is_better else "below"
    if verdict is Verdict.FAIL:
        return f"{name} regressed: {ci}, entirely {side} the limit {limit:.3f}"
    if verdict is Verdict.PASS:
        return f"{name} within the limit {limit:.3f}: {ci}"
    return f"{name} undecided: {ci} straddles the limit {limit:.3f}; more samples would decide"


def objective_check(
    objective: Objective | str,
    min_improvement: float,
    baseline: Sequence[LevelSamples],
    candidate: Sequence[LevelSamples],
    policy: BenchmarkPolicy | None = None,
    cost_ratio: float | None = 1.0,
) -> Check:
    """Pass only when every concurrency level shows at least `min_improvement` with confidence.

    `cost_ratio`: a cost objective's candidate/reference hourly price (another instance
    type); None where one is unknown (Inconclusive, naming how to give it).

    Lower-is-better objectives (latencies at their quantile, cost per token): the one-sided
    upper bound of candidate/baseline must be <= 1 - min_improvement. Throughput: the lower
    bound of the mean-throughput ratio must be >= 1 + min_improvement. Otherwise the
    verdict is NoImprovement: the burden of proof is on the candidate.
    """
    policy = policy or BenchmarkPolicy()
    objective = Objective(objective)
    if not 0.0 <= min_improvement < 1.0:
        raise ValueError("minImprovement: must be a fraction in [0, 1), e.g. 0.1 for 10 %")
    rng = np.random.default_rng(policy.seed + 1)
    pairs = _pairs(baseline, candidate)
    alpha = 1.0 - policy.confidence
    measure = objective_measure(objective, policy)
    metric, quantile = measure.metric, measure.quantile
    lower = measure.lower_is_better
    target = 1.0 - min_improvement if lower else 1.0 + min_improvement
    stat = "mean" if quantile is None else f"p{round(quantile * 100):d}"
    what = f"{_SHORT[metric]} {stat}"
    if measure.inverted:
        what = f"1/{what} (cost per token)"
    rule = (
        f"one-sided {100 * policy.confidence:.3g} % percentile-bootstrap bound of candidate/"
        f"baseline {what} at every concurrency must "
        f"{'stay <=' if lower else 'reach >='} {target:.3f}"
    )
    ratio = cost_ratio if measure.inverted else 1.0
    if ratio is not None and ratio != 1.0:
        rule += f" (candidate's cost x the hourly price ratio {ratio:.3f})"
    name = f"objective_{objective.value}"

    def undecided(reason: str, samples: int = 0) -> Check:
        return Check(
            name=name,
            kind=CheckKind.OBJECTIVE,
            verdict=Verdict.INCONCLUSIVE,
            threshold=target,
            threshold_unit="ratio",
            samples=samples,
            rule=rule,
            reason=f"{name}: {reason}",
        )

    if ratio is None:
        return undecided(UNPRICED)
    need = _required(policy, quantile) if quantile is not None else policy.min_throughput_windows
    worst: tuple[float, RatioInterval, int] | None = None
    for base, cand in pairs:
        fewest = min(len(base.metric(metric)), len(cand.metric(metric)))
        refused = unusable(base, cand, metric)
        if refused is None and fewest < need:
            refused = (
                f"{fewest} {_SHORT[metric]} samples at concurrency {base.concurrency}, "
                f"{need} needed; raise benchmark.requests"
            )
        if refused is not None:
            return undecided(refused, fewest)
        if quantile is None:
            interval = mean_ratio_interval(
                base.metric(metric), cand.metric(metric), alpha, policy.resamples, rng
            )
            if measure.inverted:
                interval = priced(invert(interval), ratio)
        else:
            interval = quantile_ratio_interval(
                base.metric(metric), cand.metric(metric), quantile, alpha, policy.resamples, rng
            )
        # The worst level: the highest upper bound (lower is better) or the lowest lower
        # bound (throughput).
        key = interval.high if lower else -interval.low
        if worst is None or key > worst[0]:
            worst = (key, interval, base.concurrency)
    if worst is None:
        return undecided("no concurrency level was measured on both variants")
    _, interval, level = worst
    shown = interval.high <= target if lower else interval.low >= target
    gain = (1.0 - interval.point) if lower else (interval.point - 1.0)
    bound_gain = (1.0 - interval.high) if lower else (interval.low - 1.0)
    scale = 1000.0 if quantile is not None else 1.0
    if shown:
        verdict = Verdict.PASS
        reason = (
            f"{objective.value} improves by {100 * gain:.1f} % at concurrency {level} "
            f"(at least {100 * bound_gain:.1f} % with confidence; "
            f"needed {100 * min_improvement:.1f} %)"
        )
    else:
        verdict = Verdict.NO_IMPROVEMENT
        reason = (
            f"{objective.value} improvement at concurrency {level} is {100 * gain:.1f} %, "
            f"only {100 * bound_gain:.1f} % with confidence; the spec needs "
            f"{100 * min_improvement:.1f} %, so the candidate is not promoted"
        )
    return Check(
        name=name,
        kind=CheckKind.OBJECTIVE,
        verdict=verdict,
        baseline=interval.baseline * scale,
        candidate=interval.candidate * scale,
        threshold=target,
        unit=measure.unit,
        threshold_unit="ratio",
        interval_low=interval.low,
        interval_high=interval.high,
        samples=min(len(b.metric(metric)) for pair in pairs for b in pair),
        rule=rule,
        reason=reason,
    )
