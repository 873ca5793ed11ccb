"""A figure the bench guard could not vouch for reaches the judges: from the level's raw
parts (bench.runner.merge_parts, the guard) to the samples the pipeline judges
(pipeline.assess.level_samples, rounds_samples) and the bench command's report."""

from __future__ import annotations

from rich.console import Console

from endpoint_optimizer.bench.cli import render
from endpoint_optimizer.bench.models import (
    BenchConfig,
    BenchReport,
    BenchTarget,
    LevelPart,
)
from endpoint_optimizer.bench.runner import merge_parts
from endpoint_optimizer.pipeline.assess import level_samples, rounds_samples
from tests.unit.bench.test_guard import _kernel_sample as kernel_sample

CONFIG = BenchConfig(concurrency=[8], requests=400, warmup=0, run_id="run-1")


def _level(stall: float, slow_slack: float) -> BenchReport:
    """400 kernel-timed requests; every 33rd read as the slow tail, its first frame
    possibly `slow_slack` early; the client's loop lagged `stall` the whole level."""
    samples = [
        kernel_sample(i, 0.13 + i * 1e-5, slow_slack)
        if i % 33 == 0
        else kernel_sample(i, 0.05, 0.0)
        for i in range(400)
    ]
    part = LevelPart(
        samples=samples,
        send_lags={i: 0.0 for i in range(400)},
        loop_times=[0.01 * i for i in range(100)],
        loop_lags=[stall] * 100,
    )
    level = merge_parts([part], CONFIG, 8)
    return BenchReport(target=BenchTarget(endpoint_name="e"), config=CONFIG, levels=[level])


def test_a_blurred_tail_is_carried_to_the_judges_and_the_widest_round_kept() -> None:
    stalled = _level(0.12, 0.08)
    (level,) = stalled.levels
    assert level.validity.valid, level.validity.reasons
    assert level.validity.blurred_s["ttft_p99"] > 0.002
    judged = level_samples(level)
    assert judged.valid and judged.blurred_s == level.validity.blurred_s
    wider = _level(0.12, 0.12)
    (joined,) = rounds_samples([stalled, wider])
    assert joined.blurred_s["ttft_p99"] == max(
        stalled.levels[0].validity.blurred_s["ttft_p99"],
        wider.levels[0].validity.blurred_s["ttft_p99"],
    )
    assert joined.blurred_s["ttft_p99"] > judged.blurred_s["ttft_p99"]


def test_the_bench_command_prints_what_it_could_only_bracket() -> None:
    console = Console(record=True, width=200)
    render(_level(0.12, 0.08), console)
    text = console.export_text()
    assert "BLURRED: known only within the client's stamp brackets: " in text
    assert "ttft p99 ±" in text and "ttft p50" not in text.split("BLURRED")[1]
    console = Console(record=True, width=200)
    render(_level(0.0, 0.0), console)
    assert "BLURRED" not in console.export_text()
