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
