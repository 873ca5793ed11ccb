"""Vectorised bootstrap intervals for the ratio of candidate to baseline statistics.

Quantiles use the exact order-statistic bootstrap: the k-th order statistic of a
resample (with replacement) of n sorted values is x[ceil(n * U) - 1] with
U ~ Beta(k, n - k + 1), because a resample is n uniform draws and its k-th
smallest uniform has that law. One Beta draw per replicate replaces sorting an
n-long resample, so a 4,000-replicate interval on 10,000 samples costs
microseconds, which matters because the operator runs it on every analysis step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class RatioInterval:
    """Point estimate and one-sided bounds (each at level 1 - alpha) of candidate/baseline."""

    point: float
    low: float
    high: float
    baseline: float
    candidate: float


def order_index(quantile: float, n: int) -> int:
    """1-based rank of the order statistic that estimates `quantile` (inverted CDF)."""
    return min(n, max(1, math.ceil(quantile * n)))


def sample_quantile(values: FloatArray, quantile: float) -> float:
    """The order-statistic quantile of `values` (sorted ascending)."""
    return float(values[order_index(quantile, values.size) - 1])


def bootstrap_quantiles(
    sorted_values: FloatArray, quantile: float, resamples: int, rng: np.random.Generator
) -> FloatArray:
    """`resamples` bootstrap replicates of the order-statistic quantile of `sorted_values`."""
    n = sorted_values.size
    k = order_index(quantile, n)
    uniforms = rng.beta(k, n - k + 1, size=resamples)
    index = np.clip(np.ceil(uniforms * n).astype(np.int64) - 1, 0, n - 1)
    return sorted_values[index]


def bootstrap_means(values: FloatArray, resamples: int, rng: np.random.Generator) -> FloatArray:
    """`resamples` bootstrap replicates of the mean (one matrix of draws, no Python loop)."""
    n = values.size
    # Chunked so memory stays bounded on long series; throughput series are short.
    out = np.empty(resamples, dtype=np.float64)
    rows = max(1, 2_000_000 // max(n, 1))
    for start in range(0, resamples, rows):
        stop = min(resamples, start + rows)
        index = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = values[index].mean(axis=1)
    return out


def as_array(values: Sequence[float]) -> FloatArray:
    return np.asarray(values, dtype=np.float64)


def quantile_ratio_interval(
    baseline: Sequence[float],
    candidate: Sequence[float],
    quantile: float,
    alpha: float,
    resamples: int,
    rng: np.random.Generator,
) -> RatioInterval:
    """Percentile-bootstrap bounds of q(candidate)/q(baseline), each one-sided at 1 - alpha."""
    base = np.sort(as_array(baseline))
    cand = np.sort(as_array(candidate))
    base_q = sample_quantile(base, quantile)
    cand_q = sample_quantile(cand, quantile)
    base_star = bootstrap_quantiles(base, quantile, resamples, rng)
    cand_star = bootstrap_quantiles(cand, quantile, resamples, rng)
    return _ratio_bounds(base_q, cand_q, base_star, cand_star, alpha)


def mean_ratio_interval(
    baseline: Sequence[float],
    candidate: Sequence[float],
    alpha: float,
    resamples: int,
    rng: np.random.Generator,
) -> RatioInterval:
    """Percentile-bootstrap bounds of mean(candidate)/mean(baseline), each one-sided."""
    base = as_array(baseline)
    cand = as_array(candidate)
    base_star = bootstrap_means(base, resamples, rng)
    cand_star = bootstrap_means(cand, resamples, rng)
    return _ratio_bounds(float(base.mean()), float(cand.mean()), base_star, cand_star, alpha)


def _ratio_bounds(
    base_point: float,
    cand_point: float,
    base_star: FloatArray,
    cand_star: FloatArray,
    alpha: float,
) -> RatioInterval:
    # A zero baseline statistic (all-zero samples) makes the ratio undefined; treat a
    # zero-over-zero as "no change" and x-over-zero as unbounded so the verdict stays sane.
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(
            base_star > 0, cand_star / np.where(base_star > 0, base_star, 1.0), np.inf
        )
        ratios = np.where((base_star <= 0) & (cand_star <= 0), 1.0, ratios)
    low, high = np.quantile(ratios, [alpha, 1.0 - alpha], method="inverted_cdf")
    point = cand_point / base_point if base_point > 0 else (1.0 if cand_point <= 0 else math.inf)
    return RatioInterval(
        point=point,
        low=float(low),
        high=float(high),
        baseline=base_point,
        candidate=cand_point,
    )
