"""One streamed request through boto3's InvokeEndpointWithResponseStream, on a thread.

The fallback path (`BenchConfig.client: boto3`); bench.lean is the default and costs a
fifth of this per token (docs/benchmarking.md).

Why boto3 in a bounded thread pool and not aiobotocore: every aiobotocore
release pins botocore to a narrow range (3.10.0 needs botocore <1.43.118), and
the project runs botocore 1.44.8; we do not downgrade it. A request runs
start to finish on one pool thread, so the chunk timestamps are taken by the
thread that reads the socket, right after botocore yields each event, without
a hop through the event loop.

The send time is taken in botocore's `before-send` hook, after signing and just
before the bytes go out, so request building does not count as server time.
Retries are off by default (`BenchConfig.max_attempts` 1): a benchmark that retried a
throttled or failed request would report the retry's latency as if it were one
request. With more attempts, botocore's standard mode retries and the send time is
the first attempt's.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import boto3
import botocore.config
from botocore.exceptions import BotoCoreError, ClientError, EventStreamError
from urllib3.exceptions import HTTPError as Urllib3Error

from endpoint_optimizer.bench.models import BenchTarget
from endpoint_optimizer.bench.served_by import parse_served_by
from endpoint_optimizer.bench.stream import StreamDecoder
from endpoint_optimizer.bench.timeline import RawTimeline

_OPERATION = "InvokeEndpointWithResponseStream"


def make_runtime_client(
    target: BenchTarget, max_connections: int, read_timeout_s: float, max_attempts: int = 1
) -> Any:
    """A sagemaker-runtime client sized for `max_connections` streams in flight."""
    config = botocore.config.Config(
        max_pool_connections=max(max_connections, 1),
        read_timeout=read_timeout_s,
        connect_timeout=10,
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        tcp_keepalive=True,
        # The request is ours and fixed: validating it each time is client CPU spent
        # while other streams' chunks wait to be timestamped.
        parameter_validation=False,
    )
    region = target.region
    if region is None and target.endpoint_url is not None:
        region = "us-east-1"  # a local stand-in ignores it, but SigV4 needs one
    with _session_lock:
        # boto3 sessions are not thread-safe; the clients they make are.
        return _shared_session().client(
            "sagemaker-runtime",
            region_name=region,
            endpoint_url=target.endpoint_url,
            config=config,
        )


_session_lock = threading.Lock()
_session: boto3.session.Session | None = None


def runtime_credentials() -> Any:
    """The shared session's credentials (the standard chain; None when there are none):
    the same object its clients sign with, refreshed by botocore as it expires."""
    with _session_lock:
        return _shared_session().get_credentials()


def runtime_ca_bundle() -> str | None:
    """The CA bundle botocore verifies TLS with (AWS_CA_BUNDLE, or `ca_bundle` in the
    profile), as its clients resolve it; None: the default trust store."""
    with _session_lock:
        # boto3 keeps its botocore session as `_session`; this is botocore's public call.
        bundle = _shared_session()._session.get_config_variable("ca_bundle")
    return str(bundle) if bundle else None


def _shared_session() -> boto3.session.Session:
    """One boto3 session per process, made on first use; callers hold `_session_lock`.

    Why shared: a fresh session parses botocore's endpoint and service data again
    (about 7 MiB of Python objects per session, measured), and the operator runs one
    benchmark per resource; 200 resources measuring at once held one each, and the
    heap stays fragmented after they are freed. Region and endpoint are passed per
    client, and credentials come from the same standard chain either way.
    """
    global _session
    if _session is None:
        _session = boto3.session.Session()
    return _session


class StreamingClient:
    """Runs one streamed invocation on the calling thread and records its timeline."""

    def __init__(self, target: BenchTarget, runtime_client: Any) -> None:
        self.target = target
        self._client = runtime_client
        self._local = threading.local()
        service = runtime_client.meta.service_model.service_id.hyphenize()
        runtime_client.meta.events.register(
            f"before-send.{service}.{_OPERATION}",
            self._mark_send,
            unique_id=f"endpoint-optimizer-bench-{id(self)}",
        )

    def _mark_send(self, **_: Any) -> None:
        # Fired once per attempt: the first attempt's send is the request's.
        if self._local.sent_at is None:
            self._local.sent_at = time.monotonic()
        self._local.attempts += 1
        # None: botocore goes on and sends the request itself.

    def stream_one(
        self, index: int, inference_id: str, body: bytes, scheduled_at: float
    ) -> RawTimeline:
        kwargs: dict[str, Any] = {
            "EndpointName": self.target.endpoint_name,
            "Body": body,
            "ContentType": self.target.content_type,
            "InferenceId": inference_id,
        }
        if self.target.variant is not None:
            kwargs["TargetVariant"] = self.target.variant
        if self.target.inference_component is not None:
            kwargs["InferenceComponentName"] = self.target.inference_component
        if self.target.custom_attributes is not None:
            kwargs["CustomAttributes"] = self.target.custom_attributes
        self._local.sent_at = None
        self._local.attempts = 0
        started_at = time.monotonic()
        decoder = StreamDecoder()
        timeline = RawTimeline(
            index=index,
            inference_id=inference_id,
            scheduled_at=scheduled_at,
            sent_at=started_at,
            end_at=started_at,
        )
        try:
            response = self._client.invoke_endpoint_with_response_stream(**kwargs)
            timeline.invoked_variant = response.get("InvokedProductionVariant")
            timeline.served_by = parse_served_by(response.get("CustomAttributes"))
            stream = response["Body"]
            try:
                for event in stream:
                    arrived_at = time.monotonic()
                    part = event.get("PayloadPart")
                    if part is not None:
                        decoder.feed(part.get("Bytes", b""), arrived_at)
            finally:
                stream.close()
        except EventStreamError as exc:  # ModelStreamError / InternalStreamFailure mid-stream
            timeline.error_kind = str(exc.response.get("Error", {}).get("Code", "EventStreamError"))
            timeline.error_message = str(exc.response.get("Error", {}).get("Message", ""))
        except ClientError as exc:
            timeline.error_kind = str(exc.response.get("Error", {}).get("Code", "ClientError"))
            timeline.error_message = str(exc.response.get("Error", {}).get("Message", ""))
            answered: dict[str, Any] = dict(exc.response)
            status = answered.get("OriginalStatusCode") or answered.get("ResponseMetadata", {}).get(
                "HTTPStatusCode"
            )
            timeline.error_status = int(status) if status is not None else None
        except (BotoCoreError, Urllib3Error, OSError) as exc:  # timeouts, broken connections
            timeline.error_kind = type(exc).__name__
            timeline.error_message = str(exc)
        timeline.end_at = time.monotonic()
        sent_at = getattr(self._local, "sent_at", None)
        timeline.sent_at = sent_at if sent_at is not None else started_at
        timeline.attempts = max(int(getattr(self._local, "attempts", 1)), 1)
        decoder.close(timeline.end_at)
        timeline.lines = decoder.lines
        return timeline
