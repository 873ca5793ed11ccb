"""The decision function, phase by phase, without Kubernetes or AWS."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from endpoint_optimizer.api import (
    ConditionType,
    LevelMeasurement,
    OptimizedEndpointStatus,
    parse_status,
)
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.aws.perform import first_round_rates
from endpoint_optimizer.pipeline.decide import decide, merge_patch
from endpoint_optimizer.pipeline.model import (
    ActionKind,
    EndpointView,
    JobView,
    Observations,
    Resource,
    Timing,
    VariantView,
)
from endpoint_optimizer.pipeline.plan import Names
from endpoint_optimizer.sagemaker.naming import Owner

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
OWNER = Owner("ml", "chat", "uid-1")
NAMES = Names.of(OWNER, 1)
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"


def spec(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "endpointName": "chat",
        "region": "us-east-1",
        "executionRoleArn": "arn:aws:iam::123456789012:role/sagemaker-exec",
        "model": {"s3Uri": "s3://models/llama/", "image": IMAGE},
        "instanceType": "ml.g6.12xlarge",
        "optimizations": {"quantization": {"scheme": "fp8"}},
        "outputS3Uri": "s3://models/out/",
        "evaluation": {"waiver": "unit test: quality not judged"},
        "rollout": {
            "strategy": "canary",
            "steps": [{"weight": 10, "pause": "1m"}, {"weight": 50, "pause": "1m"}],
        },
    }
    base.update(overrides)
    return base


def run(
    status: OptimizedEndpointStatus | dict[str, Any] | None,
    endpoint: EndpointView | None = None,
    jobs: dict[str, JobView] | None = None,
    generation: int = 1,
    annotations: dict[str, str] | None = None,
    now: datetime = NOW,
    spec_data: dict[str, Any] | None = None,
) -> tuple[OptimizedEndpointStatus, list[ActionKind], list[str]]:
    current = status if isinstance(status, OptimizedEndpointStatus) else parse_status(status)
    decision = decide(
        spec_data or spec(),
        current,
        Observations(endpoint=endpoint, jobs=jobs or {}),
        Resource(OWNER, generation, annotations or {}),
        now,
        Timing(time_scale=1.0),
    )
    return (
        parse_status(decision.status),
        [a.kind for a in decision.actions],
        [e.reason for e in decision.events],
    )


def serving(
    config: str, *variants: tuple[str, float], status: str = "InService", failure: str = ""
) -> EndpointView:
    return EndpointView(
        name="chat",
        status=status,
        config_name=config,
        failure_reason=failure,
        variants=tuple(VariantView(name, "", weight) for name, weight in variants),
    )


def baselined() -> OptimizedEndpointStatus:
    status, _, _ = run(None)
    status, _, _ = run(status, serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0)))
    assert status.baseline is not None
    status.baseline.measured_at = NOW
    return status


def test_a_new_resource_creates_model_config_and_endpoint_with_deterministic_names() -> None:
    status, actions, events = run(None)
    assert status.phase.value == "Baselining"
    assert actions == [
        ActionKind.CREATE_MODEL,
        ActionKind.CREATE_ENDPOINT_CONFIG,
        ActionKind.CREATE_ENDPOINT,
    ]
    assert status.sagemaker.baseline_endpoint_config == NAMES.baseline_config
    assert "BaselineStarted" in events
    again, _, _ = run(None)
    assert again.sagemaker.baseline_endpoint_config == status.sagemaker.baseline_endpoint_config


def test_an_existing_endpoint_is_refused_unless_adopted() -> None:
    foreign = serving("someone-elses-config", ("AllTraffic", 1.0))
    status, actions, _ = run(None, foreign)
    assert status.phase.value == "Failed"
    assert actions == []
    assert "adoptExisting" in status.last_error
    terminal = status.condition(ConditionType.TERMINAL)
    assert terminal is not None and terminal.status.value == "True"
    # adoptExisting with the proof the spec states: the endpoint's exact ARN.
    arn = "arn:aws:sagemaker:us-east-1:123456789012:endpoint/chat"
    proven = dataclasses.replace(foreign, arn=arn)
    adoption = {"endpointArn": arn}
    refused, actions, _ = run(None, foreign, spec_data=spec(adoptExisting=True, adoption=adoption))
    assert refused.phase.value == "Failed" and actions == []
    assert "spec.adoption.endpointArn" in refused.last_error
    adopted, actions, _ = run(None, proven, spec_data=spec(adoptExisting=True, adoption=adoption))
    assert adopted.sagemaker.adopted
    assert adopted.sagemaker.baseline_endpoint_config == "someone-elses-config"
    assert actions == [ActionKind.MEASURE_BASELINE]


def test_an_invalid_spec_fails_terminally_without_any_aws_action() -> None:
    status, actions, _ = run(None, spec_data=spec(instanceCount=0))
    assert status.phase.value == "Failed"
    assert actions == []
    assert "instanceCount" in status.last_error


def test_the_optimization_job_is_started_then_waited_for() -> None:
    status = baselined()
    status, actions, _ = run(status, serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0)))
    assert status.phase.value == "Optimizing"
    assert actions == [ActionKind.CREATE_OPTIMIZATION_JOB]
    endpoint = serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))
    running = {NAMES.job: JobView(NAMES.job, "INPROGRESS")}
    status, actions, _ = run(status, endpoint, running)
    assert actions == [] and status.phase.value == "Optimizing"
    failed = {NAMES.job: JobView(NAMES.job, "FAILED", "CapacityError: no ml.g6")}
    ended, actions, events = run(status, endpoint, failed)
    assert ended.phase.value == "Failed"
    assert "CapacityError" in ended.last_error
    assert "OptimizationJobFailed" in events


def deployed() -> tuple[OptimizedEndpointStatus, EndpointView]:
    status = baselined()
    endpoint = serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))
    done = {NAMES.job: JobView(NAMES.job, "COMPLETED", output_s3_uri="s3://models/out/x/")}
    status, _, _ = run(status, endpoint, done)
    status, actions, _ = run(status, endpoint, done)
    assert status.phase.value == "Deploying"
    assert ActionKind.UPDATE_ENDPOINT in actions
    rollout = serving(
        NAMES.rollout_config, (NAMES.baseline_variant, 90.0), (NAMES.candidate_variant, 10.0)
    )
    status, actions, _ = run(status, rollout, done)
    assert status.phase.value == "Analyzing"
    return status, rollout


def test_a_failed_update_is_never_reported_as_success() -> None:
    status = baselined()
    endpoint = serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))
    done = {NAMES.job: JobView(NAMES.job, "COMPLETED")}
    status, _, _ = run(status, endpoint, done)
    status, _, _ = run(status, endpoint, done)
    rolled = serving(
        NAMES.baseline_config,
        (NAMES.baseline_variant, 1.0),
        failure="Container failed health check",
    )
    status, actions, events = run(status, rolled, done)
    assert status.phase.value == "RolledBack"
    assert "health check" in status.last_error
    assert ActionKind.UPDATE_ENDPOINT not in actions
    assert "UpdateFailed" in events


def compared(status: OptimizedEndpointStatus, verdict: Verdict, step: int = 0) -> None:
    status.checks = [
        Check(name="e2e_p50@c8", kind=CheckKind.BENCHMARK, verdict=verdict, reason="r"),
    ]
    status.rollout.compared_step = step


def test_a_comparison_carries_what_the_baseline_read_per_level_to_place_its_first_round() -> None:
    status, rollout = deployed()
    assert status.baseline is not None
    status.baseline.levels = [
        LevelMeasurement(concurrency=8, output_tokens_per_second=1234.5),
        LevelMeasurement(concurrency=64, output_tokens_per_second=9000.0),
        LevelMeasurement(concurrency=128),  # nothing read: no rate to place it by
    ]
    observed = Observations(endpoint=rollout)
    decision = decide(spec(), status, observed, Resource(OWNER, 1), NOW, Timing(time_scale=1.0))
    [compare] = decision.actions
    assert compare.kind is ActionKind.COMPARE
    assert compare.baseline_tokens_per_s == {8: 1234.5, 64: 9000.0}
    # Side by side, both variants: the first round expects twice the baseline's rate.
    assert first_round_rates(compare, 2) == {8: 2469.0, 64: 18000.0}
    assert first_round_rates(dataclasses.replace(compare, baseline_tokens_per_s={}), 2) == {}


def test_canary_compares_each_step_then_promotes_after_the_pauses() -> None:
    status, rollout = deployed()
    status, actions, _ = run(status, rollout)
    assert actions == [ActionKind.COMPARE]
    compared(status, Verdict.PASS)
    status, actions, _ = run(status, rollout, now=NOW + timedelta(seconds=10))
    assert actions == [] and status.phase.value == "Analyzing"
    status, actions, _ = run(status, rollout, now=NOW + timedelta(seconds=61))
    assert actions == [ActionKind.UPDATE_WEIGHTS]
    assert status.rollout.step_index == 1
    half = serving(
        NAMES.rollout_config, (NAMES.baseline_variant, 50.0), (NAMES.candidate_variant, 50.0)
    )
    status, actions, _ = run(status, half, now=NOW + timedelta(seconds=62))
    assert actions == [ActionKind.COMPARE]
    compared(status, Verdict.PASS, step=1)
    # The live judge reads the newest published CloudWatch interval first, once.
    status, actions, _ = run(status, half, now=NOW + timedelta(seconds=200))
    assert actions == [ActionKind.JUDGE_LIVE]
    status, actions, _ = run(status, half, now=NOW + timedelta(seconds=200))
    assert status.phase.value == "Promoting"
    assert actions == [ActionKind.CREATE_ENDPOINT_CONFIG, ActionKind.UPDATE_ENDPOINT]
    promoted = serving(NAMES.promoted_config, (NAMES.candidate_variant, 1.0))
    status, actions, events = run(status, promoted, now=NOW + timedelta(seconds=210))
    assert status.phase.value == "Succeeded"
    assert "CandidatePromoted" in events


def test_a_failed_check_moves_traffic_back_first_then_the_config() -> None:
    status, rollout = deployed()
    compared(status, Verdict.FAIL)
    status, actions, events = run(status, rollout)
    assert status.phase.value == "RollingBack"
    assert actions == [ActionKind.UPDATE_WEIGHTS]
    assert "CheckFailed" in events
    drained = serving(
        NAMES.rollout_config, (NAMES.baseline_variant, 100.0), (NAMES.candidate_variant, 0.0)
    )
    status, actions, _ = run(status, drained)
    assert actions == [ActionKind.UPDATE_ENDPOINT]
    back = serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))
    status, actions, _ = run(status, back)
    assert status.phase.value == "RolledBack"
    degraded = next(c for c in status.conditions if c.type.value == "Degraded")
    assert degraded.status.value == "True"


def test_no_improvement_is_a_reason_not_to_promote() -> None:
    status, rollout = deployed()
    compared(status, Verdict.NO_IMPROVEMENT)
    status, _, events = run(status, rollout)
    assert status.phase.value == "RollingBack"
    assert "NoImprovement" in events


def test_inconclusive_checks_pause_until_approved_once() -> None:
    status, rollout = deployed()
    compared(status, Verdict.INCONCLUSIVE)
    status, actions, _ = run(status, rollout)
    assert status.paused and actions == []
    approve = {"optimizer.dev/approve": "true"}
    status, _, _ = run(status, rollout, annotations=approve, now=NOW + timedelta(seconds=61))
    assert not status.paused
    assert status.rollout.step_index == 1


def test_approval_waits_for_the_annotation_and_counts_each_value_once() -> None:
    status, rollout = deployed()
    data = spec(
        rollout={
            "strategy": "canary",
            "steps": [{"weight": 10, "pause": "1s"}],
            "approval": "beforePromotion",
        }
    )
    compared(status, Verdict.PASS)
    status, _, _ = run(status, rollout, now=NOW + timedelta(seconds=5), spec_data=data)
    assert status.phase.value == "AwaitingApproval"
    status, _, _ = run(status, rollout, spec_data=data)
    assert status.phase.value == "AwaitingApproval"
    # The value was consumed before (e.g. by an earlier pause): it does not approve again.
    stale = status.model_copy(deep=True)
    stale.rollout.levers_handled = {"optimizer.dev/approve": "yes"}
    stale, _, _ = run(stale, rollout, spec_data=data, annotations={"optimizer.dev/approve": "yes"})
    assert stale.phase.value == "AwaitingApproval"
    status, _, _ = run(
        status, rollout, spec_data=data, annotations={"optimizer.dev/approve": "yes"}
    )
    assert status.phase.value == "Promoting"


def test_rollback_annotation_rolls_back_and_pause_stops_acting() -> None:
    status, rollout = deployed()
    paused, actions, _ = run(status, rollout, annotations={"optimizer.dev/pause": "true"})
    assert paused.paused and actions == []
    status, actions, _ = run(status, rollout, annotations={"optimizer.dev/rollback": "true"})
    assert status.phase.value == "RollingBack"
    assert actions == [ActionKind.UPDATE_WEIGHTS]


def test_a_new_generation_returns_traffic_to_the_baseline_then_starts_again() -> None:
    status, rollout = deployed()
    status, actions, events = run(status, rollout, generation=2)
    assert status.phase.value == "RollingBack"
    assert actions == [ActionKind.UPDATE_WEIGHTS]
    assert "NewGeneration" in events
    back = serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))
    status, actions, _ = run(status, back, generation=2)
    assert status.observed_generation == 2
    assert status.phase.value == "Baselining"
    assert status.baseline is not None and status.baseline.measured_at is None
    assert actions == [ActionKind.MEASURE_BASELINE]


def test_merge_patch_removes_what_the_new_status_dropped() -> None:
    old = {"phase": "Analyzing", "candidate": {"variantName": "c"}, "rollout": {"a": 1, "b": 2}}
    new = {"phase": "Pending", "rollout": {"a": 1}}
    assert merge_patch(old, new) == {"phase": "Pending", "candidate": None, "rollout": {"b": None}}


def test_a_promotion_that_sagemaker_rolled_back_is_not_success() -> None:
    status, rollout = deployed()
    data = spec(rollout={"strategy": "canary", "steps": [{"weight": 10, "pause": "1s"}]})
    compared(status, Verdict.PASS)
    status, actions, _ = run(status, rollout, now=NOW + timedelta(seconds=5), spec_data=data)
    assert status.phase.value == "Promoting"
    assert ActionKind.UPDATE_ENDPOINT in actions
    updating = serving(NAMES.rollout_config, status="Updating")
    status, actions, _ = run(status, updating, spec_data=data)
    assert actions == []
    kept = serving(
        NAMES.rollout_config,
        (NAMES.baseline_variant, 90.0),
        (NAMES.candidate_variant, 10.0),
        failure="alarm ml-chat-alarm-errors fired",
    )
    status, actions, events = run(status, kept, spec_data=data)
    assert status.phase.value == "RollingBack"
    assert "PromotionRolledBack" in events
    assert actions == [ActionKind.UPDATE_WEIGHTS]


def test_blue_green_promotion_creates_alarms_and_names_them_in_the_update() -> None:
    status, rollout = deployed()
    data = spec(rollout={"strategy": "blueGreen", "steps": [{"weight": 100, "pause": "10m"}]})
    compared(status, Verdict.PASS)
    decision = decide(
        data,
        status,
        Observations(endpoint=rollout),
        Resource(OWNER, 1, {}),
        NOW + timedelta(minutes=11),
        Timing(),
    )
    kinds = [a.kind for a in decision.actions]
    assert kinds.count(ActionKind.PUT_ALARM) == 2
    update = next(a for a in decision.actions if a.kind is ActionKind.UPDATE_ENDPOINT)
    config = update.request["DeploymentConfig"]
    assert config["BlueGreenUpdatePolicy"]["TerminationWaitInSeconds"] == 600
    assert len(config["AutoRollbackConfiguration"]["Alarms"]) == 2


def test_an_endpoint_made_by_this_resource_is_recognised_after_a_lost_status_write() -> None:
    # The create happened, the status write did not (crash, or a stale read).
    status, actions, _ = run(None, serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0)))
    assert status.phase.value == "Baselining"
    assert status.sagemaker.baseline_endpoint_config == NAMES.baseline_config
    assert actions == [ActionKind.MEASURE_BASELINE]


def test_a_technique_the_instance_cannot_run_fails_before_any_aws_action() -> None:
    # A10G (g5) has no FP8 support: SageMaker would fail the job hours later.
    status, actions, events = run(None, spec_data=spec(instanceType="ml.g5.12xlarge"))
    assert status.phase.value == "Failed"
    assert actions == []
    assert "UnsupportedCombination" in events
    assert "spec.optimizations.quantization" in status.last_error or "g5" in status.last_error


def test_shadow_deploys_one_production_and_one_shadow_variant_then_judges_live() -> None:
    data = spec(rollout={"strategy": "shadow", "steps": [{"pause": "1m"}]})
    status = baselined()
    endpoint = serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))
    done = {NAMES.job: JobView(NAMES.job, "COMPLETED", output_s3_uri="s3://models/out/x/")}
    status, _, _ = run(status, endpoint, done, spec_data=data)
    decision = decide(
        data,
        status,
        Observations(endpoint=endpoint, jobs=done),
        Resource(OWNER, 1),
        NOW,
        Timing(1.0),
    )
    config = next(a for a in decision.actions if a.kind is ActionKind.CREATE_ENDPOINT_CONFIG)
    assert [v["VariantName"] for v in config.request["ProductionVariants"]] == [
        NAMES.baseline_variant
    ]
    assert [v["VariantName"] for v in config.request["ShadowProductionVariants"]] == [
        NAMES.candidate_variant
    ]
    status = parse_status(decision.status)
    shadowed = serving(NAMES.rollout_config, (NAMES.baseline_variant, 1.0))
    status, actions, _ = run(status, shadowed, done, spec_data=data)
    assert status.phase.value == "Analyzing" and status.rollout.canary_weight == 0
    status, actions, _ = run(status, shadowed, done, spec_data=data)
    assert actions == [ActionKind.COMPARE]  # the production variant; the shadow gets copies
