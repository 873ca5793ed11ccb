"""The operator-wide benchmark limits: what a spec may ask for, and the budget that holds them."""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Iterator

import pytest

from endpoint_optimizer.bench.limits import BenchBudget, BenchLimitError, BenchLimits
from endpoint_optimizer.bench.models import BenchConfig, BenchTarget
from endpoint_optimizer.bench.runner import run_side_by_side
from endpoint_optimizer.sandbox.config import SandboxConfig
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox
from tests.integration.sandbox.conftest import deploy


@pytest.mark.parametrize(
    ("limits", "per_variant"),
    [
        (BenchLimits(), 128),  # 256 streams / 2 variants; 4 processes / 2 x 64 streams
        (BenchLimits(max_streams=1024, max_workers=4), 128),  # the processes bind
        (BenchLimits(max_streams=100, max_workers=8), 50),  # the streams bind
        (BenchLimits(max_streams=256, max_workers=0), 64),  # in-process only
        (BenchLimits(max_streams=256, streams_per_worker=16, max_workers=6), 48),
    ],
)
def test_the_per_variant_limit_is_what_two_variants_side_by_side_can_hold(
    limits: BenchLimits, per_variant: int
) -> None:
    assert limits.per_variant == per_variant
    streams, workers = limits.demand(2, per_variant)
    assert streams <= limits.max_streams and workers <= limits.max_workers


def test_a_level_above_the_limit_is_refused_naming_the_field_and_the_limit() -> None:
    with pytest.raises(BenchLimitError) as refused:
        BenchLimits().check([16, 512, 256], "spec.benchmark.concurrency")
    message = str(refused.value)
    assert message.startswith("spec.benchmark.concurrency: 256, 512 is above")
    assert "limit of 128 requests in flight per variant" in message
    assert "--bench-max-streams" in message and "benchmark.*" in message
    BenchLimits().check([1, 128], "spec.benchmark.concurrency")


@pytest.mark.parametrize(
    ("limits", "concurrency", "tokens_per_s", "pods"),
    [
        # In-process: 64 streams fit, and no rate is known yet (a first round).
        (BenchLimits(max_shards=8, max_tokens_per_s=20_000), 64, None, 0),
        (BenchLimits(max_shards=8, max_tokens_per_s=20_000), 64, 19_999.0, 0),
        # At the bound: two pods, each reading half.
        (BenchLimits(max_shards=8, max_tokens_per_s=20_000), 64, 20_000.0, 2),
        (BenchLimits(max_shards=8, max_tokens_per_s=20_000), 64, 50_000.0, 3),
        # Never more pods than the operator may make, nor than streams to share out.
        (BenchLimits(max_shards=4, max_tokens_per_s=20_000), 64, 500_000.0, 4),
        (BenchLimits(max_shards=8, max_tokens_per_s=1_000), 3, 50_000.0, 3),
        # One pod reads what the operator's process would: no gain, stays in-process.
        (BenchLimits(max_shards=1, max_tokens_per_s=1_000), 64, 50_000.0, 0),
        # 0: streams alone decide, whatever the rate.
        (BenchLimits(max_shards=8), 64, 1e9, 0),
        # Streams above per_variant (128) still need their pods; the rate may ask for more.
        (BenchLimits(max_shards=8, max_tokens_per_s=20_000), 256, 10_000.0, 4),
        (BenchLimits(max_shards=8, max_tokens_per_s=20_000), 256, 130_000.0, 7),
    ],
)
def test_a_level_moves_to_shard_pods_by_streams_or_by_the_tokens_it_read(
    limits: BenchLimits, concurrency: int, tokens_per_s: float | None, pods: int
) -> None:
    assert limits.shards(concurrency, tokens_per_s) == pods


@pytest.mark.parametrize(
    ("limits", "concurrency", "tokens_per_s", "pods"),
    [
        # A saturated level goes to at least two pods, even under the rate bound or without one.
        (BenchLimits(max_shards=8, max_tokens_per_s=20_000), 64, 5_000.0, 2),
        (BenchLimits(max_shards=8), 64, 5_000.0, 2),
        (BenchLimits(max_shards=8, max_tokens_per_s=20_000), 64, 50_000.0, 3),
        # No split to make: one pod allowed, or one stream.
        (BenchLimits(max_shards=1), 64, 50_000.0, 0),
        (BenchLimits(max_shards=8), 1, 50_000.0, 0),
        (BenchLimits(), 64, 50_000.0, 0),
    ],
)
def test_a_level_the_guard_voided_in_process_escalates_to_pods_where_it_can(
    limits: BenchLimits, concurrency: int, tokens_per_s: float, pods: int
) -> None:
    assert limits.escalate(concurrency, tokens_per_s) == pods


def test_a_negative_tokens_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="max_tokens_per_s"):
        BenchLimits(max_tokens_per_s=-1.0)


def test_limits_that_cannot_hold_one_stream_per_variant_are_refused() -> None:
    with pytest.raises(ValueError, match="max_streams"):
        BenchLimits(max_streams=1)
    with pytest.raises(ValueError, match="streams_per_worker"):
        BenchLimits(streams_per_worker=0)


async def test_the_budget_never_hands_out_more_than_its_limits_and_serves_in_order() -> None:
    budget = BenchBudget(BenchLimits(max_streams=10, max_workers=2))
    peak = [0, 0]
    order: list[str] = []
    release = asyncio.Event()

    async def measure(name: str, streams: int, workers: int) -> None:
        async with budget.hold(streams, workers):
            order.append(name)
            peak[0], peak[1] = max(peak[0], budget.streams), max(peak[1], budget.workers)
            await release.wait()

    first = asyncio.create_task(measure("first", 8, 2))
    await asyncio.sleep(0)
    # Two streams are free, but "second" waits for its processes and "third" waits
    # behind it: first come, first served, so a large measurement is never starved.
    second = asyncio.create_task(measure("second", 4, 1))
    third = asyncio.create_task(measure("third", 2, 0))
    for _ in range(5):
        await asyncio.sleep(0)
    assert order == ["first"]
    release.set()
    await asyncio.gather(first, second, third)
    assert order == ["first", "second", "third"]
    assert peak == [8, 2]
    assert (budget.streams, budget.workers) == (0, 0)


async def test_a_measurement_cancelled_while_waiting_or_holding_gives_everything_back() -> None:
    budget = BenchBudget(BenchLimits(max_streams=4, max_workers=0))
    held = asyncio.Event()

    async def hold_forever(streams: int) -> None:
        async with budget.hold(streams, 0):
            held.set()
            await asyncio.Event().wait()

    holder = asyncio.create_task(hold_forever(4))
    await held.wait()
    waiter = asyncio.create_task(hold_forever(2))
    await asyncio.sleep(0)
    waiter.cancel()
    holder.cancel()
    for task in (waiter, holder):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert (budget.streams, budget.workers) == (0, 0)
    async with budget.hold(4, 0):
        assert budget.streams == 4


async def test_a_demand_that_can_never_fit_is_refused_instead_of_waiting() -> None:
    budget = BenchBudget(BenchLimits(max_streams=4, max_workers=1))
    with pytest.raises(BenchLimitError, match="can never fit"):
        async with budget.hold(2, 2):
            pass


@pytest.fixture
def sandbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[SandboxHandle]:
    config = SandboxConfig(time_scale=0.0002, serving_time_scale=0.005)
    with running_sandbox(config) as handle:
        for key, value in handle.environment.items():
            monkeypatch.setenv(key, value)
        deploy(handle.client("sagemaker"), "limits")
        yield handle


async def test_a_spec_above_the_limit_sends_nothing_and_spawns_nothing(
    sandbox: SandboxHandle,
) -> None:
    targets = [BenchTarget(endpoint_name="limits", endpoint_url=sandbox.url)] * 2
    config = BenchConfig(concurrency=[512], requests=8, output_tokens=2)
    with pytest.raises(BenchLimitError, match=r"spec\.benchmark\.concurrency: 512"):
        await run_side_by_side(targets, config, budget=BenchBudget())
    assert sandbox.admin.traffic("limits") == []
    assert multiprocessing.active_children() == []


async def test_variants_side_by_side_shard_by_the_limits_streams_per_worker(
    sandbox: SandboxHandle,
) -> None:
    # Per variant: 4 streams over 2 client processes of 2; together 8 streams, 4 processes.
    budget = BenchBudget(BenchLimits(max_streams=8, streams_per_worker=2, max_workers=4))
    targets = [BenchTarget(endpoint_name="limits", endpoint_url=sandbox.url)] * 2
    config = BenchConfig(concurrency=[4], requests=8, output_tokens=2, run_id="side")
    reports = await run_side_by_side(targets, config, budget=budget)
    assert [level.window.workers for r in reports for level in r.levels] == [2, 2]
    assert all(s.ok for r in reports for level in r.levels for s in level.samples)
    assert (budget.streams, budget.workers) == (0, 0)
    assert len(sandbox.admin.traffic("limits")) == 2 * 8


async def test_side_by_side_counts_both_variants_and_the_lag_tolerance_widens_only_the_guard(
    sandbox: SandboxHandle,
) -> None:
    budget = BenchBudget(BenchLimits(max_streams=8, max_workers=0, lag_tolerance=4.0))
    targets = [BenchTarget(endpoint_name="limits", endpoint_url=sandbox.url)] * 2
    config = BenchConfig(concurrency=[1, 2], requests=6, output_tokens=2, run_id="told")
    told: list[tuple[int, int, int]] = []
    reports = await run_side_by_side(
        targets, config, budget=budget, progress=lambda *c: told.append(c)
    )
    # Each report's config is what ran: the guard's bounds x4, everything else as asked.
    ran = reports[0].config
    assert ran.max_loop_lag_p99_s == pytest.approx(4 * config.max_loop_lag_p99_s)
    assert ran.max_wake_lag_p99_s == pytest.approx(4 * config.max_wake_lag_p99_s)
    assert ran.max_send_lag_p99_s == pytest.approx(4 * config.max_send_lag_p99_s)
    assert ran.max_stamp_error_s == pytest.approx(4 * config.max_stamp_error_s)
    assert ran.max_stamp_error_fraction == pytest.approx(4 * config.max_stamp_error_fraction)
    assert (ran.requests, ran.concurrency) == (config.requests, config.concurrency)
    # Progress: both variants' requests summed per level, of both variants' plan.
    for level in (1, 2):
        counts = [done for c, done, _ in told if c == level]
        assert counts == sorted(counts) and counts[-1] == 2 * 6
        assert {planned for c, _, planned in told if c == level} == {2 * 6}


def test_a_lag_tolerance_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="lag_tolerance"):
        BenchLimits(lag_tolerance=0.5)
