"""The lean client times tokens by the kernel's receive stamps (bench/rxstamp.py), over
plain HTTP and TLS: a token (and the stream's end) that arrives while the client's event
loop is stuck is timed when it reached the host, not when the loop got free to read it.

The stuck loop is made on purpose: once the scripted server has the request (a condition
the test waits on), a callback on the client's loop sleeps 80 ms, holding it, while the
server sends the first token 20 ms after the request. The server's own CLOCK_MONOTONIC
send record is the truth (same host, same clock). Where the server itself was late past
the stall (a loaded machine), the request proves nothing and the next one is tried. The
whole stream (4 tokens, 4 ms apart) comes inside the stall.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from endpoint_optimizer.bench import BenchTarget
from endpoint_optimizer.bench.lean import LeanStreamingClient
from endpoint_optimizer.bench.timeline import RawTimeline, request_sample

from .streaming_server import TTFT_S, StreamingServer, use_credentials

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="SO_TIMESTAMPNS is Linux's")

STALL_S = 0.08
BODY = b'{"inputs": "x", "parameters": {"max_new_tokens": 4}}'


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    use_credentials(monkeypatch)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made by the openssl command."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"),
            *("-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture(scope="module", params=["http", "https"])
def server(
    request: pytest.FixtureRequest, certificate: tuple[Path, Path]
) -> Iterator[StreamingServer]:
    context = None
    if request.param == "https":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*map(str, certificate))
    running = StreamingServer(context).start()
    yield running
    running.stop()


async def _stalled_request(
    client: LeanStreamingClient, server: StreamingServer
) -> tuple[RawTimeline, float]:
    """One request whose client loop is held for STALL_S once the server has it; returns
    its timeline and when the loop was free again."""
    loop = asyncio.get_running_loop()
    inference_id = str(uuid.uuid4())
    freed: list[float] = []

    def hold_when_received() -> None:
        if inference_id not in server.served:
            loop.call_soon(hold_when_received)
            return
        time.sleep(STALL_S)  # the loop is stuck; the server's thread sends meanwhile
        freed.append(time.monotonic())

    loop.call_soon(hold_when_received)
    timeline = await client.stream_one(0, inference_id, BODY, time.monotonic())
    return timeline, freed[0]


async def test_a_token_that_came_while_the_loop_was_stuck_is_timed_when_it_came(
    server: StreamingServer, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # TLS trusts what botocore trusts: the test's CA, through AWS_CA_BUNDLE.
    monkeypatch.setenv("AWS_CA_BUNDLE", str(certificate[0]))
    target = BenchTarget(endpoint_name="steady", endpoint_url=server.url, region="us-east-1")
    client = LeanStreamingClient(target, max_connections=4, read_timeout_s=30.0)
    try:
        await client.stream_one(0, "warm-up", BODY, time.monotonic())  # connect, handshake
        for _ in range(10):
            timeline, freed_at = await _stalled_request(client, server)
            record = server.served[timeline.inference_id]
            assert timeline.error_kind is None, timeline.error_message
            assert record.signature_ok
            first_sent, last_sent = record.sent_at[0], record.sent_at[-1]
            if last_sent > freed_at - STALL_S / 4:
                continue  # the server was late too: the stream did not come during the stall
            assert timeline.clock == "kernel"
            # The send: when the socket took the request, before the server had it.
            assert timeline.sent_at <= record.received_at
            first = timeline.lines[0].arrived_at
            # The token reached the host while the loop was stuck; its stamp says so. At
            # the read, it would be at least `freed_at`.
            assert first_sent <= first < freed_at - STALL_S / 8
            assert first - timeline.sent_at >= TTFT_S
            # So did the stream's end (E2E): timed by the read that brought it.
            assert last_sent <= timeline.end_at < freed_at - STALL_S / 8
            # The first token waited in the socket with the later ones and shares their
            # stamp, so the client knows it came earlier, and how early it can have been:
            # no later than the server sent it (a bracket the guard bounds quantiles by).
            earliest = timeline.lines[0].earliest_at
            assert earliest is not None and timeline.sent_at <= earliest <= first_sent
            sample = request_sample(timeline)
            assert sample.ttft_slack_s == pytest.approx(first - earliest)
            assert sample.ttft_s is not None
            assert sample.ttft_s - sample.ttft_slack_s <= first_sent - timeline.sent_at
            return
        pytest.fail("in 10 requests the server never sent the first token during the stall")
    finally:
        await client.close()
