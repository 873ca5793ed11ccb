"""Quantiles with n, the in-flight window, goodput and acceptance conversions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from endpoint_optimizer.bench.models import RequestSample, Slo
from endpoint_optimizer.bench.stats import (
    active_seconds,
    alpha_from_length,
    black_box_acceptance,
    distribution,
    expected_length,
    server_acceptance,
    summarize,
)


def sample(index: int, **fields: object) -> RequestSample:
    values: dict[str, object] = {
        "index": index,
        "inference_id": f"r{index}",
        "scheduled_at": 0.0,
        "sent_at": 0.0,
        "end_at": 1.0,
        "client_queue_s": 0.0,
        "e2e_s": 1.0,
        "ttft_s": 0.1,
        "tpot_s": 0.01,
        "output_tokens": 10,
    }
    values.update(fields)
    return RequestSample.model_validate(values)


def test_distribution_reports_quantiles_with_their_n() -> None:
    values = [float(x) for x in range(1, 101)]
    dist = distribution(values)
    assert dist.n == 100
    assert dist.p50 == pytest.approx(50.5)
    assert dist.p99 == pytest.approx(float(np.percentile(values, 99)))
    assert (dist.min, dist.max, dist.mean) == (1.0, 100.0, 50.5)
    assert distribution([]).n == 0 and distribution([]).p50 is None


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=200))
def test_quantiles_are_ordered(values: list[float]) -> None:
    d = distribution(values)
    assert d.min is not None and d.max is not None
    assert d.p50 is not None and d.p90 is not None and d.p95 is not None and d.p99 is not None
    assert d.min <= d.p50 <= d.p90 <= d.p95 <= d.p99 <= d.max


def test_active_window_excludes_time_with_nothing_in_flight() -> None:
    assert active_seconds([(0, 1), (0.5, 2), (5, 6)]) == pytest.approx(3.0)
    assert active_seconds([]) == 0.0


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 10)), max_size=20))
def test_active_window_matches_a_grid_count(pairs: list[tuple[int, int]]) -> None:
    intervals = [(float(a), float(a + d)) for a, d in pairs]
    covered = {t for a, b in intervals for t in range(int(a), int(b))}
    assert active_seconds(intervals) == pytest.approx(len(covered))


def test_goodput_counts_errored_requests_in_the_denominator() -> None:
    samples = [
        sample(0, ttft_s=0.1),
        sample(1, ttft_s=0.3),
        sample(2, error_kind="ModelStreamError", ttft_s=None),
        sample(3, ttft_s=0.1, tpot_s=0.2),
    ]
    summary = summarize(samples, Slo(ttft_s=0.2, tpot_s=0.05), active_s=2.0)
    assert summary.good_fraction == pytest.approx(0.25)
    assert summary.goodput_requests_per_s == pytest.approx(0.5)
    assert summary.error_rate == pytest.approx(0.25)
    assert summary.errors == {"ModelStreamError": 1}
    assert summary.requests_per_s == pytest.approx(1.5)
    assert summary.output_tokens_per_s == pytest.approx(15.0)
    assert summary.ttft_s.n == 3


def test_no_slo_means_no_goodput() -> None:
    summary = summarize([sample(0)], Slo(), active_s=1.0)
    assert summary.goodput_requests_per_s is None and summary.good_fraction is None


@pytest.mark.parametrize(
    ("k", "alpha", "length", "rate"),
    [(3, 0.7, 2.53, 0.51), (5, 0.8, 3.69, 0.54), (3, 0.5, 1.88, 0.29)],
)
def test_acceptance_conversions_match_the_reference_table(
    k: int, alpha: float, length: float, rate: float
) -> None:
    assert expected_length(alpha, k) == pytest.approx(length, abs=0.01)
    assert (expected_length(alpha, k) - 1) / k == pytest.approx(rate, abs=0.01)


@given(st.floats(min_value=0.0, max_value=0.999), st.integers(min_value=1, max_value=8))
def test_alpha_inverts_the_expected_length(alpha: float, k: int) -> None:
    assert alpha_from_length(expected_length(alpha, k), k) == pytest.approx(alpha, abs=1e-6)


def test_black_box_acceptance_uses_decode_chunks_only() -> None:
    samples = [
        sample(0, chunk_tokens=[4, 3, 3, 2]),  # the bundled first chunk is prefill
        sample(1, chunk_tokens=[1, 2, 2]),
        sample(2, chunk_tokens=[5, 5], error_kind="StreamBroken"),
    ]
    estimate = black_box_acceptance(samples, num_speculative_tokens=3)
    assert (estimate.decode_chunks, estimate.decode_tokens) == (5, 12)
    assert estimate.mean_tokens_per_chunk == pytest.approx(2.4)
    assert estimate.acceptance_rate == pytest.approx(1.4 / 3)
    assert estimate.alpha is not None
    assert expected_length(estimate.alpha, 3) == pytest.approx(2.4)
    assert black_box_acceptance(samples, None).acceptance_rate is None


def test_server_acceptance_sums_counters_over_requests() -> None:
    samples = [
        sample(0, spec_drafts=10, spec_draft_tokens=30, spec_accepted_tokens=15),
        sample(1, spec_drafts=10, spec_draft_tokens=30, spec_accepted_tokens=9),
        sample(2),
    ]
    server = server_acceptance(samples)
    assert server is not None
    assert server.acceptance_rate == pytest.approx(24 / 60)
    assert server.mean_acceptance_length == pytest.approx(1 + 24 / 20)
    assert server_acceptance([sample(0)]) is None


def test_server_acceptance_without_step_counts_has_a_rate_but_no_length() -> None:
    server = server_acceptance([sample(0, spec_draft_tokens=10, spec_accepted_tokens=4)])
    assert server is not None
    assert server.acceptance_rate == pytest.approx(0.4)
    assert server.num_drafts is None and server.mean_acceptance_length is None
