"""The live sequential judge: error control under per-interval checking, power, no-data."""

from __future__ import annotations

import json
import statistics
from datetime import UTC, datetime, timedelta

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.analysis.live import (
    LiveObservation,
    LivePolicy,
    ProbeSamples,
    VariantInterval,
    _urn_log_lr,
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


def test_no_data_pass_continues_and_the_check_stays_inconclusive() -> None:
    rng = np.random.default_rng(4)
    policy = LivePolicy(on_no_data=NoDataPolicy.PASS)
    result = judge_interval(LiveState(), observation(rng, 1, cand_n=0), policy, START)
    assert result.decision is LiveDecision.CONTINUE
    # 0 invocations decide nothing: onNoData: pass lets the rollout go on, not a green Pass.
    assert result.checks[0].verdict is Verdict.INCONCLUSIVE
    assert "no data" in result.checks[0].reason


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


def probe_canary(
    seed: int,
    slowdown: float = 1.0,
    tail_factor: float = 1.0,
    probes: int = 60,
    instance_noise: float = 0.03,
    intervals: int = 10,
    tpot_factor: float = 1.0,
    tpot_spread: float = 0.1,
) -> int | None:
    """Fixed-shape probes pinned to each variant, with shared and per-instance noise;
    CloudWatch sees nothing useful (a quiet p99 only). The candidate's per-token latency
    is `tpot_factor` times the baseline's, with its own spread. Rollback interval or None."""
    rng = np.random.default_rng(seed)
    state = LiveState()
    for minute in range(1, intervals + 1):
        shared = rng.lognormal(0.0, 0.1)

        def variant(
            factor: float, tail: float, tpot_factor: float, spread: float, shared: float = shared
        ) -> VariantInterval:
            instance = rng.lognormal(0.0, instance_noise) * shared
            slow = rng.random(probes) < 0.03
            ttft = 0.3 * np.where(
                slow, 5 * rng.lognormal(0, 0.4, probes), rng.lognormal(0, 0.25, probes)
            )
            ttft = np.where(ttft >= 0.45, ttft * tail, ttft) * factor * instance
            tpot = 0.03 * tpot_factor * rng.lognormal(0.0, spread, probes) * factor * instance
            return VariantInterval(
                invocations=200,
                latency_s=1.0,
                probes=ProbeSamples(requests=probes, ttft_s=list(ttft), tpot_s=list(tpot)),
            )

        obs = LiveObservation(
            interval_end=START + timedelta(minutes=minute),
            baseline=variant(1.0, 1.0, 1.0, 0.1),
            candidate=variant(slowdown, tail_factor, tpot_factor, tpot_spread),
        )
        result = judge_interval(state, obs, LivePolicy(), obs.interval_end)
        state = result.state
        if result.decision is LiveDecision.ROLLBACK:
            return minute
    return None


def test_probes_catch_a_twenty_percent_slowdown_within_five_intervals() -> None:
    found = [probe_canary(seed, slowdown=1.2) for seed in range(12)]
    assert all(d is not None and d <= 5 for d in found), found


def test_identical_probes_under_instance_noise_do_not_roll_back() -> None:
    rollbacks = sum(probe_canary(1_000 + seed) is not None for seed in range(120))
    assert rollbacks <= 1


def test_probes_with_enough_requests_catch_a_tail_only_regression() -> None:
    # The slowest 8 % 30 % slower, body unchanged: the median-aligned, depth-limited tail
    # bets see it once there are enough probes (docs/analysis.md §5: how many).
    found = [probe_canary(seed, tail_factor=1.3, probes=600) for seed in range(8)]
    assert all(d is not None and d <= 5 for d in found), found


def test_probe_checks_name_their_sources() -> None:
    rng = np.random.default_rng(30)
    probes = ProbeSamples(
        requests=40,
        ttft_s=list(rng.lognormal(-1, 0.2, 40)),
        tpot_s=list(rng.lognormal(-3, 0.1, 40)),
    )
    same = VariantInterval(invocations=100, latency_mean_s=1.0, latency_s=2.0, probes=probes)
    obs = LiveObservation(interval_end=START, baseline=same, candidate=same)
    result = judge_interval(LiveState(), obs, LivePolicy(), START)
    checks = {c.name: c for c in result.checks}
    assert set(checks) == {"live_latency", "live_latency_tail", "live_errors_5xx"}
    assert "probe ttft" in checks["live_latency"].reason
    assert "probe tpot" in checks["live_latency"].reason
    assert "CloudWatch average" in checks["live_latency"].reason
    assert "CloudWatch p99" in checks["live_latency_tail"].reason
    assert "3 source(s)" in checks["live_latency"].rule


bad_value = st.sampled_from([float("nan"), float("inf"), float("-inf"), -1.0, 0.0])


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(min_value=1, max_value=8), st.integers(0, 4), bad_value), max_size=4
    ),
    st.integers(min_value=0, max_value=2**31),
)
def test_broken_inputs_never_fail_a_candidate_and_the_state_stays_json(
    breakage: list[tuple[int, int, float]], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    state = LiveState()
    for minute in range(1, 9):
        latency = rng.lognormal(0.0, 0.3, 120)
        values = {
            "latency_mean_s": float(latency.mean()),
            "latency_s": float(np.quantile(latency, 0.99)),
        }
        samples = list(latency[:30])
        probes = list(rng.lognormal(-1.0, 0.2, 30))
        for when, what, bad in breakage:
            if when == minute:
                if what == 0:
                    values["latency_mean_s"] = bad
                elif what == 1:
                    values["latency_s"] = bad
                elif what == 2:
                    samples[0] = bad
                else:
                    probes[0] = bad
        same = VariantInterval(
            invocations=120,
            latency_samples_s=samples if minute % 2 else [],
            probes=ProbeSamples(requests=30, ttft_s=probes, tpot_s=probes),
            **values,
        )
        obs = LiveObservation(
            interval_end=START + timedelta(minutes=minute), baseline=same, candidate=same
        )
        result = judge_interval(state, obs, LivePolicy(), obs.interval_end)
        state = result.state
        assert result.decision is not LiveDecision.ROLLBACK
        assert all(c.verdict is not Verdict.FAIL for c in result.checks)
        text = json.dumps(state.dump(), allow_nan=False)
        assert LiveState.model_validate(json.loads(text)) == state


def test_a_zero_average_is_refused_and_does_not_stop_the_latency_test() -> None:
    rng = np.random.default_rng(31)
    state = LiveState()
    rolled = None
    for minute in range(1, 13):

        def variant(factor: float) -> VariantInterval:
            latency = rng.lognormal(0.0, 0.3, 200) * factor
            return VariantInterval(invocations=200, latency_mean_s=float(latency.mean()))

        cand = variant(1.5)
        if minute == 2:
            cand.latency_mean_s = 0.0
        obs = LiveObservation(
            interval_end=START + timedelta(minutes=minute), baseline=variant(1.0), candidate=cand
        )
        result = judge_interval(state, obs, LivePolicy(), obs.interval_end)
        state = result.state
        if minute == 2:
            assert result.decision is LiveDecision.HOLD
            assert "Average is 0.0" in result.checks[0].reason
        if result.decision is LiveDecision.ROLLBACK:
            rolled = minute
            break
    assert rolled is not None


def test_more_5xx_than_invocations_is_not_judged() -> None:
    same = VariantInterval(invocations=50, errors_5xx=0, latency_mean_s=1.0)
    broken = VariantInterval(invocations=50, errors_5xx=80, latency_mean_s=1.0)
    obs = LiveObservation(interval_end=START, baseline=same, candidate=broken)
    result = judge_interval(LiveState(), obs, LivePolicy(), START)
    errors = next(c for c in result.checks if c.name == "live_errors_5xx")
    assert errors.verdict is Verdict.PASS and "not judged" in errors.reason
    assert result.state.error_log_lr == []


def test_the_tail_test_is_exact_for_exchangeable_samples_with_ties() -> None:
    """Under the null each interval's likelihood ratio averages one (a test martingale)."""
    rng = np.random.default_rng(32)
    policy = LivePolicy(interval_noise=0.0)
    ratios = []
    for _ in range(3_000):
        pooled = np.round(rng.lognormal(0.0, 0.5, 50), 1) + 0.1
        base, cand = pooled[:35], pooled[35:]
        key = rng.random(50)
        log_lr, _, _ = _urn_log_lr(base, cand, policy, key)
        ratios.append(np.exp(log_lr))
    means = np.mean(ratios, axis=0)
    assert np.all(np.abs(means - 1.0) < 0.1), means


def test_state_written_by_an_earlier_grid_still_folds() -> None:
    old = LiveState(error_log_lr=[0.1, 0.2, 0.3, 0.4, 0.5])
    restored = LiveState.model_validate(old.dump())
    obs = LiveObservation(
        interval_end=START,
        baseline=VariantInterval(invocations=100, errors_5xx=1, latency_mean_s=1.0),
        candidate=VariantInterval(invocations=100, errors_5xx=2, latency_mean_s=1.0),
    )
    # The bake's test against the canary's rate bets on the grid: another grid's bets
    # start over.
    bake = LivePolicy(error_reference=(1, 1_000))
    result = judge_interval(restored, obs, bake, START)
    assert len(result.state.error_log_lr) == len(LivePolicy().error_odds_grid)
    # The canary's test keeps counts, not bets: an earlier operator's bets are left as
    # they were and the interval is one look.
    canary = judge_interval(LiveState.model_validate(old.dump()), obs, LivePolicy(), START)
    assert canary.state.error_log_lr == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert [(look.errors, look.candidate) for look in canary.state.error_looks] == [(3, 2)]


def test_a_faster_candidate_with_a_wider_body_is_no_tail_regression() -> None:
    # Seen in the sandbox: a speculative candidate (TPOT p90 13.9 ms against the
    # baseline's 22.6 ms) rolled back on live_latency_tail, because the candidate was
    # scaled up onto the baseline's median before its tail was compared. A tail is a
    # regression only where it is slower than the baseline's, so the alignment only ever
    # scales a candidate down (a slower body), never up.
    # A speculating candidate: per-token latency 0.4x the baseline's, but more spread from
    # request to request (a request whose drafts are rejected decodes at the plain pace).
    found = [probe_canary(seed, probes=20, tpot_factor=0.4, tpot_spread=0.4) for seed in range(20)]
    assert found == [None] * 20, found
