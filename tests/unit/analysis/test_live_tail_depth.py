"""The tail test's bet on the slowest 1 % (`LivePolicy.tail_depths`).

Where slow requests form their own mode, a regression of that mode puts the candidate's
slow requests at the very top of the pooled tail; a bet two per cent deep then draws the
baseline's slow mode right after them and gives back what the first draws won."""

from __future__ import annotations

from datetime import timedelta

import numpy as np

from endpoint_optimizer.analysis.live import (
    LiveDecision,
    LiveObservation,
    LivePolicy,
    LiveState,
    ProbeSamples,
    VariantInterval,
    judge_interval,
)
from tests.unit.analysis.test_live import START


def _tpot(rng: np.random.Generator, n: int, slow_factor: float) -> list[float]:
    """30 ms per token, 3 % of requests in a slow mode 1.5x as slow (both 10 % log-sd)."""
    slow = rng.random(n) < 0.03
    values = 0.03 * rng.lognormal(0.0, 0.1, n)
    values[slow] = 0.045 * slow_factor * rng.lognormal(0.0, 0.1, int(slow.sum()))
    return [float(v) for v in values]


def _side(rng: np.random.Generator, shared: float, factor: float) -> VariantInterval:
    instance = shared * rng.lognormal(0.0, 0.03)
    tpot = [v * instance for v in _tpot(rng, 240, factor)]
    return VariantInterval(
        invocations=0,
        probes=ProbeSamples(requests=240, ttft_s=[v * 10 for v in tpot], tpot_s=tpot),
    )


def _rolled_back_within(policy: LivePolicy, slow_factor: float, seed: int, intervals: int) -> bool:
    rng = np.random.default_rng(seed)
    state = LiveState()
    for minute in range(1, intervals + 1):
        shared = rng.lognormal(0.0, 0.1)
        end = START + timedelta(minutes=minute)
        obs = LiveObservation(
            interval_end=end,
            baseline=_side(rng, shared, 1.0),
            candidate=_side(rng, shared, slow_factor),
        )
        state = judge_interval(state, obs, policy, end).state
        if state.decision is LiveDecision.ROLLBACK:
            return True
    return False


def test_the_slowest_one_percent_bet_catches_a_slower_slow_mode_sooner() -> None:
    # 240 probes a minute, the slow mode 20 % slower: within 8 intervals, 24 of these 30
    # seeds with the bet on the slowest 1 %, 7 without it.
    seeds = range(30)
    now = sum(_rolled_back_within(LivePolicy(), 1.2, s, 8) for s in seeds)
    two_percent_deep = LivePolicy(tail_depths=[0.2, 0.5, 1.0])
    before = sum(_rolled_back_within(two_percent_deep, 1.2, s, 8) for s in seeds)
    assert now >= 20 and before <= 12, (now, before)
    assert not any(_rolled_back_within(LivePolicy(), 1.0, s, 10) for s in seeds)
