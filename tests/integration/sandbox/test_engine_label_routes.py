"""Every invocation route of the sandbox carries the same engine label, and our clients read it.

The label is the container's CustomAttributes (`X-Amzn-SageMaker-Custom-Attributes`):
InvokeEndpoint and InvokeEndpointWithResponseStream (LMI and messages-API bodies) through
real boto3, and the OpenAI-compatible /v1/chat/completions and /v1/completions routes
(streamed and not) through aiohttp, all on 127.0.0.1. Two engines: a real-default sandbox
serving an fp8 variant (the synthetic fallback, whose label carries the reason; no model
loads) and the plain synthetic sandbox.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from endpoint_optimizer.aws import evaluate
from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.bench import BenchConfig, BenchTarget, RequestFormat, run_benchmark
from endpoint_optimizer.bench.served_by import SYNTHETIC, ServedBy, parse_served_by
from endpoint_optimizer.realmodel.sandbox_engine import RealSandboxEngine, SelectingEngine
from endpoint_optimizer.sandbox.engine import Engine, SyntheticEngine
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox
from tests.integration.sandbox.conftest import deploy, fast_config

ENDPOINT = "labelled"
HEADER = "X-Amzn-SageMaker-Custom-Attributes"
PROMPT = "Tell me about lighthouses."
MESSAGES = [{"role": "user", "content": PROMPT}]


def _fallback_engine() -> Engine:
    return SelectingEngine(SyntheticEngine(), RealSandboxEngine(), default="real")


@pytest.fixture(params=["fallback", "synthetic"])
def labelled(request: pytest.FixtureRequest) -> Iterator[tuple[SandboxHandle, ServedBy]]:
    """A one-variant endpoint, and the label its engine gives it (read from the engine)."""
    fallback = request.param == "fallback"
    engine = _fallback_engine() if fallback else SyntheticEngine()
    env = {"OPTION_QUANTIZE": "fp8"} if fallback else {}
    with running_sandbox(fast_config(), engine=engine) as handle:
        deploy(handle.client("sagemaker"), ENDPOINT, env, uri="s3://models/smollm2-135m/")
        variant, _ = handle.server.sandbox.runtime.resolve(ENDPOINT, None)
        expected = engine.served_by(variant)
        if fallback:  # the fixture is worth something only if the label says why
            assert expected.engine == SYNTHETIC
            assert expected.fallback.startswith("fp8 needs FP8 tensor cores")
        yield handle, expected


@pytest.fixture(autouse=True)
def sandbox_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "sandbox")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sandbox")


@pytest.mark.parametrize(
    "body",
    [
        {"inputs": PROMPT, "parameters": {"max_new_tokens": 4}},
        {"messages": MESSAGES, "max_tokens": 4},
    ],
    ids=["lmi", "messages"],
)
def test_invoke_endpoint_carries_the_label(
    labelled: tuple[SandboxHandle, ServedBy], body: dict[str, Any]
) -> None:
    sandbox, expected = labelled
    response = sandbox.client("sagemaker-runtime").invoke_endpoint(
        EndpointName=ENDPOINT, Body=json.dumps(body), ContentType="application/json"
    )
    response["Body"].read()
    assert response["CustomAttributes"] == expected.header()
    assert parse_served_by(response["CustomAttributes"]) == expected


@pytest.mark.parametrize(
    "body",
    [
        {"inputs": PROMPT, "parameters": {"max_new_tokens": 4}, "stream": True},
        {"messages": MESSAGES, "max_tokens": 4, "stream": True},
    ],
    ids=["lmi", "messages"],
)
def test_invoke_endpoint_with_response_stream_carries_the_label(
    labelled: tuple[SandboxHandle, ServedBy], body: dict[str, Any]
) -> None:
    sandbox, expected = labelled
    response = sandbox.client("sagemaker-runtime").invoke_endpoint_with_response_stream(
        EndpointName=ENDPOINT, Body=json.dumps(body), ContentType="application/json"
    )
    parts = [event for event in response["Body"] if "PayloadPart" in event]
    assert parts, "the stream carried no payload"
    assert response["CustomAttributes"] == expected.header()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("stream", [True, False], ids=["sse", "json"])
async def test_openai_routes_carry_the_label(
    labelled: tuple[SandboxHandle, ServedBy], path: str, stream: bool
) -> None:
    sandbox, expected = labelled
    body: dict[str, Any] = {"model": ENDPOINT, "max_tokens": 4, "stream": stream}
    body.update({"messages": MESSAGES} if path.endswith("chat/completions") else {"prompt": PROMPT})
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{sandbox.url}{path}", json=body) as response,
    ):
        assert response.status == 200
        text = await response.text()
        assert response.headers[HEADER] == expected.header()
    if stream:
        assert text.rstrip().endswith("data: [DONE]")
    else:
        assert json.loads(text)["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize("request_format", list(RequestFormat))
async def test_the_benchmark_client_reads_the_label_in_either_body_format(
    labelled: tuple[SandboxHandle, ServedBy], request_format: RequestFormat
) -> None:
    sandbox, expected = labelled
    config = BenchConfig(
        concurrency=[2], requests=4, output_tokens=4, run_id="label", request_format=request_format
    )
    report = await run_benchmark(
        BenchTarget(endpoint_name=ENDPOINT, endpoint_url=sandbox.url), config
    )
    samples = report.levels[0].samples
    assert len(samples) == 4 and all(s.error_kind is None for s in samples)
    labels = {ServedBy(s.served_by or "", s.fallback or "", s.omitted or "") for s in samples}
    assert labels == {expected}
    assert report.engine_summary().engine == expected.engine


async def test_the_eval_client_reads_the_label_on_invoke_endpoint(
    labelled: tuple[SandboxHandle, ServedBy], monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox, expected = labelled
    for key, value in sandbox.environment.items():
        monkeypatch.setenv(key, value)
    aws = AwsClients(max_concurrency=2)
    try:
        answers = await evaluate.labelled_answers(
            aws, sandbox.region, ENDPOINT, "AllTraffic", [PROMPT, "Name a colour."], 4
        )
    finally:
        aws.close()
    assert answers.served == [expected, expected]
