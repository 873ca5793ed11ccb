"""Decode a model's streamed output into timed, token-bearing chunks.

SageMaker's PayloadPart boundaries are arbitrary: a JSON line or SSE event may
span several parts, and one part may carry several lines. The decoder buffers
bytes, splits on newlines, and tags every completed line with the arrival time
of the part that completed it (a token is usable only once its line is whole).

Three container formats are understood, detected per line:

- LMI / TGI: `{"token": {"id", "text", "special"}, "generated_text", "details"}`
  as JSON lines (LMI) or `data:` SSE events (TGI); `details.generated_tokens`
  is the server's token count.
- OpenAI-style: `data: {"choices": [{"delta": {...}}], "usage": {...}}` and
  `data: [DONE]`; `usage.completion_tokens` is the server's count, cumulative
  per chunk when the server sends continuous usage.
- Plain JSON lines: `{"text": ...}`, `{"generated_text": ...}`,
  `{"outputs": [...]}` or a bare JSON string.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


def _json_loads() -> Callable[[bytes], Any]:
    """orjson's parser where installed (a declared dependency), else the standard library's.

    Why orjson: this parse runs once per token line on the benchmark's per-token path;
    orjson parses an LMI token line in about a quarter of json.loads' time. Both give the
    same Python values for JSON, and both raise a ValueError subclass on bad input.
    """
    try:
        import orjson
    except ImportError:  # an environment made before the dependency was declared
        return json.loads
    parse: Callable[[bytes], Any] = orjson.loads
    return parse


_loads = _json_loads()


class ChunkFormat(StrEnum):
    LMI = "lmi"
    OPENAI = "openai"
    JSON_LINES = "json-lines"


@dataclass(frozen=True)
class SpecDecodeCounters:
    """Server-reported speculative decoding counters for one request."""

    num_drafts: int | None  # verify steps; None where the server does not say
    num_draft_tokens: int
    num_accepted_tokens: int


@dataclass(slots=True)  # one per streamed line: slots make it cheaper to build
class DecodedLine:
    """One complete line of the model's output stream, after format decoding."""

    arrived_at: float
    text: str = ""
    # Tokens this line is known to carry (a TGI/LMI token object is one token;
    # a cumulative usage counter gives a difference); None when unknown.
    tokens: int | None = None
    token_bearing: bool = False
    completion_tokens: int | None = None
    cumulative_usage: bool = False
    spec_decode: SpecDecodeCounters | None = None
    error: str | None = None
    format: ChunkFormat | None = None
    # The PayloadPart (event) that completed the line, counted from 1: lines of one event
    # are one chunk of the server's; events of one socket read share `arrived_at`.
    part: int = 0
    # The earliest the line can have arrived, where the client knows it (the kernel's
    # stamps, bench/rxstamp.py): it came between this and `arrived_at`. None: unknown.
    earliest_at: float | None = None


@dataclass
class StreamDecoder:
    """Incremental decoder: feed PayloadPart bytes with their arrival time."""

    _buffer: bytearray = field(default_factory=bytearray)
    _last_cumulative: int = 0
    _parts: int = 0
    lines: list[DecodedLine] = field(default_factory=list)

    def feed(self, data: bytes, arrived_at: float, earliest_at: float | None = None) -> None:
        if self._buffer:
            data = bytes(self._buffer) + data
            self._buffer.clear()
        *complete, rest = data.split(b"\n")
        self._decode_part(complete, arrived_at, earliest_at)
        if rest:
            self._buffer += rest

    def close(self, arrived_at: float) -> None:
        """Decode a last line that the server did not terminate with a newline."""
        if self._buffer.strip():
            self._decode_part([bytes(self._buffer)], arrived_at)
        self._buffer.clear()

    def _decode_part(
        self, raws: list[bytes], arrived_at: float, earliest_at: float | None = None
    ) -> None:
        self._parts += 1
        before = len(self.lines)
        for raw in raws:
            self._decode_line(raw, arrived_at)
        for line in self.lines[before:]:
            line.part = self._parts
            line.earliest_at = earliest_at

    def _decode_line(self, raw: bytes, arrived_at: float) -> None:
        line = raw.strip()
        if not line:
            return
        sse = False
        if line.startswith(b"data:"):
            sse = True
            line = line[5:].strip()
            if line == b"[DONE]" or not line:
                return
        elif line.startswith((b":", b"event:", b"id:", b"retry:")):
            return  # SSE comments (keep-alives) and metadata carry no output
        try:
            payload = _loads(line)
        except ValueError:
            # Undecodable output still proves a token arrived: count it as text.
            self.lines.append(
                DecodedLine(arrived_at, text=line.decode("utf-8", "replace"), token_bearing=True)
            )
            return
        decoded = self._decode_payload(payload, arrived_at, sse)
        if decoded is not None:
            self.lines.append(decoded)

    def _decode_payload(self, payload: Any, arrived_at: float, sse: bool) -> DecodedLine | None:
        if isinstance(payload, str):
            return DecodedLine(
                arrived_at, text=payload, token_bearing=bool(payload), format=ChunkFormat.JSON_LINES
            )
        if not isinstance(payload, dict):
            return None
        if "error" in payload and not payload.get("choices") and "token" not in payload:
            return DecodedLine(arrived_at, error=_error_text(payload["error"]))
        if "token" in payload and isinstance(payload["token"], dict):
            return _decode_lmi(payload, arrived_at)
        if "choices" in payload or "usage" in payload or sse:
            return self._decode_openai(payload, arrived_at)
        return _decode_plain(payload, arrived_at)

    def _decode_openai(self, payload: dict[str, Any], arrived_at: float) -> DecodedLine:
        decoded = DecodedLine(arrived_at, format=ChunkFormat.OPENAI)
        texts: list[str] = []
        for choice in payload.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                for key in ("content", "reasoning_content", "reasoning"):
                    value = delta.get(key)
                    if isinstance(value, str) and value:
                        texts.append(value)
                        decoded.token_bearing = True
                if delta.get("tool_calls"):
                    decoded.token_bearing = True
            text = choice.get("text")  # the completions API
            if isinstance(text, str) and text:
                texts.append(text)
                decoded.token_bearing = True
        decoded.text = "".join(texts)
        usage = payload.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            completion = int(usage["completion_tokens"])
            decoded.completion_tokens = completion
            if decoded.token_bearing:
                # Continuous usage: the counter rides every content chunk.
                decoded.cumulative_usage = True
                decoded.tokens = completion - self._last_cumulative
            self._last_cumulative = completion
        decoded.spec_decode = _spec_decode_counters(payload)
        return decoded


def _decode_lmi(payload: dict[str, Any], arrived_at: float) -> DecodedLine:
    token = payload["token"]
    text = token.get("text")
    if not isinstance(text, str):
        text = ""
    special = bool(token.get("special", False))
    # One line per engine step: a speculative step may carry several tokens.
    count = payload.get("num_tokens")
    decoded = DecodedLine(
        arrived_at,
        text="" if special else text,
        tokens=count if isinstance(count, int) and count >= 1 else 1,
        token_bearing=not special,
        format=ChunkFormat.LMI,
    )
    details = payload.get("details")
    if isinstance(details, dict):
        if isinstance(details.get("generated_tokens"), int):
            decoded.completion_tokens = int(details["generated_tokens"])
        decoded.spec_decode = _spec_decode_counters(details)
    decoded.spec_decode = decoded.spec_decode or _spec_decode_counters(payload)
    return decoded


def _decode_plain(payload: dict[str, Any], arrived_at: float) -> DecodedLine:
    text = ""
    for key in ("text", "generated_text", "output", "outputs"):
        value = payload.get(key)
        if isinstance(value, list) and value and isinstance(value[0], str):
            value = value[0]
        if isinstance(value, str):
            text = value
            break
    decoded = DecodedLine(
        arrived_at, text=text, token_bearing=bool(text), format=ChunkFormat.JSON_LINES
    )
    usage = payload.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        decoded.completion_tokens = int(usage["completion_tokens"])
    decoded.spec_decode = _spec_decode_counters(payload)
    return decoded


_COUNTER_KEYS = frozenset(("metrics", "speculative_decoding", "num_draft_tokens", "draft_tokens"))


def _spec_decode_counters(payload: dict[str, Any]) -> SpecDecodeCounters | None:
    """Per-request speculative counters, where a server reports them.

    vLLM: `metrics.speculative_decoding` {num_spec_steps, num_draft_tokens,
    num_accepted_draft_tokens} in the final usage chunk; LMI-style `details`
    {draft_tokens, accepted_tokens} (no step count, so no acceptance length).
    """
    # The per-token fast path: a line without counters names none of their keys (one C-level
    # pass over the line's few keys; a generator here was 8 % of the profiled request path:
    # benchmarks/results/lean_profile_c256.txt).
    if _COUNTER_KEYS.isdisjoint(payload):
        return None
    found: Any = None
    metrics = payload.get("metrics")
    if isinstance(metrics, dict):
        found = metrics.get("speculative_decoding")
    if found is None:
        found = payload.get("speculative_decoding", payload)
    if not isinstance(found, dict):
        return None
    drafted = _first_int(found, "num_draft_tokens", "draft_tokens")
    accepted = _first_int(
        found, "num_accepted_draft_tokens", "num_accepted_tokens", "accepted_tokens"
    )
    if drafted is None or accepted is None:
        return None
    return SpecDecodeCounters(_first_int(found, "num_spec_steps", "num_drafts"), drafted, accepted)


def _first_int(mapping: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = mapping.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    return None


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or "error")
    return str(error)
