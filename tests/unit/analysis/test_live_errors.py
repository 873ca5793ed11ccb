"""The canary's 5XX test (analysis/live_errors.py): exact, group-sequential, and what it
costs a rollout in false rollbacks, computed by enumerating every outcome."""

from __future__ import annotations

import itertools
import math
from datetime import timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from endpoint_optimizer.analysis import live_errors
from endpoint_optimizer.analysis.live import (
    LiveDecision,
    LiveObservation,
    LivePolicy,
    LiveState,
    VariantInterval,
    judge_interval,
)
from endpoint_optimizer.api.live import ErrorLook
from tests.unit.analysis.test_live import START

looks_strategy = st.lists(
    st.tuples(st.integers(0, 4), st.sampled_from([0.05, 0.1, 0.3, 0.5, 0.7])),
    min_size=1,
    max_size=4,
)


def _rejection_probability(
    looks: list[tuple[int, float]], alpha: float, tau: float, odds: float
) -> float:
    """P(the test ever rejects), summed over every assignment of the errors to the
    variants, each error the candidate's with odds `odds` times its share's."""
    boundaries = []
    for t in range(1, len(looks) + 1):
        prefix = [ErrorLook(errors=m, candidate=0, share=p) for m, p in looks[:t]]
        boundaries.append(live_errors.walk(prefix, alpha, tau).boundary)
    total = 0.0
    for counts in itertools.product(*(range(m + 1) for m, _ in looks)):
        probability, running = 1.0, 0
        rejected = False
        for (m, p), x, boundary in zip(looks, counts, boundaries, strict=True):
            q = odds * p / (odds * p + 1 - p)
            probability *= math.comb(m, x) * q**x * (1 - q) ** (m - x)
            running += x
            rejected = rejected or (boundary is not None and running >= boundary)
        total += probability * rejected
    return total


@settings(max_examples=150, deadline=None)
@given(
    looks=looks_strategy,
    alpha=st.sampled_from([0.05, 0.2, 0.4]),
    tau=st.sampled_from([0.5, 1.0, 4.0]),
)
def test_the_false_rollback_rate_is_what_the_boundaries_spent_and_within_alpha(
    looks: list[tuple[int, float]], alpha: float, tau: float
) -> None:
    exact = _rejection_probability(looks, alpha, tau, odds=1.0)
    errors = [ErrorLook(errors=m, candidate=0, share=p) for m, p in looks]
    path = live_errors.walk(errors, alpha, tau)
    assert exact <= live_errors.spent_by(len(looks), alpha, tau) + 1e-12
    # The dynamic program's own account of its spending is the enumerated truth.
    assert math.isclose(exact, path.spent, rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=60, deadline=None)
@given(looks=looks_strategy, odds=st.sampled_from([0.25, 0.5, 0.9]))
def test_a_candidate_that_errs_less_is_rolled_back_less(
    looks: list[tuple[int, float]], odds: float
) -> None:
    at_null = _rejection_probability(looks, 0.4, 1.0, odds=1.0)
    assert _rejection_probability(looks, 0.4, 1.0, odds=odds) <= at_null + 1e-12


def test_the_p_value_is_the_level_where_it_starts_to_reject_and_never_rises() -> None:
    rng = np.random.default_rng(7)
    looks: list[ErrorLook] = []
    previous = 1.0
    for _ in range(8):
        cand, base = int(rng.binomial(480, 0.02)), int(rng.binomial(480, 0.005))
        looks.append(ErrorLook(errors=cand + base, candidate=cand, share=0.5))
        p = live_errors.p_value(looks, 4.0)
        assert p <= previous
        previous = p
        if p < 1.0:
            assert live_errors.walk(looks, p * 1.01, 4.0).rejected_at is not None
            assert live_errors.walk(looks, p * 0.99, 4.0).rejected_at is None
    assert previous < 1e-6


def test_quiet_intervals_cost_nothing_and_unspent_alpha_carries_forward() -> None:
    """Ten intervals without a 5XX, then a burst: the burst may use the whole alpha that the
    quiet intervals could not spend."""
    quiet = [ErrorLook(errors=0, candidate=0, share=0.5)] * 10
    burst = ErrorLook(errors=14, candidate=14, share=0.5)
    after_quiet = live_errors.walk([*quiet, burst], 0.01 / 3, 4.0)
    at_once = live_errors.walk([burst], 0.01 / 3, 4.0)
    assert after_quiet.rejected_at == 11
    assert after_quiet.boundary is not None and at_once.boundary is not None
    assert after_quiet.boundary <= at_once.boundary
    # 0.5**14 = 6.1e-5: within the whole alpha/3, not within the first interval's share.
    assert at_once.spent <= live_errors.spent_by(1, 0.01 / 3, 4.0)


def test_large_counts_go_through_the_fft_and_agree_with_the_direct_sum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    looks = [ErrorLook(errors=300 + 7 * t, candidate=150 + 4 * t, share=0.5) for t in range(20)]
    monkeypatch.setattr(live_errors, "_DIRECT_LIMIT", 10**12)
    direct = live_errors.walk(looks, 0.01 / 3, 4.0)
    monkeypatch.setattr(live_errors, "_DIRECT_LIMIT", 0)
    fft = live_errors.walk(looks, 0.01 / 3, 4.0)
    assert (fft.rejected_at, fft.boundary) == (direct.rejected_at, direct.boundary)
    assert math.isclose(fft.spent, direct.spent, rel_tol=1e-6)
    # The first look's boundary is Binomial(300, 1/2)'s upper alpha(1) quantile.
    first = live_errors.walk(looks[:1], 0.01 / 3, 4.0).boundary
    assert first is not None
    assert 1 - binom.cdf(first - 1, 300, 0.5) <= live_errors.spent_by(1, 0.01 / 3, 4.0)
    assert 1 - binom.cdf(first - 2, 300, 0.5) > live_errors.spent_by(1, 0.01 / 3, 4.0)


def _canary(rate: float, seed: int, intervals: int) -> int | None:
    rng = np.random.default_rng(seed)
    state, policy = LiveState(), LivePolicy()
    for minute in range(1, intervals + 1):
        obs = LiveObservation(
            interval_end=START + timedelta(minutes=minute),
            baseline=VariantInterval(
                invocations=480, errors_5xx=int(rng.binomial(480, 0.005)), latency_mean_s=1.0
            ),
            candidate=VariantInterval(
                invocations=480, errors_5xx=int(rng.binomial(480, rate)), latency_mean_s=1.0
            ),
        )
        result = judge_interval(state, obs, policy, START + timedelta(minutes=minute))
        state = LiveState.model_validate(result.state.dump())
        errors = next(c for c in result.checks if c.name == "live_errors_5xx")
        if result.decision is LiveDecision.ROLLBACK:
            assert "roll back" in errors.reason
            assert errors.p_value is not None and errors.p_value <= policy.alpha / 3
            return minute
    return None


def test_a_fourfold_error_rate_is_rolled_back_within_five_intervals_at_480_a_minute() -> None:
    caught = [_canary(0.02, seed, 5) for seed in range(40)]
    assert sum(minute is not None for minute in caught) >= 36
    assert all(_canary(0.005, seed, 10) is None for seed in range(40))
