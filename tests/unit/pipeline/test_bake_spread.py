"""The bake's probe test varies each interval as much as the baseline's intervals did.

During the canary both variants share each minute (its load, its traffic mix), so the
probe location test only had instance noise to allow for (`intervalNoise`, 0.05 a variant).
The bake compares the promoted variant with a frozen reference, and nothing is shared: a
minute-to-minute swing of 10 % (log-sd) in the promoted variant's probes was read with the
canary's variance and rolled back 1.2-2.3 % of identical candidates over a 30-interval bake
(benchmarks/bench_judges.py --sections bakeLoad). The reference now records how much the
baseline's interval means moved (`IntervalSpread`, grouped by per-instance load, since
latency follows the load), and the bake uses that spread at its upper confidence bound
(a few intervals measure it), never less than the canary's.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.analysis.live import (
    LiveObservation,
    LivePolicy,
    ProbeSamples,
    VariantInterval,
    add_to_spread,
    between_variance,
    judge_interval,
)
from endpoint_optimizer.api import parse_spec
from endpoint_optimizer.api.live import IntervalSpread, LiveFigures, LiveState
from endpoint_optimizer.pipeline.assess import BAKE_SPREAD_CONFIDENCE, bake_policy
from endpoint_optimizer.pipeline.record import reference_interval, remembered
from tests.unit.pipeline.test_decide import spec

START = datetime(2026, 1, 1, tzinfo=UTC)
TOLERANCE = LivePolicy().load_tolerance


def probed(load: float, level: float, seed: int, n: int = 60) -> VariantInterval:
    """A baseline interval at a per-instance load: probes lognormal around `level`."""
    rng = np.random.default_rng(seed)
    samples = (level * rng.lognormal(0.0, 0.2, n)).tolist()
    return VariantInterval(
        invocations=240,
        errors_5xx=0,
        latency_mean_s=level,
        latency_s=3 * level,
        load_per_instance_s=load,
        probes=ProbeSamples(requests=n, ttft_s=samples, tpot_s=[s / 10 for s in samples]),
    )


def reference_of(*intervals: VariantInterval) -> LiveFigures:
    figures = None
    for k, one in enumerate(intervals):
        figures = remembered(figures, one, START + timedelta(minutes=k), LivePolicy())
    assert figures is not None
    return figures


def pooled_within_groups(groups: list[list[list[float]]]) -> float:
    """numpy's own reckoning: the interval means' spread within each group, pooled, less
    the mean sampling variance of a mean."""
    squares = degrees = 0.0
    within = []
    for group in groups:
        means = np.array([np.mean(values) for values in group])
        squares += float(((means - means.mean()) ** 2).sum())
        degrees += len(group) - 1
        within += [np.var(values, ddof=1) / len(values) for values in group]
    return max(0.0, squares / degrees - float(np.mean(within)))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([1.0, 1.05, 2.0, 4.0]),
            st.lists(
                st.floats(-3.0, 1.0, allow_nan=False, allow_subnormal=False),
                min_size=2,
                max_size=8,
            ),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_the_spread_is_the_pooled_within_load_spread_of_the_interval_means(
    intervals: list[tuple[float, list[float]]],
) -> None:
    spread = IntervalSpread()
    groups: list[list[list[float]]] = []
    group_load: float | None = None
    for load, logs in intervals:
        # A new group when the load leaves the tolerance of the open group's load (the
        # same rule as the reference's pools), as the property's own bookkeeping.
        if group_load is None or not (
            group_load / (1 + TOLERANCE) <= load <= group_load * (1 + TOLERANCE)
        ):
            groups.append([])
            group_load = load
        else:
            k = len(groups[-1])
            group_load = math.exp((k * math.log(group_load) + math.log(load)) / (k + 1))
        groups[-1].append(logs)
        add_to_spread(spread, logs, load, TOLERANCE)
    measured = between_variance(spread)
    if sum(len(g) - 1 for g in groups) == 0:
        assert measured is None
    else:
        assert measured == pytest.approx(pooled_within_groups(groups), rel=1e-6, abs=1e-9)


def test_a_canary_step_does_not_count_as_spread() -> None:
    # Latency steps down with the baseline's share (0.9, then 0.5 of the load): the step
    # is the load's, not noise, and must not widen the bake's variance.
    spread = IntervalSpread()
    for load, level in [(7.2, 0.0)] * 5 + [(4.0, -0.25)] * 5:
        add_to_spread(spread, [level - 0.01, level + 0.01], load, TOLERANCE)
    assert between_variance(spread) == pytest.approx(0.0, abs=1e-12)


def test_the_reference_records_the_spread_of_every_probed_interval() -> None:
    # The 10 % step's intervals make the latency reference; the 50 % step's lighter ones
    # stay out of it, but their spread still counts (grouped apart).
    levels = [1.0, 1.2, 0.9, 1.1, 1.0]
    figures = reference_of(
        *(probed(7.2, level, seed) for seed, level in enumerate(levels)),
        *(probed(4.0, 0.8 * level, 10 + seed) for seed, level in enumerate(levels)),
    )
    assert figures.load_per_instance_s == pytest.approx(7.2)
    assert len(figures.probe_ttft_s) == 300  # the latency pool: the heavier step only
    assert figures.probe_ttft_spread.intervals == 10
    assert figures.probe_ttft_spread.degrees == 4  # the first step's group, closed
    between = between_variance(figures.probe_ttft_spread)
    assert between is not None
    # The levels' own log spread within each step, about 0.0145 (their samples' sampling
    # variance, 0.2**2 / 60, is taken out).
    expected = float(np.var(np.log(levels), ddof=1))
    assert between == pytest.approx(expected, rel=0.5)
    # TPOT has its own record (the same levels here, tenfold smaller).
    tpot = between_variance(figures.probe_tpot_spread)
    assert tpot == pytest.approx(between, rel=1e-6)


def test_the_bake_policy_carries_the_reference_spread_never_below_the_canarys() -> None:
    made = parse_spec(spec(rollout={"strategy": "canary", "baselineRetention": "2h", "bake": "1h"}))
    noisy = reference_of(*(probed(1.0, level, s) for s, level in enumerate([1.0, 1.3, 0.8, 1.2])))
    policy = bake_policy(made, 1, noisy)
    assert set(policy.interval_variance) == {"ttft", "tpot"}
    assert policy.interval_variance["ttft"] > 2 * policy.interval_noise**2
    # At the spread's upper confidence bound, above its point estimate.
    point = between_variance(noisy.probe_ttft_spread)
    assert point is not None and policy.interval_variance["ttft"] > point
    assert policy.interval_variance["ttft"] == pytest.approx(
        between_variance(noisy.probe_ttft_spread, BAKE_SPREAD_CONFIDENCE)
    )
    # One interval: no spread measured, and the canary's variance stands.
    single = bake_policy(made, 1, reference_of(probed(1.0, 1.0, 0)))
    assert single.interval_variance == {}


def test_a_reference_that_moved_makes_the_bake_less_sure_of_the_same_slowdown() -> None:
    """The same promoted interval against the same pooled reference: where the baseline's
    minutes moved 20 %, one interval 50 % slower is weaker evidence than where they were
    steady, and the canary's variance (the floor) is never undercut."""
    made = parse_spec(spec(rollout={"strategy": "canary", "baselineRetention": "2h", "bake": "1h"}))
    steady = reference_of(*(probed(1.0, 1.0, s) for s in range(5)))
    moving = reference_of(
        *(probed(1.0, level, s) for s, level in enumerate([0.8, 1.2, 0.85, 1.15, 1.0]))
    )
    promoted = probed(1.0, 1.5 * reference_interval(steady).latency_mean_s, 99)  # type: ignore[operator]

    def p_value(reference: LiveFigures) -> float:
        observation = LiveObservation(
            interval_end=START,
            baseline=reference_interval(reference).model_copy(
                update={"probes": reference_interval(steady).probes}
            ),
            candidate=promoted,
        )
        judged = judge_interval(LiveState(), observation, bake_policy(made, 1, reference), START)
        return judged.state.probe_ttft.p_value

    assert bake_policy(made, 1, steady).interval_variance["ttft"] < 2 * 0.05**2
    assert p_value(moving) > p_value(steady)


def test_the_spreads_upper_bound_covers_the_truth_as_often_as_it_says() -> None:
    """2,000 references of five probed intervals at each of two loads (8 degrees of
    freedom) whose interval means truly vary by 0.01 in log variance: the bound at
    confidence 0.75 is at or above the truth in about 75 % of them, the point estimate in
    fewer than 60 % (a low estimate is what made the bake surer than its data)."""
    rng = np.random.default_rng(7)
    trials, bound_covers, point_covers = 2_000, 0, 0
    for _ in range(trials):
        spread = IntervalSpread()
        for load in [7.2] * 5 + [4.0] * 5:
            logs = rng.normal(rng.normal(0.0, 0.1), 0.2, 60).tolist()
            add_to_spread(spread, logs, load, TOLERANCE)
        bound, point = between_variance(spread, 0.75), between_variance(spread)
        assert bound is not None and point is not None and bound >= point
        bound_covers += bound >= 0.01
        point_covers += point >= 0.01
    assert 0.72 <= bound_covers / trials <= 0.78
    assert point_covers / trials < 0.6
