"""A real-default sandbox serves what the real model cannot express synthetically, and says so.

An endpoint with an fp8 candidate next to its baseline, on a sandbox whose default
engine is the real SmolLM2 model: both variants are answered by the synthetic engine
(the baseline too, so a comparison stays like with like), every response carries
`engine=synthetic; fallback=<reason>` in CustomAttributes, and the benchmark and eval
clients read it per variant. No model loads: the routing is what keeps it synthetic,
and the test checks that no real worker was started.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console

from endpoint_optimizer.aws import evaluate
from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.bench import BenchConfig, BenchTarget, run_benchmark
from endpoint_optimizer.bench.cli import render
from endpoint_optimizer.bench.served_by import SYNTHETIC, parse_served_by
from endpoint_optimizer.realmodel import evalset
from endpoint_optimizer.realmodel.sandbox_engine import RealSandboxEngine, SelectingEngine
from endpoint_optimizer.sandbox.engine import SyntheticEngine
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox
from tests.integration.sandbox.conftest import FAST, create_model, fast_config, variant

ENDPOINT = "fp8-on-cpu"


@pytest.fixture
def real_default() -> Iterator[tuple[SandboxHandle, RealSandboxEngine]]:
    real = RealSandboxEngine()
    engine = SelectingEngine(SyntheticEngine(), real, default="real")
    with running_sandbox(fast_config(), engine=engine) as handle:
        yield handle, real


@pytest.fixture(autouse=True)
def sandbox_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "sandbox")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sandbox")


def _deploy_fp8_pair(sm: Any) -> None:
    create_model(sm, "smol-baseline", "s3://models/smollm2-135m/")
    create_model(sm, "smol-fp8", "s3://models/smollm2-135m/", {"OPTION_QUANTIZE": "fp8"})
    sm.create_endpoint_config(
        EndpointConfigName=f"{ENDPOINT}-config",
        ProductionVariants=[variant("baseline", "smol-baseline"), variant("fp8", "smol-fp8")],
    )
    sm.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName=f"{ENDPOINT}-config")
    sm.get_waiter("endpoint_in_service").wait(EndpointName=ENDPOINT, WaiterConfig=FAST)


def _stream_attributes(rt: Any, target: str) -> str:
    response = rt.invoke_endpoint_with_response_stream(
        EndpointName=ENDPOINT,
        TargetVariant=target,
        Body=json.dumps(
            {"inputs": "Tell me about lighthouses.", "parameters": {"max_new_tokens": 4}}
        ),
        ContentType="application/json",
    )
    for _event in response["Body"]:
        pass
    return str(response["CustomAttributes"])


def test_fp8_and_its_baseline_answer_synthetically_with_the_reason(
    real_default: tuple[SandboxHandle, RealSandboxEngine],
) -> None:
    sandbox, real = real_default
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    _deploy_fp8_pair(sm)

    candidate = parse_served_by(_stream_attributes(rt, "fp8"))
    baseline = parse_served_by(_stream_attributes(rt, "baseline"))
    assert candidate is not None and baseline is not None
    assert candidate.engine == SYNTHETIC and "fp8 needs FP8 tensor cores" in candidate.fallback
    # The baseline follows its candidate, and says whose fallback it follows.
    assert baseline.engine == SYNTHETIC
    assert baseline.fallback.startswith("paired with fp8: fp8 needs FP8")

    item = evalset.eval_items(per_class=1)[1]  # copy a number from the prompt
    response = rt.invoke_endpoint(
        EndpointName=ENDPOINT,
        TargetVariant="fp8",
        Body=json.dumps({"inputs": item["prompt"], "parameters": {"max_new_tokens": 16}}),
        ContentType="application/json",
    )
    assert response["CustomAttributes"].startswith("engine=synthetic; fallback=fp8")
    answer = json.loads(response["Body"].read())["generated_text"]
    # The synthetic quality model answers the real eval item: a number, not filler text.
    assert answer.strip().isdigit()
    assert real.engine._workers == {}  # no SmolLM2 worker was started


async def test_benchmark_and_eval_clients_read_the_label_per_variant(
    real_default: tuple[SandboxHandle, RealSandboxEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox, real = real_default
    _deploy_fp8_pair(sandbox.client("sagemaker"))
    config = BenchConfig(concurrency=[2], requests=4, output_tokens=4, run_id="fallback")
    target = BenchTarget(endpoint_name=ENDPOINT, endpoint_url=sandbox.url, variant="fp8")
    report = await run_benchmark(target, config)
    assert {s.served_by for s in report.levels[0].samples} == {SYNTHETIC}
    summary = report.engine_summary()
    assert summary.engine == SYNTHETIC and summary.note.startswith("fp8 needs FP8")
    console = Console(record=True, width=200)
    render(report, console)
    assert "served by: synthetic engine (fp8 needs FP8 tensor cores" in console.export_text()

    for key, value in sandbox.environment.items():
        monkeypatch.setenv(key, value)
    aws = AwsClients(max_concurrency=2)
    try:
        prompts = [item["prompt"] for item in evalset.eval_items(per_class=3)]
        answers = await evaluate.labelled_answers(
            aws, "us-east-1", ENDPOINT, "baseline", prompts, 16
        )
    finally:
        aws.close()
    assert len(answers.texts) == len(prompts)
    assert {served.engine for served in answers.served if served} == {SYNTHETIC}
    assert answers.engine_summary().note.startswith("paired with fp8")
    assert real.engine._workers == {}
