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


def cluster_quantile_replicates(
    values: Sequence[float],
    sizes: Sequence[int],
    quantile: float,
    resamples: int,
    rng: np.random.Generator,
    bins: int = 128,
) -> tuple[float, FloatArray]:
    """The pooled quantile of per-request groups and its cluster-bootstrap replicates.

    Token gaps of one request share its load and its decode speed, so resampling gaps as
    if independent makes intervals far too narrow. Here whole requests are resampled
    (Poisson(1) weights per request, the multinomial's large-sample twin); a replicate's
    pooled quantile is read off the weighted counts of gaps per request. Only a window
    of order statistics around the quantile is tabulated: eight cluster standard errors
    of the share of gaps below it on each side (from the delta method), so one replicate
    is a product of a weight vector with a (requests x bins) table, not a sort. The
    bins are the window's own order statistics, exact for rounded (tied) timestamps.
    """
    data = as_array(values)
    group = np.asarray(sizes, dtype=np.int64)
    requests = group.size
    owner = np.repeat(np.arange(requests), group)
    point = sample_quantile(np.sort(data), quantile)
    total = float(group.sum())
    at_or_below = np.bincount(owner, weights=(data <= point).astype(np.float64), minlength=requests)
    share_sd = math.sqrt(float(((at_or_below - quantile * group) ** 2).sum())) / total
    reach = min(0.5, 8.0 * share_sd + 2.0 / total)
    grid = np.linspace(max(0.0, quantile - reach), min(1.0, quantile + reach), bins)
    edges = np.unique(np.quantile(data, grid, method="inverted_cdf"))
    below = np.bincount(owner, weights=(data < edges[0]).astype(np.float64), minlength=requests)
    inside = (data >= edges[0]) & (data <= edges[-1])
    table = np.zeros((requests, edges.size))
    np.add.at(table, (owner[inside], np.searchsorted(edges, data[inside], side="left")), 1.0)
    cumulative_table = np.cumsum(table, axis=1) + below[:, None]
    out = np.empty(resamples, dtype=np.float64)
    rows = max(1, 2_000_000 // (edges.size + requests))
    for start in range(0, resamples, rows):
        stop = min(resamples, start + rows)
        weights = rng.poisson(1.0, size=(stop - start, requests)).astype(np.float64)
        cumulative = weights @ cumulative_table
        rank = np.maximum(np.ceil(quantile * (weights @ group) - 1e-9), 1.0)
        reached = cumulative >= rank[:, None]
        # A replicate beyond the window (eight standard errors out) takes its edge.
        index = np.where(reached.any(axis=1), reached.argmax(axis=1), edges.size - 1)
        out[start:stop] = edges[index]
    return point, out


def cluster_quantile_ratio_interval(
    baseline: tuple[Sequence[float], Sequence[int]],
    candidate: tuple[Sequence[float], Sequence[int]],
    quantile: float,
    alpha: float,
    resamples: int,
    rng: np.random.Generator,
) -> RatioInterval:
    """Percentile-bootstrap bounds of the pooled-quantile ratio, resampling whole requests."""
    base_q, base_star = cluster_quantile_replicates(*baseline, quantile, resamples, rng)
    cand_q, cand_star = cluster_quantile_replicates(*candidate, quantile, resamples, rng)
    return _ratio_bounds(base_q, cand_q, base_star, cand_star, alpha)


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
