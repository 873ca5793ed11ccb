"""A measurement's progress in status: rate-bounded, one write in flight, never a failure."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.api import parse_status
from endpoint_optimizer.aws.perform import Progress
from endpoint_optimizer.controller.progress import ProgressReporter

START = datetime(2026, 12, 2, 5, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Writes:
    """The status subresource: records each merge patch; may fail or hold a write."""

    def __init__(self, fail: bool = False) -> None:
        self.patches: list[dict[str, Any]] = []
        self.fail = fail
        self.gate: asyncio.Event | None = None

    async def __call__(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise ConnectionResetError("apiserver went away")
        self.patches.append({"namespace": namespace, "name": name, **status})


READY = [{"type": "Ready", "status": "True", "reason": "EndpointInService"}]


def _reporter(writes: Writes, clock: Clock, interval: float = 10.0) -> ProgressReporter:
    first = {"message": "benchmarking the baseline", "conditions": READY, "phase": "Failed"}
    return ProgressReporter(
        writes,
        "ml",
        "chat",
        "MeasureBaseline",
        interval,
        first=first,
        clock=clock,
        now=lambda: START,
    )


def _level(done: int, planned: int = 64, level: int = 1) -> Progress:
    return Progress("benchmark", done, planned, concurrency=4, level=level, levels=2)


async def _settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_the_first_count_is_written_at_once_then_at_most_one_per_interval() -> None:
    writes, clock = Writes(), Clock()
    reporter = _reporter(writes, clock)
    for done in range(1, 65):
        reporter(_level(done))
        await _settle()
        clock.t += 0.5  # a request every half second: 32 s in all
    assert await reporter.close() is True
    # 32 s at one write per 10 s: the first, then at 10, 20 and 30 s.
    assert [p["measurement"]["requestsDone"] for p in writes.patches] == [1, 21, 41, 61]
    first = writes.patches[0]["measurement"]
    assert (first["action"], first["stage"], first["concurrency"]) == (
        "MeasureBaseline",
        "benchmark",
        4,
    )
    assert (first["level"], first["levels"], first["requestsPlanned"]) == (1, 2, 64)
    assert writes.patches[-1]["measurement"]["elapsed"] == "30s"
    # The first write says what the wake-up decided (message, conditions), once; never
    # anything the pipeline decides from (the phase).
    assert (writes.patches[0]["message"], writes.patches[0]["conditions"]) == (
        "benchmarking the baseline",
        READY,
    )
    assert all("phase" not in p for p in writes.patches)
    assert all(set(p) == {"namespace", "name", "measurement"} for p in writes.patches[1:])
    # What is written reads back through the status model (the CRD's schema).
    status = parse_status({"measurement": writes.patches[-1]["measurement"]})
    assert status.measurement is not None and status.measurement.requests_done == 61


async def test_a_write_in_flight_holds_the_next_one() -> None:
    writes, clock = Writes(), Clock()
    writes.gate = asyncio.Event()
    reporter = _reporter(writes, clock, interval=1.0)
    reporter(_level(1))
    for done in range(2, 10):
        clock.t += 5.0  # due, but the apiserver has not answered the first write yet
        reporter(_level(done))
        await _settle()
    writes.gate.set()
    assert await reporter.close() is True
    assert [p["measurement"]["requestsDone"] for p in writes.patches] == [1]


async def test_a_failed_write_is_no_failure_and_nothing_to_remove() -> None:
    writes, clock = Writes(fail=True), Clock()
    reporter = _reporter(writes, clock)
    reporter(_level(1))
    await _settle()
    assert await reporter.close() is False


async def test_nothing_counted_nothing_written() -> None:
    reporter = _reporter(Writes(), Clock())
    assert await reporter.close() is False


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.floats(min_value=0.0, max_value=30.0), min_size=1, max_size=200),
    interval=st.floats(min_value=0.5, max_value=20.0),
)
def test_writes_never_come_closer_than_the_interval(gaps: list[float], interval: float) -> None:
    async def run() -> tuple[list[float], float]:
        writes, clock = Writes(), Clock()
        reporter = _reporter(writes, clock, interval)
        times: list[float] = []
        for done, gap in enumerate(gaps, start=1):
            clock.t += gap
            before = len(writes.patches)
            reporter(_level(done, planned=len(gaps)))
            await _settle()
            if len(writes.patches) > before:
                times.append(clock.t)
        await reporter.close()
        return times, clock.t - 100.0

    times, span = asyncio.run(run())
    assert times, "the first count is always written"
    assert all(b - a >= interval for a, b in itertools.pairwise(times))
    assert len(times) <= 1 + span / interval


@pytest.mark.parametrize(
    ("seconds", "shown"), [(0.2, "0s"), (42, "42s"), (80, "1m20s"), (3725, "1h02m05s")]
)
def test_elapsed_reads_as_a_person_writes_it(seconds: float, shown: str) -> None:
    clock = Clock()
    reporter = _reporter(Writes(), clock)
    assert reporter.shown(_level(1), clock.t + seconds).elapsed == shown
