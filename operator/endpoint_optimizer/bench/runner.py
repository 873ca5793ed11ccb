"""The async library entry point: run every concurrency level and report.

    report = await run_benchmark(BenchTarget(endpoint_name="x"), BenchConfig(...))

Load modes:
- closed loop (rate None): `concurrency` slots, each sends its next request
  when its previous one ends;
- open loop (rate R): Poisson arrivals from a seeded RNG, `concurrency` as a
  ceiling; time spent waiting for a free slot is client queue time, reported
  apart from TTFT (TTFT starts when the request is sent).

Warm-up requests run first at the level's concurrency and are dropped. The
measurement window is the time with at least one measured request in flight.

Above `streams_per_worker` streams (64 by default) a level is sharded over several
client processes (bench.workers): each runs this same loop for its share of the slots
or arrivals and returns its raw timelines, send lags and probe lags; `_merge` builds
the level from all of them exactly as from one process, so the window, warm-up
exclusion and guard see every worker.

The operator measures through `run_side_by_side`, which holds the streams and client
processes of a measurement from the process's budget (bench.limits) and refuses a level
the operator's limits can never hold.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from endpoint_optimizer.bench.guard import LagProbes, judge
from endpoint_optimizer.bench.limits import BenchBudget, process_budget

if TYPE_CHECKING:
    from endpoint_optimizer.bench.shards import ShardLauncher
from endpoint_optimizer.bench.models import (
    Acceptance,
    BenchConfig,
    BenchReport,
    BenchTarget,
    LevelPart,
    LevelReport,
    Window,
    kernel_clock_share,
)
from endpoint_optimizer.bench.senders import Send, open_sender
from endpoint_optimizer.bench.stats import (
    active_seconds,
    black_box_acceptance,
    server_acceptance,
    summarize,
)
from endpoint_optimizer.bench.timeline import RawTimeline, Tokenizer, request_sample
from endpoint_optimizer.bench.workload import request_body
from endpoint_optimizer.logs import get_logger

log = get_logger(__name__)

# (concurrency, measured requests done, measured requests in the level)
ProgressCallback = Callable[[int, int, int], None]


def workers_for(config: BenchConfig, concurrency: int) -> int:
    """Client processes for one level: config.workers, else one per streams_per_worker."""
    wanted = config.workers or -(-concurrency // config.streams_per_worker)
    return max(1, min(wanted, concurrency))


@dataclass
class Partial:
    """What one client process measured for one level: plain, picklable data."""

    raws: list[RawTimeline]
    send_lags: dict[int, float]  # by request index
    loop_times: list[float]
    loop_lags: list[float]
    wake_times: list[float]
    wake_lags: list[float]
    cpu_s: float  # this process's CPU time over the level (all its threads)


class _Level:
    """One process's share of one level: `slots` (global slot numbers) of a closed
    loop that draws request indices from `next_index`, or `arrivals` of an open loop
    behind a ceiling of `ceiling` requests in flight."""

    def __init__(
        self,
        send: Send,
        config: BenchConfig,
        concurrency: int,
        on_done: Callable[[int], None],
    ) -> None:
        self.send = send
        self.config = config
        self.concurrency = concurrency
        self.on_done = on_done
        self.send_lags: dict[int, float] = {}  # by request index

    async def _one(self, index: int, scheduled_at: float, dispatched_at: float) -> RawTimeline:
        inference_id = f"{self.config.run_id}-c{self.concurrency}-{index}"
        body = request_body(self.config, index)
        raw = await self.send(index, inference_id, body, scheduled_at)
        self.send_lags[index] = max(raw.sent_at - dispatched_at, 0.0)
        return raw

    async def closed_loop(
        self, start: float, slots: Sequence[int], next_index: Callable[[], int]
    ) -> list[RawTimeline]:
        count = self.config.warmup + self.config.requests
        all_slots = min(self.concurrency, count)
        results: list[RawTimeline] = []

        async def slot(number: int) -> None:
            # A ramp staggers the slots' first sends; a closed loop keeps that stagger.
            scheduled_at = start + self.config.ramp_up_s * number / all_slots
            delay = scheduled_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            while (index := next_index()) < count:
                raw = await self._one(index, scheduled_at, scheduled_at)
                results.append(raw)
                self.on_done(index)
                scheduled_at = raw.end_at  # the slot was free from here on

        await asyncio.gather(*(slot(number) for number in slots if number < all_slots))
        return results

    async def open_loop(
        self, start: float, arrivals: Sequence[tuple[int, float]], ceiling: int
    ) -> list[RawTimeline]:
        """`arrivals`: (request index, seconds after start) in time order."""
        limit = asyncio.Semaphore(ceiling)

        async def request(index: int, scheduled_at: float) -> RawTimeline:
            waited = limit.locked()
            async with limit:
                dispatched_at = time.monotonic() if waited else scheduled_at
                raw = await self._one(index, scheduled_at, dispatched_at)
            self.on_done(index)
            return raw

        tasks: list[asyncio.Task[RawTimeline]] = []
        for index, offset in arrivals:
            scheduled_at = start + offset
            delay = scheduled_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(request(index, scheduled_at)))
        return list(await asyncio.gather(*tasks))

    async def measure(self, run: Callable[[], Awaitable[list[RawTimeline]]]) -> Partial:
        probes = LagProbes()
        probes.start()
        cpu_before = time.process_time()
        try:
            raws = await run()
        finally:
            cpu_s = time.process_time() - cpu_before
            await probes.stop()
        return Partial(
            raws=raws,
            send_lags=self.send_lags,
            loop_times=probes.loop_times,
            loop_lags=probes.loop_lags,
            wake_times=probes.wake_times,
            wake_lags=probes.wake_lags,
            cpu_s=cpu_s,
        )


def arrival_offsets(config: BenchConfig, level_index: int, rate: float) -> list[float]:
    """Poisson arrival times (seconds after the level starts) of every request, seeded."""
    rng = np.random.default_rng([config.seed, level_index])
    gaps = rng.exponential(1.0 / rate, size=config.warmup + config.requests)
    return [float(x) for x in np.cumsum(gaps) - gaps[0]]


def _within(times: Sequence[float], lags: Sequence[float], start: float, end: float) -> list[float]:
    return [lag for t, lag in zip(times, lags, strict=True) if start <= t <= end]


def level_part(partial: Partial, tokenizer: Tokenizer | None, processes: int = 1) -> LevelPart:
    """One process's raw share of a level as mergeable samples (bench.models.LevelPart)."""
    return LevelPart(
        samples=[request_sample(raw, tokenizer) for raw in partial.raws],
        send_lags=dict(partial.send_lags),
        loop_times=list(partial.loop_times),
        loop_lags=list(partial.loop_lags),
        wake_times=list(partial.wake_times),
        wake_lags=list(partial.wake_lags),
        cpu_s=partial.cpu_s,
        processes=processes,
    )


def merge(
    partials: Sequence[Partial],
    config: BenchConfig,
    concurrency: int,
    tokenizer: Tokenizer | None,
    extra_cpu_s: float = 0.0,
) -> LevelReport:
    """One level's report from every client process's share (see `merge_parts`)."""
    parts = [level_part(partial, tokenizer) for partial in partials]
    return merge_parts(parts, config, concurrency, extra_cpu_s)


def merge_parts(
    parts: Sequence[LevelPart],
    config: BenchConfig,
    concurrency: int,
    extra_cpu_s: float = 0.0,
) -> LevelReport:
    """One level's report from every share of it: client processes of this pod, or shards
    in other pods (bench.shards). Warm-up requests are the first `warmup` indices,
    whichever share sent them; only lags observed inside the window count (warm-up opens
    connections in a burst), from every share.

    The result depends on the union of the parts only, not on how it was split or in
    which order the parts come: samples are ordered by request index, lag lists are
    sorted before their quantiles and means, and CPU seconds are summed exactly (fsum).
    """
    everything = [sample for part in parts for sample in part.samples]
    send_lags = sorted(
        lag for part in parts for index, lag in part.send_lags.items() if index >= config.warmup
    )
    all_tokens = sum(sample.output_tokens or 0 for sample in everything)
    samples = sorted((s for s in everything if s.index >= config.warmup), key=lambda s: s.index)
    active = active_seconds([(s.sent_at, s.end_at) for s in samples])
    summary = summarize(samples, config.slo, active)
    start_at = min((s.sent_at for s in samples), default=0.0)
    end_at = max((s.end_at for s in samples), default=0.0)
    loop_lags = sorted(
        lag for p in parts for lag in _within(p.loop_times, p.loop_lags, start_at, end_at)
    )
    wake_lags = sorted(
        lag for p in parts for lag in _within(p.wake_times, p.wake_lags, start_at, end_at)
    )
    cpu_s = math.fsum([*(p.cpu_s for p in parts), extra_cpu_s])
    in_flight = math.fsum(s.end_at - s.sent_at for s in samples)
    return LevelReport(
        concurrency=concurrency,
        rate=config.rate,
        samples=samples,
        summary=summary,
        acceptance=Acceptance(
            server=server_acceptance(samples),
            black_box=black_box_acceptance(samples, config.num_speculative_tokens),
        ),
        validity=judge(
            send_lags,
            loop_lags,
            wake_lags,
            config,
            median_e2e_s=summary.e2e_s.p50 if config.rate is None else None,
            samples=samples,
        ),
        window=Window(
            start_at=start_at,
            end_at=end_at,
            active_s=active,
            mean_in_flight=in_flight / active if active else 0,
            client_cpu_s=cpu_s,
            client_cpu_s_per_1k_tokens=cpu_s / all_tokens * 1000 if all_tokens else None,
            workers=sum(p.processes for p in parts),
            kernel_clock_share=kernel_clock_share(samples),
        ),
    )


def _counter() -> Callable[[], int]:
    source = itertools.count()
    return lambda: next(source)


async def _in_process(
    send: Send,
    config: BenchConfig,
    concurrency: int,
    level_index: int,
    on_done: Callable[[int], None],
) -> Partial:
    level = _Level(send, config, concurrency, on_done)
    start = time.monotonic()
    if config.rate is None:
        next_index = _counter()
        return await level.measure(lambda: level.closed_loop(start, range(concurrency), next_index))
    arrivals = list(enumerate(arrival_offsets(config, level_index, config.rate)))
    return await level.measure(lambda: level.open_loop(start, arrivals, concurrency))


class _SwitchInterval:
    """The GIL switch interval is process-wide and runs may overlap (the operator
    measures baseline and candidate together): the first run in saves it, the last
    one out restores it, and the shortest interval asked for wins meanwhile."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._saved = sys.getswitchinterval()

    def enter(self, interval_s: float) -> None:
        with self._lock:
            if self._active == 0:
                self._saved = sys.getswitchinterval()
            self._active += 1
            sys.setswitchinterval(min(interval_s, sys.getswitchinterval()))

    def exit(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0:
                sys.setswitchinterval(self._saved)


_switch_interval = _SwitchInterval()


async def run_benchmark(
    target: BenchTarget,
    config: BenchConfig,
    *,
    runtime_client: Any | None = None,
    tokenizer: Tokenizer | None = None,
    progress: ProgressCallback | None = None,
    only: frozenset[int] | None = None,
) -> BenchReport:
    """Benchmark one endpoint (or one pinned variant) at each concurrency level in turn.

    `only`: the indices of the levels to run (the others are left out of the report;
    each level keeps its index, which seeds its open-loop arrivals); None: all.

    `runtime_client`: a boto3 sagemaker-runtime client to use (its endpoint and service
    model on the lean path); by default one is made from `target` with a connection
    pool as large as the highest concurrency (botocore's default pool of 10 would queue
    streams inside urllib3).
    `tokenizer`: counts tokens when the server reports none.
    """
    if runtime_client is not None and config.workers not in (None, 1):
        raise ValueError(
            "BenchConfig.workers: a runtime_client cannot be shared with other processes; "
            "pass workers=1 with it, or leave runtime_client out (each worker makes one)"
        )
    max_concurrency = max(c for i, c in enumerate(config.concurrency) if only is None or i in only)
    if config.switch_interval_s is not None:
        _switch_interval.enter(config.switch_interval_s)
    try:
        async with open_sender(target, config, max_concurrency, runtime_client) as send:
            levels = []
            for level_index, concurrency in enumerate(config.concurrency):
                if only is not None and level_index not in only:
                    continue
                done = 0

                def on_done(index: int, concurrency: int = concurrency) -> None:
                    nonlocal done
                    if index < config.warmup:
                        return
                    done += 1
                    if progress is not None:
                        progress(concurrency, done, config.requests)

                workers = 1 if runtime_client is not None else workers_for(config, concurrency)
                if workers == 1:
                    partial = await _in_process(send, config, concurrency, level_index, on_done)
                    levels.append(merge([partial], config, concurrency, tokenizer))
                else:
                    from endpoint_optimizer.bench.workers import run_sharded

                    cpu_before = time.process_time()
                    partials = await run_sharded(
                        target, config, concurrency, level_index, workers, on_done
                    )
                    parent_cpu_s = time.process_time() - cpu_before
                    levels.append(merge(partials, config, concurrency, tokenizer, parent_cpu_s))
    finally:
        if config.switch_interval_s is not None:
            _switch_interval.exit()
    return BenchReport(target=target, config=config, levels=levels)


async def run_side_by_side(
    targets: Sequence[BenchTarget],
    config: BenchConfig,
    *,
    budget: BenchBudget | None = None,
    where: str = "spec.benchmark.concurrency",
    progress: ProgressCallback | None = None,
    launcher: ShardLauncher | None = None,
    tokens_per_s: Mapping[int, float] | None = None,
) -> list[BenchReport]:
    """Benchmark several variants at once, within the process's limits (the operator's path).

    Refuses a level above the limits before any request (`where` names the field it
    came from); otherwise waits for the streams and client processes of the highest
    level for all variants, and holds them until every variant is done, so the variants
    still run together. `progress`: the requests done at a level by all variants
    together, of all they plan there.

    `launcher`: where a level is above what this process may hold (`BenchLimits.shards`)
    and the limits allow shard pods, the level runs on them (bench.shards; the operator's
    launcher is a Kubernetes Indexed Job) and their results are merged and validated;
    without one, such a level is refused as before. `tokens_per_s`: per concurrency, the
    output tokens per second an earlier round of this measurement read there (all
    variants together); a level that reached `BenchLimits.max_tokens_per_s` also runs on
    shard pods where the launcher is there (else in-process, where its guard judges it).
    An in-process level its guard voided (the client saturated) is run again at once on
    shard pods where the launcher is there (`BenchLimits.escalate`), and that is its report.
    """
    budget = budget or process_budget()
    limits = budget.limits
    jobs = launcher is not None and limits.max_shards > 0
    limits.check(config.concurrency, where, jobs=jobs)
    widen = limits.lag_tolerance
    sharded = config.model_copy(
        update={
            "streams_per_worker": limits.streams_per_worker,
            "max_send_lag_p99_s": config.max_send_lag_p99_s * widen,
            "max_loop_lag_p99_s": config.max_loop_lag_p99_s * widen,
            "max_wake_lag_p99_s": config.max_wake_lag_p99_s * widen,
            "max_stamp_error_s": config.max_stamp_error_s * widen,
            "max_stamp_error_fraction": config.max_stamp_error_fraction * widen,
        }
    )
    rates = tokens_per_s or {}
    pods = [limits.shards(c, rates.get(c)) if jobs else 0 for c in config.concurrency]
    remote = {i for i, n in enumerate(pods) if n}
    local = frozenset(range(len(config.concurrency))) - remote
    levels: list[dict[int, LevelReport]] = [{} for _ in targets]
    if local:
        highest = max(config.concurrency[i] for i in local)
        streams, workers = limits.demand(len(targets), highest)
        async with budget.hold(streams, workers):
            counts: dict[tuple[int, int], int] = {}
            reports = await asyncio.gather(
                *(
                    run_benchmark(
                        t,
                        sharded,
                        progress=_together(progress, counts, i, len(targets)),
                        only=None if not remote else local,
                    )
                    for i, t in enumerate(targets)
                )
            )
        for mine, report in zip(levels, reports, strict=True):
            ordered = sorted(local)
            mine.update(zip(ordered, report.levels, strict=True))
        if jobs:
            for index in sorted(local):
                if all(mine[index].validity.valid for mine in levels):
                    continue
                read = sum(mine[index].summary.output_tokens_per_s for mine in levels)
                pods[index] = limits.escalate(config.concurrency[index], read)
                if pods[index]:
                    log.info(
                        "benchmark level saturated the client; again on shard pods",
                        concurrency=config.concurrency[index],
                        tokens_per_s=round(read),
                        shards=pods[index],
                    )
                    remote.add(index)
    if remote:
        from endpoint_optimizer.bench.shards import run_level_on_shards

        assert launcher is not None
        for level_index in sorted(remote):
            # The pods' counts arrive as the launcher reads them (each pod rewrites its own
            # at an interval), then the merged count: begun, moving, measured.
            concurrency = config.concurrency[level_index]
            planned = config.requests * len(targets)
            told = _on_pods(progress, concurrency, planned)
            merged = await run_level_on_shards(
                launcher, targets, sharded, level_index, pods[level_index], told
            )
            if told is not None:
                told(sum(len(level.samples) for level in merged))
            for mine, level in zip(levels, merged, strict=True):
                mine[level_index] = level
    return [
        BenchReport(target=t, config=sharded, levels=[mine[i] for i in sorted(mine)])
        for t, mine in zip(targets, levels, strict=True)
    ]


def tokens_per_s_read(rounds: Sequence[Sequence[BenchReport]]) -> dict[int, float]:
    """Per concurrency, the most output tokens per second one round read there, all
    variants together (`rounds`: each variant's reports, round by round), for
    `run_side_by_side`'s `tokens_per_s`. A round its guard voided read at least that much."""
    rates: dict[int, float] = {}
    for together in zip(*rounds, strict=True):
        summed: dict[int, float] = {}
        for report in together:
            for level in report.levels:
                c = level.concurrency
                summed[c] = summed.get(c, 0.0) + level.summary.output_tokens_per_s
        for c, rate in summed.items():
            rates[c] = max(rates.get(c, 0.0), rate)
    return rates


def _on_pods(
    progress: ProgressCallback | None, concurrency: int, planned: int
) -> Callable[[int], None] | None:
    """A level on pods told as `progress(concurrency, done, planned)`: 0 at once, then each
    count that moved (capped at `planned`: a count never runs past the level)."""
    if progress is None:
        return None
    last = [0]
    progress(concurrency, 0, planned)

    def told(done: int) -> None:
        done = min(done, planned)
        if done != last[0]:
            last[0] = done
            progress(concurrency, done, planned)

    return told


def _together(
    progress: ProgressCallback | None, counts: dict[tuple[int, int], int], index: int, count: int
) -> ProgressCallback | None:
    """Target `index`'s counts in `counts` (by target and level), told summed per level."""
    if progress is None:
        return None

    def told(concurrency: int, answered: int, planned: int) -> None:
        counts[(index, concurrency)] = answered
        total = sum(n for (_, level), n in counts.items() if level == concurrency)
        progress(concurrency, total, planned * count)

    return told
