"""The lean client and the boto3 fallback, side by side: same requests, same answers.

Both run against the scripted event-stream server (which checks every SigV4 signature
with botocore's signer, and scripts throttling and 503s) and against the project's
SageMaker sandbox (real wire format, real error shapes); each assertion holds for both.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from endpoint_optimizer.bench import BenchConfig, BenchTarget, run_benchmark
from endpoint_optimizer.bench.models import BenchClient
from endpoint_optimizer.sandbox.config import (
    BreakStreams,
    DeterministicServing,
    Faults,
    InvocationErrors,
    SandboxConfig,
)
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox

from .reads import tokens_after_first_read
from .streaming_server import BURST, StreamingServer, use_credentials
from .test_bench_sandbox import deploy

CLIENTS = [BenchClient.LEAN, BenchClient.BOTO3]


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    use_credentials(monkeypatch)


@pytest.fixture(scope="module")
def server() -> Iterator[StreamingServer]:
    running = StreamingServer().start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxHandle]:
    steady = DeterministicServing(ttft_ms=20.0, itl_ms=4.0, tokens_per_chunk=1)
    config = SandboxConfig(
        time_scale=0.0002,
        serving_time_scale=1.0,
        deterministic_endpoints={"steady": steady, "faulty": steady},
    )
    with running_sandbox(config) as handle:
        sm = handle.client("sagemaker")
        deploy(sm, "steady", ["AllTraffic"])
        deploy(sm, "faulty", ["AllTraffic"])
        yield handle


def config(client: BenchClient, run_id: str, **overrides: object) -> BenchConfig:
    base: dict[str, object] = {
        "concurrency": [2],
        "requests": 4,
        "output_tokens": 6,
        "input_tokens": 16,
        "client": client,
        "run_id": f"{run_id}-{client.value}",
    }
    return BenchConfig.model_validate({**base, **overrides})


@pytest.mark.parametrize("client", CLIENTS)
async def test_every_request_is_signed_with_sigv4_that_verifies(
    server: StreamingServer, client: BenchClient
) -> None:
    target = BenchTarget(endpoint_name="lmi", endpoint_url=server.url, variant="candidate")
    (level,) = (await run_benchmark(target, config(client, "signed"))).levels
    records = [server.served[s.inference_id] for s in level.samples]
    assert all(s.ok and s.output_tokens == 6 for s in level.samples)
    assert [r.signature_ok for r in records] == [True] * 4
    assert {r.variant for r in records} == {"candidate"}


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("endpoint", ["throttled-once", "unavailable-once"])
async def test_standard_mode_retries_throttling_and_503_before_the_stream(
    server: StreamingServer, client: BenchClient, endpoint: str
) -> None:
    target = BenchTarget(endpoint_name=endpoint, endpoint_url=server.url)
    retried = config(client, f"retry-{endpoint}", max_attempts=3)
    (level,) = (await run_benchmark(target, retried)).levels
    assert all(s.ok and s.attempts == 2 for s in level.samples)
    for sample in level.samples:
        record = server.served[sample.inference_id]
        assert record.attempts == 2
        # TTFT runs from the first attempt's send: the retry's wait is in it.
        assert sample.sent_at + sample.ttft_s >= record.received_at  # type: ignore[operator]

    once = config(client, f"once-{endpoint}")
    (level,) = (await run_benchmark(target, once)).levels
    expected = {
        "throttled-once": ("ThrottlingException", 400),
        "unavailable-once": (
            "ServiceUnavailable",
            503,
        ),
    }[endpoint]
    assert {(s.error_kind, s.error_status, s.attempts) for s in level.samples} == {(*expected, 1)}


@pytest.mark.parametrize("client", CLIENTS)
async def test_mid_stream_exceptions_are_not_retried(
    server: StreamingServer, client: BenchClient
) -> None:
    target = BenchTarget(endpoint_name="stream-error", endpoint_url=server.url)
    (level,) = (await run_benchmark(target, config(client, "mid", max_attempts=3))).levels
    assert level.summary.errors == {"ModelStreamError": 4}
    assert all(s.attempts == 1 and s.error_message == "the model stopped" for s in level.samples)


async def test_frames_read_together_are_timed_as_one_read_on_the_lean_path(
    server: StreamingServer,
) -> None:
    """Four PayloadParts in one read are four chunks (the server's events: acceptance
    counts them) timed as one step, its gap spread over their tokens: not three gaps
    of a few microseconds, which pulled ITL p50 towards zero whenever the client fell
    behind (a speculative candidate judged 68.8 times "slower" than such a baseline in
    one CI run). The boto3 fallback stamps each event botocore yields and cannot see
    its reads."""
    target = BenchTarget(endpoint_name="bursts", endpoint_url=server.url)
    bursts = config(BenchClient.LEAN, "bursts", output_tokens=8)
    (level,) = (await run_benchmark(target, bursts)).levels
    for sample in level.samples:
        record = server.served[sample.inference_id]
        assert sample.ok and sample.output_tokens == 8
        assert record.tokens == [BURST, BURST] and sample.chunk_tokens == [1] * 8
        # A write's four frames arrive in one read on loopback: one stamp each write (the
        # old per-frame stamps differed by microseconds).
        first, second = sample.chunk_offsets_s[:BURST], sample.chunk_offsets_s[BURST:]
        assert len(set(first)) == 1 and len(set(second)) == 1
        # The first read's tokens are what TTFT saw; the second read's four share its gap.
        # (A client so late that both writes came in one read has no gap to time.)
        assert len(sample.itl_s) == tokens_after_first_read(sample)
        if sample.itl_s:
            gap = (second[0] - first[0]) / BURST
            assert gap > 0 and sample.itl_s == pytest.approx([gap] * BURST)
            assert sample.tpot_s == pytest.approx(gap)


async def test_both_clients_measure_the_sandbox_alike(sandbox: SandboxHandle) -> None:
    target = BenchTarget(endpoint_name="steady", endpoint_url=sandbox.url)
    by_id = {}
    levels = {}
    for client in CLIENTS:
        (levels[client],) = (await run_benchmark(target, config(client, "alike"))).levels
    by_id = {r["inference_id"]: r for r in sandbox.admin.traffic("steady")}
    for client, level in levels.items():
        assert level.summary.ttft_s.n == 4, client
        for sample in level.samples:
            record = by_id[sample.inference_id]
            assert sample.ok and sample.output_tokens == 6 and sample.tokens_source == "usage"
            assert sample.sent_at <= record["t_start"]
            assert sample.ttft_s is not None
            assert sample.ttft_s >= record["t_first_token"] - record["t_start"]
            assert len(sample.chunk_offsets_s) == len(record["chunk_send_times"]) == 6
            assert sample.invoked_variant == "AllTraffic"


@pytest.mark.parametrize("client", CLIENTS)
async def test_sandbox_errors_read_as_botocore_reads_them(
    sandbox: SandboxHandle, client: BenchClient
) -> None:
    unknown = BenchTarget(endpoint_name="no-such-endpoint", endpoint_url=sandbox.url)
    (level,) = (await run_benchmark(unknown, config(client, "unknown"))).levels
    kinds = {(s.error_kind, s.error_status) for s in level.samples}
    assert kinds == {("ValidationError", 400)}
    assert all("no-such-endpoint" in (s.error_message or "") for s in level.samples)

    faulty = BenchTarget(endpoint_name="faulty", endpoint_url=sandbox.url)
    sandbox.admin.set_faults(
        Faults(invocation_errors=[InvocationErrors(endpoint="faulty", original_status=503)])
    )
    try:
        # ModelError is not retryable in standard mode: one attempt even with three allowed.
        (level,) = (await run_benchmark(faulty, config(client, "model", max_attempts=3))).levels
    finally:
        sandbox.admin.clear_faults()
    assert {(s.error_kind, s.error_status, s.attempts) for s in level.samples} == {
        ("ModelError", 503, 1)
    }
    assert all("Received server error (503)" in (s.error_message or "") for s in level.samples)

    broken = BreakStreams(endpoint="faulty", after_tokens=2)
    sandbox.admin.set_faults(Faults(break_streams=[broken]))
    try:
        (level,) = (await run_benchmark(faulty, config(client, "broken"))).levels
    finally:
        sandbox.admin.clear_faults()
    assert level.summary.errors == {"ModelStreamError": 4}


async def test_both_clients_report_the_same_error_messages(sandbox: SandboxHandle) -> None:
    unknown = BenchTarget(endpoint_name="no-such-endpoint", endpoint_url=sandbox.url)
    messages = {}
    for client in CLIENTS:
        (level,) = (await run_benchmark(unknown, config(client, "same"))).levels
        messages[client] = {(s.error_kind, s.error_message, s.error_status) for s in level.samples}
    assert messages[BenchClient.LEAN] == messages[BenchClient.BOTO3]
    assert len(messages[BenchClient.LEAN]) == 1


async def test_the_signature_check_refuses_a_request_signed_with_another_secret(
    server: StreamingServer,
) -> None:
    """The check above can fail: the same request signed with a wrong secret does not verify."""
    import aiohttp
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    url = f"{server.url}/endpoints/lmi/invocations-response-stream"
    body = b'{"inputs": "x", "parameters": {"max_new_tokens": 1}}'
    headers = {"Content-Type": "application/json", "X-Amzn-SageMaker-Inference-Id": "forged"}
    request = AWSRequest(method="POST", url=url, data=body, headers=headers)
    SigV4Auth(Credentials("sandbox", "not-the-secret"), "sagemaker", "us-east-1").add_auth(request)
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=dict(request.headers.items())) as response,
    ):
        await response.read()
    assert server.served["forged"].signature_ok is False
