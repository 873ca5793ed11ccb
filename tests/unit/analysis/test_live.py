"""The live sequential judge: error control under per-interval checking, power, no-data."""

from __future__ import annotations

import statistics
from datetime import UTC, datetime, timedelta

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.analysis.live import (
    LiveObservation,
    LivePolicy,
    VariantInterval,
    judge_interval,
)
from endpoint_optimizer.api import NoDataPolicy
from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.api.live import LatencyNoise, LiveDecision, LiveState

START = datetime(2026, 1, 1, tzinfo=UTC)


def observation(
    rng: np.random.Generator,
    minute: int,
    slowdown: float = 1.0,
    base_n: int = 90,
    cand_n: int = 30,
    base_err: float = 0.0,
    cand_err: float = 0.0,
) -> LiveObservation:
    def variant(n: int, factor: float, err: float) -> VariantInterval:
        return VariantInterval(
            invocations=n,
            errors_5xx=int(rng.binomial(n, err)),
            latency_samples_s=list(rng.lognormal(-1.5, 0.35, n) * factor),
        )

    return LiveObservation(
        interval_end=START + timedelta(minutes=minute),
        baseline=variant(base_n, 1.0, base_err),
        candidate=variant(cand_n, slowdown, cand_err),
    )


def run(rng: np.random.Generator, intervals: int, policy: LivePolicy, **kw: float) -> int | None:
    """Interval (1-based) at which the judge decides to roll back, or None."""
    state = LiveState()
    for minute in range(1, intervals + 1):
        obs = observation(rng, minute, **kw)  # type: ignore[arg-type]
        result = judge_interval(state, obs, policy, now=obs.interval_end)
        state = result.state
        if result.decision is LiveDecision.ROLLBACK:
            return minute
    return None


def test_aa_false_rollback_rate_holds_under_checking_every_interval() -> None:
    rng = np.random.default_rng(11)
    policy = LivePolicy(alpha=0.05)
    rollbacks = sum(run(rng, 20, policy) is not None for _ in range(150))
    # alpha 0.05 bounds the rate; 150 rollouts leave sampling noise, hence 0.09.
    assert rollbacks / 150 <= 0.09


def test_twice_as_slow_candidate_rolls_back_within_a_few_intervals() -> None:
    rng = np.random.default_rng(5)
    detected = [run(rng, 20, LivePolicy(), slowdown=2.0) for _ in range(20)]
    assert all(d is not None and d <= 4 for d in detected)


def test_candidate_with_more_5xx_rolls_back() -> None:
    rng = np.random.default_rng(9)
    detected = run(rng, 30, LivePolicy(), base_err=0.01, cand_err=0.2)
    assert detected is not None and detected <= 10


def test_same_interval_twice_is_judged_once() -> None:
    rng = np.random.default_rng(1)
    obs = observation(rng, 1)
    first = judge_interval(LiveState(), obs, LivePolicy(), now=START)
    again = judge_interval(first.state, obs, LivePolicy(), now=START + timedelta(seconds=30))
    assert again.state == first.state and again.checks == []
    assert first.state.intervals == 1


def test_state_survives_a_round_trip_through_status_json() -> None:
    rng = np.random.default_rng(2)
    state = LiveState()
    for minute in (1, 2, 3):
        state = judge_interval(state, observation(rng, minute, 1.3), LivePolicy(), START).state
    restored = LiveState.model_validate(state.dump())
    assert restored == state
    assert "latencyLogLr" in state.dump()


def test_no_data_pause_holds_without_counting_a_failure() -> None:
    rng = np.random.default_rng(3)
    quiet = observation(rng, 1, cand_n=5)
    result = judge_interval(LiveState(), quiet, LivePolicy(min_invocations=20), START)
    assert result.decision is LiveDecision.HOLD
    assert result.checks[0].verdict is Verdict.INCONCLUSIVE
    assert result.state.failures == 0 and "need 20" in result.checks[0].reason


def test_no_data_fail_rolls_back_at_the_failure_limit() -> None:
    rng = np.random.default_rng(4)
    policy = LivePolicy(on_no_data=NoDataPolicy.FAIL, failure_limit=2)
    state = LiveState()
    decisions = []
    for minute in (1, 2):
        result = judge_interval(state, observation(rng, minute, cand_n=0), policy, START)
        state = result.state
        decisions.append(result.decision)
    assert decisions == [LiveDecision.CONTINUE, LiveDecision.ROLLBACK]


def test_no_data_pass_continues() -> None:
    rng = np.random.default_rng(4)
    policy = LivePolicy(on_no_data=NoDataPolicy.PASS)
    result = judge_interval(LiveState(), observation(rng, 1, cand_n=0), policy, START)
    assert result.decision is LiveDecision.CONTINUE
    assert result.checks[0].verdict is Verdict.PASS


def aggregate_run(
    rng: np.random.Generator, factor: float, spread: float, with_mean: bool = False
) -> int | None:
    state = LiveState()
    for minute in range(1, 16):

        def variant(n: int, scale: float) -> VariantInterval:
            return VariantInterval(
                invocations=n,
                latency_s=float(rng.lognormal(0.0, spread)) * scale,
                latency_mean_s=float(rng.lognormal(-1.0, spread / 4)) * scale
                if with_mean
                else None,
            )

        obs = LiveObservation(
            interval_end=START + timedelta(minutes=minute),
            baseline=variant(100, 1.0),
            candidate=variant(30, factor),
        )
        result = judge_interval(state, obs, LivePolicy(), START)
        state = result.state
        if result.decision is LiveDecision.ROLLBACK:
            return minute
    return None


def test_aggregate_only_path_detects_a_doubling() -> None:
    rng = np.random.default_rng(8)
    detected = aggregate_run(rng, 2.0, spread=0.05)
    # The spread is learnt, not assumed, so even a clean doubling needs a few intervals.
    assert detected is not None and detected <= 5


def test_aggregate_only_path_holds_its_error_rate_on_noisy_p99_without_a_variance_guess() -> None:
    rng = np.random.default_rng(10)
    # A p99 of a few requests swings by +-50 % from minute to minute.
    rollbacks = sum(aggregate_run(rng, 1.0, spread=0.5) is not None for _ in range(150))
    assert rollbacks <= 3


def test_aggregate_path_never_rejects_on_its_first_interval() -> None:
    obs = LiveObservation(
        interval_end=START,
        baseline=VariantInterval(invocations=100, latency_s=1.0),
        candidate=VariantInterval(invocations=100, latency_s=5.0),
    )
    result = judge_interval(LiveState(), obs, LivePolicy(), START)
    assert result.decision is LiveDecision.CONTINUE
    assert result.checks[0].p_value == 1.0


def test_aggregate_path_prefers_the_average_when_both_sides_have_it() -> None:
    # p99 is mostly noise here; the averages carry a 2x slowdown with a quarter the spread.
    with_mean = aggregate_run(np.random.default_rng(16), 2.0, spread=0.8, with_mean=True)
    p99_only = aggregate_run(np.random.default_rng(16), 2.0, spread=0.8)
    assert with_mean is not None
    assert p99_only is None or with_mean < p99_only


def test_after_rollback_every_interval_reports_fail() -> None:
    rng = np.random.default_rng(6)
    state = LiveState(decision=LiveDecision.ROLLBACK)
    result = judge_interval(state, observation(rng, 1), LivePolicy(), START)
    assert result.decision is LiveDecision.ROLLBACK
    assert result.checks[0].verdict is Verdict.FAIL


def mixed_prompt_observation(
    rng: np.random.Generator, minute: int, slowdown: float, with_tokens: bool
) -> LiveObservation:
    """TTFT mostly proportional to prompt length, which varies 4x between requests."""

    def variant(n: int, factor: float) -> VariantInterval:
        tokens = np.exp(rng.normal(np.log(512), 0.7, n)).round().astype(int) + 1
        latency = 0.0004 * tokens * rng.lognormal(0.0, 0.15, n) * factor
        return VariantInterval(
            invocations=n,
            latency_samples_s=list(latency),
            input_tokens=[int(t) for t in tokens] if with_tokens else [],
        )

    return LiveObservation(
        interval_end=START + timedelta(minutes=minute),
        baseline=variant(100, 1.0),
        candidate=variant(20, slowdown),
    )


def mixed_run(rng: np.random.Generator, slowdown: float, with_tokens: bool) -> int | None:
    state = LiveState()
    for minute in range(1, 11):
        obs = mixed_prompt_observation(rng, minute, slowdown, with_tokens)
        result = judge_interval(state, obs, LivePolicy(), now=obs.interval_end)
        state = result.state
        if result.decision is LiveDecision.ROLLBACK:
            return minute
    return None


def test_prompt_tokens_as_covariate_catch_a_regression_that_prompt_spread_hides() -> None:
    rng = np.random.default_rng(12)
    plain = [mixed_run(rng, 1.15, with_tokens=False) for _ in range(20)]
    adjusted = [mixed_run(rng, 1.15, with_tokens=True) for _ in range(20)]
    assert sum(d is not None for d in adjusted) >= 18
    assert sum(d is not None for d in adjusted) > sum(d is not None for d in plain)


def test_prompt_token_covariate_keeps_the_false_rollback_rate() -> None:
    rng = np.random.default_rng(13)
    rollbacks = sum(mixed_run(rng, 1.0, with_tokens=True) is not None for _ in range(100))
    assert rollbacks <= 4


def test_every_interval_reports_location_tail_and_error_checks() -> None:
    rng = np.random.default_rng(14)
    result = judge_interval(LiveState(), observation(rng, 1), LivePolicy(), START)
    assert [c.name for c in result.checks] == [
        "live_latency",
        "live_latency_tail",
        "live_errors_5xx",
    ]
    assert all(c.p_value is not None and c.rule and c.reason for c in result.checks)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.lists(st.floats(min_value=1e-3, max_value=60.0), min_size=20, max_size=80),
        min_size=1,
        max_size=6,
    ),
    st.integers(min_value=0, max_value=5),
)
def test_candidate_identical_to_baseline_never_rolls_back(
    intervals: list[list[float]], errors: int
) -> None:
    state = LiveState()
    for minute, samples in enumerate(intervals, start=1):
        same = VariantInterval(
            invocations=len(samples), errors_5xx=errors, latency_samples_s=samples
        )
        obs = LiveObservation(
            interval_end=START + timedelta(minutes=minute), baseline=same, candidate=same
        )
        result = judge_interval(state, obs, LivePolicy(), START)
        state = result.state
        assert result.decision is LiveDecision.CONTINUE
        assert all(check.verdict is Verdict.PASS for check in result.checks)


def test_calibrated_cloudwatch_path_detects_sooner_and_keeps_its_error_rate() -> None:
    def run(seed: int, factor: float, calibrated: bool) -> int | None:
        rng = np.random.default_rng(seed)
        c = 0.2
        state = LiveState(noise=LatencyNoise(average=c, intervals=60) if calibrated else None)
        for minute in range(1, 11):

            def variant(n: int, scale: float) -> VariantInterval:
                mean = float(np.exp(rng.normal(0.0, np.sqrt(c / n)))) * scale
                return VariantInterval(invocations=n, latency_s=mean * 3, latency_mean_s=mean)

            obs = LiveObservation(
                interval_end=START + timedelta(minutes=minute),
                baseline=variant(90, 1.0),
                candidate=variant(30, factor),
            )
            result = judge_interval(state, obs, LivePolicy(), START)
            state = result.state
            if result.decision is LiveDecision.ROLLBACK:
                return minute
        return None

    calibrated = [run(s, 1.2, True) for s in range(20)]
    learnt = [run(s, 1.2, False) for s in range(20)]
    assert sum(d is not None for d in calibrated) >= 16
    assert statistics.median(d or 11 for d in calibrated) < statistics.median(
        d or 11 for d in learnt
    )
    assert sum(run(100 + s, 1.0, True) is not None for s in range(100)) <= 3
