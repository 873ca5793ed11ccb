"""An autoscaled endpoint through a rollout: its scaling survives promotion, rollback,
deletion and a killed operator, and SageMaker's refusal is what the round trip avoids.

The baseline variant is registered with Application Auto Scaling (min 1, max 3) with three
policies as teams write them: target tracking on the predefined invocations metric, target
tracking on a customized metric whose dimensions name the endpoint and variant, and a step
policy. What must hold, read from the sandbox over boto3: after the outcome the same
capacities and policies are registered on the variant that serves (the customized metric's
VariantName rewritten to it), nothing was refused, and status forgot what it saved.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from endpoint_optimizer.pipeline.plan import Names
from tests.e2e.conftest import E2E, GUARD, spec
from tests.e2e.test_crash import ENDPOINT, Killer, KillPoint, call, ok_calls, wait_in_service

ENDS = {"Succeeded", "Failed", "RolledBack"}
DIMENSION = "sagemaker:variant:DesiredInstanceCount"
ONE_STEP = {
    "strategy": "canary",
    "steps": [{"weight": 20, "pause": "1s"}],
    "analysis": {"onNoData": "pass"},
}
HELD = {**ONE_STEP, "approval": "beforePromotion"}


def _key(variant: str) -> dict[str, str]:
    return {
        "ServiceNamespace": "sagemaker",
        "ResourceId": f"endpoint/{ENDPOINT}/variant/{variant}",
        "ScalableDimension": DIMENSION,
    }


def _policies(variant: str) -> list[dict[str, Any]]:
    return [
        {
            "PolicyName": "invocations",
            "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": {
                "TargetValue": 70.0,
                "PredefinedMetricSpecification": {
                    "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"
                },
                "ScaleInCooldown": 300,
                "ScaleOutCooldown": 60,
            },
        },
        {
            "PolicyName": "latency",
            "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": {
                "TargetValue": 1500000.0,
                "CustomizedMetricSpecification": {
                    "MetricName": "ModelLatency",
                    "Namespace": "AWS/SageMaker",
                    "Dimensions": [
                        {"Name": "EndpointName", "Value": ENDPOINT},
                        {"Name": "VariantName", "Value": variant},
                    ],
                    "Statistic": "Average",
                    "Unit": "Microseconds",
                },
                "DisableScaleIn": True,
            },
        },
        {
            "PolicyName": "steps",
            "PolicyType": "StepScaling",
            "StepScalingPolicyConfiguration": {
                "AdjustmentType": "ChangeInCapacity",
                "StepAdjustments": [
                    {"MetricIntervalLowerBound": 0.0, "ScalingAdjustment": 1},
                ],
                "Cooldown": 120,
                "MetricAggregationType": "Average",
            },
        },
    ]


def autoscale(e2e: E2E, variant: str) -> None:
    aas = e2e.sandbox.client("application-autoscaling")
    aas.register_scalable_target(**_key(variant), MinCapacity=1, MaxCapacity=3)
    for policy in _policies(variant):
        aas.put_scaling_policy(**_key(variant), **policy)


def scaling(e2e: E2E) -> dict[str, dict[str, Any]]:
    """Every registered target of the endpoint: its capacities and policies by name."""
    aas = e2e.sandbox.client("application-autoscaling")
    found: dict[str, dict[str, Any]] = {}
    for target in aas.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]:
        variant = target["ResourceId"].rsplit("/", 1)[-1]
        policies = aas.describe_scaling_policies(
            ServiceNamespace="sagemaker", ResourceId=target["ResourceId"]
        )["ScalingPolicies"]
        found[variant] = {
            "capacity": (target["MinCapacity"], target["MaxCapacity"]),
            "policies": {
                p["PolicyName"]: {
                    k: v
                    for k, v in p.items()
                    if k in ("PolicyName", "PolicyType") or k.endswith("PolicyConfiguration")
                }
                for p in policies
            },
        }
    return found


def start_autoscaled(e2e: E2E, body: dict[str, Any]) -> Names:
    """The resource created; its baseline autoscaled as soon as the endpoint serves, while
    the operator still measures it (long before the candidate is built)."""
    names = e2e.create("chat", body)
    wait_in_service(e2e)
    autoscale(e2e, names.baseline_variant)
    obj = e2e.cluster.get(e2e.namespace, "chat")
    deployed = [h for h in obj["status"].get("history", []) if h["event"] == "CandidateDeployed"]
    assert not deployed, "registered too late: the candidate was already deployed"
    return names


def assert_scaling_on(e2e: E2E, variant: str) -> None:
    """The saved target and its three policies on `variant`, and nothing else registered."""
    expected = {p["PolicyName"]: p for p in _policies(variant)}
    found = scaling(e2e)
    assert list(found) == [variant], (found, e2e.diagnostics())
    assert found[variant]["capacity"] == (1, 3)
    assert found[variant]["policies"] == expected


def assert_round_trip(e2e: E2E, obj: dict[str, Any], variant: str) -> None:
    assert_scaling_on(e2e, variant)
    autoscaling = obj["status"].get("autoscaling") or {}
    assert autoscaling.get("saved", []) == [], e2e.explain(obj)
    assert autoscaling.get("restoredOn") == variant, e2e.explain(obj)
    # Saved before anything was deregistered, and never refused by SageMaker.
    assert any(h["event"] == "AutoscalingSaved" for h in obj["status"]["history"])
    refused = [c for c in e2e.sandbox.admin.calls() if c.get("errorCode")]
    assert [c for c in refused if c["operation"] == "UpdateEndpoint"] == []
    assert ok_calls(e2e, "DeregisterScalableTarget"), e2e.diagnostics()


def wait_restored(e2e: E2E, variant: str) -> dict[str, Any]:
    return e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: (o.get("status", {}).get("autoscaling") or {}).get("restoredOn") == variant,
        timeout=GUARD,
        what=f"autoscaling restored on {variant}",
        on_timeout=e2e.diagnostics,
    )


def test_promotion_carries_the_scaling_to_the_candidate_variant(e2e: E2E) -> None:
    names = start_autoscaled(e2e, spec(rollout=ONE_STEP))
    obj = e2e.wait_phase("chat", ENDS)
    assert obj["status"]["phase"] == "Succeeded", e2e.explain(obj)
    obj = wait_restored(e2e, names.candidate_variant)
    served = e2e.serving(ENDPOINT)
    assert served["EndpointConfigName"] == names.promoted_config
    assert_round_trip(e2e, obj, names.candidate_variant)
    # During the canary no policy was registered: both variants at fixed counts.
    calls = [c["operation"] for c in e2e.sandbox.admin.calls()]
    first_update = calls.index("UpdateEndpoint")
    assert "DeregisterScalableTarget" in calls[:first_update]

    # The round trip skipped: SageMaker refuses to remove the autoscaled variant.
    sm = e2e.sandbox.client("sagemaker")
    with pytest.raises(ClientError) as refused:
        sm.update_endpoint(EndpointName=ENDPOINT, EndpointConfigName=names.baseline_config)
    error = refused.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert names.candidate_variant in error["Message"]
    assert "DeregisterScalableTarget" in error["Message"]
    assert e2e.serving(ENDPOINT)["EndpointConfigName"] == names.promoted_config


def test_rollback_puts_the_scaling_back_on_the_baseline_variant(e2e: E2E) -> None:
    # A gain the FP8 candidate cannot reach: NoImprovement rolls back.
    body = spec(rollout=ONE_STEP, objective={"metric": "latency", "minImprovement": 0.9})
    names = start_autoscaled(e2e, body)
    obj = e2e.wait_phase("chat", ENDS)
    assert obj["status"]["phase"] == "RolledBack", e2e.explain(obj)
    obj = wait_restored(e2e, names.baseline_variant)
    assert e2e.serving(ENDPOINT)["EndpointConfigName"] == names.baseline_config
    assert_round_trip(e2e, obj, names.baseline_variant)


def test_rollback_after_promotion_moves_the_scaling_back_to_the_baseline(e2e: E2E) -> None:
    names = start_autoscaled(e2e, spec(rollout=ONE_STEP))
    e2e.wait_phase("chat", ENDS)
    wait_restored(e2e, names.candidate_variant)
    e2e.cluster.annotate(e2e.namespace, "chat", {"optimizer.dev/rollback": "true"})
    e2e.wait_phase("chat", "RolledBack")
    obj = wait_restored(e2e, names.baseline_variant)
    assert e2e.serving(ENDPOINT)["EndpointConfigName"] == names.baseline_config
    assert_round_trip(e2e, obj, names.baseline_variant)


def test_deletion_mid_rollout_returns_the_scaling_with_the_baseline(e2e: E2E) -> None:
    names = start_autoscaled(e2e, spec(rollout=HELD))
    obj = e2e.wait_phase("chat", {"AwaitingApproval", *ENDS})
    assert obj["status"]["phase"] == "AwaitingApproval", e2e.explain(obj)
    # Held off while the candidate takes traffic, saved in status.
    assert scaling(e2e) == {}
    assert [t["variant"] for t in obj["status"]["autoscaling"]["saved"]] == [names.baseline_variant]
    e2e.cluster.delete(e2e.namespace, "chat")
    e2e.cluster.wait_gone(e2e.namespace, "chat", timeout=GUARD, on_timeout=e2e.diagnostics)
    served = e2e.serving(ENDPOINT)
    assert served["EndpointConfigName"] == names.baseline_config
    assert_scaling_on(e2e, names.baseline_variant)


def test_a_killed_operator_between_deregister_and_update_loses_no_scaling(e2e: E2E) -> None:
    names = start_autoscaled(e2e, spec(rollout=ONE_STEP))
    killer = Killer(e2e, names)
    # Right after the deregistration (the update to the rollout config not yet seen), and
    # again halfway through putting it back on the promoted variant.
    killer.wait_and_kill(
        KillPoint("after DeregisterScalableTarget", call("DeregisterScalableTarget"))
    )
    killer.wait_and_kill(KillPoint("after RegisterScalableTarget", call("RegisterScalableTarget")))
    obj = e2e.wait_phase("chat", ENDS)
    assert obj["status"]["phase"] == "Succeeded", e2e.explain(obj)
    obj = wait_restored(e2e, names.candidate_variant)
    assert_round_trip(e2e, obj, names.candidate_variant)
    assert len(killer.killed) == 2
