"""The client-saturation guard marks a run invalid instead of publishing it."""

from __future__ import annotations

import asyncio
import time

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.bench.guard import LagProbes, judge, stamp_errors
from endpoint_optimizer.bench.models import BenchConfig, RequestSample


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


def _kernel_sample(
    index: int,
    ttft: float,
    slack: float | None = 0.0,
    *,
    tokens: int = 8,
    gap: float = 0.01,
    last_slack: float | None = 0.0,
    clock: str = "kernel",
) -> RequestSample:
    offsets = [ttft + gap * i for i in range(tokens)]
    return RequestSample(
        index=index,
        inference_id=f"r{index}",
        scheduled_at=0.0,
        sent_at=0.0,
        end_at=offsets[-1],
        client_queue_s=0.0,
        ttft_s=ttft,
        e2e_s=offsets[-1],
        tpot_s=gap,
        chunk_offsets_s=offsets,
        chunk_tokens=[1] * tokens,
        output_tokens=tokens,
        clock=clock,
        ttft_slack_s=slack if clock == "kernel" else None,
        last_chunk_slack_s=last_slack if clock == "kernel" else None,
    )


STALLED_LOOP = [0.12] * 200  # event-loop lag p99 120 ms: far past the 50 ms bound


def test_kernel_stamps_replace_the_loop_lag_bound_when_every_request_took_them() -> None:
    """The loop lagged 120 ms, but every chunk ended its read (slack 0): each reported
    quantile is exact, so the level is valid; timed at the reads, the same lag voids it."""
    config = BenchConfig()
    kernel = [_kernel_sample(i, 0.05 + i * 1e-4) for i in range(200)]
    validity = judge([0.0], STALLED_LOOP, STALLED_LOOP, config, samples=kernel)
    assert validity.valid, validity.reasons
    assert validity.stamp_error_s is not None
    assert set(validity.stamp_error_s) == {
        f"{m}_p{q}" for m in ("ttft", "tpot") for q in (50, 90, 95, 99)
    }
    assert validity.blurred_s == {}
    assert max(validity.stamp_error_s.values()) == 0.0
    read = [s.model_copy(update={"clock": "read"}) for s in kernel]
    assert not judge([0.0], STALLED_LOOP, STALLED_LOOP, config, samples=read).valid
    # One request the kernel did not time brings the lag bound back for all of them.
    mixed = [*kernel[:-1], read[-1]]
    validity = judge([0.0], STALLED_LOOP, STALLED_LOOP, config, samples=mixed)
    assert not validity.valid and validity.stamp_error_s is None
    assert any("event-loop lag" in r for r in validity.reasons)


def test_first_tokens_that_waited_in_the_socket_blur_the_quantile_they_reach_not_the_level() -> (
    None
):
    """3 % of first tokens shared a read with later frames, each possibly 80 ms early, and
    read as the slow tail: the median is still exact, so the level stays valid, and the
    p99 is published as blurred (the judges widen its interval by the bracket), whether
    or not the lag bounds held: they are p99s of timer ticks, not of the slowest requests."""
    config = BenchConfig()
    # The stall held their first frames 80 ms: they read as the slow tail.
    samples = [
        _kernel_sample(i, 0.13 + i * 1e-5, 0.08) if i % 33 == 0 else _kernel_sample(i, 0.05)
        for i in range(400)
    ]
    for loop in ([0.0], STALLED_LOOP):
        validity = judge([0.0], loop, [0.0], config, samples=samples)
        assert validity.valid, validity.reasons
        assert validity.stamp_error_s is not None
        assert validity.stamp_error_s["ttft_p50"] < 1e-4
        assert validity.stamp_error_s["ttft_p99"] > 0.002
        assert validity.blurred_s["ttft_p99"] == validity.stamp_error_s["ttft_p99"]
        assert "ttft_p50" not in validity.blurred_s
        assert set(validity.blurred_s) <= {
            name
            for name, width in validity.stamp_error_s.items()
            if width > max(0.002, 0.02 * 0.05)
        }
    # The send-lag probe still applies under the kernel's stamps.
    late = judge([0.5] * 10, [0.0], [0.0], BenchConfig(max_send_lag_p99_s=0.01), samples=samples)
    assert any("send lag" in r for r in late.reasons)


def test_a_blurred_median_voids_the_level_only_when_the_lag_bounds_fail_too() -> None:
    """Half the first tokens may have come 30 ms before their stamps: with the loop on time
    its lag bound vouches for the median (valid, the median not published as blurred);
    with the loop stalled neither proof holds, and the reason names the median."""
    config = BenchConfig()
    samples = [_kernel_sample(i, 0.06 + i * 1e-5, 0.03 if i % 2 else 0.0) for i in range(400)]
    on_time = judge([0.0], [0.0], [0.0], config, samples=samples)
    assert on_time.valid, on_time.reasons
    assert "ttft_p50" not in on_time.blurred_s
    stalled = judge([0.0], STALLED_LOOP, [0.0], config, samples=samples)
    assert not stalled.valid
    assert any(
        r.startswith("client saturated: ttft p50 known only within") for r in stalled.reasons
    )
    assert any("event-loop lag" in r for r in stalled.reasons)  # both proofs failed


def test_a_slack_not_known_counts_as_wide_as_it_can_be() -> None:
    """No floor for a request's first chunk: it may have come right after the send, so
    the TTFT bracket reaches 0 for it; enough of them blur the median."""
    samples = [_kernel_sample(i, 0.05, None if i % 2 else 0.0) for i in range(100)]
    widths = dict((n, w) for n, w, _ in stamp_errors(samples, BenchConfig()))
    assert widths["ttft_p50"] >= 0.02  # half the requests may have been near 0
    assert widths["ttft_p90"] == 0.0  # the other half were exactly 50 ms: the top holds


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.001, 2.0),  # true TTFT
            st.floats(0.0, 0.2),  # how late the stamp of the first chunk is ...
            st.floats(0.0, 1.0),  # ... as a share of the slack the client knows
            st.integers(1, 200),  # decode tokens
            st.floats(0.0, 0.1),  # true TPOT
            st.floats(0.0, 0.2),  # the last chunk's slack
            st.floats(0.0, 1.0),
            st.booleans(),  # slack unknown
        ),
        min_size=1,
        max_size=60,
    )
)
def test_every_reported_quantile_is_within_its_bracket_of_the_true_one(
    requests: list[tuple[float, float, float, int, float, float, float, bool]],
) -> None:
    """Whatever the true times and however late each stamp was within its slack, every
    reported TTFT and TPOT quantile is within the guard's bracket of the true one."""
    samples: list[RequestSample] = []
    true_ttft: list[float] = []
    true_tpot: list[float] = []
    for i, (ttft, slack, share, decode, tpot, last_slack, last_share, unknown) in enumerate(
        requests
    ):
        first_at = ttft + slack * share  # what the stamp said
        last_true = ttft + tpot * decode
        last_at = max(last_true + last_slack * last_share, first_at)
        span = last_at - first_at
        true_ttft.append(ttft)
        if span > 0:  # one stamp for both: one read, no decode phase measured (timeline)
            true_tpot.append((last_true - ttft) / decode)
        samples.append(
            RequestSample(
                index=i,
                inference_id=str(i),
                scheduled_at=0.0,
                sent_at=0.0,
                end_at=last_at,
                client_queue_s=0.0,
                ttft_s=first_at,
                e2e_s=last_at,
                tpot_s=span / decode if span > 0 else None,
                chunk_offsets_s=[first_at, last_at],
                chunk_tokens=[1, decode],
                output_tokens=decode + 1,
                clock="kernel",
                ttft_slack_s=None if unknown else slack,
                last_chunk_slack_s=None if unknown else last_slack + (last_at - last_true),
            )
        )
    widths = dict((n, w) for n, w, _ in stamp_errors(samples, BenchConfig()))
    for metric, measured, true in (
        ("ttft", [s.ttft_s for s in samples if s.ttft_s is not None], true_ttft),
        ("tpot", [s.tpot_s for s in samples if s.tpot_s is not None], true_tpot),
    ):
        if not true:
            assert f"{metric}_p50" not in widths
            continue
        for q in (50, 90, 95, 99):
            error = abs(float(np.percentile(measured, q)) - float(np.percentile(true, q)))
            assert error <= widths[f"{metric}_p{q}"] + 1e-9, (metric, q)
