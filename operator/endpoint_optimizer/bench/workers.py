"""One concurrency level sharded over several client processes.

Why processes: one process has one GIL and, on the boto3 path, one blocking reader
thread per stream; at 256 streams x 20 chunks/s the hand-offs alone made chunk
timestamps (and request sends) late by hundreds of milliseconds. The lean path
(bench.lean) carries several times more streams per process, but a level past one
core's worth still needs more. Each worker here runs the same sender and loops
(`runner._Level`) for its share:

- closed loop: worker w owns the global slots w, w+N, w+2N, ... (so a ramp stays
  spread over all workers) and every slot draws the next request index from one
  counter shared by all workers, as the slots of one process do;
- open loop: the parent draws every Poisson arrival from the seeded RNG; arrival i
  goes to worker i mod N, whose ceiling is its share of the concurrency.

Workers are started with the `spawn` context (never fork a process that has
threads), build their own sender, report ready, and wait for one start
instant the parent picks. Every timestamp is `time.monotonic()`, which on Linux
is CLOCK_MONOTONIC for the whole system, so stamps from different processes
compare. Each worker returns its `Partial` (raw timelines, send lags, probe lags,
its own CPU time) as plain data; `runner.merge` builds the level from them.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import queue
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from endpoint_optimizer.bench import loop as event_loop
from endpoint_optimizer.bench.models import BenchConfig, BenchTarget
from endpoint_optimizer.bench.runner import Partial, _Level, arrival_offsets
from endpoint_optimizer.bench.senders import open_sender

_START_MARGIN_S = 0.05  # between the go signal and the first scheduled send
_READY_TIMEOUT_S = 120.0  # spawning and importing boto3 on a loaded 2-core box


@dataclass
class WorkerPlan:
    target: BenchTarget
    config: BenchConfig
    concurrency: int
    worker_index: int
    slots: list[int]  # closed loop: global slot numbers this worker runs
    arrivals: list[tuple[int, float]]  # open loop: (request index, seconds after start)
    ceiling: int  # open loop: this worker's share of the concurrency


def plans(
    target: BenchTarget, config: BenchConfig, concurrency: int, level_index: int, workers: int
) -> list[WorkerPlan]:
    """Split one level over `workers` processes (see the module docstring)."""
    if config.rate is None:
        arrivals: list[tuple[int, float]] = []
    else:
        arrivals = list(enumerate(arrival_offsets(config, level_index, config.rate)))
    return [
        WorkerPlan(
            target=target,
            config=config,
            concurrency=concurrency,
            worker_index=w,
            slots=list(range(w, concurrency, workers)),
            arrivals=[a for a in arrivals if a[0] % workers == w],
            ceiling=len(range(w, concurrency, workers)),
        )
        for w in range(workers)
    ]


def _worker(
    plan: WorkerPlan,
    counter: Any,  # multiprocessing.Value("q"): the next request index, shared
    start_at: Any,  # multiprocessing.Value("d"): the level's start, set before go
    go: Any,  # multiprocessing.Event
    messages: Any,  # multiprocessing.Queue
) -> None:
    try:
        config = plan.config
        if config.switch_interval_s is not None:
            sys.setswitchinterval(config.switch_interval_s)
        streams = max(plan.ceiling, 1)

        def next_index() -> int:
            with counter.get_lock():
                index = int(counter.value)
                counter.value = index + 1
            return index

        def on_done(index: int) -> None:
            messages.put(("done", plan.worker_index, index))

        async def run() -> Partial:
            async with open_sender(plan.target, config, streams) as send:
                messages.put(("ready", plan.worker_index, None))
                await asyncio.to_thread(go.wait)
                level = _Level(send, config, plan.concurrency, on_done)
                start = float(start_at.value)
                if config.rate is None:
                    return await level.measure(
                        lambda: level.closed_loop(start, plan.slots, next_index)
                    )
                return await level.measure(lambda: level.open_loop(start, plan.arrivals, streams))

        partial = event_loop.run(run())
        messages.put(("result", plan.worker_index, partial))
    except BaseException:
        messages.put(("error", plan.worker_index, traceback.format_exc(limit=8)))


class WorkerFailed(RuntimeError):
    """A client process died or raised; its traceback is the message."""


def _collect(
    processes: Sequence[Any],
    messages: Any,
    start_at: Any,
    go: Any,
    on_done: Callable[[int], None],
) -> list[Partial]:
    """Runs on a thread: wait for every worker to be ready, start them together, relay
    progress, and gather each worker's Partial (by worker index)."""
    workers = len(processes)
    ready = 0
    results: dict[int, Partial] = {}
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while len(results) < workers:
        try:
            kind, worker, payload = messages.get(timeout=0.5)
        except queue.Empty:
            dead = [w for w, p in enumerate(processes) if not p.is_alive() and w not in results]
            if dead:
                raise WorkerFailed(
                    f"bench worker(s) {dead} exited without a result "
                    f"(exit codes {[processes[w].exitcode for w in dead]})"
                ) from None
            if ready < workers and time.monotonic() > deadline:
                raise WorkerFailed(
                    f"only {ready} of {workers} bench workers started within "
                    f"{_READY_TIMEOUT_S:.0f} s; use fewer workers (BenchConfig.workers)"
                ) from None
            continue
        if kind == "ready":
            ready += 1
            if ready == workers:
                start_at.value = time.monotonic() + _START_MARGIN_S
                go.set()
        elif kind == "done":
            on_done(payload)
        elif kind == "result":
            results[worker] = payload
        else:
            raise WorkerFailed(f"bench worker {worker} failed:\n{payload}")
    return [results[w] for w in range(workers)]


async def run_sharded(
    target: BenchTarget,
    config: BenchConfig,
    concurrency: int,
    level_index: int,
    workers: int,
    on_done: Callable[[int], None],
) -> list[Partial]:
    """Run one level over `workers` spawned processes; one Partial per worker."""
    context = multiprocessing.get_context("spawn")
    counter = context.Value("q", 0)
    start_at = context.Value("d", 0.0)
    go = context.Event()
    messages = context.Queue()
    loop = asyncio.get_running_loop()

    def relay(index: int) -> None:
        loop.call_soon_threadsafe(on_done, index)

    processes = [
        context.Process(
            target=_worker,
            args=(plan, counter, start_at, go, messages),
            name=f"bench-worker-{plan.worker_index}",
            daemon=True,
        )
        for plan in plans(target, config, concurrency, level_index, workers)
    ]
    for process in processes:
        process.start()
    finished = False
    try:
        partials = await asyncio.to_thread(_collect, processes, messages, start_at, go, relay)
        finished = True
        return partials
    finally:
        for process in processes:
            if not finished:
                process.terminate()  # a failed level: the others' numbers are of no use
            await asyncio.to_thread(process.join, 10)
            if process.is_alive():
                process.kill()
                await asyncio.to_thread(process.join, 5)
        messages.close()
        with contextlib.suppress(Exception):
            messages.join_thread()
