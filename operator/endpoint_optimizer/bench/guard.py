"""Client-saturation guard: a run whose client fell behind measures the client.

Three probes run for the whole level:

- send lag: when a request left (botocore's before-send) minus when the
  schedule wanted it to (its Poisson arrival, or the moment its slot freed);
- event-loop lag: how late a periodic asyncio timer fires;
- wake lag: how late a plain thread wakes from a short sleep. Request threads
  timestamp chunks, so this is the delay a timestamp suffers when the GIL
  and the CPU are contended.

If the p99 of any of them passes its bound, the level is marked invalid with
the reason, instead of publishing polluted percentiles.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Sequence

from endpoint_optimizer.bench.models import BenchConfig, Validity
from endpoint_optimizer.bench.stats import distribution

PROBE_INTERVAL_S = 0.025  # 80 wake-ups/s for both probes: cheap at concurrency 1


class LagProbes:
    """Runs the event-loop and thread wake-up probes between start() and stop()."""

    def __init__(self, interval_s: float = PROBE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.loop_lags: list[float] = []
        self.wake_lags: list[float] = []
        # When each lag was observed, to keep only those inside the measurement window.
        self.loop_times: list[float] = []
        self.wake_times: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None

    async def _loop_probe(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(self.interval_s)
            now = time.monotonic()
            self.loop_times.append(now)
            self.loop_lags.append(max(now - before - self.interval_s, 0.0))

    def _wake_probe(self) -> None:
        while not self._stop.is_set():
            before = time.monotonic()
            time.sleep(self.interval_s)
            now = time.monotonic()
            self.wake_times.append(now)
            self.wake_lags.append(max(now - before - self.interval_s, 0.0))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop_probe())
        self._thread = threading.Thread(target=self._wake_probe, name="bench-wake-probe")
        self._thread.start()

    def within(self, start: float, end: float) -> tuple[list[float], list[float]]:
        """(event-loop lags, wake lags) observed between start and end."""
        loop = [
            lag for t, lag in zip(self.loop_times, self.loop_lags, strict=True) if start <= t <= end
        ]
        wake = [
            lag for t, lag in zip(self.wake_times, self.wake_lags, strict=True) if start <= t <= end
        ]
        return loop, wake

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)


def judge(
    send_lags: Sequence[float],
    loop_lags: Sequence[float],
    wake_lags: Sequence[float],
    config: BenchConfig,
    median_e2e_s: float | None = None,
) -> Validity:
    send, loop, wake = distribution(send_lags), distribution(loop_lags), distribution(wake_lags)
    send_bound = config.max_send_lag_p99_s
    if median_e2e_s is not None:
        send_bound = max(send_bound, 0.1 * median_e2e_s)
    reasons: list[str] = []
    for name, dist, bound in (
        ("send lag", send, send_bound),
        ("event-loop lag", loop, config.max_loop_lag_p99_s),
        ("thread wake lag", wake, config.max_wake_lag_p99_s),
    ):
        if dist.p99 is not None and dist.p99 > bound:
            reasons.append(
                f"client saturated: {name} p99 {dist.p99 * 1e3:.1f} ms > {bound * 1e3:.1f} ms "
                f"(n={dist.n}); lower the concurrency or rate, or run the client on more CPU"
            )
    return Validity(
        valid=not reasons, reasons=reasons, send_lag_s=send, loop_lag_s=loop, wake_lag_s=wake
    )
