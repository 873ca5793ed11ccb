"""The judges widen a check by the client's stamp bracket where the guard could not vouch
for the figure (bench Validity.blurredS): a lagging client's tail is known only within it."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.analysis.benchmark import (
    BenchmarkPolicy,
    LevelSamples,
    judge_benchmark,
    stamp_bracket,
    stamp_widened,
)
from endpoint_optimizer.analysis.sequential import Outcome, judge_sequential
from endpoint_optimizer.analysis.slo import slo_checks
from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.api.spec import TailGating

TTFT_ONLY = {"ttft_s": 0.10}


def level(
    seed: int, n: int, factor: float = 1.0, blurred: dict[str, float] | None = None
) -> LevelSamples:
    rng = np.random.default_rng(seed)
    ttft = rng.lognormal(-2.0, 0.3, n) * factor  # median 135 ms, p99 ~272 ms
    return LevelSamples(concurrency=8, ttft_s=list(ttft), blurred_s=blurred or {})


@settings(max_examples=300, deadline=None)
@given(
    st.floats(0.01, 5.0),  # baseline's measured quantile
    st.floats(0.01, 5.0),  # candidate's
    st.floats(0.0, 1.0),  # interval's low, as a share of the point ratio
    st.floats(1.0, 3.0),  # its high, as a multiple
    st.floats(0.0, 0.99),  # baseline's bracket, as a share of its figure
    st.floats(0.0, 2.0),  # candidate's
    st.floats(-1.0, 1.0),  # where in its bracket the true baseline figure lies
    st.floats(-1.0, 1.0),
    st.floats(0.0, 1.0),  # where in the interval the ratio lies
)
def test_the_widened_interval_holds_every_ratio_the_brackets_allow(
    base: float,
    cand: float,
    low_share: float,
    high_mult: float,
    base_rel: float,
    cand_rel: float,
    base_at: float,
    cand_at: float,
    within: float,
) -> None:
    """If the ratio of the measured figures' population values lies in [low, high], and
    each true figure lies within its bracket of the measured one, the ratio of the true
    figures lies in the widened interval, which contains the original."""
    point = cand / base
    low, high = point * low_share, point * high_mult
    base_w, cand_w = base_rel * base, cand_rel * cand
    wide_low, wide_high = stamp_widened(low, high, base, cand, base_w, cand_w)
    assert wide_low <= low * (1 + 1e-12) and wide_high >= high * (1 - 1e-12)
    ratio = low + within * (high - low)
    true_base = base * (1 + base_at * base_rel)
    true_cand = max(0.0, cand * (1 + cand_at * cand_rel))
    true_ratio = ratio * (true_cand / cand) / (true_base / base)
    assert wide_low * (1 - 1e-9) <= true_ratio <= wide_high * (1 + 1e-9)


def test_a_quantile_takes_the_bracket_of_the_next_one_up() -> None:
    blurred = level(0, 10, blurred={"ttft_p90": 0.004, "ttft_p99": 0.05})
    assert stamp_bracket(blurred, "ttft_s", 0.5) == 0.0  # p50 vouched for
    assert stamp_bracket(blurred, "ttft_s", 0.75) == 0.004
    assert stamp_bracket(blurred, "ttft_s", 0.99) == 0.05
    assert stamp_bracket(blurred, "ttft_s", 0.999) == 0.05
    assert stamp_bracket(blurred, "itl_s", 0.99) == 0.0  # ITL is not bracketed


def test_a_tail_known_only_within_its_bracket_is_not_passed_and_not_measured_further() -> None:
    """The same candidate, p99 gating: with every figure vouched for its p99 passes; with the
    candidate's p99 known only within 60 ms (run I's c=256 one core) it is undecided, finally
    (more requests cannot shrink a client's bracket), and the reason says what to change."""
    policy = BenchmarkPolicy(
        thresholds=TTFT_ONLY, quantiles=[0.5, 0.99], tail_gating=TailGating.ALWAYS
    )
    base = level(1, 6_000)
    exact = judge_sequential([base], [level(2, 6_000, 0.9)], policy)
    outcome = {r.check.name: r for r in exact.results}
    assert outcome["ttft_p99@c8"].outcome is Outcome.PASS
    blurred = judge_sequential([base], [level(2, 6_000, 0.9, {"ttft_p99": 0.06})], policy)
    p99 = {r.check.name: r for r in blurred.results}["ttft_p99@c8"]
    assert p99.outcome is Outcome.FINAL and p99.check.verdict is Verdict.INCONCLUSIVE
    assert p99.more_requests == 0
    assert "stamp brackets alone straddle" in p99.check.reason
    assert "candidate 60.0 ms" in p99.check.reason
    low, high = p99.check.interval_low, p99.check.interval_high
    exact_p99 = outcome["ttft_p99@c8"].check
    assert low is not None and high is not None and exact_p99.interval_high is not None
    assert exact_p99.interval_low is not None
    assert low < exact_p99.interval_low and high > exact_p99.interval_high
    # The median was vouched for: judged exactly as before.
    assert {r.check.name: r for r in blurred.results}["ttft_p50@c8"].check == (
        outcome["ttft_p50@c8"].check
    )


def test_a_regression_larger_than_the_bracket_still_fails() -> None:
    policy = BenchmarkPolicy(
        thresholds=TTFT_ONLY, quantiles=[0.5, 0.99], tail_gating=TailGating.ALWAYS
    )
    judgement = judge_sequential(
        [level(1, 6_000, blurred={"ttft_p99": 0.01})],
        [level(2, 6_000, 2.0, {"ttft_p99": 0.03})],
        policy,
    )
    p99 = {r.check.name: r for r in judgement.results}["ttft_p99@c8"]
    assert p99.outcome is Outcome.FAIL, p99.check.reason
    assert "baseline 10.0 ms, candidate 30.0 ms" in p99.check.reason


def test_the_fixed_judge_widens_its_bootstrap_interval_too() -> None:
    policy = BenchmarkPolicy(thresholds=TTFT_ONLY, quantiles=[0.99], resamples=400)
    base, cand = level(1, 4_000), level(2, 4_000, 0.9)
    (exact,) = judge_benchmark([base], [cand], policy)
    (wide,) = judge_benchmark(
        [base], [cand.model_copy(update={"blurred_s": {"ttft_p99": 0.06}})], policy
    )
    assert exact.verdict is Verdict.PASS
    assert wide.verdict is Verdict.INCONCLUSIVE and "stamp brackets" in wide.reason
    assert exact.interval_high is not None and wide.interval_high is not None
    assert wide.interval_high > exact.interval_high


def test_an_slo_limit_is_judged_on_the_bounds_widened_by_the_bracket() -> None:
    """A p99 of ~272 ms against a 320 ms limit passes; known only within 80 ms, its
    upper bound passes the limit and the check waits, naming the bracket."""
    candidate = level(3, 4_000)
    (exact,) = slo_checks([candidate], {"ttft": 320.0}, 8)
    assert exact.verdict is Verdict.PASS
    blurred = candidate.model_copy(update={"blurred_s": {"ttft_p99": 0.08}})
    (wide,) = slo_checks([blurred], {"ttft": 320.0}, 8)
    assert wide.verdict is Verdict.INCONCLUSIVE
    assert "80.0 ms stamp bracket" in wide.reason
