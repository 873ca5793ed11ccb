"""Confidence sequences: they cover at every sample size at once, even with ties."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.analysis.confseq import (
    DEFAULT_PRIOR_SIZE,
    count_bounds,
    gaussian_half_width,
    quantile_bounds,
    samples_to_bracket,
    tuned_rho2,
)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=1, max_value=5_000),
    st.sampled_from([0.01, 0.1, 0.5, 0.9, 0.99]),
    st.sampled_from([1e-4, 0.001, 0.05]),
)
def test_accepted_counts_are_an_interval_around_the_expected_count(
    n: int, quantile: float, alpha: float
) -> None:
    lowest, highest = count_bounds(n, quantile, alpha, DEFAULT_PRIOR_SIZE)
    assert 0 <= lowest <= round(n * quantile) <= highest <= n


def test_smaller_alpha_and_fewer_samples_give_wider_brackets() -> None:
    wide = count_bounds(1_000, 0.5, 1e-4, DEFAULT_PRIOR_SIZE)
    narrow = count_bounds(1_000, 0.5, 0.05, DEFAULT_PRIOR_SIZE)
    assert wide[0] <= narrow[0] and wide[1] >= narrow[1]
    small = count_bounds(100, 0.5, 0.05, DEFAULT_PRIOR_SIZE)
    assert (small[1] - small[0]) / 100 > (narrow[1] - narrow[0]) / 1_000


def test_a_tail_quantile_needs_more_samples_to_be_bracketed_and_is_bracketed_then() -> None:
    p50 = samples_to_bracket(0.5, 0.002, DEFAULT_PRIOR_SIZE)
    p99 = samples_to_bracket(0.99, 0.002, DEFAULT_PRIOR_SIZE)
    assert p50 < 100 < p99
    values = np.sort(np.random.default_rng(0).lognormal(0.0, 1.0, p99))
    low, high = quantile_bounds(values, 0.99, 0.002, DEFAULT_PRIOR_SIZE)
    assert math.isfinite(low) and math.isfinite(high) and low <= high
    low, high = quantile_bounds(values[: p99 // 2], 0.99, 0.002, DEFAULT_PRIOR_SIZE)
    assert not (math.isfinite(low) and math.isfinite(high))


def _first_miss(values: np.ndarray, truth: float, quantile: float, alpha: float) -> bool:
    """Whether the CS misses the true quantile at any look, looking every 25 samples."""
    for n in range(25, values.size + 1, 25):
        low, high = quantile_bounds(np.sort(values[:n]), quantile, alpha, DEFAULT_PRIOR_SIZE)
        if not low <= truth <= high:
            return True
    return False


def test_quantile_sequence_covers_at_every_look_with_its_stated_probability() -> None:
    rng = np.random.default_rng(1)
    alpha, runs = 0.1, 300
    misses = sum(_first_miss(rng.lognormal(0.0, 1.0, 1_000), 1.0, 0.5, alpha) for _ in range(runs))
    # Ville's bound is alpha; the mixture is conservative, so far fewer in practice.
    assert misses / runs <= alpha


def test_quantile_sequence_covers_tied_data_too() -> None:
    # Rounded timestamps: only a handful of distinct values, the quantile sits on a tie.
    rng = np.random.default_rng(2)
    misses = 0
    for _ in range(200):
        values = np.round(rng.gamma(20.0, 0.2, 600))
        misses += _first_miss(values, 4.0, 0.5, 0.1)
    assert misses / 200 <= 0.1


def test_gaussian_boundary_holds_on_a_random_walk_checked_every_step() -> None:
    rng = np.random.default_rng(3)
    alpha, runs, steps = 0.1, 400, 400
    rho2 = tuned_rho2(100.0, alpha)
    crossings = 0
    for _ in range(runs):
        walk = np.cumsum(rng.normal(0.0, 1.0, steps))
        information = np.arange(1, steps + 1, dtype=float)
        # Estimate of a zero mean with variance 1/I: walk / I.
        bounds = np.array([gaussian_half_width(i, alpha, rho2) for i in information])
        crossings += bool((np.abs(walk / information) > bounds).any())
    assert crossings / runs <= alpha
    assert gaussian_half_width(0.0, alpha, rho2) == math.inf
