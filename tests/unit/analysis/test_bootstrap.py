"""The order-statistic bootstrap draws the same law as resampling and sorting."""

from __future__ import annotations

import numpy as np
import pytest

from endpoint_optimizer.analysis.bootstrap import (
    bootstrap_quantiles,
    cluster_quantile_replicates,
    quantile_ratio_interval,
    sample_quantile,
)


def test_beta_order_statistic_matches_naive_resampling() -> None:
    rng = np.random.default_rng(7)
    values = np.sort(rng.lognormal(0.0, 0.6, 300))
    fast = bootstrap_quantiles(values, 0.9, 20_000, rng)
    index = rng.integers(0, values.size, size=(4_000, values.size))
    naive = np.quantile(values[index], 0.9, axis=1, method="inverted_cdf")
    for q in (0.05, 0.5, 0.95):
        assert abs(np.quantile(fast, q) - np.quantile(naive, q)) < 0.03 * np.quantile(naive, q)


def test_sample_quantile_is_the_inverted_cdf_quantile() -> None:
    values = np.sort(np.arange(1.0, 101.0))
    assert sample_quantile(values, 0.99) == float(np.quantile(values, 0.99, method="inverted_cdf"))
    assert sample_quantile(values, 0.5) == 50.0


def test_ratio_interval_brackets_the_true_ratio_on_large_samples() -> None:
    rng = np.random.default_rng(3)
    base = rng.lognormal(0.0, 0.5, 5_000)
    cand = rng.lognormal(0.0, 0.5, 5_000) * 1.3
    interval = quantile_ratio_interval(list(base), list(cand), 0.5, 0.005, 2_000, rng)
    assert interval.low < 1.3 < interval.high
    assert interval.low <= interval.point <= interval.high


def test_cluster_bootstrap_of_single_gap_requests_matches_the_ordinary_one() -> None:
    rng = np.random.default_rng(12)
    values = rng.lognormal(0.0, 0.5, 2_000)
    _, clustered = cluster_quantile_replicates(values, [1] * values.size, 0.5, 4_000, rng)
    ordinary = bootstrap_quantiles(np.sort(values), 0.5, 4_000, rng)
    assert np.std(clustered) == pytest.approx(np.std(ordinary), rel=0.2)


def test_cluster_bootstrap_widens_with_the_correlation_inside_requests() -> None:
    rng = np.random.default_rng(13)
    speeds = rng.lognormal(0.0, 0.3, 400)
    correlated = np.concatenate([s * rng.lognormal(0.0, 0.05, 50) for s in speeds])
    sizes = [50] * 400
    _, honest = cluster_quantile_replicates(correlated, sizes, 0.5, 2_000, rng)
    naive = bootstrap_quantiles(np.sort(correlated), 0.5, 2_000, rng)
    assert np.std(honest) > 3 * np.std(naive)
