"""The benchmark judge and the objective check."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from endpoint_optimizer.analysis.benchmark import (
    BenchmarkPolicy,
    LevelSamples,
    judge_benchmark,
    objective_check,
)
from endpoint_optimizer.api.checks import CheckKind, Verdict


def level(concurrency: int, seed: int, factor: float = 1.0, n: int = 1_000) -> LevelSamples:
    rng = np.random.default_rng(seed)
    return LevelSamples(
        concurrency=concurrency,
        ttft_s=list(rng.lognormal(-2.0, 0.4, n) * factor),
        itl_s=list(rng.lognormal(-4.0, 0.2, n) * factor),
        tpot_s=list(rng.lognormal(-4.0, 0.2, n) * factor),
        e2e_s=list(rng.lognormal(1.0, 0.2, n) * factor),
        throughput_tok_s=list(rng.normal(1_000.0, 20.0, 10) / factor),
    )


latencies = st.lists(
    st.floats(min_value=1e-4, max_value=100.0, allow_nan=False), min_size=1, max_size=400
)


@settings(max_examples=40, deadline=None)
@given(latencies, st.integers(min_value=0, max_value=2**31))
def test_identical_samples_never_fail(values: list[float], seed: int) -> None:
    sample = LevelSamples(
        concurrency=4,
        ttft_s=values,
        itl_s=values,
        tpot_s=values,
        e2e_s=values,
        throughput_tok_s=values,
    )
    policy = BenchmarkPolicy(seed=seed, min_samples=2, min_tail_samples=1, resamples=400)
    checks = judge_benchmark([sample], [sample], policy)
    assert checks
    assert all(check.verdict is not Verdict.FAIL for check in checks)


@settings(max_examples=10, deadline=None)
@given(st.integers(min_value=0, max_value=2**31), st.floats(min_value=0.1, max_value=0.8))
def test_candidate_twice_as_slow_on_large_samples_always_fails(seed: int, spread: float) -> None:
    rng = np.random.default_rng(seed)
    base = list(rng.lognormal(-1.0, spread, 3_000))
    cand = [2.0 * x for x in rng.lognormal(-1.0, spread, 3_000)]
    policy = BenchmarkPolicy(seed=seed, resamples=1_000)
    checks = judge_benchmark(
        [LevelSamples(concurrency=1, ttft_s=base, e2e_s=base)],
        [LevelSamples(concurrency=1, ttft_s=cand, e2e_s=cand)],
        policy,
    )
    assert len(checks) == 4
    assert all(check.verdict is Verdict.FAIL for check in checks)


def test_equal_variants_pass_the_median_and_report_values_in_ms() -> None:
    checks = judge_benchmark([level(16, 1)], [level(16, 2)])
    by_name = {check.name: check for check in checks}
    median = by_name["ttft_p50@c16"]
    assert median.verdict is Verdict.PASS
    assert median.kind is CheckKind.BENCHMARK
    assert median.unit == "ms" and median.baseline is not None and median.baseline > 50
    assert median.interval_low is not None and median.interval_low < 1.0 < median.threshold  # type: ignore[operator]
    assert "Bonferroni over 9 checks" in median.rule
    assert by_name["throughput_mean@c16"].unit == "tok/s"


def test_thirty_percent_slower_candidate_fails_and_throughput_fails_too() -> None:
    checks = {c.name: c for c in judge_benchmark([level(1, 1)], [level(1, 2, factor=1.3)])}
    assert checks["e2e_p50@c1"].verdict is Verdict.FAIL
    assert checks["throughput_mean@c1"].verdict is Verdict.FAIL
    assert "regressed" in checks["e2e_p50@c1"].reason


def test_too_few_samples_for_p99_is_inconclusive_and_says_what_to_do() -> None:
    checks = {c.name: c for c in judge_benchmark([level(1, 1, n=160)], [level(1, 2, n=160)])}
    p99 = checks["ttft_p99@c1"]
    assert p99.verdict is Verdict.INCONCLUSIVE
    assert "500 needed" in p99.reason and "benchmark.requests" in p99.reason
    assert checks["ttft_p50@c1"].verdict is not Verdict.INCONCLUSIVE or p99.samples == 160


def test_level_measured_on_one_side_only_is_inconclusive() -> None:
    checks = judge_benchmark([level(1, 1), level(16, 1)], [level(1, 2)])
    orphan = [c for c in checks if c.name == "level@c16"]
    assert orphan and orphan[0].verdict is Verdict.INCONCLUSIVE


def test_unknown_metric_threshold_is_rejected_with_the_field_name() -> None:
    with pytest.raises(ValidationError, match="thresholds"):
        BenchmarkPolicy(thresholds={"latency": 0.1})


def test_objective_latency_passes_when_improvement_is_shown() -> None:
    check = objective_check(
        "latency", 0.1, [level(1, 1), level(8, 3)], [level(1, 2, 0.7), level(8, 4, 0.7)]
    )
    assert check.verdict is Verdict.PASS
    assert check.interval_high is not None and check.interval_high <= 0.9


def test_objective_latency_without_enough_improvement_is_no_improvement() -> None:
    check = objective_check("latency", 0.1, [level(1, 1)], [level(1, 2, 0.97)])
    assert check.verdict is Verdict.NO_IMPROVEMENT
    assert "not promoted" in check.reason


def test_objective_is_decided_by_the_worst_concurrency_level() -> None:
    check = objective_check(
        "throughput", 0.1, [level(1, 1), level(16, 3)], [level(1, 2, 0.5), level(16, 4, 1.0)]
    )
    assert check.verdict is Verdict.NO_IMPROVEMENT
    assert "concurrency 16" in check.reason


def test_objective_throughput_passes_on_a_faster_candidate() -> None:
    check = objective_check("throughput", 0.2, [level(1, 1)], [level(1, 2, 0.5)])
    assert check.verdict is Verdict.PASS
    assert check.unit == "tok/s"


def test_objective_rejects_an_improvement_that_is_not_a_fraction() -> None:
    with pytest.raises(ValueError, match="minImprovement"):
        objective_check("latency", 10.0, [level(1, 1)], [level(1, 2)])


@settings(max_examples=20, deadline=None)
@given(
    st.sampled_from([float("nan"), float("inf"), -0.2, 0.0]),
    st.integers(min_value=0, max_value=999),
    st.sampled_from(["baseline", "candidate"]),
)
def test_broken_samples_are_inconclusive_with_the_reason_never_pass_or_fail(
    bad: float, where: int, side: str
) -> None:
    base, cand = level(8, 1), level(8, 2, factor=2.0)
    broken = (base if side == "baseline" else cand).model_copy()
    values = list(broken.ttft_s)
    values[where] = bad
    broken = broken.model_copy(update={"ttft_s": values})
    pair = (broken, cand) if side == "baseline" else (base, broken)
    checks = {c.name: c for c in judge_benchmark([pair[0]], [pair[1]], BenchmarkPolicy())}
    for name in ("ttft_p50@c8", "ttft_p99@c8"):
        assert checks[name].verdict is Verdict.INCONCLUSIVE
        assert f"{side} ttft at concurrency 8" in checks[name].reason
    # The other metrics are still judged.
    assert checks["e2e_p50@c8"].verdict is Verdict.FAIL


def test_a_level_the_guard_marked_invalid_is_inconclusive_with_its_reasons() -> None:
    invalid = level(8, 1).model_copy(
        update={"valid": False, "invalid_reasons": ["event-loop lag p99 0.3 s exceeds 0.05 s"]}
    )
    checks = judge_benchmark([invalid], [level(8, 2, factor=2.0)])
    assert checks and all(c.verdict is Verdict.INCONCLUSIVE for c in checks)
    assert all("event-loop lag" in c.reason and "client" in c.reason for c in checks)
    objective = objective_check("latency", 0.1, [invalid], [level(8, 2, 0.5)])
    assert objective.verdict is Verdict.INCONCLUSIVE and "event-loop lag" in objective.reason


def test_zero_token_gaps_ask_for_a_finer_clock() -> None:
    base = level(8, 1)
    gaps = list(base.itl_s)
    gaps[3] = 0.0
    checks = {
        c.name: c for c in judge_benchmark([base.model_copy(update={"itl_s": gaps})], [level(8, 2)])
    }
    assert checks["itl_p50@c8"].verdict is Verdict.INCONCLUSIVE
    assert "clock" in checks["itl_p50@c8"].reason


def rounded_gaps(rng: np.random.Generator, requests: int) -> tuple[list[float], list[int]]:
    """A fast decoder's token gaps (about 4.5 ms) stamped to the millisecond."""
    tpot = rng.lognormal(np.log(0.0045), 0.15, requests)
    gaps = [np.maximum(np.round(t * rng.gamma(20.0, 0.05, 100), 3), 0.001) for t in tpot]
    return [float(g) for request in gaps for g in request], [100] * requests


def test_itl_intervals_resample_requests_when_their_sizes_are_given() -> None:
    rng = np.random.default_rng(11)
    policy = BenchmarkPolicy(thresholds={"itl_s": 0.1}, quantiles=[0.5], resamples=1_000)
    widths = {}
    for clustered in (False, True):
        (b, b_sizes), (c, c_sizes) = rounded_gaps(rng, 300), rounded_gaps(rng, 300)
        extra_b = {"itl_request_sizes": b_sizes} if clustered else {}
        extra_c = {"itl_request_sizes": c_sizes} if clustered else {}
        (check,) = judge_benchmark(
            [LevelSamples(concurrency=4, itl_s=b, **extra_b)],
            [LevelSamples(concurrency=4, itl_s=c, **extra_c)],
            policy,
        )
        assert check.interval_low is not None and check.interval_high is not None
        widths[clustered] = check.interval_high - check.interval_low
        assert ("cluster bootstrap" in check.rule) is clustered
    # Gaps of one request share its speed: resampling requests gives the honest, wider
    # interval (the independent one is often a single point on rounded timestamps).
    assert widths[True] >= widths[False]


def test_request_sizes_must_add_up_to_the_gaps() -> None:
    with pytest.raises(ValidationError, match="itlRequestSizes"):
        LevelSamples(concurrency=1, itl_s=[0.01, 0.02, 0.03], itl_request_sizes=[1, 1])


def shaped(seed: int, ttft: float = 1.0, tpot: float = 1.0, tail: float = 1.0) -> LevelSamples:
    """1,000 requests whose TTFT tail (slowest 3 %), TPOT and body can be scaled apart."""
    rng = np.random.default_rng(seed)
    first = rng.lognormal(-2.0, 0.2, 1_000) * ttft
    first[rng.random(1_000) < 0.03] *= 6.0 * tail
    gap = rng.lognormal(-4.0, 0.1, 1_000) * tpot
    e2e = first + 100 * gap
    return LevelSamples(
        concurrency=8,
        ttft_s=list(first),
        tpot_s=list(gap),
        e2e_s=list(e2e),
        throughput_tok_s=[100.0 * 8 / float(np.mean(e2e[i : i + 50])) for i in range(0, 1000, 50)],
    )


@pytest.mark.parametrize(
    ("metric", "candidate", "passes"),
    [
        # The TTFT tail 40 % shorter: ttftP99 shows it; e2e p50 (the body) does not move.
        ("ttftP99", {"tail": 0.6}, True),
        ("latency", {"tail": 0.6}, False),
        ("e2eP50", {"tail": 0.6}, False),
        # Each token 25 % faster: itlP50 (per-request token gap) and e2e p50 both show it;
        # ttftP99 does not move.
        ("itlP50", {"tpot": 0.75}, True),
        ("e2eP50", {"tpot": 0.75}, True),
        ("ttftP99", {"tpot": 0.75}, False),
    ],
)
def test_each_objective_metric_is_judged_on_its_own_statistic(
    metric: str, candidate: dict[str, float], passes: bool
) -> None:
    check = objective_check(metric, 0.15, [shaped(1)], [shaped(2, **candidate)])
    assert check.name == f"objective_{metric}" and check.unit == "ms"
    assert check.verdict is (Verdict.PASS if passes else Verdict.NO_IMPROVEMENT), check.reason


def test_itl_objective_counts_one_sample_per_request_not_per_token_gap() -> None:
    check = objective_check("itlP50", 0.15, [shaped(1)], [shaped(2, tpot=0.75)])
    assert check.samples == 1_000 and "tpot p50" in check.rule


def test_cost_per_million_tokens_is_the_reciprocal_of_throughput() -> None:
    base, cand = level(1, 1), level(1, 2, 0.8)  # throughput / 0.8: 25 % more tokens per second
    cost = objective_check("costPerMillionTokens", 0.15, [base], [cand])
    throughput = objective_check("throughput", 0.2, [base], [cand])
    assert cost.verdict is Verdict.PASS and cost.unit == "s/Mtok"
    assert throughput.interval_low is not None and throughput.interval_high is not None
    # The cost interval is the throughput interval inverted, end for end.
    assert cost.interval_low == pytest.approx(1.0 / throughput.interval_high)
    assert cost.interval_high == pytest.approx(1.0 / throughput.interval_low)
    # Instance-seconds per million output tokens on each side.
    assert cost.baseline == pytest.approx(1e6 / throughput.baseline)
    assert cost.candidate == pytest.approx(1e6 / throughput.candidate)
    # 25 % more throughput is 20 % less cost: not 25 %.
    assert objective_check("costPerMillionTokens", 0.25, [base], [cand]).verdict is (
        Verdict.NO_IMPROVEMENT
    )


def test_an_unknown_objective_metric_is_refused() -> None:
    with pytest.raises(ValueError, match="p95"):
        objective_check("p95", 0.1, [level(1, 1)], [level(1, 2)])
