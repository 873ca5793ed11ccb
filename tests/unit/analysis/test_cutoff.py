"""The concurrency cut-off: read from the judge's per-level intervals, not point estimates."""

from __future__ import annotations

from endpoint_optimizer.analysis.cutoff import find_cutoff, level_outcomes, per_instance
from endpoint_optimizer.api import Check, CheckKind, CutoffOutcome, Verdict


def check(name: str, low: float | None, high: float | None, point: float = 1.0) -> Check:
    return Check(
        name=name,
        kind=CheckKind.BENCHMARK,
        verdict=Verdict.PASS,
        baseline=100.0,
        candidate=100.0 * point,
        interval_low=low,
        interval_high=high,
    )


def cutoff_of(*intervals: tuple[int, float | None, float | None]) -> int | None:
    checks = [check(f"e2e_p50@c{c}", low, high) for c, low, high in intervals]
    return find_cutoff(level_outcomes(checks, "e2e_p50")).concurrency


def test_wins_at_low_concurrency_and_loses_at_high_gives_the_last_winning_level() -> None:
    assert cutoff_of((1, 0.6, 0.7), (4, 0.8, 0.95), (16, 1.1, 1.3)) == 4


def test_wins_everywhere_gives_no_cutoff() -> None:
    assert cutoff_of((1, 0.6, 0.7), (16, 0.8, 0.9)) is None


def test_loses_everywhere_gives_no_cutoff() -> None:
    assert cutoff_of((1, 1.05, 1.2), (16, 1.1, 1.3)) is None


def test_an_undecided_level_between_a_win_and_a_loss_falls_above_the_cutoff() -> None:
    assert cutoff_of((1, 0.6, 0.7), (4, 0.9, 1.1), (16, 1.1, 1.3)) == 1


def test_a_point_estimate_that_wins_inside_an_interval_that_straddles_one_is_undecided() -> None:
    checks = [check("e2e_p50@c1", 0.5, 0.7), check("e2e_p50@c8", 0.7, 1.2, point=0.8)]
    levels = level_outcomes(checks, "e2e_p50")
    assert [lv.outcome for lv in levels] == [CutoffOutcome.WINS, CutoffOutcome.UNDECIDED]
    assert find_cutoff(levels).concurrency is None


def test_undecided_everywhere_or_unjudged_levels_give_no_cutoff() -> None:
    assert cutoff_of((1, 0.9, 1.1), (16, None, None)) is None
    assert find_cutoff(()).concurrency is None


def test_a_win_above_a_loss_is_no_single_cutoff() -> None:
    result = find_cutoff(
        level_outcomes([check("e2e_p50@c1", 1.1, 1.2), check("e2e_p50@c8", 0.6, 0.8)], "e2e_p50")
    )
    assert result.concurrency is None
    assert "disagree" in result.reason


def test_throughput_wins_when_the_whole_interval_is_above_one() -> None:
    checks = [check("throughput_mean@c1", 1.2, 1.4), check("throughput_mean@c32", 0.7, 0.9)]
    assert find_cutoff(level_outcomes(checks, "throughput_mean", False)).concurrency == 1


def test_other_statistics_are_not_read() -> None:
    checks = [check("ttft_p99@c1", 0.5, 0.6), check("e2e_p50@c1", 0.5, 0.6)]
    assert [lv.concurrency for lv in level_outcomes(checks, "e2e_p50")] == [1]


def test_the_batch_per_instance_rounds_up() -> None:
    assert per_instance(8, 1) == 8
    assert per_instance(8, 3) == 3
    assert per_instance(1, 4) == 1
