"""Shadow's own checks: the objective on CloudWatch aggregates, eval on a pinned stage first."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from endpoint_optimizer.api import OptimizedEndpointStatus, VariantMeasurements, parse_spec
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.api.live import LiveState
from endpoint_optimizer.pipeline.assess import shadow_objective_check
from endpoint_optimizer.pipeline.decide import decide
from endpoint_optimizer.pipeline.model import (
    ActionKind,
    JobView,
    Measurement,
    Observations,
    Resource,
)
from endpoint_optimizer.pipeline.record import record
from tests.unit.pipeline.test_decide import NAMES, NOW, OWNER, baselined, run, serving, spec

EVALUATION = {"dataset": {"configMapRef": {"name": "evals", "key": "items.jsonl"}}}
DONE = {NAMES.job: JobView(NAMES.job, "COMPLETED", output_s3_uri="s3://models/out/x/")}
BASELINE = serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))
PINNED = serving(NAMES.pinned_config, (NAMES.baseline_variant, 1.0), (NAMES.candidate_variant, 0.0))
SHADOWED = serving(NAMES.rollout_config, (NAMES.baseline_variant, 1.0))


def shadow_spec(**overrides: Any) -> dict[str, Any]:
    rollout = {"strategy": "shadow", "steps": [{"pause": "1m"}], "analysis": {"onNoData": "pass"}}
    return spec(rollout=rollout, **overrides)


def folded(ratios: list[float], invocations: int = 100) -> LiveState:
    """A live state whose aggregate path saw these per-interval candidate/baseline ratios."""
    state = LiveState()
    weight = invocations / 2  # equal traffic: the harmonic combination n*n/(2n)
    for ratio in ratios:
        d = math.log(ratio)
        state.aggregate_n += 1
        state.aggregate_weight += weight
        state.aggregate_weighted_sum += weight * d
        state.aggregate_weighted_sum_sq += weight * d * d
    return state


def test_a_shadow_faster_by_the_margin_passes_and_one_that_is_not_shows_no_improvement() -> None:
    data = parse_spec(spec(objective={"metric": "latency", "minImprovement": 0.1}))
    fast = shadow_objective_check(data, folded([0.70, 0.72, 0.69, 0.71]))
    assert fast.verdict is Verdict.PASS and fast.kind is CheckKind.OBJECTIVE
    assert fast.candidate is not None and abs(fast.candidate - 0.705) < 0.01
    assert fast.interval_high is not None and fast.interval_high <= 0.9
    same = shadow_objective_check(data, folded([0.98, 1.01, 0.97, 1.0]))
    assert same.verdict is Verdict.NO_IMPROVEMENT
    assert "minImprovement" in same.reason and "CloudWatch" in same.source


def test_a_noisy_shadow_must_show_the_gain_with_confidence() -> None:
    data = parse_spec(spec(objective={"metric": "latency", "minImprovement": 0.1}))
    # Mean x0.84 would pass, but two intervals this far apart do not show it.
    noisy = shadow_objective_check(data, folded([0.6, 1.15]))
    assert noisy.verdict is Verdict.NO_IMPROVEMENT
    assert noisy.interval_high is not None and noisy.interval_high > 0.9
    steady = shadow_objective_check(data, folded([0.83, 0.85, 0.84, 0.84, 0.83, 0.85]))
    assert steady.verdict is Verdict.PASS


def test_one_interval_is_inconclusive_and_says_what_to_change() -> None:
    data = parse_spec(spec())
    check = shadow_objective_check(data, folded([0.5]))
    assert check.verdict is Verdict.INCONCLUSIVE
    assert "rollout.steps[].pause" in check.reason


def test_throughput_is_judged_as_the_per_request_token_rate_on_identical_copies() -> None:
    data = parse_spec(spec(objective={"metric": "throughput", "minImprovement": 0.2}))
    faster = shadow_objective_check(data, folded([0.7, 0.72, 0.71]))  # ~1.41x token rate
    assert faster.verdict is Verdict.PASS
    assert faster.candidate is not None and faster.candidate > 1.3
    slower = shadow_objective_check(data, folded([0.95, 0.9, 0.92]))  # ~1.09x
    assert slower.verdict is Verdict.NO_IMPROVEMENT


def test_shadow_with_an_eval_set_is_judged_pinned_first_then_shadows() -> None:
    data = shadow_spec(evaluation=EVALUATION)
    status = baselined()
    status, _, _ = run(status, BASELINE, DONE, spec_data=data)
    decision = decide(data, status, Observations(BASELINE, DONE), Resource(OWNER, 1), NOW)
    config = next(a for a in decision.actions if a.kind is ActionKind.CREATE_ENDPOINT_CONFIG)
    assert config.resource == NAMES.pinned_config
    variants = config.request["ProductionVariants"]
    assert [v["VariantName"] for v in variants] == [NAMES.baseline_variant, NAMES.candidate_variant]
    assert variants[1]["InitialVariantWeight"] == 0
    assert "ShadowProductionVariants" not in config.request
    status = OptimizedEndpointStatus.model_validate(decision.status)
    status, _, _ = run(status, PINNED, DONE, spec_data=data)
    assert status.phase.value == "Analyzing"
    decision = decide(data, status, Observations(PINNED, DONE), Resource(OWNER, 1), NOW)
    compare = decision.actions[0]
    assert compare.kind is ActionKind.COMPARE and compare.request == {"pinned": True}
    assert compare.candidate_variant == NAMES.candidate_variant
    # The pinned comparison passed (eval included): the candidate moves to a shadow.
    status = OptimizedEndpointStatus.model_validate(decision.status)
    status.checks = [Check(name="eval_exact_match", kind=CheckKind.EVAL, verdict=Verdict.PASS)]
    status.rollout.compared_step = 0
    status, actions, _ = run(status, PINNED, DONE, spec_data=data)
    assert actions == [ActionKind.CREATE_ENDPOINT_CONFIG, ActionKind.UPDATE_ENDPOINT]
    assert status.history[-1].event == "PinnedChecksPassed"
    # Until the shadow config serves, the pinned one is no reason to roll back.
    status, actions, _ = run(status, PINNED, DONE, spec_data=data)
    assert actions == [] and status.phase.value == "Analyzing"
    status, actions, _ = run(status, SHADOWED, DONE, spec_data=data, now=NOW + timedelta(seconds=5))
    assert status.history[-1].event == "ShadowStarted"
    assert status.rollout.step_started_at == NOW + timedelta(seconds=5)
    decision = decide(data, status, Observations(SHADOWED, DONE), Resource(OWNER, 1), NOW)
    assert decision.actions[0].kind is ActionKind.COMPARE
    # Production benchmarked, the shadow gets copies: the candidate is not invoked.
    assert decision.actions[0].request == {"invokeCandidate": False}


def test_a_failed_pinned_check_rolls_back_before_any_shadow() -> None:
    data = shadow_spec(evaluation=EVALUATION)
    status = baselined()
    status, _, _ = run(status, BASELINE, DONE, spec_data=data)
    status, _, _ = run(status, BASELINE, DONE, spec_data=data)
    status, _, _ = run(status, PINNED, DONE, spec_data=data)
    status.checks = [Check(name="eval_exact_match", kind=CheckKind.EVAL, verdict=Verdict.FAIL)]
    status.rollout.compared_step = 0
    status, actions, events = run(status, PINNED, DONE, spec_data=data)
    assert status.phase.value == "RollingBack" and "CheckFailed" in events
    assert actions == [ActionKind.UPDATE_ENDPOINT]  # weight 0: straight back to the baseline


def shadow_at_the_end(ratios: list[float]) -> tuple[OptimizedEndpointStatus, list[str]]:
    data = shadow_spec(objective={"metric": "latency", "minImprovement": 0.1})
    status = baselined()
    status, _, _ = run(status, BASELINE, DONE, spec_data=data)
    status, _, _ = run(status, BASELINE, DONE, spec_data=data)
    status, _, _ = run(status, SHADOWED, DONE, spec_data=data)
    assert status.phase.value == "Analyzing"
    status.rollout.compared_step = 0
    status.rollout.live_judge = folded(ratios)
    # Intervals read up to now: the live judge asks for nothing more.
    status.rollout.live_read_until = (NOW + timedelta(seconds=600)).timestamp()
    status.rollout.live_period_seconds = 60
    status, _, events = run(status, SHADOWED, DONE, spec_data=data, now=NOW + timedelta(minutes=2))
    return status, events


def test_a_shadow_that_is_not_faster_is_not_promoted() -> None:
    status, events = shadow_at_the_end([0.99, 1.0, 0.98, 1.01])
    assert status.phase.value == "RollingBack"
    assert "NoImprovement" in events
    check = next(c for c in status.checks if c.name == "objective_latency_shadow")
    assert check.verdict is Verdict.NO_IMPROVEMENT
    assert status.objective_gain is not None and abs(status.objective_gain) < 0.05


def test_a_faster_shadow_is_promoted_with_its_objective_check() -> None:
    status, events = shadow_at_the_end([0.7, 0.71, 0.69, 0.7])
    assert "NoImprovement" not in events
    assert status.phase.value == "Promoting", status.message
    check = next(c for c in status.checks if c.name == "objective_latency_shadow")
    assert check.verdict is Verdict.PASS
    assert status.objective_gain is not None and 0.25 < status.objective_gain < 0.35


def test_the_shadow_comparison_keeps_what_the_pinned_stage_measured() -> None:
    data = parse_spec(shadow_spec(evaluation=EVALUATION))
    status = OptimizedEndpointStatus(
        baseline=VariantMeasurements(variant_name="b", eval_score=0.8, eval_items=40),
        candidate=VariantMeasurements(variant_name="c", eval_score=0.79, eval_items=40),
        checks=[
            Check(name="eval_exact_match", kind=CheckKind.EVAL, verdict=Verdict.PASS),
            Check(name="live_latency", kind=CheckKind.LIVE, verdict=Verdict.PASS),
        ],
    )
    shadow = Measurement(ActionKind.COMPARE, 0, VariantMeasurements(variant_name="b"))
    after = OptimizedEndpointStatus.model_validate(record(status.dump(), shadow, data, NOW))
    assert [c.name for c in after.checks] == ["eval_exact_match"]
    assert after.candidate is not None and after.candidate.eval_score == 0.79
    assert after.baseline is not None and after.baseline.eval_score == 0.8
    assert after.rollout.compared_step == 0


def test_the_t_quantile_matches_scipy_without_needing_it_at_run_time() -> None:
    from scipy.stats import t

    from endpoint_optimizer.analysis.shadow import student_t_quantile

    for df in range(1, 60):
        for p, tolerance in ((0.9, 5e-4), (0.95, 5e-4), (0.99, 5e-3)):
            exact = float(t.ppf(p, df))
            assert abs(student_t_quantile(p, df) - exact) <= tolerance * exact, (df, p)
