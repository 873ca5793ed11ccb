"""Operator-wide limits on the load generator: streams and client processes held at once.

A benchmark stream is a request in flight: a reader thread, a pooled connection and
its per-request records. Above `streams_per_worker` streams a level is sharded over
spawned client processes (bench.workers), each a fresh interpreter with boto3 (about
50 MiB). Unbounded, `benchmark.concurrency: [512]` made 8 of them and 691 MiB, over the
chart's memory limit, and four resources measuring at once would have made 64.

`BenchLimits` are what the operator's command line (and the chart) set; `BenchBudget`
hands them out: a measurement holds the streams and processes of its highest level for
all its variants at once (baseline and candidate run side by side), waiting in
first-come order while others hold them, so the operator never holds more than the
limits. A spec whose level could never fit is refused before any request
(`BenchLimitError`, naming the field and the limit); it is not clamped, because a
benchmark at a lower concurrency measures a different load, and the objective, the
SLOs and the baseline recorded in status would silently mean something else.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

# The most variants the operator measures at once (baseline and candidate). A baseline
# measured alone gets the same per-variant limit, so it can be compared later.
SIDE_BY_SIDE = 2
DEFAULT_STREAMS_PER_WORKER = 64
# The operator's default per-process read bound (its --bench-max-tokens-per-second): the
# lean client was measured valid at c=256 x 10 ms/token, 25,600 tokens/s, on one quiet
# core (docs/benchmarking.md); 20,000 leaves a fifth of that core to the rest.
DEFAULT_MAX_TOKENS_PER_S = 20_000.0


class BenchLimitError(ValueError):
    """A benchmark asks for more than the operator's limits allow; the message says which."""


@dataclass(frozen=True)
class BenchLimits:
    """What the whole process may hold for benchmarks at once."""

    # Requests in flight over every benchmark at once.
    max_streams: int = 256
    # Streams one client process carries; a level above it is sharded over processes.
    streams_per_worker: int = DEFAULT_STREAMS_PER_WORKER
    # Spawned client processes alive at once over every benchmark (0: never spawn).
    max_workers: int = 4
    # The client-saturation guard's bounds (bench/guard.py: lags, and the stamp brackets of
    # kernel-timed levels) times this: 1 keeps them.
    # For a host whose CPU the operator shares by design (a CI runner checking the control
    # loop against deterministic serving), where a strict guard voids every measurement.
    lag_tolerance: float = 1.0
    # Shard pods of a Kubernetes Indexed Job one level may use when it is above
    # `per_variant` (0: never; the level is refused). Each pod carries at most
    # `streams_per_worker` streams per variant, in one process (bench.shards).
    max_shards: int = 0
    # Output tokens per second (all variants side by side) one process may read: a level
    # whose measured rate reached it runs its later rounds on shard pods, each reading at
    # most this much (0: streams alone decide). Streams bound memory; this bounds CPU.
    max_tokens_per_s: float = 0.0

    def __post_init__(self) -> None:
        if self.max_streams < SIDE_BY_SIDE:
            raise ValueError(f"max_streams must be at least {SIDE_BY_SIDE} (one per variant)")
        if self.streams_per_worker < 1 or self.max_workers < 0:
            raise ValueError("streams_per_worker must be >= 1 and max_workers >= 0")
        if self.lag_tolerance < 1:
            raise ValueError("lag_tolerance must be >= 1 (it only widens the guard)")
        if self.max_shards < 0:
            raise ValueError("max_shards must be >= 0")
        if self.max_tokens_per_s < 0:
            raise ValueError("max_tokens_per_s must be >= 0 (0: no bound)")

    def shards(self, concurrency: int, tokens_per_s: float | None = None) -> int:
        """Shard pods a level runs on: 0 while the operator's own process holds it.

        `tokens_per_s`: the output tokens per second this level was measured to read (all
        variants together, an earlier round's); at or above `max_tokens_per_s` the level
        needs pods enough that each reads less, within `max_shards` and one stream a pod.
        """
        by_streams = (
            0 if concurrency <= self.per_variant else -(-concurrency // self.streams_per_worker)
        )
        by_tokens = 0
        bound = self.max_tokens_per_s
        if bound > 0 and tokens_per_s is not None and tokens_per_s >= bound:
            by_tokens = min(int(tokens_per_s // bound) + 1, self.max_shards, concurrency)
        return max(by_streams, by_tokens if by_tokens > 1 else 0)

    def escalate(self, concurrency: int, tokens_per_s: float) -> int:
        """Shard pods for a level whose in-process round the saturation guard voided (it
        read `tokens_per_s`, at least): what `shards` asks, and never fewer than two, within
        `max_shards` and one pod a stream; 0 where no split is possible."""
        pods = min(max(2, self.shards(concurrency, tokens_per_s)), self.max_shards, concurrency)
        return pods if pods >= 2 else 0

    @property
    def per_level(self) -> int:
        """The highest level any path may run: in-process, or over `max_shards` pods."""
        return max(self.per_variant, self.max_shards * self.streams_per_worker)

    def workers(self, concurrency: int) -> int:
        """Client processes one variant's level spawns: none while it fits in-process."""
        if concurrency <= self.streams_per_worker:
            return 0
        return -(-concurrency // self.streams_per_worker)

    @property
    def per_variant(self) -> int:
        """The highest concurrency level a variant may be benchmarked at."""
        by_streams = self.max_streams // SIDE_BY_SIDE
        by_workers = (self.max_workers // SIDE_BY_SIDE) * self.streams_per_worker
        return min(by_streams, max(self.streams_per_worker, by_workers))

    def check(self, levels: Sequence[int], where: str, jobs: bool = False) -> None:
        """Refuse levels above `per_variant` (above `per_level` where the Job path is
        available: `jobs`); `where` names the field they came from."""
        bound = self.per_level if jobs else self.per_variant
        over = sorted(c for c in levels if c > bound)
        if not over:
            return
        if bound > self.per_variant:
            raise BenchLimitError(
                f"{where}: {', '.join(map(str, over))} is above this operator's limit of "
                f"{bound} requests in flight per variant ({self.max_shards} shard pods of "
                f"{self.streams_per_worker} streams: --bench-max-shards, "
                "--bench-streams-per-worker); lower it, or ask the operator's administrator "
                "to raise the limits"
            )
        raise BenchLimitError(
            f"{where}: {', '.join(map(str, over))} is above this operator's limit of "
            f"{self.per_variant} requests in flight per variant (baseline and candidate are "
            f"measured side by side within {self.max_streams} streams and {self.max_workers} "
            f"client processes of {self.streams_per_worker} streams: the operator's "
            "--bench-max-streams, --bench-max-workers and --bench-streams-per-worker, Helm "
            f"values benchmark.*); lower it to at most {self.per_variant}, or ask the "
            "operator's administrator to raise the limits"
        )

    def demand(self, variants: int, concurrency: int) -> tuple[int, int]:
        """(streams, processes) a measurement of `variants` side by side at this level holds."""
        return variants * concurrency, variants * self.workers(concurrency)


@dataclass
class _Waiter:
    streams: int
    workers: int
    future: asyncio.Future[None]
    granted: bool = False


@dataclass
class BenchBudget:
    """The process's streams and client processes, handed out first come, first served.

    Thread-safe and loop-agnostic (tests run one loop after another in one process): a
    waiter is a future of its own loop, resolved through that loop.
    """

    limits: BenchLimits = field(default_factory=BenchLimits)
    streams: int = 0
    workers: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _waiters: deque[_Waiter] = field(default_factory=deque, repr=False)

    def _fits(self, streams: int, workers: int) -> bool:
        return (
            self.streams + streams <= self.limits.max_streams
            and self.workers + workers <= self.limits.max_workers
        )

    @asynccontextmanager
    async def hold(self, streams: int, workers: int) -> AsyncIterator[None]:
        """Hold `streams` and `workers` for the block; wait while others hold them."""
        if streams > self.limits.max_streams or workers > self.limits.max_workers:
            raise BenchLimitError(
                f"a benchmark of {streams} streams and {workers} client processes can never "
                f"fit the operator's {self.limits.max_streams} streams and "
                f"{self.limits.max_workers} processes"
            )
        waiter: _Waiter | None = None
        with self._lock:
            if not self._waiters and self._fits(streams, workers):
                self.streams += streams
                self.workers += workers
            else:
                future = asyncio.get_running_loop().create_future()
                waiter = _Waiter(streams, workers, future)
                self._waiters.append(waiter)
        if waiter is not None:
            try:
                await waiter.future
            except asyncio.CancelledError:
                with self._lock:
                    if waiter.granted:
                        self._give_back(streams, workers)
                    else:
                        self._waiters.remove(waiter)
                        self._grant()
                raise
        try:
            yield
        finally:
            with self._lock:
                self._give_back(streams, workers)

    def _give_back(self, streams: int, workers: int) -> None:
        self.streams -= streams
        self.workers -= workers
        self._grant()

    def _grant(self) -> None:
        """Wake waiters in order while the first one fits (under the lock)."""
        while self._waiters and self._fits(self._waiters[0].streams, self._waiters[0].workers):
            waiter = self._waiters.popleft()
            self.streams += waiter.streams
            self.workers += waiter.workers
            waiter.granted = True
            waiter.future.get_loop().call_soon_threadsafe(_resolve, waiter.future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_process_budget = BenchBudget()


def configure(limits: BenchLimits) -> BenchBudget:
    """Set the process's limits (`endpoint-optimizer run` does, once, at start)."""
    global _process_budget
    _process_budget = BenchBudget(limits)
    return _process_budget


def process_budget() -> BenchBudget:
    """The process's budget: every measurement the operator makes holds from it."""
    return _process_budget
