"""Speculative decoding counters from the serving container's log lines (pure parsing).

vLLM prints its speculative decoding statistics to the container's stdout, which
SageMaker ships to CloudWatch Logs (`/aws/sagemaker/Endpoints/<endpoint>`, one stream per
`<variant>/<instance-id>`). Two forms exist, both read here as COUNTERS (accepted and
drafted tokens), never as the printed ratios, so intervals and instances add up exactly:

- V1 engine (`vllm/v1/spec_decode/metrics.py`, `SpecDecodingLogging.log`), every
  log-stats interval while busy, over the interval since its previous line (it resets):
  ``SpecDecoding metrics: Mean acceptance length: 2.73, Accepted throughput: 12.40
  tokens/s, Drafted throughput: 15.10 tokens/s, Accepted: 124 tokens, Drafted: 151 tokens,
  Per-position acceptance rate: 0.890, 0.760, 0.610, Avg Draft acceptance rate: 82.1%``
  (earlier 0.8/0.9 releases print fewer fields before `Accepted:`; the counters are the
  same).
- V0 engine (`vllm/engine/metrics.py`, `_format_spec_decode_metrics_str`): running totals
  since the engine started, so an interval is the difference of two lines of one stream:
  ``Speculative metrics: Draft acceptance rate: 0.512, System efficiency: 0.433, Number of
  speculative tokens: 5, Number of accepted tokens: 1234, Number of draft tokens: 2410,
  Number of emitted tokens: 2000.``

The line is matched anywhere in the message: CloudWatch keeps vLLM's own prefix
(``INFO 08-04 20:51:08 [metrics.py:120]``) and LMI (DJL Serving) prefixes its Python
worker's stdout with its own logger (``INFO PyProcess W-...-stdout:``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

_V1 = re.compile(
    r"SpecDecoding metrics:.*?Accepted: (?P<accepted>\d+) tokens, Drafted: (?P<drafted>\d+) tokens"
)
_V0 = re.compile(
    r"Speculative metrics:.*?Number of speculative tokens: (?P<k>\d+), "
    r"Number of accepted tokens: (?P<accepted>\d+), Number of draft tokens: (?P<drafted>\d+)"
)
# CloudWatch Logs filter pattern (OR of two phrases) that selects both forms server-side.
FILTER_PATTERN = '?"SpecDecoding metrics" ?"Speculative metrics"'


class CounterForm(StrEnum):
    INTERVAL = "interval"  # V1: counts since the stream's previous line
    CUMULATIVE = "cumulative"  # V0: running totals since the engine started


@dataclass(frozen=True)
class SpecLine:
    """One parsed log line of one log stream (one instance of one variant)."""

    stream: str
    timestamp_ms: int
    accepted: int
    drafted: int
    form: CounterForm
    speculative_tokens: int | None = None


@dataclass(frozen=True)
class SpecCounts:
    """Accepted and drafted tokens over one stretch of one stream (one log line's worth)."""

    stream: str
    timestamp_ms: int
    accepted: int
    drafted: int


def parse_line(stream: str, timestamp_ms: int, message: str) -> SpecLine | None:
    """The counters of one log event, or None when it is not a speculative-metrics line."""
    if (v1 := _V1.search(message)) is not None:
        return SpecLine(
            stream,
            timestamp_ms,
            int(v1["accepted"]),
            int(v1["drafted"]),
            CounterForm.INTERVAL,
        )
    if (v0 := _V0.search(message)) is not None:
        return SpecLine(
            stream,
            timestamp_ms,
            int(v0["accepted"]),
            int(v0["drafted"]),
            CounterForm.CUMULATIVE,
            int(v0["k"]),
        )
    return None


def interval_counts(
    lines: Iterable[SpecLine], last_totals: dict[str, tuple[int, int]]
) -> tuple[list[SpecCounts], dict[str, tuple[int, int]]]:
    """Per-line interval counts from lines of any form, oldest first per stream.

    V1 lines are already per interval. V0 lines are running totals: each one minus the
    stream's previous total (from `last_totals` across reads); a stream's first line has no
    previous total and only sets it, and a total that goes down is a restarted engine, whose
    new total is itself the interval. Returns the counts and the updated totals.
    """
    totals = dict(last_totals)
    out: list[SpecCounts] = []
    for line in sorted(lines, key=lambda one: (one.stream, one.timestamp_ms)):
        if line.accepted > line.drafted:
            continue  # not counters of one engine: skipped rather than judged
        if line.form is CounterForm.INTERVAL:
            out.append(SpecCounts(line.stream, line.timestamp_ms, line.accepted, line.drafted))
            continue
        previous = totals.get(line.stream)
        totals[line.stream] = (line.accepted, line.drafted)
        if previous is None:
            continue
        accepted, drafted = line.accepted - previous[0], line.drafted - previous[1]
        if accepted < 0 or drafted < 0:
            accepted, drafted = line.accepted, line.drafted
        if drafted > 0 and 0 <= accepted <= drafted:
            out.append(SpecCounts(line.stream, line.timestamp_ms, accepted, drafted))
    return out, totals
