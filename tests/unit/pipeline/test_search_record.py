"""A search candidate's comparison, recorded into its row of status.search (pipeline/record.py).

What a row says decides the search (pipeline/search.py reads improves, gates, gain and
objectiveMet), so each rule is pinned here: the gain and its bound from the objective
check, which checks gate (as the rollout's verdicts would: onNoData, must-pass slices),
the whole stack's bar for objectiveMet, the figures, and that status.baseline, candidate
and checks stay the rollout's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from endpoint_optimizer.api import (
    LevelMeasurement,
    OptimizedEndpointStatus,
    Phase,
    SearchRow,
    SearchStatus,
    VariantMeasurements,
    parse_spec,
)
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.pipeline.model import ActionKind, Measurement, Timing
from endpoint_optimizer.pipeline.record import record
from tests.unit.pipeline.test_search_status import BASE

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def _status(rows: list[SearchRow], **fields: Any) -> dict[str, Any]:
    return OptimizedEndpointStatus(
        phase=Phase.SEARCHING,
        baseline=VariantMeasurements(variant_name="baseline-g1"),
        search=SearchStatus(rows=rows, **fields),
    ).dump()


def _measurement(
    *checks: Check, variant: str = "cawq", acceptance: float | None = None
) -> Measurement:
    level = LevelMeasurement(concurrency=8, e2e_p50_ms=400.0, output_tokens_per_second=300.0)
    return Measurement(
        ActionKind.COMPARE,
        0,
        VariantMeasurements(variant_name="cfp8", eval_score=0.80),
        VariantMeasurements(
            variant_name=variant,
            levels=[level],
            eval_score=0.79,
            acceptance_rate=acceptance,
        ),
        tuple(checks),
    )


def objective(verdict: Verdict, base: float = 1000.0, cand: float = 700.0) -> Check:
    return Check(
        name="objective_latency",
        kind=CheckKind.OBJECTIVE,
        verdict=verdict,
        baseline=base,
        candidate=cand,
        interval_low=cand / base - 0.02,
        interval_high=cand / base + 0.02,
        reason="objective reason",
    )


def check(name: str, kind: CheckKind, verdict: Verdict) -> Check:
    return Check(name=name, kind=kind, verdict=verdict, reason=f"{name} {verdict.value}")


def _record(
    spec: dict[str, Any], status: dict[str, Any], m: Measurement, minutes: float = 30
) -> SearchRow:
    out = record(status, m, parse_spec(spec), NOW + timedelta(minutes=minutes), Timing())
    parsed = OptimizedEndpointStatus.model_validate(out)
    assert parsed.search is not None
    return parsed.search.rows[-1]


def _flying(**fields: Any) -> list[SearchRow]:
    kept = SearchRow(name="fp8", rung="quantization", verdict="Kept", measured=True, gain=0.25)
    row = SearchRow(
        name="awq", rung="quantization", base=["fp8"], variant="cawq",
        started_at=NOW, **fields,
    )  # fmt: skip
    return [kept, row]


def test_the_gain_its_bound_and_the_figures_go_into_the_candidate_s_row() -> None:
    status = _status(_flying())
    row = _record(BASE, status, _measurement(objective(Verdict.PASS), acceptance=None))
    assert row.measured and row.improves and row.gates
    assert row.gain == pytest.approx(0.3) and row.gain_low == pytest.approx(0.28)
    assert row.eval_delta == pytest.approx(-0.01)
    assert (row.tokens_per_second, row.latency_ms) == (300.0, 400.0)
    # Half an hour on one instance; the search's total grows by as much.
    assert row.instance_hours == pytest.approx(0.5)
    # fp8 kept 25 % off the latency, awq 30 % off what was left: 1 - 0.75 x 0.7 = 47.5 %
    # >= the spec's 30 %.
    assert row.objective_met
    # status.baseline, candidate and checks stay the rollout's.
    out = OptimizedEndpointStatus.model_validate(
        record(status, _measurement(objective(Verdict.PASS)), parse_spec(BASE), NOW, Timing())
    )
    assert out.baseline is not None and out.baseline.variant_name == "baseline-g1"
    assert out.candidate is None and out.checks == []
    assert out.search is not None and out.search.instance_hours == 0.0


def test_the_stack_s_bar_is_the_objective_s_not_the_step_s() -> None:
    # fp8 25 % off and awq 3 % off the rest is 1 - 0.75 x 0.97 = 27.25 %: the step passes
    # (0.04 is its bar) but the stack does not meet the spec's 30 %.
    status = _status(_flying())
    row = _record(BASE, status, _measurement(objective(Verdict.PASS, cand=970.0)))
    assert row.improves and not row.objective_met


@pytest.mark.parametrize(
    ("on_no_data", "extra", "gates"),
    [
        ("pass", check("e2e_p99@c8", CheckKind.BENCHMARK, Verdict.INCONCLUSIVE), True),
        ("pause", check("e2e_p99@c8", CheckKind.BENCHMARK, Verdict.INCONCLUSIVE), False),
        ("fail", check("e2e_p99@c8", CheckKind.BENCHMARK, Verdict.INCONCLUSIVE), False),
        ("pass", check("ttft_p50@c8", CheckKind.BENCHMARK, Verdict.FAIL), False),
        # A must-pass slice never passes undecided; a class that is not must-pass informs.
        ("pass", check("eval@long-context", CheckKind.EVAL, Verdict.INCONCLUSIVE), False),
        ("pause", check("eval@capital", CheckKind.EVAL_SLICE, Verdict.INCONCLUSIVE), True),
        ("pass", check("eval@capital", CheckKind.EVAL_SLICE, Verdict.FAIL), False),
        ("pass", check("acceptance_rate", CheckKind.ACCEPTANCE, Verdict.FAIL), False),
    ],
)
def test_gates_follow_the_rollout_s_verdicts(on_no_data: str, extra: Check, gates: bool) -> None:
    spec = {**BASE, "rollout": {"analysis": {"onNoData": on_no_data}}}
    row = _record(spec, _status(_flying()), _measurement(objective(Verdict.PASS), extra))
    assert row.gates is gates
    assert (extra.name in row.failed_checks) is not gates
    if not gates:
        assert row.why.startswith("not passed: ") and not row.objective_met


def test_no_improvement_says_why_and_a_missing_objective_is_no_gain() -> None:
    row = _record(BASE, _status(_flying()), _measurement(objective(Verdict.NO_IMPROVEMENT)))
    assert not row.improves and row.gates and row.why == "objective reason"
    row = _record(BASE, _status(_flying()), _measurement())
    assert row.gain is None and not row.improves and row.why == "no objective check"


def test_a_comparison_of_another_variant_or_with_nothing_in_flight_is_not_recorded() -> None:
    status = _status(_flying())
    out = record(status, _measurement(objective(Verdict.PASS), variant="cgptq"),
                 parse_spec(BASE), NOW, Timing())  # fmt: skip
    assert OptimizedEndpointStatus.model_validate(out).search.rows[-1].measured is False  # type: ignore[union-attr]
    done = _status(_flying(), done="budget")
    out = record(done, _measurement(objective(Verdict.PASS)), parse_spec(BASE), NOW, Timing())
    assert OptimizedEndpointStatus.model_validate(out).search.rows[-1].measured is False  # type: ignore[union-attr]


def test_a_price_gives_the_cost_of_a_million_output_tokens() -> None:
    spec = {**BASE, "search": {**BASE["search"], "usdPerInstanceHour": 10.8}}
    row = _record(spec, _status(_flying()), _measurement(objective(Verdict.PASS)))
    # $10.80 an hour at 300 tokens/s: 1.08 M tokens an hour, $10 per million.
    assert row.cost_per_million_tokens == pytest.approx(10.0)
    assert (
        _record(
            BASE, _status(_flying()), _measurement(objective(Verdict.PASS))
        ).cost_per_million_tokens
        is None
    )


def test_every_level_s_gain_and_interval_come_from_its_benchmark_check() -> None:
    def e2e(level: int, base: float, cand: float, low: float, high: float) -> Check:
        return Check(
            name=f"e2e_p50@c{level}", kind=CheckKind.BENCHMARK, verdict=Verdict.PASS,
            baseline=base, candidate=cand, interval_low=low, interval_high=high,
        )  # fmt: skip

    m = _measurement(
        objective(Verdict.PASS),
        e2e(8, 1000.0, 700.0, 0.68, 0.72),
        e2e(1, 500.0, 400.0, 0.75, 0.85),
        check("ttft_p50@c8", CheckKind.BENCHMARK, Verdict.PASS),
    )
    row = _record(BASE, _status(_flying()), m)
    assert [(lg.concurrency, lg.gain, lg.gain_low, lg.gain_high) for lg in row.levels] == [
        (1, 0.2, 0.15, 0.25),
        (8, 0.3, 0.28, 0.32),
    ]
    # Throughput: higher is better, the interval's low end is the low gain.
    spec = {**BASE, "objective": {"metric": "throughput", "minImprovement": 0.1}}
    tput = Check(
        name="throughput_mean@c8", kind=CheckKind.BENCHMARK, verdict=Verdict.PASS,
        baseline=200.0, candidate=260.0, interval_low=1.2, interval_high=1.4,
    )  # fmt: skip
    row = _record(spec, _status(_flying()), _measurement(objective(Verdict.PASS), tput))
    assert [(lg.gain, lg.gain_low, lg.gain_high) for lg in row.levels] == [(0.3, 0.2, 0.4)]


def test_a_cost_objective_takes_its_level_gains_from_throughput_inverted() -> None:
    spec = {
        **BASE,
        "objective": {"metric": "costPerMillionTokens", "minImprovement": 0.1},
        "benchmark": {"slo": {"e2eP99Ms": 5000}},
    }
    tput = Check(
        name="throughput_mean@c8", kind=CheckKind.BENCHMARK, verdict=Verdict.PASS,
        baseline=200.0, candidate=250.0, interval_low=1.2, interval_high=1.3,
    )  # fmt: skip
    cost = objective(Verdict.PASS, base=5000.0, cand=4000.0).model_copy(
        update={"name": "objective_costPerMillionTokens", "unit": "s/Mtok"}
    )
    row = _record(spec, _status(_flying()), _measurement(cost, tput))
    # 25 % more tokens per second is 20 % less instance time per token (1 - 1/1.25).
    assert [(lg.gain, lg.gain_low, lg.gain_high) for lg in row.levels] == [
        (0.2, round(1 - 1 / 1.2, 4), round(1 - 1 / 1.3, 4))
    ]
    assert row.gain == pytest.approx(0.2) and row.binding == "cost"
    # fp8 kept 25 %, this 20 % on the rest: 1 - 0.75 x 0.8 = 40 % >= 10 %.
    assert row.objective_met


def test_each_judged_class_s_score_change_goes_into_the_row() -> None:
    long = Check(
        name="eval@long-context", kind=CheckKind.EVAL, verdict=Verdict.PASS,
        baseline=0.875, candidate=0.833, reason="",
    )  # fmt: skip
    capital = Check(
        name="eval@capital", kind=CheckKind.EVAL_SLICE, verdict=Verdict.PASS,
        baseline=0.96, candidate=0.96, reason="",
    )  # fmt: skip
    row = _record(BASE, _status(_flying()), _measurement(objective(Verdict.PASS), long, capital))
    assert row.slice_deltas == {"long-context": -0.042, "capital": 0.0}
