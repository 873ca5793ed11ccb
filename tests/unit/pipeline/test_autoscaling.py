"""Autoscaled variants across a rollout, pure: save before deregistering, deregister with the
update, put back on the serving variant with its dimensions rewritten, idempotently."""

from __future__ import annotations

from typing import Any

from endpoint_optimizer.api import DeletionPolicy, OptimizedEndpointStatus, Phase, parse_status
from endpoint_optimizer.api.status import ScalableTargetRecord
from endpoint_optimizer.pipeline.autoscaling import restore_actions, wanted
from endpoint_optimizer.pipeline.cleanup import cleanup
from endpoint_optimizer.pipeline.decide import decide
from endpoint_optimizer.pipeline.model import (
    ROLLBACK,
    ActionKind,
    EndpointView,
    JobView,
    Observations,
    Resource,
    Timing,
)
from endpoint_optimizer.sagemaker import autoscaling as aas
from tests.unit.pipeline.test_decide import NAMES, NOW, OWNER, baselined, serving, spec

TARGET = {
    "ResourceId": f"endpoint/chat/variant/{NAMES.baseline_variant}",
    "MinCapacity": 1,
    "MaxCapacity": 4,
}
POLICIES: list[dict[str, Any]] = [
    {
        "PolicyName": "latency",
        "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": {
            "TargetValue": 2.0,
            "CustomizedMetricSpecification": {
                "MetricName": "ModelLatency",
                "Namespace": "AWS/SageMaker",
                "Dimensions": [
                    {"Name": "EndpointName", "Value": "chat"},
                    {"Name": "VariantName", "Value": NAMES.baseline_variant},
                    {"Name": "Team", "Value": "search"},
                ],
                "Statistic": "Average",
            },
            "ScaleInCooldown": 300,
        },
    },
    {
        "PolicyName": "invocations",
        "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": {
            "TargetValue": 70.0,
            "PredefinedMetricSpecification": {
                "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"
            },
        },
    },
    {
        "PolicyName": "steps",
        "PolicyType": "StepScaling",
        "StepScalingPolicyConfiguration": {
            "AdjustmentType": "ChangeInCapacity",
            "StepAdjustments": [{"MetricIntervalLowerBound": 0.0, "ScalingAdjustment": 2}],
            "Cooldown": 60,
        },
    },
]
RECORD = aas.record("chat", TARGET, POLICIES)
DONE = {NAMES.job: JobView(NAMES.job, "COMPLETED", output_s3_uri="s3://models/out/x/")}


def run(
    status: OptimizedEndpointStatus,
    endpoint: EndpointView,
    scaling: tuple[ScalableTargetRecord, ...] | None,
    annotations: dict[str, str] | None = None,
) -> tuple[OptimizedEndpointStatus, list[tuple[ActionKind, dict[str, Any]]]]:
    decision = decide(
        spec(),
        status,
        Observations(endpoint=endpoint, jobs=DONE, scaling=scaling),
        Resource(OWNER, 1, annotations or {}),
        NOW,
        Timing(time_scale=1.0),
    )
    return parse_status(decision.status), [(a.kind, a.request) for a in decision.actions]


def test_reading_a_record_and_writing_it_back_round_trips_every_policy() -> None:
    assert RECORD.variant == NAMES.baseline_variant
    assert [p.name for p in RECORD.policies] == ["invocations", "latency", "steps"]
    written = {p.name: aas.policy_request("chat", RECORD.variant, p) for p in RECORD.policies}
    for policy in POLICIES:
        request = written[policy["PolicyName"]]
        assert {k: v for k, v in request.items() if k in policy} == policy


def test_moving_rewrites_the_endpoint_and_variant_dimensions_only() -> None:
    moved = aas.moved(RECORD, "chat", "candidate-x")
    latency = next(p for p in moved.policies if p.name == "latency")
    assert latency.target_tracking is not None
    metric = latency.target_tracking.customized_metric
    assert metric is not None
    assert [(d.name, d.value) for d in metric.dimensions] == [
        ("EndpointName", "chat"),
        ("VariantName", "candidate-x"),
        ("Team", "search"),
    ]
    assert moved.variant == "candidate-x"
    assert (moved.min_capacity, moved.max_capacity) == (1, 4)
    # The record it came from is untouched (status keeps the original).
    assert RECORD.policies[1].target_tracking is not None
    original = RECORD.policies[1].target_tracking.customized_metric
    assert original is not None and original.dimensions[1].value == NAMES.baseline_variant


def _ready_to_deploy() -> tuple[OptimizedEndpointStatus, EndpointView]:
    status = baselined()
    endpoint = serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))
    status, _ = run(status, endpoint, ())
    assert status.phase is Phase.DEPLOYING
    return status, endpoint


def test_deploy_saves_first_then_deregisters_and_updates_keeping_instance_counts() -> None:
    status, endpoint = _ready_to_deploy()
    saved, actions = run(status, endpoint, (RECORD,))
    # Saved in status, nothing called: a crash now loses nothing.
    assert actions == []
    assert saved.autoscaling is not None and saved.autoscaling.saved == [RECORD]
    assert saved.autoscaling.suspended_at == NOW
    assert saved.history[-1].event == "AutoscalingSaved"
    # Next wake-up: deregister, then the update, in one decision.
    after, actions = run(saved, endpoint, (RECORD,))
    kinds = [kind for kind, _ in actions]
    assert kinds[0] is ActionKind.DEREGISTER_SCALABLE_TARGET
    assert kinds[-1] is ActionKind.UPDATE_ENDPOINT
    assert actions[0][1] == aas.target_key("chat", NAMES.baseline_variant)
    update = actions[-1][1]
    assert update["RetainAllVariantProperties"] is True
    assert update["ExcludeRetainedVariantProperties"] == [{"VariantPropertyType": "DesiredWeight"}]
    assert after.autoscaling is not None and after.autoscaling.saved == [RECORD]
    # Repeated after a crash (the target already gone): the update alone, still saved.
    again, actions = run(saved, endpoint, ())
    assert [kind for kind, _ in actions][-1] is ActionKind.UPDATE_ENDPOINT
    assert ActionKind.DEREGISTER_SCALABLE_TARGET not in [kind for kind, _ in actions]
    assert again.autoscaling is not None and again.autoscaling.saved == [RECORD]


def test_without_autoscaling_the_update_is_unchanged() -> None:
    status, endpoint = _ready_to_deploy()
    after, actions = run(status, endpoint, ())
    update = actions[-1][1]
    assert "RetainAllVariantProperties" not in update
    assert after.autoscaling is None


def test_restore_puts_the_saved_scaling_on_the_only_serving_variant_then_forgets_it() -> None:
    status = baselined()
    status.phase = Phase.ROLLED_BACK
    status.autoscaling = parse_status({"autoscaling": {"saved": [RECORD.dump()]}}).autoscaling
    promoted = serving(NAMES.promoted_config, (NAMES.candidate_variant, 1.0))
    moved = aas.moved(RECORD, "chat", NAMES.candidate_variant)
    actions, placed = restore_actions([RECORD], promoted, ())
    assert placed == [NAMES.candidate_variant]
    assert [a.kind for a in actions] == [
        ActionKind.REGISTER_SCALABLE_TARGET,
        *[ActionKind.PUT_SCALING_POLICY] * 3,
    ]
    assert actions[0].request == aas.register_request("chat", moved)
    # Not yet seen registered: the decision registers again (idempotent) and keeps it saved.
    after, calls = run(status, promoted, ())
    assert next(kind for kind, _ in calls) is ActionKind.REGISTER_SCALABLE_TARGET
    assert after.autoscaling is not None and after.autoscaling.saved == [RECORD]
    # Seen registered with every policy: nothing to call, status forgets it.
    done, calls = run(status, promoted, (moved,))
    assert calls == []
    assert done.autoscaling is not None and done.autoscaling.saved == []
    assert done.autoscaling.restored_on == NAMES.candidate_variant


def test_restore_waits_for_the_outcome_and_prefers_the_saved_variant() -> None:
    rollout = serving(
        NAMES.rollout_config, (NAMES.baseline_variant, 90.0), (NAMES.candidate_variant, 10.0)
    )
    actions, placed = restore_actions([RECORD], rollout, ())
    assert placed == [NAMES.baseline_variant]
    assert actions[0].request["ResourceId"].endswith(NAMES.baseline_variant)
    status = baselined()
    status.phase = Phase.ANALYZING
    status.autoscaling = parse_status({"autoscaling": {"saved": [RECORD.dump()]}}).autoscaling
    _during, calls = run(status, rollout, ())
    assert ActionKind.REGISTER_SCALABLE_TARGET not in [kind for kind, _ in calls]


def test_which_wake_ups_read_the_scaling() -> None:
    res = Resource(OWNER, 1)
    status = OptimizedEndpointStatus()
    assert not wanted(status, res)
    for phase in (Phase.OPTIMIZING, Phase.DEPLOYING, Phase.ANALYZING, Phase.PROMOTING):
        status.phase = phase
        assert wanted(status, res)
        assert not wanted(status, res, described=False)
    status.phase = Phase.SUCCEEDED
    assert not wanted(status, res)
    assert wanted(status, Resource(OWNER, 1, {ROLLBACK: "true"}))
    assert wanted(status, Resource(OWNER, 1, deleting=True))
    status.autoscaling = parse_status({"autoscaling": {"saved": [RECORD.dump()]}}).autoscaling
    assert wanted(status, res, described=False)


def test_the_finalizer_returns_to_the_baseline_then_puts_the_scaling_back() -> None:
    status = baselined()
    status.sagemaker.endpoint_configs = [NAMES.baseline_config, NAMES.rollout_config]
    status.autoscaling = parse_status({"autoscaling": {"saved": [RECORD.dump()]}}).autoscaling
    rollout = serving(
        NAMES.rollout_config, (NAMES.baseline_variant, 90.0), (NAMES.candidate_variant, 10.0)
    )
    back = cleanup(status, Observations(endpoint=rollout, scaling=()), DeletionPolicy.RETAIN)
    assert not back.done
    assert [a.kind for a in back.actions] == [ActionKind.UPDATE_ENDPOINT]
    assert back.actions[0].request["RetainAllVariantProperties"] is True
    baseline = serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))
    restoring = cleanup(status, Observations(endpoint=baseline, scaling=()), DeletionPolicy.RETAIN)
    assert not restoring.done
    assert restoring.actions[0].kind is ActionKind.REGISTER_SCALABLE_TARGET
    finished = cleanup(
        status, Observations(endpoint=baseline, scaling=(RECORD,)), DeletionPolicy.RETAIN
    )
    assert finished.done
    assert ActionKind.REGISTER_SCALABLE_TARGET not in [a.kind for a in finished.actions]
    # Someone registered a variant during the rollout: no status to save it in, so the
    # finalizer says what to do instead of deregistering it.
    stranger = ScalableTargetRecord(variant=NAMES.candidate_variant, min_capacity=1, max_capacity=2)
    refused = cleanup(
        status, Observations(endpoint=rollout, scaling=(stranger,)), DeletionPolicy.RETAIN
    )
    assert not refused.done and refused.actions == []
    assert "DeregisterScalableTarget" in refused.message
