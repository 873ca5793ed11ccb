"""Measurements share a process-wide bound, and benchmark clients share one boto3 session."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.perform import perform
from endpoint_optimizer.bench.client import make_runtime_client
from endpoint_optimizer.bench.models import BenchTarget
from endpoint_optimizer.pipeline.model import Action, ActionKind
from endpoint_optimizer.sandbox.config import SandboxConfig
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox
from tests.unit.sagemaker.test_bench_dataset import LINES, SPEC, serve_baseline


async def test_no_more_measurements_than_slots_run_at_once() -> None:
    aws = AwsClients(max_concurrency=1, max_measurements=2)
    inside = 0
    most = 0
    release = asyncio.Event()
    full = asyncio.Event()

    async def measurement() -> None:
        nonlocal inside, most
        async with aws.measuring():
            inside += 1
            most = max(most, inside)
            if inside == 2:
                full.set()
            await release.wait()
            inside -= 1

    try:
        tasks = [asyncio.create_task(measurement()) for _ in range(5)]
        async with asyncio.timeout(5):
            await full.wait()
        for _ in range(20):  # the waiting three get every chance to enter
            await asyncio.sleep(0)
        assert inside == 2
        release.set()
        async with asyncio.timeout(5):
            await asyncio.gather(*tasks)
    finally:
        aws.close()
    assert most == 2 and inside == 0


def test_a_slot_count_under_one_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="max_measurements"):
        AwsClients(max_measurements=0)


@pytest.fixture
def sandbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[SandboxHandle]:
    with running_sandbox(SandboxConfig(time_scale=0.001, serving_time_scale=0.1)) as handle:
        for key, value in handle.environment.items():
            monkeypatch.setenv(key, value)
        yield handle


async def test_with_one_slot_two_baseline_benchmarks_do_not_overlap(
    sandbox: SandboxHandle,
) -> None:
    aws = AwsClients(max_concurrency=2, max_measurements=1)
    try:
        baseline_variant = await serve_baseline(aws, SPEC)
        measure = Action(
            ActionKind.MEASURE_BASELINE, SPEC.endpoint_name, baseline_variant=baseline_variant
        )
        first, second = await asyncio.gather(
            asyncio.create_task(perform(aws, SPEC, measure, bench_dataset="\n".join(LINES))),
            asyncio.create_task(perform(aws, SPEC, measure, bench_dataset="\n".join(LINES))),
        )
    finally:
        aws.close()
    assert first is not None and second is not None
    records = sorted(sandbox.admin.traffic_records(SPEC.endpoint_name), key=lambda r: r.t_start)
    requests = SPEC.benchmark.requests + SPEC.benchmark.warmup
    assert len(records) == 2 * requests
    earlier, later = records[:requests], records[requests:]
    # Every request of the second benchmark arrived after the first one's last ended.
    assert all(r.t_end is not None for r in earlier)
    assert max(r.t_end or 0.0 for r in earlier) <= min(r.t_start for r in later)


def test_benchmark_clients_share_one_session_but_keep_their_own_target() -> None:
    east = make_runtime_client(
        BenchTarget(endpoint_name="a", region="us-east-1", endpoint_url="http://127.0.0.1:9"), 2, 5
    )
    west = make_runtime_client(
        BenchTarget(endpoint_name="b", region="eu-west-1", endpoint_url="http://127.0.0.1:8"), 4, 7
    )
    try:
        # One parsed copy of botocore's data for every benchmark in the process.
        assert east._loader is west._loader
        assert east.meta.region_name == "us-east-1" and west.meta.region_name == "eu-west-1"
        assert east.meta.endpoint_url == "http://127.0.0.1:9"
        assert west.meta.endpoint_url == "http://127.0.0.1:8"
        assert east.meta.config.max_pool_connections == 2
        assert west.meta.config.read_timeout == 7
    finally:
        east.close()
        west.close()
