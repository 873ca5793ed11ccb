"""Sharding one level over client processes: the split, and the merge of their shares."""

from __future__ import annotations

from endpoint_optimizer.bench.models import BenchConfig, BenchTarget
from endpoint_optimizer.bench.runner import Partial, arrival_offsets, merge, workers_for
from endpoint_optimizer.bench.stream import DecodedLine
from endpoint_optimizer.bench.timeline import RawTimeline
from endpoint_optimizer.bench.workers import plans

TARGET = BenchTarget(endpoint_name="e")


def test_one_process_up_to_64_streams_then_one_per_64() -> None:
    config = BenchConfig()
    assert [workers_for(config, c) for c in (1, 64, 65, 256, 512)] == [1, 1, 2, 4, 8]
    assert workers_for(BenchConfig(workers=3), 256) == 3
    assert workers_for(BenchConfig(workers=8), 2) == 2  # never more processes than streams


def test_closed_loop_slots_are_interleaved_over_workers() -> None:
    split = plans(TARGET, BenchConfig(requests=10), 10, 0, 3)
    assert [p.slots for p in split] == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert [p.ceiling for p in split] == [4, 3, 3]
    assert all(p.arrivals == [] for p in split)


def test_poisson_arrivals_are_the_one_process_schedule_dealt_out() -> None:
    config = BenchConfig(requests=9, warmup=1, rate=50.0, seed=3)
    split = plans(TARGET, config, 4, 2, 2)
    dealt = sorted(a for p in split for a in p.arrivals)
    assert dealt == list(enumerate(arrival_offsets(config, 2, 50.0)))
    assert {i % 2 for i, _ in split[1].arrivals} == {1}
    assert [p.ceiling for p in split] == [2, 2]


def _raw(index: int, sent_at: float) -> RawTimeline:
    lines = [
        DecodedLine(arrived_at=sent_at + 0.2 + 0.05 * k, text="a", tokens=1, token_bearing=True)
        for k in range(4)
    ]
    return RawTimeline(
        index=index,
        inference_id=f"r-{index}",
        scheduled_at=sent_at,
        sent_at=sent_at,
        end_at=sent_at + 0.4,
        lines=lines,
    )


def _partial(indices: list[int], wake_lag: float, cpu_s: float) -> Partial:
    return Partial(
        raws=[_raw(i, 100.0 + 0.1 * i) for i in indices],
        send_lags={i: 0.001 for i in indices},
        loop_times=[100.5, 101.0],
        loop_lags=[0.001, 0.001],
        # One lag before the window (warm-up) and one inside it.
        wake_times=[99.0, 100.5],
        wake_lags=[5.0, wake_lag],
        cpu_s=cpu_s,
    )


def test_merge_drops_warmup_by_index_and_the_guard_sees_every_worker() -> None:
    config = BenchConfig(warmup=2, requests=4)
    quiet, late = _partial([0, 2, 4], 0.001, 1.0), _partial([1, 3, 5], 0.5, 2.0)
    level = merge([quiet, late], config, 2, None, extra_cpu_s=0.5)
    assert [s.index for s in level.samples] == [2, 3, 4, 5]
    assert level.window.start_at == 100.2 and level.window.end_at == 100.9
    assert level.window.workers == 2
    assert level.window.client_cpu_s == 3.5
    # 6 requests x 4 tokens, warm-up included, over the level's CPU:
    assert level.window.client_cpu_s_per_1k_tokens == 3.5 / 24 * 1000
    # The warm-up's 5 s lag is outside the window; the late worker's 0.5 s is inside.
    assert level.validity.wake_lag_s.n == 2 and level.validity.wake_lag_s.max == 0.5
    assert not level.validity.valid
    assert "thread wake lag" in level.validity.reasons[0]
    alone = merge([quiet], config, 1, None)
    assert alone.validity.valid and alone.validity.wake_lag_s.n == 1
