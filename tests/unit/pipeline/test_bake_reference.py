"""The bake's reference is the baseline over the whole canary, not its last interval.

One frozen interval reused in every bake interval made its own noise repeat: a reference
with no 5XX, or measured in a quiet minute, rolled back identical candidates in 11-33 %
of bakes (benchmarks/results/bench_judges_bake_before.json). The reference now pools the
canary's usable intervals (5XX totals, geometric mean latency, probe samples), and the
bake tests the promoted variant's 5XX against the pooled rate's upper confidence bound.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from endpoint_optimizer.analysis.live import (
    LiveObservation,
    LivePolicy,
    ProbeSamples,
    VariantInterval,
    judge_interval,
    reference_upper_bound,
)
from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.api.live import MAX_REFERENCE_SAMPLES, LiveDecision, LiveState
from endpoint_optimizer.pipeline.record import reference_interval, remembered

START = datetime(2026, 1, 1, tzinfo=UTC)


def baseline(invocations: int, errors: int, mean: float, probes: list[float]) -> VariantInterval:
    return VariantInterval(
        invocations=invocations,
        errors_5xx=errors,
        latency_mean_s=mean,
        latency_s=mean * 3,
        probes=ProbeSamples(requests=len(probes), ttft_s=probes, tpot_s=probes),
    )


def test_the_reference_pools_the_canary_intervals() -> None:
    policy = LivePolicy()
    figures = None
    means = [1.0, 2.0, 4.0]
    for k, mean in enumerate(means):
        interval = baseline(240, k, mean, [mean] * 300)
        figures = remembered(figures, interval, START + timedelta(minutes=k), policy)
    # An interval with too few invocations and no probes adds nothing.
    quiet = VariantInterval(invocations=3, errors_5xx=3, latency_mean_s=9.0, latency_s=9.0)
    assert remembered(figures, quiet, START + timedelta(minutes=9), policy) == figures
    assert figures is not None
    assert (figures.invocations_total, figures.errors_5xx_total) == (720, 0 + 1 + 2)
    assert (figures.invocations, figures.errors_5xx) == (240, 2)  # the newest, as before
    reference = reference_interval(figures)
    assert reference.latency_mean_s == pytest.approx(2.0)  # geometric mean of 1, 2, 4
    assert reference.latency_s == pytest.approx(6.0)
    # The probes: the newest MAX_REFERENCE_SAMPLES of all intervals, newest last.
    assert len(figures.probe_ttft_s) == MAX_REFERENCE_SAMPLES == 600
    assert figures.probe_ttft_s[:300] == [2.0] * 300 and figures.probe_ttft_s[300:] == [4.0] * 300


def test_the_upper_bound_of_a_reference_rate_is_clopper_pearsons() -> None:
    # No error in n: 1 - alpha^(1/n).
    assert reference_upper_bound(0, 2400, 0.01) == pytest.approx(1 - 0.01 ** (1 / 2400), rel=1e-6)
    assert reference_upper_bound(12, 2400, 0.01) > 12 / 2400
    assert reference_upper_bound(5, 0, 0.01) == 1.0


def _bake(rate: float, reference: tuple[int, int], seed: int, intervals: int = 30) -> int | None:
    """Interval at which the errors test rolls the promoted variant back, or None."""
    rng = np.random.default_rng(seed)
    policy = LivePolicy(error_reference=reference, alpha=0.006)
    state = LiveState()
    # Its last interval had no 5XX; latency equal on both sides (errors are the subject).
    frozen = VariantInterval(invocations=240, errors_5xx=0, latency_mean_s=1.0, latency_s=3.0)
    for k in range(1, intervals + 1):
        promoted = VariantInterval(
            invocations=480,
            errors_5xx=int(rng.binomial(480, rate)),
            latency_mean_s=1.0,
            latency_s=3.0,
        )
        end = START + timedelta(minutes=k)
        obs = LiveObservation(interval_end=end, baseline=frozen, candidate=promoted)
        result = judge_interval(state, obs, policy, end)
        state = result.state
        check = next(c for c in result.checks if c.name == "live_errors_5xx")
        assert "over the canary" in check.reason
        if result.decision is LiveDecision.ROLLBACK:
            assert check.verdict is Verdict.FAIL
            return k
    return None


def test_the_same_error_rate_as_the_canarys_baseline_is_not_rolled_back() -> None:
    # 0.5 % over a 10-interval canary (12 of 2400), whatever its last interval showed.
    found = [_bake(0.005, (12, 2400), seed) for seed in range(40)]
    assert found == [None] * 40


def test_a_fourfold_error_rate_is_rolled_back_within_a_few_intervals() -> None:
    found = [_bake(0.02, (12, 2400), seed) for seed in range(20)]
    assert all(k is not None and k <= 10 for k in found), found
    assert math.isfinite(sum(k for k in found if k is not None))
