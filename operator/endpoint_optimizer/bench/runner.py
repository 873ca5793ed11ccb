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
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from endpoint_optimizer.bench.client import StreamingClient, make_runtime_client
from endpoint_optimizer.bench.guard import LagProbes, judge
from endpoint_optimizer.bench.models import (
    Acceptance,
    BenchConfig,
    BenchReport,
    BenchTarget,
    LevelReport,
    Window,
)
from endpoint_optimizer.bench.stats import (
    active_seconds,
    black_box_acceptance,
    server_acceptance,
    summarize,
)
from endpoint_optimizer.bench.timeline import RawTimeline, Tokenizer, request_sample
from endpoint_optimizer.bench.workload import request_body

# (concurrency, measured requests done, measured requests in the level)
ProgressCallback = Callable[[int, int, int], None]


class _Level:
    def __init__(
        self,
        streaming: StreamingClient,
        pool: ThreadPoolExecutor,
        config: BenchConfig,
        concurrency: int,
        level_index: int,
        progress: ProgressCallback | None,
    ) -> None:
        self.streaming = streaming
        self.pool = pool
        self.config = config
        self.concurrency = concurrency
        self.level_index = level_index
        self.progress = progress
        self.send_lags: dict[int, float] = {}  # by request index

    async def _one(self, index: int, scheduled_at: float, dispatched_at: float) -> RawTimeline:
        inference_id = f"{self.config.run_id}-c{self.concurrency}-{index}"
        body = request_body(self.config, index)
        loop = asyncio.get_running_loop()
        raw = await loop.run_in_executor(
            self.pool, self.streaming.stream_one, index, inference_id, body, scheduled_at
        )
        self.send_lags[index] = max(raw.sent_at - dispatched_at, 0.0)
        return raw

    async def closed_loop(self, count: int, on_done: Callable[[int], None]) -> list[RawTimeline]:
        indices = iter(range(count))
        results: list[RawTimeline] = []
        slots = min(self.concurrency, count)
        start = time.monotonic()

        async def slot(number: int) -> None:
            # A ramp staggers the slots' first sends; a closed loop keeps that stagger.
            scheduled_at = start + self.config.ramp_up_s * number / slots
            delay = scheduled_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            for index in indices:
                raw = await self._one(index, scheduled_at, scheduled_at)
                results.append(raw)
                on_done(index)
                scheduled_at = raw.end_at  # the slot was free from here on

        await asyncio.gather(*(slot(number) for number in range(slots)))
        return results

    async def open_loop(
        self, count: int, rate: float, on_done: Callable[[int], None]
    ) -> list[RawTimeline]:
        rng = np.random.default_rng([self.config.seed, self.level_index])
        gaps = rng.exponential(1.0 / rate, size=count)
        start = time.monotonic()
        arrivals = start + np.cumsum(gaps) - gaps[0]
        ceiling = asyncio.Semaphore(self.concurrency)

        async def request(index: int, scheduled_at: float) -> RawTimeline:
            waited = ceiling.locked()
            async with ceiling:
                dispatched_at = time.monotonic() if waited else scheduled_at
                raw = await self._one(index, scheduled_at, dispatched_at)
            on_done(index)
            return raw

        tasks: list[asyncio.Task[RawTimeline]] = []
        for index, scheduled_at in enumerate(arrivals):
            delay = float(scheduled_at) - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(request(index, float(scheduled_at))))
        return list(await asyncio.gather(*tasks))

    async def run(self, tokenizer: Tokenizer | None) -> LevelReport:
        """Warm-up and measured requests form one stream, so the load is already steady
        when measuring starts; the first `warmup` requests (by index) are dropped."""
        config = self.config
        done = 0

        def on_done(index: int) -> None:
            nonlocal done
            if index < config.warmup:
                return
            done += 1
            if self.progress is not None:
                self.progress(self.concurrency, done, config.requests)

        total = config.warmup + config.requests
        probes = LagProbes()
        probes.start()
        cpu_before = time.process_time()
        try:
            if config.rate is None:
                everything = await self.closed_loop(total, on_done)
            else:
                everything = await self.open_loop(total, config.rate, on_done)
        finally:
            cpu_s = time.process_time() - cpu_before
            await probes.stop()
        raws = [raw for raw in everything if raw.index >= config.warmup]
        send_lags = [lag for index, lag in self.send_lags.items() if index >= config.warmup]
        all_tokens = sum(
            sample.output_tokens or 0
            for sample in (request_sample(raw, tokenizer) for raw in everything)
        )
        samples = sorted((request_sample(raw, tokenizer) for raw in raws), key=lambda s: s.index)
        active = active_seconds([(s.sent_at, s.end_at) for s in samples])
        summary = summarize(samples, config.slo, active)
        start_at = min(s.sent_at for s in samples)
        end_at = max(s.end_at for s in samples)
        # Warm-up opens connections in a burst: only lags inside the window count.
        loop_lags, wake_lags = probes.within(start_at, end_at)
        return LevelReport(
            concurrency=self.concurrency,
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
            ),
            window=Window(
                start_at=start_at,
                end_at=end_at,
                active_s=active,
                mean_in_flight=sum(s.end_at - s.sent_at for s in samples) / active if active else 0,
                client_cpu_s=cpu_s,
                client_cpu_s_per_1k_tokens=cpu_s / all_tokens * 1000 if all_tokens else None,
            ),
        )


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
) -> BenchReport:
    """Benchmark one endpoint (or one pinned variant) at each concurrency level in turn.

    `runtime_client`: a boto3 sagemaker-runtime client to use; by default one is
    made from `target` with a connection pool as large as the highest concurrency
    (botocore's default pool of 10 would queue streams inside urllib3).
    `tokenizer`: counts tokens when the server reports none.
    """
    max_concurrency = max(config.concurrency)
    client = runtime_client or make_runtime_client(target, max_concurrency, config.read_timeout_s)
    streaming = StreamingClient(target, client)
    pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="bench-stream")
    if config.switch_interval_s is not None:
        _switch_interval.enter(config.switch_interval_s)
    try:
        levels = []
        for level_index, concurrency in enumerate(config.concurrency):
            level = _Level(streaming, pool, config, concurrency, level_index, progress)
            levels.append(await level.run(tokenizer))
    finally:
        await asyncio.to_thread(pool.shutdown, wait=True)
        if config.switch_interval_s is not None:
            _switch_interval.exit()
    return BenchReport(target=target, config=config, levels=levels)
