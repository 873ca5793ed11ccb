"""CloudWatch Logs: what a speculating serving container writes to its endpoint's log group.

SageMaker sends a container's stdout to the log group `/aws/sagemaker/Endpoints/<endpoint>`,
one log stream per `<production-variant>/<instance-id>` (AWS: "Log groups and streams
that Amazon SageMaker AI sends to Amazon CloudWatch Logs"). A vLLM engine that speculates
prints a "SpecDecoding metrics" line every log-stats interval while it is busy, with the
accepted and drafted token counts since its previous line (vllm/v1/spec_decode/metrics.py).
The sandbox writes the same lines, computed from the traffic it served: each request's
drafted and accepted tokens (what the engine simulated) count in the interval its last
token left in, on the stream of the instance that served it; a line appears once its
interval has closed, and only for intervals that drafted something.

The API is botocore's `logs` model (JSON 1.1, `X-Amz-Target: Logs_20140328.<Operation>`):
FilterLogEvents (stream names or a stream-name prefix, startTime/endTime inclusive in
epoch ms, a filter pattern, limit, nextToken pagination) and DescribeLogStreams. Filter
patterns: the term subset (`"quoted phrase"`, bare words, `?term` for OR); JSON and
space-delimited patterns are refused with InvalidParameterException.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import shlex
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from endpoint_optimizer.sandbox.config import SandboxConfig
from endpoint_optimizer.sandbox.control import AwsError, ControlPlane
from endpoint_optimizer.sandbox.runtime import Runtime, TrafficRecord
from endpoint_optimizer.sandbox.validation import RequestInvalid, validate

GROUP_PREFIX = "/aws/sagemaker/Endpoints/"
_MAX_LIMIT = 10000


@dataclass(frozen=True)
class LogEvent:
    stream: str
    timestamp_ms: int
    message: str

    @property
    def event_id(self) -> str:
        digest = hashlib.sha256(f"{self.stream}|{self.timestamp_ms}".encode()).hexdigest()
        return str(int(digest[:30], 16)).rjust(56, "0")[:56]


def instance_id(endpoint: str, variant: str, index: int) -> str:
    digest = hashlib.sha256(f"{endpoint}|{variant}|{index}".encode()).hexdigest()
    return f"i-{digest[:17]}"


def spec_decoding_line(
    when: float, accepted: int, drafted: int, drafts: int, per_position: list[int], seconds: float
) -> str:
    """vLLM V1's line, with the prefix vLLM's logger puts before it."""
    mean_length = 1 + accepted / drafts if drafts else 1.0
    stamp = datetime.fromtimestamp(when, UTC).strftime("%m-%d %H:%M:%S")
    # An engine that does not count per position (the real-model engine) leaves it out.
    positions = (
        "Per-position acceptance rate: "
        + ", ".join(f"{count / drafts:.3f}" for count in per_position)
        + ", "
        if drafts and per_position
        else ""
    )
    return (
        f"(APIServer pid=97) INFO {stamp} [metrics.py:120] SpecDecoding metrics: "
        f"Mean acceptance length: {mean_length:.2f}, "
        f"Accepted throughput: {accepted / seconds:.2f} tokens/s, "
        f"Drafted throughput: {drafted / seconds:.2f} tokens/s, "
        f"Accepted: {accepted} tokens, Drafted: {drafted} tokens, "
        f"{positions}Avg Draft acceptance rate: {100 * accepted / drafted:.1f}%"
    )


class Logs:
    """The CloudWatch Logs operations the operator reads, over the sandbox's traffic record."""

    def __init__(self, config: SandboxConfig, control: ControlPlane, runtime: Runtime) -> None:
        self.config = config
        self.control = control
        self.runtime = runtime

    def handle(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            validate("logs", operation, params)
        except RequestInvalid as exc:
            raise AwsError("InvalidParameterException", str(exc)) from exc
        handler = getattr(self, f"op_{operation}", None)
        if handler is None:
            raise AwsError(
                "InvalidOperationException",
                f"The sandbox does not implement CloudWatch Logs {operation}.",
            )
        result: dict[str, Any] = handler(params)
        return result

    # -- the container's lines ----------------------------------------------------------

    def _endpoint(self, params: dict[str, Any]) -> str:
        group = params.get("logGroupName") or params.get("logGroupIdentifier") or ""
        if params.get("logGroupName") and params.get("logGroupIdentifier"):
            raise AwsError(
                "InvalidParameterException",
                "LogGroupName and LogGroupIdentifier are mutually exclusive.",
            )
        group = str(group).rsplit(":log-group:", 1)[-1].removesuffix(":*")
        endpoint = group.removeprefix(GROUP_PREFIX)
        known = endpoint in self.control.endpoints or any(
            r.endpoint == endpoint for r in self._records()
        )
        if not group.startswith(GROUP_PREFIX) or not known:
            raise AwsError("ResourceNotFoundException", "The specified log group does not exist.")
        return endpoint

    def _records(self) -> list[TrafficRecord]:
        with self.runtime.lock:
            return [r for r in self.runtime.traffic if r.t_end is not None]

    def _speculative_tokens(self, record: TrafficRecord) -> int:
        live = self.runtime.live.get((record.endpoint, record.endpoint_config, record.variant))
        speculative = live.profile.speculative if live is not None else None
        return speculative.num_speculative_tokens if speculative is not None else 1

    def events(self, endpoint: str, now: float | None = None) -> list[LogEvent]:
        """Every line the endpoint's containers have written by `now`, oldest first."""
        now = time.time() if now is None else now
        every = self.config.container_log_interval_s
        buckets: dict[tuple[str, int], list[TrafficRecord]] = {}
        for record in self._records():
            if record.endpoint != endpoint or record.draft_tokens <= 0:
                continue
            assert record.t_end is not None
            ended = record.wall_time + (record.t_end - record.t_start)
            endpoint_state = self.control.endpoints.get(endpoint)
            counts = endpoint_state.instance_counts if endpoint_state else {}
            instance = record.id % max(1, counts.get(record.variant, 1))
            stream = f"{record.variant}/{instance_id(endpoint, record.variant, instance)}"
            buckets.setdefault((stream, math.floor(ended / every)), []).append(record)
        out: list[LogEvent] = []
        for (stream, bucket), records in buckets.items():
            closes = (bucket + 1) * every
            if closes > now:
                continue
            accepted = sum(r.accepted_tokens for r in records)
            drafted = sum(r.draft_tokens for r in records)
            drafts = sum(r.drafts or r.draft_tokens // self._speculative_tokens(r) for r in records)
            width = max((len(r.accepted_per_position) for r in records), default=0)
            per_position = [
                sum(r.accepted_per_position[i] for r in records if i < len(r.accepted_per_position))
                for i in range(width)
            ]
            message = spec_decoding_line(closes, accepted, drafted, drafts, per_position, every)
            out.append(LogEvent(stream, int(closes * 1000), message))
        out.sort(key=lambda e: (e.timestamp_ms, e.stream))
        return out

    def truth(self, endpoint: str, variant: str, start: float, end: float) -> tuple[int, int]:
        """(accepted, drafted) the variant's engine simulated for requests ending in [start,
        end): the ground truth a live estimate is measured against."""
        accepted = drafted = 0
        for record in self._records():
            if record.endpoint != endpoint or record.variant != variant:
                continue
            assert record.t_end is not None
            ended = record.wall_time + (record.t_end - record.t_start)
            if start <= ended < end:
                accepted += record.accepted_tokens
                drafted += record.draft_tokens
        return accepted, drafted

    # -- operations -----------------------------------------------------------------------

    def op_FilterLogEvents(self, p: dict[str, Any]) -> dict[str, Any]:
        endpoint = self._endpoint(p)
        names, prefix = p.get("logStreamNames"), p.get("logStreamNamePrefix")
        if names and prefix:
            raise AwsError(
                "InvalidParameterException",
                "logStreamNames and logStreamNamePrefix are mutually exclusive.",
            )
        start = p.get("startTime")
        end = p.get("endTime")
        terms = _pattern(str(p.get("filterPattern") or ""))
        selected = [
            e
            for e in self.events(endpoint)
            if (not names or e.stream in names)
            and (not prefix or e.stream.startswith(prefix))
            and (start is None or e.timestamp_ms >= int(start))
            and (end is None or e.timestamp_ms <= int(end))
            and _matches(terms, e.message)
        ]
        limit = int(p.get("limit") or _MAX_LIMIT)
        offset = _offset(p.get("nextToken"), p)
        page = selected[offset : offset + limit]
        result: dict[str, Any] = {
            "events": [
                {
                    "logStreamName": e.stream,
                    "timestamp": e.timestamp_ms,
                    "message": e.message,
                    "ingestionTime": e.timestamp_ms + 200,
                    "eventId": e.event_id,
                }
                for e in page
            ],
            "searchedLogStreams": [
                {"logStreamName": s, "searchedCompletely": True}
                for s in sorted({e.stream for e in selected})
            ],
        }
        if offset + limit < len(selected):
            result["nextToken"] = _token(offset + limit, p)
        return result

    def op_DescribeLogStreams(self, p: dict[str, Any]) -> dict[str, Any]:
        endpoint = self._endpoint(p)
        prefix = str(p.get("logStreamNamePrefix") or "")
        if prefix and p.get("orderBy") == "LastEventTime":
            raise AwsError(
                "InvalidParameterException",
                "Cannot order by LastEventTime with a logStreamNamePrefix.",
            )
        streams: dict[str, list[int]] = {}
        for event in self.events(endpoint):
            if event.stream.startswith(prefix):
                streams.setdefault(event.stream, []).append(event.timestamp_ms)
        rows = [
            {
                "logStreamName": name,
                "creationTime": min(stamps),
                "firstEventTimestamp": min(stamps),
                "lastEventTimestamp": max(stamps),
                "lastIngestionTime": max(stamps) + 200,
                "arn": (
                    f"arn:aws:logs:{self.config.region}:{self.config.account_id}:log-group:"
                    f"{GROUP_PREFIX}{endpoint}:log-stream:{name}"
                ),
                "storedBytes": 0,
            }
            for name, stamps in streams.items()
        ]
        by_time = p.get("orderBy") == "LastEventTime"
        rows.sort(
            key=lambda row: (
                str(row["lastEventTimestamp"]).zfill(20) if by_time else str(row["logStreamName"])
            ),
            reverse=bool(p.get("descending")),
        )
        limit = int(p.get("limit") or 50)
        offset = _offset(p.get("nextToken"), p)
        result: dict[str, Any] = {"logStreams": rows[offset : offset + limit]}
        if offset + limit < len(rows):
            result["nextToken"] = _token(offset + limit, p)
        return result


def _query_key(p: dict[str, Any]) -> str:
    kept = {k: v for k, v in p.items() if k not in ("nextToken", "limit")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _token(offset: int, p: dict[str, Any]) -> str:
    raw = json.dumps({"o": offset, "q": _query_key(p)}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _offset(token: Any, p: dict[str, Any]) -> int:
    if not token:
        return 0
    try:
        decoded = json.loads(base64.urlsafe_b64decode(str(token).encode()))
        offset = int(decoded["o"])
        same = decoded["q"] == _query_key(p)
    except (ValueError, KeyError, TypeError) as exc:
        raise AwsError("InvalidParameterException", "The specified nextToken is invalid.") from exc
    if not same or offset < 0:
        raise AwsError(
            "InvalidParameterException",
            "The nextToken was issued for a different request; repeat the request's parameters.",
        )
    return offset


def _pattern(pattern: str) -> tuple[list[str], list[str]]:
    """(terms that must all match, terms of which one must match)."""
    text = pattern.strip()
    if text.startswith("{") or text.startswith("["):
        raise AwsError(
            "InvalidParameterException",
            "The sandbox matches term filter patterns only (quoted phrases, words, ?term).",
        )
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise AwsError("InvalidParameterException", f"Invalid filter pattern: {exc}") from exc
    required = [w for w in words if not w.startswith("?")]
    optional = [w[1:] for w in words if w.startswith("?")]
    return required, optional


def _matches(terms: tuple[list[str], list[str]], message: str) -> bool:
    required, optional = terms
    if any(term not in message for term in required):
        return False
    return not optional or any(term in message for term in optional)
