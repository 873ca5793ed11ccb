"""Summaries of one concurrency level: quantiles with their n, throughput, goodput, acceptance."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from endpoint_optimizer.bench.models import (
    BlackBoxAcceptance,
    Distribution,
    RequestSample,
    ServerAcceptance,
    Slo,
    Summary,
)


def distribution(values: Sequence[float]) -> Distribution:
    """p50/p90/p95/p99 (linear interpolation), mean, min, max, and the n behind them."""
    if not values:
        return Distribution(n=0)
    data = np.asarray(values, dtype=float)
    p50, p90, p95, p99 = (float(x) for x in np.percentile(data, [50, 90, 95, 99]))
    return Distribution(
        n=int(data.size),
        mean=float(data.mean()),
        p50=p50,
        p90=p90,
        p95=p95,
        p99=p99,
        min=float(data.min()),
        max=float(data.max()),
    )


def active_seconds(intervals: Sequence[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals: time with a request in flight."""
    total = 0.0
    current_start: float | None = None
    current_end = 0.0
    for start, end in sorted(intervals):
        if current_start is None or start > current_end:
            if current_start is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_start is not None:
        total += current_end - current_start
    return total


def is_good(sample: RequestSample, slo: Slo) -> bool:
    if not sample.ok:
        return False
    if slo.ttft_s is not None and (sample.ttft_s is None or sample.ttft_s > slo.ttft_s):
        return False
    # A one-chunk answer has no decode phase: nothing to hold against the ITL bound.
    if slo.tpot_s is not None and sample.tpot_s is not None and sample.tpot_s > slo.tpot_s:
        return False
    return slo.e2e_s is None or sample.e2e_s <= slo.e2e_s


def summarize(samples: Sequence[RequestSample], slo: Slo, active_s: float) -> Summary:
    ok = [s for s in samples if s.ok]
    tokens = sum(s.output_tokens or 0 for s in ok)
    errors = Counter(s.error_kind for s in samples if s.error_kind is not None)
    has_slo = any(x is not None for x in (slo.ttft_s, slo.tpot_s, slo.e2e_s))
    good = sum(1 for s in samples if is_good(s, slo)) if has_slo else None
    per_s = 1.0 / active_s if active_s > 0 else 0.0
    return Summary(
        ttft_s=distribution([s.ttft_s for s in ok if s.ttft_s is not None]),
        itl_s=distribution([x for s in ok for x in s.itl_s]),
        tpot_s=distribution([s.tpot_s for s in ok if s.tpot_s is not None]),
        e2e_s=distribution([s.e2e_s for s in ok]),
        chunk_gap_s=distribution([x for s in ok for x in s.chunk_gaps_s]),
        client_queue_s=distribution([s.client_queue_s for s in samples]),
        output_tokens=distribution([float(s.output_tokens) for s in ok if s.output_tokens]),
        output_tokens_per_s=tokens * per_s,
        requests_per_s=len(ok) * per_s,
        goodput_requests_per_s=None if good is None else good * per_s,
        good_fraction=None if good is None or not samples else good / len(samples),
        error_rate=(len(samples) - len(ok)) / len(samples) if samples else 0.0,
        errors=dict(errors),
    )


def expected_length(alpha: float, k: int) -> float:
    """Leviathan et al.: expected tokens per verify step, E = (1 - a^(k+1)) / (1 - a)."""
    if alpha >= 1.0:
        return float(k + 1)
    return float((1.0 - alpha ** (k + 1)) / (1.0 - alpha))


def alpha_from_length(length: float, k: int) -> float:
    """Invert `expected_length` by bisection (it is increasing in alpha on [0, 1])."""
    if length <= 1.0:
        return 0.0
    if length >= k + 1:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        if expected_length(middle, k) < length:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def black_box_acceptance(
    samples: Sequence[RequestSample], num_speculative_tokens: int | None
) -> BlackBoxAcceptance:
    decode_chunks = 0
    decode_tokens = 0
    for s in samples:
        if s.ok and len(s.chunk_tokens) > 1:
            decode_chunks += len(s.chunk_tokens) - 1
            decode_tokens += sum(s.chunk_tokens[1:])
    length = decode_tokens / decode_chunks if decode_chunks else None
    result = BlackBoxAcceptance(
        decode_chunks=decode_chunks,
        decode_tokens=decode_tokens,
        mean_tokens_per_chunk=length,
        num_speculative_tokens=num_speculative_tokens,
    )
    if length is not None and num_speculative_tokens:
        k = num_speculative_tokens
        result.acceptance_rate = min(max((length - 1.0) / k, 0.0), 1.0)
        result.alpha = alpha_from_length(length, k)
    return result


def server_acceptance(samples: Sequence[RequestSample]) -> ServerAcceptance | None:
    counted = [s for s in samples if s.spec_draft_tokens is not None]
    if not counted:
        return None
    drafts: int | None = sum(s.spec_drafts or 0 for s in counted)
    if any(s.spec_drafts is None for s in counted):
        drafts = None  # no step count: the acceptance length cannot be computed
    drafted = sum(s.spec_draft_tokens or 0 for s in counted)
    accepted = sum(s.spec_accepted_tokens or 0 for s in counted)
    return ServerAcceptance(
        num_drafts=drafts,
        num_draft_tokens=drafted,
        num_accepted_tokens=accepted,
        acceptance_rate=accepted / drafted if drafted else None,
        mean_acceptance_length=1.0 + accepted / drafts if drafts else None,
    )
