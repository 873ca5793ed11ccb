"""Shards of one level (bench.shards): the split, the barrier, and an exact, validated merge."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.bench import shards as shards_module
from endpoint_optimizer.bench.limits import BenchBudget, BenchLimitError, BenchLimits
from endpoint_optimizer.bench.models import (
    BenchConfig,
    BenchTarget,
    LevelPart,
    LevelReport,
    RequestSample,
)
from endpoint_optimizer.bench.runner import merge_parts
from endpoint_optimizer.bench.shards import (
    ShardResult,
    ShardSpecError,
    ShardVariant,
    merge_shards,
    parse_shard,
    run_shard,
    share,
)
from endpoint_optimizer.bench.stream import DecodedLine
from endpoint_optimizer.bench.timeline import RawTimeline

TARGET = BenchTarget(endpoint_name="e")
CONFIG = BenchConfig(concurrency=[8], requests=40, warmup=2, run_id="run-1")


def test_parse_shard() -> None:
    assert parse_shard("0/4") == (0, 4)
    assert parse_shard("3/4") == (3, 4)
    for bad in ("4/4", "-1/4", "1", "a/b", "0/0"):
        with pytest.raises(ShardSpecError):
            parse_shard(bad)


@given(st.integers(1, 500), st.integers(1, 16))
def test_share_splits_exactly_with_the_remainder_spread(total: int, n: int) -> None:
    shares = [list(share(total, i, n)) for i in range(n)]
    assert sorted(x for s in shares for x in s) == list(range(total))
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the remainder goes to the first shards


def _sample(index: int, sent_at: float, ttft: float, e2e: float, tokens: int) -> RequestSample:
    gaps = [(e2e - ttft) / max(tokens - 1, 1)] * max(tokens - 1, 0)
    return RequestSample(
        index=index,
        inference_id=f"r-{index}",
        scheduled_at=sent_at,
        sent_at=sent_at,
        end_at=sent_at + e2e,
        client_queue_s=0.0,
        ttft_s=ttft,
        e2e_s=e2e,
        tpot_s=gaps[0] if gaps else None,
        itl_s=gaps,
        chunk_gaps_s=gaps,
        output_tokens=tokens,
        error_kind="ModelError" if tokens == 1 else None,
    )


_request = st.tuples(
    st.floats(0, 30, allow_nan=False),  # sent_at
    st.floats(0.001, 2, allow_nan=False),  # ttft
    st.floats(0.0, 20, allow_nan=False),  # decode time
    st.integers(1, 40),  # tokens
    st.floats(0, 0.2, allow_nan=False),  # send lag
)


@st.composite
def _level(draw: st.DrawFn) -> tuple[list[LevelPart], int, LevelPart]:
    """A level's union and a random split of it into n shards' parts."""
    requests = draw(st.lists(_request, min_size=1, max_size=60))
    n = draw(st.integers(1, 8))
    owner = [draw(st.integers(0, n - 1)) for _ in requests]
    probes = draw(
        st.lists(
            st.tuples(st.integers(0, n - 1), st.floats(0, 40, allow_nan=False), st.floats(0, 0.5)),
            max_size=80,
        )
    )
    cpus = [draw(st.floats(0, 5, allow_nan=False)) for _ in range(n)]
    parts = []
    for shard in range(n):
        mine = [(i, r) for i, r in enumerate(requests) if owner[i] == shard]
        times = [t for s, t, _ in probes if s == shard]
        lags = [lag for s, _, lag in probes if s == shard]
        parts.append(
            LevelPart(
                samples=[_sample(i, r[0], r[1], r[1] + r[2], r[3]) for i, r in mine],
                send_lags={i: r[4] for i, r in mine},
                loop_times=times,
                loop_lags=lags,
                wake_times=times,
                wake_lags=[lag / 10 for lag in lags],
                cpu_s=cpus[shard],
            )
        )
    union = LevelPart(
        samples=[s for p in parts for s in p.samples],
        send_lags={i: lag for p in parts for i, lag in p.send_lags.items()},
        loop_times=[t for p in parts for t in p.loop_times],
        loop_lags=[x for p in parts for x in p.loop_lags],
        wake_times=[t for p in parts for t in p.wake_times],
        wake_lags=[x for p in parts for x in p.wake_lags],
        cpu_s=0.0,
    )
    return parts, n, union


def _results(
    parts: list[LevelPart], config: BenchConfig, run_id: str = "run-1"
) -> list[ShardResult]:
    n = len(parts)
    return [
        ShardResult(
            run_id=run_id,
            level_index=0,
            concurrency=config.concurrency[0],
            shard=i,
            shards=n,
            start_at=0.0,
            variants=[
                ShardVariant(
                    target=TARGET,
                    part=part,
                    validity=merge_parts([part], config, config.concurrency[0]).validity,
                )
            ],
        )
        for i, part in enumerate(parts)
    ]


def _comparable(report: LevelReport) -> dict[str, Any]:
    """The report but the window's process count and CPU seconds (a split's own facts)."""
    dumped = report.model_dump()
    for key in ("workers", "client_cpu_s", "client_cpu_s_per_1k_tokens"):
        dumped["window"].pop(key)
    return dumped


@settings(max_examples=150, deadline=None)
@given(_level(), st.integers(0, 5))
def test_merging_a_random_split_is_the_unsplit_report(
    level: tuple[list[LevelPart], int, LevelPart], warmup: int
) -> None:
    parts, n, union = level
    # Lag bounds that the random lags may or may not cross: validity must match either way,
    # so the shards' own guards are left out of this comparison (their reasons are added).
    config = BenchConfig(
        concurrency=[8],
        requests=10,
        warmup=warmup,
        run_id="run-1",
        max_send_lag_p99_s=10.0,
        max_loop_lag_p99_s=10.0,
        max_wake_lag_p99_s=10.0,
    )
    whole = merge_parts([union], config, 8)
    [merged] = merge_shards(
        _results(parts, config),
        expected=n,
        run_id="run-1",
        config=config,
        level_index=0,
        targets=[TARGET],
    )
    assert merged.validity.valid
    assert _comparable(merged) == _comparable(whole)
    assert merged.window.workers == n
    # The shards in any order give the same report, CPU seconds included.
    [reversed_] = merge_shards(
        list(reversed(_results(parts, config))),
        expected=n,
        run_id="run-1",
        config=config,
        level_index=0,
        targets=[TARGET],
    )
    assert reversed_.model_dump() == merged.model_dump()


def _two_parts() -> list[LevelPart]:
    return [
        LevelPart(
            samples=[_sample(i, 0.1 * i, 0.05, 0.5, 8) for i in range(k, 42, 2)],
            send_lags={i: 0.001 for i in range(k, 42, 2)},
            loop_times=[1.0],
            loop_lags=[0.001],
        )
        for k in (0, 1)
    ]


def _merge(results: list[ShardResult], expected: int = 2) -> LevelReport:
    [report] = merge_shards(
        results,
        expected=expected,
        run_id="run-1",
        config=CONFIG,
        level_index=0,
        targets=[TARGET],
    )
    return report


def test_complete_valid_shards_are_valid() -> None:
    report = _merge(_results(_two_parts(), CONFIG))
    assert report.validity.valid, report.validity.reasons
    assert [s.index for s in report.samples] == list(range(2, 42))


def test_a_missing_shard_makes_the_level_invalid_and_names_it() -> None:
    results = _results(_two_parts(), CONFIG)
    report = merge_shards(
        results[:1],
        expected=2,
        run_id="run-1",
        config=CONFIG,
        level_index=0,
        targets=[TARGET],
        missing={1: "pod exited 137"},
    )[0]
    assert not report.validity.valid
    assert "shard 1/2: missing (pod exited 137); the level is a subset" in report.validity.reasons


def test_a_duplicate_a_foreign_run_and_another_split_are_named_and_left_out() -> None:
    results = _results(_two_parts(), CONFIG)
    report = _merge([*results, results[1]])
    assert not report.validity.valid
    assert "shard 1/2: reported twice; the second result left out" in report.validity.reasons
    assert len(report.samples) == 40

    foreign = _results(_two_parts(), CONFIG, run_id="run-0")
    report = _merge([results[0], foreign[1]])
    assert any("shard 1/2: result of run 'run-0'" in r for r in report.validity.reasons)
    assert any("shard 1/2: missing" in r for r in report.validity.reasons)
    assert len(report.samples) == 20

    split3 = results[1].model_copy(update={"shards": 3})
    report = _merge([results[0], split3])
    assert any("shard 1/3: a split of 3, expected 2" in r for r in report.validity.reasons)


def test_a_saturated_shard_makes_the_level_invalid_and_names_it() -> None:
    parts = _two_parts()
    parts[1] = parts[1].model_copy(update={"loop_times": [1.0, 1.5], "loop_lags": [0.9, 0.9]})
    report = _merge(_results(parts, CONFIG))
    assert not report.validity.valid
    assert any(
        r.startswith("shard 1/2: client saturated: event-loop lag") for r in report.validity.reasons
    )


def test_a_shard_that_missed_the_barrier_is_named() -> None:
    results = _results(_two_parts(), CONFIG)
    late = results[0].model_copy(
        update={"variants": [], "problems": ["missed the start barrier by 3.000 s"]}
    )
    report = _merge([late, results[1]])
    assert not report.validity.valid
    assert "shard 0/2: missed the start barrier by 3.000 s" in report.validity.reasons


class _FakeSender:
    """Answers every request 50 ms after it is sent, 4 tokens 10 ms apart."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, float]] = []

    @asynccontextmanager
    async def __call__(
        self, target: Any, config: Any, streams: int, client: Any = None
    ) -> AsyncIterator[Any]:
        async def send(
            index: int, inference_id: str, body: bytes, scheduled_at: float
        ) -> RawTimeline:
            sent_at = time.monotonic()
            self.sent.append((index, sent_at))
            await asyncio.sleep(0.02)
            lines = [
                DecodedLine(
                    arrived_at=time.monotonic() + 0.01 * k, text="a", tokens=1, token_bearing=True
                )
                for k in range(4)
            ]
            return RawTimeline(
                index=index,
                inference_id=inference_id,
                scheduled_at=scheduled_at,
                sent_at=sent_at,
                end_at=lines[-1].arrived_at,
                lines=lines,
            )

        yield send


def test_run_shard_waits_for_the_barrier_and_sends_its_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _FakeSender()
    monkeypatch.setattr(shards_module, "open_sender", fake)
    config = BenchConfig(concurrency=[8], requests=20, warmup=1, run_id="run-1")
    start_at = time.time() + 0.3
    result = asyncio.run(
        run_shard([TARGET], config, level_index=0, shard=1, shards=3, start_at=start_at)
    )
    assert sorted(i for i, _ in fake.sent) == list(range(1, 21, 3))
    first = min(t for _, t in fake.sent)
    assert result.problems == [] and result.started_late_s < 0.2
    [variant] = result.variants
    # Instants are seconds after the barrier: the first send is at or just after 0.
    assert 0 <= min(s.sent_at for s in variant.part.samples) < 0.2
    assert first > 0
    assert variant.validity.valid


def test_run_shard_that_misses_the_barrier_sends_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeSender()
    monkeypatch.setattr(shards_module, "open_sender", fake)
    result = asyncio.run(
        run_shard([TARGET], CONFIG, level_index=0, shard=0, shards=2, start_at=time.time() - 5)
    )
    assert fake.sent == []
    assert result.variants == []
    assert result.problems and result.problems[0].startswith("missed the start barrier by 5.")


def test_a_split_with_an_empty_shard_is_refused() -> None:
    with pytest.raises(ShardSpecError, match="a shard would hold no stream"):
        asyncio.run(
            run_shard([TARGET], CONFIG, level_index=0, shard=0, shards=9, start_at=time.time())
        )


@pytest.fixture
def fake_sender(monkeypatch: pytest.MonkeyPatch) -> _FakeSender:
    """Every sender the runner and the shards open is the in-loop fake."""
    from endpoint_optimizer.bench import runner

    fake = _FakeSender()
    monkeypatch.setattr(shards_module, "open_sender", fake)
    monkeypatch.setattr(runner, "open_sender", fake)
    return fake


# The operator's process holds 4 streams a variant; a level above runs on pods of 4.
SHARD_LIMITS = BenchLimits(max_streams=8, streams_per_worker=4, max_workers=0, max_shards=4)


class _LocalLauncher:
    """Runs each shard as a task of this loop (the operator's launcher runs pods)."""

    def __init__(self, drop: int | None = None) -> None:
        self.calls: list[tuple[int, int]] = []
        self.drop = drop

    async def __call__(
        self,
        targets: Any,
        config: BenchConfig,
        level_index: int,
        shards: int,
        progress: shards_module.ShardProgress | None = None,
    ) -> shards_module.ShardOutcome:
        self.calls.append((level_index, shards))
        run = config.model_copy(update={"run_id": "job-1"})
        start_at = time.time() + 0.2
        finished = [0]

        def on_done(index: int) -> None:
            # What the pods' progress ConfigMaps add up to, told as each request ends.
            if index >= config.warmup:
                finished[0] += 1
                if progress is not None:
                    progress(finished[0])

        results = await asyncio.gather(
            *(
                run_shard(
                    targets,
                    run,
                    level_index=level_index,
                    shard=i,
                    shards=shards,
                    start_at=start_at,
                    on_done=on_done,
                )
                for i in range(shards)
                if i != self.drop
            )
        )
        return shards_module.ShardOutcome(
            run_id="job-1",
            results=list(results),
            missing={} if self.drop is None else {self.drop: "pod exited 137"},
        )


def test_side_by_side_runs_a_level_above_the_limits_on_shards(
    fake_sender: _FakeSender,
) -> None:
    from endpoint_optimizer.bench import runner

    limits = SHARD_LIMITS
    config = BenchConfig(concurrency=[2, 12], requests=24, run_id="m")
    with pytest.raises(BenchLimitError, match="12 is above"):
        asyncio.run(runner.run_side_by_side([TARGET], config, budget=BenchBudget(limits)))
    launcher = _LocalLauncher()
    told: list[tuple[int, int, int]] = []
    [report] = asyncio.run(
        runner.run_side_by_side(
            [TARGET],
            config,
            budget=BenchBudget(limits),
            launcher=launcher,
            progress=lambda *counts: told.append(counts),
        )
    )
    assert launcher.calls == [(1, 3)]  # 12 streams over pods of 4
    # Both levels count up request by request: the in-process one as each ends, the one on
    # pods as the launcher reads the pods' counts (here each request; pods: each interval).
    assert [t for t in told if t[0] == 2] == [(2, n, 24) for n in range(1, 25)]
    assert [t for t in told if t[0] == 12] == [(12, n, 24) for n in range(25)]
    assert [level.concurrency for level in report.levels] == [2, 12]
    assert report.levels[1].window.workers == 3
    assert sorted(s.index for s in report.levels[1].samples) == list(range(24))
    assert report.valid, [lvl.validity.reasons for lvl in report.levels]
    [report] = asyncio.run(
        runner.run_side_by_side(
            [TARGET], config, budget=BenchBudget(limits), launcher=_LocalLauncher(drop=2)
        )
    )
    assert report.levels[0].validity.valid
    assert not report.levels[1].validity.valid
    assert "shard 2/3: missing (pod exited 137); the level is a subset" in (
        report.levels[1].validity.reasons
    )


def test_a_level_that_read_more_tokens_than_one_process_may_runs_its_next_round_on_shards(
    fake_sender: _FakeSender,
) -> None:
    from endpoint_optimizer.bench import runner

    # 4 streams fit in-process; the rate is what moves the level.
    limits = SHARD_LIMITS
    config = BenchConfig(concurrency=[4], requests=16, run_id="m")
    first = asyncio.run(runner.run_side_by_side([TARGET], config, budget=BenchBudget(limits)))
    read = runner.tokens_per_s_read([first])
    assert set(read) == {4} and read[4] == first[0].levels[0].summary.output_tokens_per_s > 0
    # Without a bound, or below it, the next round stays in this process.
    launcher = _LocalLauncher()
    for bound in (0.0, read[4] * 1.01):
        bounded = replace(limits, max_tokens_per_s=bound)
        asyncio.run(
            runner.run_side_by_side(
                [TARGET], config, budget=BenchBudget(bounded), launcher=launcher, tokens_per_s=read
            )
        )
    assert launcher.calls == []
    # At a bound below what it read: pods enough that each reads under the bound.
    bounded = replace(limits, max_tokens_per_s=read[4] / 2.5)
    [report] = asyncio.run(
        runner.run_side_by_side(
            [TARGET], config, budget=BenchBudget(bounded), launcher=launcher, tokens_per_s=read
        )
    )
    assert launcher.calls == [(0, 3)]
    assert report.levels[0].window.workers == 3
    assert report.valid, [lvl.validity.reasons for lvl in report.levels]


def test_a_level_that_saturated_the_client_in_process_is_run_again_on_shards(
    fake_sender: _FakeSender,
) -> None:
    from endpoint_optimizer.bench import runner

    limits = SHARD_LIMITS
    # A guard no client can satisfy: every in-process level is voided as saturated.
    strict = BenchConfig(concurrency=[4], requests=16, run_id="m", max_loop_lag_p99_s=1e-9)
    [alone] = asyncio.run(runner.run_side_by_side([TARGET], strict, budget=BenchBudget(limits)))
    assert not alone.valid and "client saturated" in alone.levels[0].validity.reasons[0]
    launcher = _LocalLauncher()
    [again] = asyncio.run(
        runner.run_side_by_side([TARGET], strict, budget=BenchBudget(limits), launcher=launcher)
    )
    assert launcher.calls == [(0, 2)]
    assert again.levels[0].window.workers == 2  # the shards' report replaced the voided one
    assert sorted(s.index for s in again.levels[0].samples) == list(range(16))
    # A level the guard passed stays where it ran.
    launcher = _LocalLauncher()
    fine = strict.model_copy(
        update={"max_loop_lag_p99_s": 60.0, "max_send_lag_p99_s": 60.0, "max_wake_lag_p99_s": 60.0}
    )
    asyncio.run(
        runner.run_side_by_side([TARGET], fine, budget=BenchBudget(limits), launcher=launcher)
    )
    assert launcher.calls == []


def test_tokens_read_are_summed_over_variants_and_the_highest_round_kept() -> None:
    from endpoint_optimizer.bench.runner import tokens_per_s_read

    def report(rates: dict[int, float]) -> Any:
        levels = [
            type("L", (), {"concurrency": c, "summary": type("S", (), {"output_tokens_per_s": r})})
            for c, r in rates.items()
        ]
        return type("R", (), {"levels": levels})

    baseline = [report({1: 100.0, 8: 700.0}), report({8: 900.0})]
    candidate = [report({1: 120.0, 8: 650.0}), report({8: 1_000.0})]
    assert tokens_per_s_read([baseline, candidate]) == {1: 220.0, 8: 1_900.0}
    assert tokens_per_s_read([]) == {}


def test_a_shard_that_began_late_is_named() -> None:
    results = _results(_two_parts(), CONFIG)
    late = results[1].model_copy(update={"started_late_s": 0.3})
    report = _merge([results[0], late])
    assert not report.validity.valid
    assert any(
        r.startswith("shard 1/2: began 300 ms after the start barrier")
        for r in report.validity.reasons
    )
