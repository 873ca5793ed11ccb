"""The paired eval gate, the refusal rule and the A/A noise check."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.evaluation.gate import (
    eval_check,
    mcnemar_exact_p,
    paired_difference,
    refusal_check,
    tango_bound,
)


def paired(
    n: int, p: float, flip: float, drop: float, seed: int
) -> tuple[list[float], list[float]]:
    """Baseline correct with p; `flip` of correct items flip and as many wrong ones flip
    back (so the candidate's accuracy is the same), plus `drop` extra losses."""
    rng = np.random.default_rng(seed)
    base = rng.random(n) < p
    flip_prob = np.where(base, flip, flip * p / (1 - p))
    cand = np.where(rng.random(n) < flip_prob, ~base, base)
    cand = np.where(base & (rng.random(n) < drop), False, cand)
    return list(base.astype(float)), list(cand.astype(float))


def test_mcnemar_exact_p_values() -> None:
    assert mcnemar_exact_p(0, 5) == pytest.approx(2 / 32)
    assert mcnemar_exact_p(3, 3) == 1.0
    assert mcnemar_exact_p(0, 0) == 1.0


@settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0]), min_size=400, max_size=800))
def test_identical_scores_never_fail(scores: list[float]) -> None:
    check = eval_check(scores, scores, "exact_match")
    assert check.verdict is Verdict.PASS
    assert check.samples == len(scores)


def test_large_eval_with_small_noise_passes_and_states_items_and_interval() -> None:
    base, cand = paired(3_000, 0.7, 0.03, 0.0, seed=1)
    check = eval_check(base, cand, "exact_match", max_absolute_drop=0.01)
    assert check.verdict is Verdict.PASS
    assert "3000 items" in check.reason and "CI" in check.reason
    assert check.interval_low is not None and check.interval_low >= -0.01
    assert check.p_value is not None


def test_five_point_drop_fails() -> None:
    base, cand = paired(3_000, 0.7, 0.03, 0.07, seed=2)
    check = eval_check(base, cand, "exact_match", max_absolute_drop=0.01)
    assert check.verdict is Verdict.FAIL
    assert check.p_value is not None and check.p_value < 1e-6


def test_small_eval_is_inconclusive_and_says_how_many_items() -> None:
    base, cand = paired(200, 0.7, 0.05, 0.0, seed=3)
    check = eval_check(base, cand, "exact_match", max_absolute_drop=0.01)
    assert check.verdict is Verdict.INCONCLUSIVE
    assert "items would resolve it" in check.reason


def test_too_few_items_is_inconclusive() -> None:
    assert eval_check([1.0] * 10, [1.0] * 10, "exact_match").verdict is Verdict.INCONCLUSIVE


def test_rouge_uses_the_paired_bootstrap() -> None:
    rng = np.random.default_rng(4)
    base = rng.uniform(0.3, 0.9, 2_000)
    same = eval_check(list(base), list(base + rng.normal(0, 0.01, 2_000)), "rouge_l")
    worse = eval_check(list(base), list(base - 0.05), "rouge_l")
    assert same.verdict is Verdict.PASS and "bootstrap" in same.rule
    assert worse.verdict is Verdict.FAIL


def test_unpaired_scores_are_rejected() -> None:
    with pytest.raises(ValueError, match="same items"):
        paired_difference([1.0], [1.0, 0.0], binary=True)


def test_refusal_increase_fails_and_no_change_passes_with_its_resolution() -> None:
    rng = np.random.default_rng(5)
    base = list(rng.random(1_000) < 0.05)
    more = [b or r for b, r in zip(base, rng.random(1_000) < 0.06, strict=True)]
    assert refusal_check(base, more).verdict is Verdict.FAIL
    same = refusal_check(base, base)
    assert same.verdict is Verdict.PASS and "CI" in same.reason


def test_mixed_scorers_fall_back_to_the_paired_bootstrap() -> None:
    rng = np.random.default_rng(9)
    base = [float(x) for x in rng.random(500) < 0.7] + list(rng.uniform(0, 1, 100))
    check = eval_check(base, base, "exact_match")
    assert "bootstrap" in check.rule and check.p_value is None


@settings(max_examples=40, deadline=None)
@given(
    st.integers(min_value=0, max_value=60),
    st.integers(min_value=0, max_value=60),
    st.integers(min_value=120, max_value=3_000),
)
def test_tango_bounds_bracket_the_estimate_and_mirror_when_the_sides_swap(
    baseline_only: int, candidate_only: int, n: int
) -> None:
    estimate = (candidate_only - baseline_only) / n
    low = tango_bound(baseline_only, candidate_only, n, 0.95, lower=True)
    high = tango_bound(baseline_only, candidate_only, n, 0.95, lower=False)
    assert -1.0 <= low <= estimate <= high <= 1.0
    swapped = tango_bound(candidate_only, baseline_only, n, 0.95, lower=False)
    assert swapped == pytest.approx(-low, abs=1e-9)
    assert tango_bound(baseline_only, candidate_only, n, 0.99, lower=True) <= low


def test_tango_bounds_solve_the_score_equation_of_tango_1998() -> None:
    # 1 and 7 discordant of 21 pairs, no continuity correction: at each bound the score
    # statistic (n12 - n21 - n d) / sqrt(n (2 p21~ + d (1 - d))) equals -+z.
    n, b, c, z = 21, 7, 1, 1.959963984540054
    for lower, target in ((True, z), (False, -z)):
        d = tango_bound(b, c, n, 0.975, lower=lower, correction=0.0)
        a = 2 * n
        slope = -b - c + (2 * n - c + b) * d
        p21 = (np.sqrt(slope * slope + 4 * a * b * d * (1 - d)) - slope) / (2 * a)
        statistic = (c - b - n * d) / np.sqrt(n * (2 * p21 + d * (1 - d)))
        assert statistic == pytest.approx(target, abs=1e-6)


def test_at_a_drop_equal_to_the_margin_at_most_five_percent_pass() -> None:
    rng = np.random.default_rng(20)
    n, discordance, margin, trials = 500, 0.1, 0.01, 3_000
    worse, better = (discordance + margin) / 2, (discordance - margin) / 2
    passed = 0
    for _ in range(trials):
        b, c, _ = rng.multinomial(n, [worse, better, 1 - worse - better])
        passed += tango_bound(int(b), int(c), n, 0.95, lower=True) >= -margin
    # The Wald form this replaces passed 6.2-6.5 %; the benchmark measures 10,000 a cell.
    assert passed / trials <= 0.055


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, 1.5])
def test_scores_the_scorer_could_not_give_are_refused(bad: float) -> None:
    base, cand = paired(3_000, 0.7, 0.03, 0.2, seed=21)
    cand[7] = bad
    check = eval_check(base, cand, "exact_match")
    assert check.verdict is Verdict.INCONCLUSIVE
    assert "candidate scores" in check.reason and "scorer" in check.reason
