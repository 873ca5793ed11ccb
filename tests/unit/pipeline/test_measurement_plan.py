"""What a measurement reaches, and judging what came back: the pipeline's part, not perform's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from endpoint_optimizer.analysis.series import IntervalPoint, VariantRole, VariantSeries
from endpoint_optimizer.api import parse_spec
from endpoint_optimizer.bench.models import BenchConfig, BenchReport, BenchTarget
from endpoint_optimizer.evaluation.dataset import EvalItem
from endpoint_optimizer.pipeline.assess import (
    judge,
    live_observations,
    measurement_plan,
    spot_check,
)
from endpoint_optimizer.pipeline.model import (
    Action,
    ActionKind,
    EvalAnswers,
    MeasurementPlan,
    RawMeasurement,
    VariantRun,
)
from tests.unit.pipeline.test_decide import NAMES, NOW, spec

EVALUATION = {"dataset": {"configMapRef": {"name": "evals", "key": "items.jsonl"}}}
SHADOW = {"strategy": "shadow", "steps": [{"pause": "1m"}], "analysis": {"onNoData": "pass"}}


def action(kind: ActionKind, **request: Any) -> Action:
    return Action(
        kind,
        "chat",
        dict(request),
        baseline_variant=NAMES.baseline_variant,
        candidate_variant=NAMES.candidate_variant,
    )


def test_a_shadow_comparison_benchmarks_production_only_and_its_pinned_stage_both() -> None:
    shadow = parse_spec(spec(rollout=SHADOW, evaluation=EVALUATION))
    compare = action(ActionKind.COMPARE, invokeCandidate=False)
    # The shadow variant cannot be invoked: production is benchmarked, the shadow gets copies.
    assert measurement_plan(shadow, compare) == MeasurementPlan()
    pinned = action(ActionKind.COMPARE, pinned=True)
    assert measurement_plan(shadow, pinned) == MeasurementPlan(candidate=True, evaluate=True)


def test_a_comparison_reaches_both_variants_and_evaluates_only_with_an_eval_set() -> None:
    compare = action(ActionKind.COMPARE)
    assert measurement_plan(parse_spec(spec()), compare) == MeasurementPlan(candidate=True)
    with_eval = parse_spec(spec(evaluation=EVALUATION))
    assert measurement_plan(with_eval, compare) == MeasurementPlan(candidate=True, evaluate=True)
    baseline = action(ActionKind.MEASURE_BASELINE)
    assert measurement_plan(with_eval, baseline) == MeasurementPlan(evaluate=True)
    assert measurement_plan(parse_spec(spec(rollout=SHADOW)), baseline) == MeasurementPlan()


def test_a_live_window_is_judged_one_period_at_a_time_quiet_ones_included() -> None:
    start = NOW
    end = NOW + timedelta(minutes=3)
    window = action(
        ActionKind.JUDGE_LIVE, start=start.isoformat(), end=end.isoformat(), periodSeconds=60
    )
    t0 = start.timestamp()

    def series(role: VariantRole, *points: IntervalPoint) -> VariantSeries:
        return VariantSeries(role=role, variant_name=role.value, period_seconds=60, points=points)

    read = {
        VariantRole.BASELINE: series(
            VariantRole.BASELINE,
            IntervalPoint(start=t0, invocations=40, model_latency_seconds=0.2),
            IntervalPoint(start=t0 + 60, invocations=30, model_latency_seconds=0.3),
        ),
        VariantRole.CANDIDATE: series(
            VariantRole.CANDIDATE,
            IntervalPoint(start=t0, invocations=10, model_latency_seconds=0.1),
            IntervalPoint(start=t0 + 60, invocations=0, model_latency_seconds=0.5),
        ),
    }
    first, second, quiet = live_observations(read, window)
    assert [o.interval_end for o in (first, second, quiet)] == [
        start + timedelta(minutes=n) for n in (1, 2, 3)
    ]
    assert (first.baseline.invocations, first.candidate.invocations) == (40, 10)
    # The Average is the judge's latency where a variant had traffic in the period.
    assert first.baseline.latency_mean_s == 0.2 and first.candidate.latency_mean_s == 0.1
    assert second.baseline.latency_mean_s == 0.3 and second.candidate.latency_mean_s is None
    assert quiet.baseline.invocations == 0 and quiet.candidate.invocations == 0

    judged = judge(parse_spec(spec()), RawMeasurement(window, series=read))
    assert judged.live == (first, second, quiet) and judged.series == read


def test_the_baseline_alone_is_summarised_and_scored_by_the_pipeline() -> None:
    evaluated = parse_spec(spec(evaluation=EVALUATION | {"metric": "exact_match"}))
    report = BenchReport(
        target=BenchTarget(endpoint_name="chat", variant=NAMES.baseline_variant),
        config=BenchConfig(),
        levels=[],
    )
    items = tuple(EvalItem(id=str(n), prompt=f"q{n}", reference="yes") for n in range(4))
    answers = EvalAnswers(["yes", "yes", "no", "I cannot help with that."], [None] * 4)
    at = datetime(2026, 11, 29, 12, 5, tzinfo=UTC)
    raw = RawMeasurement(
        action(ActionKind.MEASURE_BASELINE),
        baseline=VariantRun(NAMES.baseline_variant, report, answers),
        eval_items=items,
        benchmarked_at=at,
    )
    judged = judge(evaluated, raw)
    assert judged.candidate is None and judged.checks == ()
    assert judged.baseline.variant_name == NAMES.baseline_variant
    assert judged.baseline.measured_at == at  # when the benchmark ended, not when judged
    assert judged.baseline.eval_items == 4 and judged.baseline.eval_score == 0.5
    assert judged.baseline.refusal_rate == 0.25


def test_the_spot_check_picks_the_two_hardest_classes_the_same_way_every_time() -> None:
    spot_spec = parse_spec(
        spec(
            evaluation=EVALUATION | {"spotCheck": {"samples": 4}},
            rollout={"strategy": "canary", "approval": "beforePromotion"},
        )
    )
    classes = ["easy", "hard", "harder"]
    items = tuple(
        EvalItem(id=str(n), prompt=f"q{n}", reference="yes", prompt_class=classes[n % 3])
        for n in range(30)
    )
    # The baseline answers every easy item, half the hard ones, none of the harder ones.
    base = ["yes" if n % 3 == 0 or (n % 3 == 1 and n % 2) else "no" for n in range(30)]
    cand = ["yes"] * 30
    at = datetime(2026, 11, 29, 12, 5, tzinfo=UTC)
    first = spot_check(spot_spec, items, base, cand, at)
    assert first is not None
    assert first.classes == ["harder", "hard"]
    assert [s.prompt_class for s in first.samples] == ["harder", "hard", "harder", "hard"]
    assert all(s.candidate_answer == "yes" for s in first.samples)
    # Seeded by spec.benchmark.seed: the same pick on every comparison of a generation.
    again = spot_check(spot_spec, items, base, cand, at)
    assert again is not None and again.samples == first.samples
    assert spot_check(parse_spec(spec(evaluation=EVALUATION)), items, base, cand, at) is None
