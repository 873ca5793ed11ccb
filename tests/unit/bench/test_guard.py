"""The client-saturation guard marks a run invalid instead of publishing it."""

from __future__ import annotations

import asyncio
import time

from endpoint_optimizer.bench.guard import LagProbes, judge
from endpoint_optimizer.bench.models import BenchConfig


def test_a_send_lag_over_the_bound_invalidates_the_run() -> None:
    config = BenchConfig(max_send_lag_p99_s=0.01)
    validity = judge([0.001] * 50 + [0.5] * 5, [0.0], [0.0], config)
    assert not validity.valid
    assert "send lag" in validity.reasons[0] and "n=55" in validity.reasons[0]
    assert judge([0.001] * 50, [0.0], [0.0], config).valid


async def test_a_blocked_event_loop_is_detected() -> None:
    probes = LagProbes(interval_s=0.002)
    probes.start()
    deadline = time.monotonic() + 5
    # Polling the probe's own sample list, with a deadline: it exposes no event.
    while len(probes.loop_lags) < 3 and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.002)
    time.sleep(0.1)  # noqa: ASYNC251 - hog the loop on purpose, as a CPU-bound client would
    seen = len(probes.loop_lags)
    while len(probes.loop_lags) == seen and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.002)
    await probes.stop()
    assert max(probes.loop_lags) >= 0.09
    assert probes.wake_lags  # the thread probe ran and stopped
    validity = judge([0.0], probes.loop_lags, probes.wake_lags, BenchConfig())
    assert not validity.valid
    assert any("event-loop lag" in reason for reason in validity.reasons)


def test_only_lags_inside_the_window_count() -> None:
    probes = LagProbes()
    probes.loop_times, probes.loop_lags = [1.0, 2.0, 3.0], [0.5, 0.001, 0.002]
    probes.wake_times, probes.wake_lags = [1.5, 2.5], [0.9, 0.003]
    loop, wake = probes.within(2.0, 3.0)
    assert (loop, wake) == ([0.001, 0.002], [0.003])
