"""Per-request metrics from one request's timeline of decoded lines.

Definitions (published in docs/benchmarking.md, because every tool means
something else by "ITL"):

- chunk: the token-bearing lines completed by one PayloadPart arrival;
- TTFT = first token-bearing chunk - send (role-only and keep-alive chunks skipped);
- chunk gap = time between consecutive token-bearing chunks;
- ITL: a chunk carrying k tokens after gap g contributes k samples of g/k; the
  first chunk's tokens arrived with TTFT and contribute none;
- TPOT = (last chunk - first chunk) / (output tokens - first-chunk tokens);
- E2E = end of stream - send;
- output tokens: the server's count (usage / details) when present, else the
  stream's own token objects (TGI/LMI), else one re-tokenization of the whole
  text; never the number of chunks.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from endpoint_optimizer.bench.models import RequestSample
from endpoint_optimizer.bench.served_by import ServedBy
from endpoint_optimizer.bench.stream import DecodedLine

Tokenizer = Callable[[str], int]  # text -> number of tokens


class TokenizerUnavailable(RuntimeError):
    """A tokenizer file was asked for and cannot be loaded."""


def load_tokenizer(path: str) -> Tokenizer:
    """Count tokens with the served model's own `tokenizer.json` (Hugging Face format).

    Used only when the server reports no token count; encoding the whole text once
    (not chunk by chunk) keeps merges across chunk boundaries right.
    """
    try:
        from tokenizers import Tokenizer as HfTokenizer
    except ImportError as exc:
        raise TokenizerUnavailable(
            "counting tokens from a tokenizer file needs the `tokenizers` package: "
            "pip install tokenizers"
        ) from exc
    try:
        tokenizer = HfTokenizer.from_file(path)
    except Exception as exc:  # the library raises a bare Exception for bad files
        raise TokenizerUnavailable(f"{path}: not a tokenizer.json file: {exc}") from exc

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return count


_MAX_ERROR_MESSAGE = 200


@dataclass
class RawTimeline:
    """What the client thread recorded for one request, before any arithmetic."""

    index: int
    inference_id: str
    scheduled_at: float
    sent_at: float
    end_at: float
    lines: list[DecodedLine] = field(default_factory=list)
    invoked_variant: str | None = None
    # The container's CustomAttributes label (engine=...; fallback=...), parsed.
    served_by: ServedBy | None = None
    error_kind: str | None = None
    error_message: str | None = None
    attempts: int = 1  # HTTP attempts, retries included (BenchConfig.max_attempts)
    # ModelError's OriginalStatusCode (the container's status), else the HTTP status of
    # an error response; None for a stream that began.
    error_status: int | None = None
    clock: str = "read"  # RequestSample.clock


@dataclass
class _Chunk:
    at: float
    text: str
    known_tokens: int | None
    part: int = 0
    earliest: float | None = None  # DecodedLine.earliest_at


def _chunks(lines: Sequence[DecodedLine]) -> list[_Chunk]:
    chunks: list[_Chunk] = []
    for line in lines:
        if not line.token_bearing:
            continue
        # One event, one chunk; lines built without a decoder (part 0): one stamp.
        if chunks and (
            chunks[-1].part == line.part if line.part else chunks[-1].at == line.arrived_at
        ):
            last = chunks[-1]
            last.text += line.text
            if last.known_tokens is not None and line.tokens is not None:
                last.known_tokens += line.tokens
            else:
                last.known_tokens = None
        else:
            chunks.append(
                _Chunk(line.arrived_at, line.text, line.tokens, line.part, line.earliest_at)
            )
    return chunks


def allocate(total: int, weights: Sequence[float]) -> list[int]:
    """Split `total` tokens over chunks in proportion to `weights` (largest remainder).

    Every chunk gets at least one token when there are enough: a token-bearing
    chunk carried at least one token.
    """
    n = len(weights)
    if n == 0:
        return []
    clipped = [max(w, 0.0) for w in weights]
    weight_sum = sum(clipped)
    if weight_sum <= 0:
        clipped = [1.0] * n
        weight_sum = float(n)
    shares = [total * w / weight_sum for w in clipped]
    whole = [int(s) for s in shares]
    by_remainder = sorted(range(n), key=lambda i: shares[i] - whole[i], reverse=True)
    for i in by_remainder[: total - sum(whole)]:
        whole[i] += 1
    if total >= n:
        for i in range(n):
            if whole[i] == 0:
                donor = max(range(n), key=lambda j: whole[j])
                whole[donor] -= 1
                whole[i] = 1
    return whole


def _token_counts(
    chunks: list[_Chunk], lines: Sequence[DecodedLine], tokenizer: Tokenizer | None
) -> tuple[int | None, str, list[int], bool]:
    """(output tokens, where they came from, tokens per chunk, per-chunk exact?)."""
    server_total: int | None = None
    for line in lines:
        if line.completion_tokens is not None:
            server_total = line.completion_tokens
    known = [c.known_tokens for c in chunks]
    all_known = bool(chunks) and all(k is not None for k in known)
    known_sum = sum(k for k in known if k is not None)
    text = "".join(c.text for c in chunks)
    if server_total is not None:
        total, source = server_total, "usage"
    elif all_known:
        total, source = known_sum, "stream"
    elif tokenizer is not None:
        total, source = tokenizer(text), "tokenizer"
    else:
        return None, "unknown", [], False
    if all_known and known_sum == total:
        return total, source, [k or 0 for k in known], True
    weights: list[float]
    if all_known:
        weights = [float(k or 0) for k in known]
    elif tokenizer is not None:
        weights = [float(tokenizer(c.text)) for c in chunks]
    else:
        weights = [float(len(c.text)) for c in chunks]
    return total, source, allocate(total, weights), False


def request_sample(raw: RawTimeline, tokenizer: Tokenizer | None = None) -> RequestSample:
    """Turn one request's recorded timeline into its metrics."""
    chunks = _chunks(raw.lines)
    error_kind = raw.error_kind
    error_message = raw.error_message
    in_stream_error = next((line.error for line in raw.lines if line.error), None)
    if error_kind is None and in_stream_error is not None:
        error_kind, error_message = "InStreamError", in_stream_error
    if error_kind is None and not chunks:
        error_kind, error_message = "EmptyStream", "the stream ended without a token"
    total, source, per_chunk, exact = _token_counts(chunks, raw.lines, tokenizer)

    offsets = [c.at - raw.sent_at for c in chunks]
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    itl: list[float] = []
    tpot: float | None = None
    if per_chunk:
        # Timing is per socket read: chunks (events) that arrived in one read share a stamp,
        # and when in the read each came is unknown, so the read is one step whose gap is
        # spread over all its tokens, never one real gap and near-zero ones; the first
        # read's tokens are what TTFT saw. Token counts stay per event (acceptance).
        reads: list[tuple[float, int]] = []
        for offset, tokens in zip(offsets, per_chunk, strict=True):
            if reads and reads[-1][0] == offset:
                reads[-1] = (offset, reads[-1][1] + tokens)
            else:
                reads.append((offset, tokens))
        previous = reads[0][0]
        for offset, tokens in reads[1:]:
            if tokens <= 0:
                continue  # its gap folds into the next read that carries tokens
            itl.extend([(offset - previous) / tokens] * tokens)
            previous = offset
        decode_tokens = sum(tokens for _, tokens in reads[1:])
        if decode_tokens > 0:
            tpot = (offsets[-1] - offsets[0]) / decode_tokens

    ttft_slack = last_slack = None
    if chunks and raw.clock == "kernel":
        ttft_slack, last_slack = _slack(chunks[0]), _slack(chunks[-1])

    counters = [line.spec_decode for line in raw.lines if line.spec_decode is not None]
    spec = counters[-1] if counters else None
    return RequestSample(
        index=raw.index,
        inference_id=raw.inference_id,
        scheduled_at=raw.scheduled_at,
        sent_at=raw.sent_at,
        end_at=raw.end_at,
        client_queue_s=max(raw.sent_at - raw.scheduled_at, 0.0),
        ttft_s=offsets[0] if offsets else None,
        e2e_s=raw.end_at - raw.sent_at,
        tpot_s=tpot,
        itl_s=itl,
        chunk_gaps_s=gaps,
        chunk_offsets_s=offsets,
        chunk_tokens=per_chunk,
        output_tokens=total,
        tokens_source=source,
        chunk_tokens_exact=exact,
        spec_drafts=spec.num_drafts if spec else None,
        spec_draft_tokens=spec.num_draft_tokens if spec else None,
        spec_accepted_tokens=spec.num_accepted_tokens if spec else None,
        invoked_variant=raw.invoked_variant,
        served_by=raw.served_by.engine if raw.served_by else None,
        fallback=(raw.served_by.fallback or None) if raw.served_by else None,
        omitted=(raw.served_by.omitted or None) if raw.served_by else None,
        error_kind=error_kind,
        error_message=error_message[:_MAX_ERROR_MESSAGE] if error_message else None,
        attempts=raw.attempts,
        error_status=raw.error_status,
        clock=raw.clock,
        ttft_slack_s=ttft_slack,
        last_chunk_slack_s=last_slack,
    )


def _slack(chunk: _Chunk) -> float | None:
    """How much earlier than its stamp the chunk can have arrived (None: not known)."""
    if chunk.earliest is None:
        return None
    return max(chunk.at - chunk.earliest, 0.0)
