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

Where the kernel timed every request (bench/rxstamp.py), loop and wake lag no longer
reach a timestamp directly, and the guard has a second proof besides that proxy: each
request knows how much earlier than its stamp its first and last chunks can have arrived
(its slack: 0 for a chunk that ended its socket read), so the true TTFT and TPOT of each
request lie in a known interval, and each reported quantile lies between the quantile of
the intervals' low ends and that of their high ends (true for every order statistic, and
so for any quantile interpolated between two). Such a level is valid when either the lag bounds
hold (a kernel stamp is never later than the read time they vouch for) or the medians'
brackets (TTFT, TPOT) are within max(maxStampErrorS, maxStampErrorFraction x the
quantile); the send-lag probe applies either way (a late send costs load).

A valid level's figure is not vouched for by that alone: the lag bounds are p99s of timer
ticks and say nothing of the slowest requests, which are where a lagging loop's late reads
gather (benchmarks/results/bench_client_cost_quiet16_c256_run_i.json: lag bounds held, TTFT
p99 59-66 ms off). So every figure whose bracket is wider than that allowance, the medians
excepted while the lag bounds hold, is published in `Validity.blurred_s`, and the judges
widen that figure's interval by its bracket (analysis/benchmark.stamp_widened).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Sequence

from endpoint_optimizer.bench.models import BenchConfig, Distribution, RequestSample, Validity
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
    samples: Sequence[RequestSample] = (),
) -> Validity:
    """The level's validity. `samples` (the measured requests) decide which rule times
    them: the kernel's stamps when every request that has a TTFT was timed by them."""
    send, loop, wake = distribution(send_lags), distribution(loop_lags), distribution(wake_lags)
    send_bound = config.max_send_lag_p99_s
    if median_e2e_s is not None:
        send_bound = max(send_bound, 0.1 * median_e2e_s)
    reasons = _over([("send lag", send, send_bound)])
    lags = _over(
        [
            ("event-loop lag", loop, config.max_loop_lag_p99_s),
            ("thread wake lag", wake, config.max_wake_lag_p99_s),
        ]
    )
    timed = [s for s in samples if s.ok and s.ttft_s is not None]
    stamp_error: dict[str, float] | None = None
    blurred: dict[str, float] = {}
    if timed and all(s.clock == "kernel" for s in timed):
        stamp_error, medians = {}, []
        for name, width, allowed in stamp_errors(timed, config):
            stamp_error[name] = width
            if width <= allowed:
                continue
            median = name.endswith("_p50")
            if median and not lags:
                continue  # the lag bounds vouch for the body of the distribution
            blurred[name] = width
            if median:
                medians.append(
                    f"client saturated: {name.replace('_', ' ')} known only within "
                    f"{width * 1e3:.1f} ms > {allowed * 1e3:.1f} ms (token frames waited "
                    "in the socket for a busy client loop); lower the concurrency or rate, "
                    "or run the client on more CPU"
                )
        # Either proof will do for the level: a kernel stamp is never later than the read
        # time the lag bounds vouch for, and the brackets bound the error whatever the lag.
        if lags and medians:
            reasons += lags + medians
    else:
        reasons += lags
    return Validity(
        valid=not reasons,
        reasons=reasons,
        send_lag_s=send,
        loop_lag_s=loop,
        wake_lag_s=wake,
        stamp_error_s=stamp_error,
        blurred_s=blurred,
    )


def _over(probes: Sequence[tuple[str, Distribution, float]]) -> list[str]:
    return [
        f"client saturated: {name} p99 {dist.p99 * 1e3:.1f} ms > {bound * 1e3:.1f} ms "
        f"(n={dist.n}); lower the concurrency or rate, or run the client on more CPU"
        for name, dist, bound in probes
        if dist.p99 is not None and dist.p99 > bound
    ]


def stamp_errors(
    samples: Sequence[RequestSample], config: BenchConfig
) -> list[tuple[str, float, float]]:
    """(ttft_p50 ..., the width of the bracket its true value lies in, the width allowed)
    for each reported TTFT and TPOT quantile of kernel-timed requests (e2e needs none: it
    ends at the stamp of the read that brought the stream's end, the newest bytes of it).

    Per request, the first chunk came within `ttft_slack_s` before its stamp and the last
    within `last_chunk_slack_s`; a slack not known is as wide as it can be (the first
    chunk no earlier than the send, the last no earlier than the first)."""
    ttft: tuple[list[float], list[float], list[float]] = ([], [], [])  # low, measured, high
    tpot: tuple[list[float], list[float], list[float]] = ([], [], [])
    for s in samples:
        if not s.ok or s.ttft_s is None:
            continue
        first = s.ttft_s if s.ttft_slack_s is None else min(s.ttft_slack_s, s.ttft_s)
        _add(ttft, s.ttft_s - first, s.ttft_s, s.ttft_s)
        if s.tpot_s is None or not s.chunk_offsets_s:
            continue
        # TPOT is span / decode tokens (bench/timeline.py): the span's ends move by the
        # slacks, so the bracket scales the measured TPOT by (span - last) and (span + first).
        span = s.chunk_offsets_s[-1] - s.chunk_offsets_s[0]
        if span > 0:
            last = span if s.last_chunk_slack_s is None else min(s.last_chunk_slack_s, span)
            per_s = s.tpot_s / span
            _add(tpot, (span - last) * per_s, s.tpot_s, (span + first) * per_s)
    found: list[tuple[str, float, float]] = []
    for metric, (low, measured, high) in (("ttft", ttft), ("tpot", tpot)):
        if not measured:
            continue
        lows, values, highs = (distribution(x) for x in (low, measured, high))
        for q in ("p50", "p90", "p95", "p99"):  # the quantiles a level reports
            lo, value, hi = (getattr(d, q) or 0.0 for d in (lows, values, highs))
            allowed = max(config.max_stamp_error_s, config.max_stamp_error_fraction * value)
            found.append((f"{metric}_{q}", max(hi - lo, 0.0), allowed))
    return found


def _add(into: tuple[list[float], list[float], list[float]], *values: float) -> None:
    for column, value in zip(into, values, strict=True):
        column.append(value)
