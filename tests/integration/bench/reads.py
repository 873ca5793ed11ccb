"""What a request's ITL samples cover: the tokens after the first socket read.

Chunks (events) that the client found waiting together share one stamp and are timed as
one step (bench/timeline.py); the first read's tokens are what TTFT saw. A busy host may
join the first two chunks of a request, so exact ITL counts are taken from the reads.
"""

from __future__ import annotations

from endpoint_optimizer.bench.models import RequestSample


def tokens_after_first_read(sample: RequestSample) -> int:
    first = sample.chunk_offsets_s[0]
    return sum(
        tokens
        for offset, tokens in zip(sample.chunk_offsets_s, sample.chunk_tokens, strict=True)
        if offset != first
    )
