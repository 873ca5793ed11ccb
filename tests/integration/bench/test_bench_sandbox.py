"""The benchmark against the sandbox, whose traffic record is the ground truth."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from endpoint_optimizer.bench import BenchConfig, BenchTarget, run_benchmark
from endpoint_optimizer.sandbox.config import (
    BreakStreams,
    DeterministicServing,
    Faults,
    SandboxConfig,
)
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox

from .reads import tokens_after_first_read

ROLE = "arn:aws:iam::123456789012:role/sagemaker-exec"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"
TTFT_MS, ITL_MS = 20.0, 4.0


def deploy(sm: Any, endpoint: str, variants: list[str]) -> None:
    production = []
    for name in variants:
        sm.create_model(
            ModelName=f"{endpoint}-{name}",
            ExecutionRoleArn=ROLE,
            PrimaryContainer={
                "Image": IMAGE,
                "ModelDataSource": {
                    "S3DataSource": {
                        "S3Uri": "s3://models/llama-3.1-8b/",
                        "S3DataType": "S3Prefix",
                        "CompressionType": "None",
                    }
                },
            },
        )
        production.append(
            {
                "VariantName": name,
                "ModelName": f"{endpoint}-{name}",
                "InstanceType": "ml.g6e.2xlarge",
                "InitialInstanceCount": 1,
                "InitialVariantWeight": 1.0,
            }
        )
    sm.create_endpoint_config(EndpointConfigName=f"{endpoint}-cfg", ProductionVariants=production)
    sm.create_endpoint(EndpointName=endpoint, EndpointConfigName=f"{endpoint}-cfg")
    sm.get_waiter("endpoint_in_service").wait(
        EndpointName=endpoint, WaiterConfig={"Delay": 0.02, "MaxAttempts": 500}
    )


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxHandle]:
    steady = DeterministicServing(ttft_ms=TTFT_MS, itl_ms=ITL_MS, tokens_per_chunk=1)
    config = SandboxConfig(
        time_scale=0.0002,
        serving_time_scale=1.0,
        deterministic_endpoints={
            "steady": steady,
            "spec": steady.model_copy(update={"tokens_per_chunk": 3}),
            "ab": steady,
            "broken": steady,
        },
    )
    with running_sandbox(config) as handle:
        sm = handle.client("sagemaker")
        deploy(sm, "steady", ["AllTraffic"])
        deploy(sm, "spec", ["AllTraffic"])
        deploy(sm, "ab", ["baseline", "candidate"])
        deploy(sm, "broken", ["AllTraffic"])
        yield handle


def target(sandbox: SandboxHandle, name: str, variant: str | None = None) -> BenchTarget:
    return BenchTarget(endpoint_name=name, endpoint_url=sandbox.url, variant=variant)


@pytest.fixture(autouse=True)
def sandbox_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "sandbox")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sandbox")


@pytest.mark.parametrize("workers", [1, 2])
async def test_measured_latencies_bracket_the_sandbox_truth(
    sandbox: SandboxHandle, workers: int
) -> None:
    config = BenchConfig(
        concurrency=[1, 4],
        requests=8,
        warmup=2,
        output_tokens=8,
        input_tokens=32,
        workers=workers,
        run_id=f"acc{workers}",
    )
    report = await run_benchmark(target(sandbox, "steady"), config)
    # The sandbox keeps each request's InferenceId: every measured request has its record.
    by_id = {r["inference_id"]: r for r in sandbox.admin.traffic("steady") if not r["shadow"]}
    for level in report.levels:
        assert level.window.workers == min(workers, level.concurrency)
        records = [by_id[s.inference_id] for s in level.samples]
        assert len(records) == 8 == level.summary.ttft_s.n
        for sample, record in zip(level.samples, records, strict=True):
            # The client's clock starts before the server's and stops after it.
            assert sample.sent_at <= record["t_start"]
            assert sample.ttft_s is not None
            assert sample.ttft_s >= record["t_first_token"] - record["t_start"]
        true_ttft = [r["t_first_token"] - r["t_start"] for r in records]
        true_itl = [b - a for r in records for a, b in itertools.pairwise(r["chunk_send_times"])]
        measured = level.summary
        assert measured.ttft_s.p50 is not None and measured.itl_s.p50 is not None
        assert measured.ttft_s.p50 - float(np.percentile(true_ttft, 50)) < 0.25
        assert abs(measured.itl_s.p50 - float(np.percentile(true_itl, 50))) < 0.25
        # One gap per token after the first read: a busy client that finds the first two
        # tokens waiting together has one gap fewer for that request (TTFT saw both).
        assert len(true_itl) == 8 * 7
        assert measured.itl_s.n == sum(len(s.itl_s) for s in level.samples)
        assert 0 < measured.itl_s.n <= 8 * 7
        assert all(s.output_tokens == 8 and s.tokens_source == "usage" for s in level.samples)


async def test_multi_token_steps_read_as_acceptance_length(sandbox: SandboxHandle) -> None:
    config = BenchConfig(
        concurrency=[2], requests=4, output_tokens=9, num_speculative_tokens=4, run_id="spec"
    )
    (level,) = (await run_benchmark(target(sandbox, "spec"), config)).levels
    assert all(s.chunk_tokens == [3, 3, 3] and s.chunk_tokens_exact for s in level.samples)
    assert level.acceptance.black_box.mean_tokens_per_chunk == 3.0
    assert level.acceptance.black_box.acceptance_rate == pytest.approx(0.5)
    assert all(len(s.chunk_gaps_s) == 2 for s in level.samples)
    assert all(len(s.itl_s) == tokens_after_first_read(s) for s in level.samples)


async def test_target_variant_pins_requests_in_the_sandbox(sandbox: SandboxHandle) -> None:
    config = BenchConfig(concurrency=[2], requests=6, output_tokens=3, run_id="pin")
    (level,) = (await run_benchmark(target(sandbox, "ab", "candidate"), config)).levels
    assert {s.invoked_variant for s in level.samples} == {"candidate"}
    served = [r for r in sandbox.admin.traffic("ab") if r["t_start"] >= level.window.start_at]
    assert {r["variant"] for r in served} == {"candidate"}


async def test_broken_streams_are_failed_requests(sandbox: SandboxHandle) -> None:
    sandbox.admin.set_faults(
        Faults(break_streams=[BreakStreams(endpoint="broken", after_tokens=2)])
    )
    try:
        config = BenchConfig(concurrency=[2], requests=4, output_tokens=6, run_id="broken")
        (level,) = (await run_benchmark(target(sandbox, "broken"), config)).levels
    finally:
        sandbox.admin.clear_faults()
    assert level.summary.errors == {"ModelStreamError": 4}
    assert level.summary.error_rate == 1.0
