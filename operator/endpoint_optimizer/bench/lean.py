"""The lean per-token path: InvokeEndpointWithResponseStream on one asyncio event loop.

Why not boto3 here: its stream is read by a blocking thread per request, and its
event-stream decoding is pure Python per event; at 256 streams x 100 tokens/s the
reader threads and the GIL between them cost 0.2-0.6 CPU s per 1,000 tokens and
made every timestamp late (issue 24). This client keeps what must stay botocore's
and replaces only the transport and the per-token decoding:

- the request is signed by botocore's own `SigV4Auth` with the credentials of the
  boto3 session's standard chain (environment, profile, IRSA / Pod Identity web
  identity, container and instance metadata), refreshed by botocore as they expire;
- the endpoint URL, region and signing name come from a boto3 sagemaker-runtime
  client made as the boto3 path makes it (so AWS_ENDPOINT_URL and the endpoint
  rules apply the same way), and the operation model from its service model;
- an error response is parsed by botocore's own rest-json parser, with the modeled
  error's fields (ModelError's OriginalStatusCode, OriginalMessage, LogStreamArn)
  merged in as botocore's endpoint does, so the error code and message are the ones
  a boto3 caller sees;
- retries are botocore's standard mode, its own classes (conditions, exponential
  backoff with jitter, retry quota), with `BenchConfig.max_attempts` as the limit;
- TLS verifies against botocore's CA bundle (AWS_CA_BUNDLE, the profile's ca_bundle),
  else the default trust store;
- the response body is read by aiohttp on the loop, framed by bench.eventstream
  (both CRCs checked with zlib), and each PayloadPart goes to the same
  `StreamDecoder` as on the boto3 path, stamped with the kernel's receive time of its
  last byte where asyncio's loop reads the socket on Linux (bench/rxstamp.py), else as
  it is decoded.

The send time is taken after signing, just before aiohttp writes the request, as the
boto3 path's before-send hook does, and replaced by the moment the socket took the
request's first bytes where the kernel stamps are in use; with retries it is the first
attempt's send, so a retried request's latency is what its caller waited.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

import aiohttp
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest, AWSResponse, HeadersDict
from botocore.exceptions import (
    BotoCoreError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)
from botocore.parsers import RestJSONParser
from botocore.retries import quota, standard
from botocore.utils import percent_encode

from endpoint_optimizer.bench.client import (
    make_runtime_client,
    runtime_ca_bundle,
    runtime_credentials,
)
from endpoint_optimizer.bench.eventstream import EventStreamCorrupt, EventStreamDecoder
from endpoint_optimizer.bench.models import BenchTarget
from endpoint_optimizer.bench.rxstamp import Claim, claiming, socket_factory
from endpoint_optimizer.bench.served_by import parse_served_by
from endpoint_optimizer.bench.stream import StreamDecoder
from endpoint_optimizer.bench.timeline import RawTimeline

_OPERATION = "InvokeEndpointWithResponseStream"
_CONNECT_TIMEOUT_S = 10.0  # as the boto3 path's connect_timeout


class _Failed(Exception):
    """An attempt that ended before the stream: botocore's exception or parsed error."""

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        http_response: AWSResponse | None = None,
        parsed: dict[str, Any] | None = None,
        caught: Exception | None = None,
        streaming: bool = False,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        # The response had begun: botocore hands the stream to its caller and retries
        # nothing after that, and neither does this client.
        self.streaming = streaming
        self.message = message
        self.http_response = http_response
        self.parsed = parsed
        self.caught = caught
        status = None
        if parsed is not None:
            status = parsed.get("OriginalStatusCode")
        if status is None and http_response is not None:
            status = http_response.status_code
        self.status: int | None = int(status) if status is not None else None


class _StandardRetries:
    """botocore's standard retry mode, wired as `botocore.retries.standard.register_retry_handler`
    wires it on a client, for requests this module sends itself."""

    def __init__(self, max_attempts: int, operation_model: Any, sleep: Callable[[float], None]):
        adapter = standard.RetryEventAdapter()
        detector = standard.ThrottlingErrorDetector(adapter)
        self._quota = standard.RetryQuotaChecker(quota.RetryQuota(), detector)
        self._handler = standard.RetryHandler(
            retry_policy=standard.RetryPolicy(
                retry_checker=standard.StandardRetryConditions(max_attempts=max_attempts),
                retry_backoff=standard.ExponentialBackoff(
                    service_name="sagemaker-runtime", throttling_detector=detector
                ),
            ),
            retry_event_adapter=adapter,
            # botocore's stubs say RetryQuota; its register_retry_handler passes the checker.
            retry_quota=cast(Any, self._quota),
            service_name="sagemaker-runtime",
            sleep=sleep,
        )
        self._operation_model = operation_model

    def delay(self, attempt: int, failed: _Failed, request_context: dict[str, Any]) -> float | None:
        """Seconds to wait before the next attempt, or None: do not retry."""
        response = None
        if failed.http_response is not None and failed.parsed is not None:
            response = (failed.http_response, failed.parsed)
        delay = self._handler.needs_retry(
            response=response,
            attempts=attempt,
            caught_exception=failed.caught,
            operation=self._operation_model,
            request_dict={"context": request_context},
        )
        return float(delay) if delay else None

    def succeeded(self, request_context: dict[str, Any], status: int) -> None:
        # As botocore's after-call event calls it: the request's context dict (the stubs
        # say RetryContext) and the final response.
        release: Any = self._quota.release_retry_quota
        release(request_context, AWSResponse("", status, cast(Any, {}), None))


class LeanStreamingClient:
    """Streams invocations on the running event loop; `close()` when done."""

    def __init__(
        self,
        target: BenchTarget,
        max_connections: int,
        read_timeout_s: float,
        max_attempts: int = 1,
        runtime_client: Any | None = None,
    ) -> None:
        # A boto3 client made as the boto3 path makes it: the endpoint URL, region and
        # service model it resolved are what this client sends to and parses with.
        client = runtime_client or make_runtime_client(target, 1, read_timeout_s)
        self.target = target
        meta = client.meta
        self._region = meta.region_name
        self._signing_name = meta.service_model.signing_name or "sagemaker"
        self._operation = meta.service_model.operation_model(_OPERATION)
        self._credentials = runtime_credentials()
        self._url = (
            meta.endpoint_url.rstrip("/")
            + f"/endpoints/{percent_encode(target.endpoint_name)}/invocations-response-stream"
        )
        self._headers = {"Content-Type": target.content_type}
        if target.variant is not None:
            self._headers["X-Amzn-SageMaker-Target-Variant"] = target.variant
        if target.inference_component is not None:
            self._headers["X-Amzn-SageMaker-Inference-Component"] = target.inference_component
        if target.custom_attributes is not None:
            self._headers["X-Amzn-SageMaker-Custom-Attributes"] = target.custom_attributes
        self._parser = RestJSONParser()
        self._retries = _StandardRetries(max_attempts, self._operation, time.sleep)
        # TLS trusts what botocore trusts: a private CA in AWS_CA_BUNDLE or the profile's
        # ca_bundle, else the default store.
        bundle = runtime_ca_bundle()
        self._ssl: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=bundle) if bundle else True
        )
        self._max_connections = max(max_connections, 1)
        self._read_timeout_s = read_timeout_s
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._max_connections,
                    limit_per_host=0,
                    ttl_dns_cache=300,
                    socket_factory=socket_factory,
                    ssl=self._ssl,
                ),
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=_CONNECT_TIMEOUT_S, sock_read=self._read_timeout_s
                ),
                auto_decompress=False,
                skip_auto_headers=("Accept-Encoding",),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _signed_headers(self, inference_id: str, body: bytes) -> dict[str, str]:
        if self._credentials is None:
            raise NoCredentialsError()
        headers = dict(self._headers)
        headers["X-Amzn-SageMaker-Inference-Id"] = inference_id
        request = AWSRequest(method="POST", url=self._url, data=body, headers=headers)
        # Frozen per request: refreshable credentials (IRSA, SSO) renew themselves here.
        frozen = self._credentials.get_frozen_credentials()
        SigV4Auth(frozen, self._signing_name, self._region).add_auth(request)
        return dict(request.headers.items())

    def _error(self, status: int, headers: Any, raw: bytes) -> _Failed:
        """Parse an error response as botocore's endpoint and client do."""
        response_dict = {"status_code": status, "headers": HeadersDict(headers), "body": raw}
        parsed: dict[str, Any] = self._parser.parse(response_dict, self._operation.output_shape)
        code = parsed.get("Error", {}).get("Code")
        if code:
            shape = self._operation.service_model.shape_for_error_code(code)
            if shape is not None:
                parsed.update(self._parser.parse(response_dict, shape))
        error = parsed.get("Error", {})
        http_response = AWSResponse(self._url, status, cast(Any, response_dict["headers"]), None)
        return _Failed(
            str(error.get("Code") or status),
            str(error.get("Message", "")),
            http_response=http_response,
            parsed=parsed,
        )

    def _transport_error(self, exc: BaseException, connected: bool, streaming: bool) -> _Failed:
        """aiohttp's and asyncio's errors as the botocore exceptions urllib3's would be."""
        mapped: BotoCoreError
        if isinstance(exc, TimeoutError):
            mapped = (
                ReadTimeoutError(endpoint_url=self._url, error=exc)
                if connected
                else ConnectTimeoutError(endpoint_url=self._url, error=exc)
            )
        elif isinstance(exc, aiohttp.ClientConnectorError) and not connected:
            mapped = EndpointConnectionError(endpoint_url=self._url, error=exc)
        else:
            mapped = ConnectionClosedError(endpoint_url=self._url)
        return _Failed(type(mapped).__name__, str(mapped), caught=mapped, streaming=streaming)

    async def stream_one(
        self, index: int, inference_id: str, body: bytes, scheduled_at: float
    ) -> RawTimeline:
        started_at = time.monotonic()
        timeline = RawTimeline(
            index=index,
            inference_id=inference_id,
            scheduled_at=scheduled_at,
            sent_at=started_at,
            end_at=started_at,
        )
        decoder = StreamDecoder()
        request_context: dict[str, Any] = {}
        sent_at: float | None = None
        ended_at: float | None = None
        attempt = 0
        while True:
            attempt += 1
            try:
                headers = self._signed_headers(inference_id, body)
                first = sent_at is None
                if sent_at is None:
                    sent_at = time.monotonic()
                kernel = await self._attempt(headers, body, timeline, decoder, sent_at)
                if first and kernel is not None and kernel.wrote_at is not None:
                    sent_at, ended_at = kernel.wrote_at, kernel.ended_at
                    timeline.clock = "kernel"
                self._retries.succeeded(request_context, 200)
                break
            except _Failed as failed:
                delay = None
                if not failed.streaming:
                    delay = self._retries.delay(attempt, failed, request_context)
                if delay is None:
                    timeline.error_kind, timeline.error_message = failed.kind, failed.message
                    timeline.error_status = failed.status
                    break
                await asyncio.sleep(delay)
            except BotoCoreError as exc:  # NoCredentialsError, a refresh that failed
                timeline.error_kind, timeline.error_message = type(exc).__name__, str(exc)
                break
        timeline.attempts = attempt
        timeline.end_at = ended_at if ended_at is not None else time.monotonic()
        timeline.sent_at = sent_at if sent_at is not None else started_at
        decoder.close(timeline.end_at)
        timeline.lines = decoder.lines
        return timeline

    async def _attempt(
        self,
        headers: dict[str, str],
        body: bytes,
        timeline: RawTimeline,
        decoder: StreamDecoder,
        sent_at: float,
    ) -> Claim | None:
        """One HTTP attempt; returns its claim where the kernel's stamps timed it (when the
        socket took the request, when the stream's end reached this host), else None."""
        connected = streaming = False
        try:
            # The kernel's stamps (bench/rxstamp.py) where the loop's socket reads give them:
            # the claim learns which socket took this request, and when.
            with claiming() as claim:
                async with self._http().post(self._url, data=body, headers=headers) as response:
                    connected = True
                    try:
                        if response.status != 200:
                            raise self._error(
                                response.status, response.headers, await response.read()
                            )
                        streaming = True
                        return await self._stream(response, claim, timeline, decoder, sent_at)
                    finally:
                        # Before the connection goes back to the pool.
                        if claim.sock is not None:
                            claim.sock.unwatch()
        except _Failed:
            raise
        except EventStreamCorrupt as exc:
            raise _Failed("EventStreamCorrupt", str(exc), streaming=True) from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise self._transport_error(exc, connected, streaming) from exc

    async def _stream(
        self,
        response: aiohttp.ClientResponse,
        claim: Claim,
        timeline: RawTimeline,
        decoder: StreamDecoder,
        sent_at: float,
    ) -> Claim | None:
        monotonic = time.monotonic
        timeline.invoked_variant = response.headers.get("x-Amzn-Invoked-Production-Variant")
        timeline.served_by = parse_served_by(
            response.headers.get("X-Amzn-SageMaker-Custom-Attributes")
        )
        sock = claim.sock
        if sock is not None and sock.last_at is not None and claim.wrote_at is not None:
            # The request left when the socket took it, not when this coroutine asked
            # aiohttp to send it (a busy loop runs other callbacks in between).
            claim.wrote_at = sent_at = max(sent_at, claim.wrote_at)
            sock.watch(response.content)
        else:
            sock = None  # one clock per request: the read times, throughout
        last_at = sent_at
        frames = EventStreamDecoder()
        async for data in response.content.iter_any():
            # One stamp per read, or per kernel receive: frames that arrived together share
            # it, and bench/timeline.py times them as one step (the gap spread over their
            # tokens), not as events microseconds apart whose near-zero gaps would drag the
            # ITL quantiles down when the client fell behind.
            read_at = monotonic()
            messages = frames.feed(data)
            for (frame_headers, payload), end in zip(messages, frames.ends, strict=True):
                kind = frame_headers.get(":message-type")
                if kind == "event":
                    if frame_headers.get(":event-type") == "PayloadPart":
                        if sock is None:
                            decoder.feed(payload, read_at)
                            last_at = read_at
                            continue
                        # When the frame's last byte reached this host: no later than
                        # `at`, no earlier than `earliest` (the send, at the least).
                        at, earliest = read_at, sent_at
                        received, floor = sock.arrived(end)
                        if received is not None and sent_at <= received <= read_at:
                            at = received
                        if floor is not None and sent_at <= floor <= at:
                            earliest = floor
                        decoder.feed(payload, at, earliest)
                        last_at = at
                elif kind == "exception":
                    raise _stream_exception(frame_headers, payload)
                elif kind == "error":
                    raise _Failed(
                        str(frame_headers.get(":error-code", "EventStreamError")),
                        str(frame_headers.get(":error-message", "")),
                        streaming=True,
                    )
        if frames.pending:
            raise _Failed(
                "ConnectionClosedError",
                f"the stream ended inside an event-stream message ({frames.pending} bytes unread)",
                streaming=True,
            )
        if sock is None:
            return None
        if sock.last_at is not None:
            # The read that brought the stream's end: its stamp, within what is known.
            claim.ended_at = min(max(sock.last_at, last_at), monotonic())
        return claim


def _stream_exception(headers: Mapping[str, object], payload: bytes) -> _Failed:
    """A modeled exception event (ModelStreamError, InternalStreamFailure), as botocore's
    EventStreamError carries it: the exception type is the code, the payload's Message
    the message."""
    kind = str(headers.get(":exception-type", "EventStreamError"))
    try:
        fields = json.loads(payload) if payload else {}
    except ValueError:
        fields = {}
    message = fields.get("Message", fields.get("message", "")) if isinstance(fields, dict) else ""
    return _Failed(kind, str(message), streaming=True)
