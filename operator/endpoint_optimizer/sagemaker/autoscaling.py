"""Application Auto Scaling of SageMaker variants, pure: names, what a read returns as a
record, and the requests that put a recorded target and its policies on another variant.

A variant's scalable target is `endpoint/<EndpointName>/variant/<VariantName>` with the
dimension `sagemaker:variant:DesiredInstanceCount` (sagemaker/latest/dg/
endpoint-auto-scaling-add-policy.html). A target-tracking policy on a customized metric
names the endpoint and variant in its dimensions; moved to another variant, those two
dimensions are rewritten, every other one is kept. Predefined metrics
(SageMakerVariantInvocationsPerInstance) carry no dimensions: Application Auto Scaling
reads them for the target's own variant.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from endpoint_optimizer.api.status import (
    CustomizedScalingMetric,
    MetricDimension,
    PredefinedScalingMetric,
    ScalableTargetRecord,
    ScalingPolicyRecord,
    StepAdjustment,
    StepScalingPolicy,
    TargetTrackingPolicy,
)

NAMESPACE = "sagemaker"
DIMENSION = "sagemaker:variant:DesiredInstanceCount"


class UnsupportedPolicy(ValueError):
    """A policy the operator cannot carry to another variant as it is."""


def resource_id(endpoint: str, variant: str) -> str:
    return f"endpoint/{endpoint}/variant/{variant}"


def variant_of(resource: str, endpoint: str) -> str | None:
    """The variant a ResourceId names on `endpoint`, or None when it names another thing."""
    prefix = f"endpoint/{endpoint}/variant/"
    return resource[len(prefix) :] if resource.startswith(prefix) else None


def target_key(endpoint: str, variant: str) -> dict[str, str]:
    return {
        "ServiceNamespace": NAMESPACE,
        "ResourceId": resource_id(endpoint, variant),
        "ScalableDimension": DIMENSION,
    }


# ------------------------------------------------------------------ reading


def record(
    endpoint: str, target: Mapping[str, Any], policies: Iterable[Mapping[str, Any]]
) -> ScalableTargetRecord:
    """A DescribeScalableTargets row and its DescribeScalingPolicies rows, as a record."""
    variant = variant_of(str(target["ResourceId"]), endpoint) or ""
    return ScalableTargetRecord(
        variant=variant,
        min_capacity=int(target["MinCapacity"]),
        max_capacity=int(target["MaxCapacity"]),
        policies=sorted((_policy(p) for p in policies), key=lambda p: p.name),
    )


def _policy(policy: Mapping[str, Any]) -> ScalingPolicyRecord:
    name = str(policy["PolicyName"])
    kind = str(policy.get("PolicyType", ""))
    if kind == "TargetTrackingScaling":
        return ScalingPolicyRecord(
            name=name,
            policy_type="TargetTrackingScaling",
            target_tracking=_tracking(name, policy["TargetTrackingScalingPolicyConfiguration"]),
        )
    if kind == "StepScaling":
        step = policy["StepScalingPolicyConfiguration"]
        return ScalingPolicyRecord(
            name=name,
            policy_type="StepScaling",
            step_scaling=StepScalingPolicy(
                adjustment_type=str(step.get("AdjustmentType", "")),
                step_adjustments=[
                    StepAdjustment(
                        lower_bound=a.get("MetricIntervalLowerBound"),
                        upper_bound=a.get("MetricIntervalUpperBound"),
                        scaling_adjustment=int(a["ScalingAdjustment"]),
                    )
                    for a in step.get("StepAdjustments", [])
                ],
                min_adjustment_magnitude=step.get("MinAdjustmentMagnitude"),
                cooldown=step.get("Cooldown"),
                metric_aggregation_type=str(step.get("MetricAggregationType", "")),
            ),
        )
    raise UnsupportedPolicy(
        f"scaling policy {name} is of type {kind or '(none)'}: the operator carries "
        "TargetTrackingScaling and StepScaling policies only"
    )


def _tracking(name: str, config: Mapping[str, Any]) -> TargetTrackingPolicy:
    predefined = config.get("PredefinedMetricSpecification")
    customized = config.get("CustomizedMetricSpecification")
    if customized is not None and "Metrics" in customized:
        raise UnsupportedPolicy(
            f"scaling policy {name} tracks a metric math expression (Metrics): the operator "
            "carries a single customized metric only"
        )
    return TargetTrackingPolicy(
        target_value=float(config["TargetValue"]),
        predefined_metric=PredefinedScalingMetric(
            predefined_metric_type=str(predefined["PredefinedMetricType"]),
            resource_label=str(predefined.get("ResourceLabel", "")),
        )
        if predefined is not None
        else None,
        customized_metric=CustomizedScalingMetric(
            metric_name=str(customized["MetricName"]),
            namespace=str(customized["Namespace"]),
            dimensions=[
                MetricDimension(name=str(d["Name"]), value=str(d["Value"]))
                for d in customized.get("Dimensions", [])
            ],
            statistic=str(customized["Statistic"]),
            unit=str(customized.get("Unit", "")),
        )
        if customized is not None
        else None,
        scale_out_cooldown=config.get("ScaleOutCooldown"),
        scale_in_cooldown=config.get("ScaleInCooldown"),
        disable_scale_in=config.get("DisableScaleIn"),
    )


# ------------------------------------------------------------------ moving to a variant


def moved(target: ScalableTargetRecord, endpoint: str, variant: str) -> ScalableTargetRecord:
    """The same target and policies on `variant`: the metric dimensions that name the
    endpoint or the variant are rewritten."""
    policies = []
    for policy in target.policies:
        metric = policy.target_tracking.customized_metric if policy.target_tracking else None
        if metric is not None and policy.target_tracking is not None:
            dimensions = [
                MetricDimension(name=d.name, value=_rewritten(d, endpoint, variant))
                for d in metric.dimensions
            ]
            tracking = policy.target_tracking.model_copy(
                update={"customized_metric": metric.model_copy(update={"dimensions": dimensions})}
            )
            policy = policy.model_copy(update={"target_tracking": tracking})
        policies.append(policy)
    return target.model_copy(update={"variant": variant, "policies": policies})


def _rewritten(dimension: MetricDimension, endpoint: str, variant: str) -> str:
    if dimension.name == "EndpointName":
        return endpoint
    if dimension.name == "VariantName":
        return variant
    return dimension.value


def register_request(endpoint: str, target: ScalableTargetRecord) -> dict[str, Any]:
    return {
        **target_key(endpoint, target.variant),
        "MinCapacity": target.min_capacity,
        "MaxCapacity": target.max_capacity,
    }


def deregister_request(endpoint: str, variant: str) -> dict[str, Any]:
    return target_key(endpoint, variant)


def policy_request(endpoint: str, variant: str, policy: ScalingPolicyRecord) -> dict[str, Any]:
    request: dict[str, Any] = {
        **target_key(endpoint, variant),
        "PolicyName": policy.name,
        "PolicyType": policy.policy_type,
    }
    if policy.target_tracking is not None:
        request["TargetTrackingScalingPolicyConfiguration"] = _tracking_config(
            policy.target_tracking
        )
    if policy.step_scaling is not None:
        request["StepScalingPolicyConfiguration"] = _step_config(policy.step_scaling)
    return request


def _tracking_config(tracking: TargetTrackingPolicy) -> dict[str, Any]:
    config: dict[str, Any] = {"TargetValue": tracking.target_value}
    if tracking.predefined_metric is not None:
        predefined: dict[str, Any] = {
            "PredefinedMetricType": tracking.predefined_metric.predefined_metric_type
        }
        if tracking.predefined_metric.resource_label:
            predefined["ResourceLabel"] = tracking.predefined_metric.resource_label
        config["PredefinedMetricSpecification"] = predefined
    if tracking.customized_metric is not None:
        metric = tracking.customized_metric
        customized: dict[str, Any] = {
            "MetricName": metric.metric_name,
            "Namespace": metric.namespace,
            "Dimensions": [{"Name": d.name, "Value": d.value} for d in metric.dimensions],
            "Statistic": metric.statistic,
        }
        if metric.unit:
            customized["Unit"] = metric.unit
        config["CustomizedMetricSpecification"] = customized
    for key, value in (
        ("ScaleOutCooldown", tracking.scale_out_cooldown),
        ("ScaleInCooldown", tracking.scale_in_cooldown),
        ("DisableScaleIn", tracking.disable_scale_in),
    ):
        if value is not None:
            config[key] = value
    return config


def _step_config(step: StepScalingPolicy) -> dict[str, Any]:
    adjustments = []
    for a in step.step_adjustments:
        item: dict[str, Any] = {"ScalingAdjustment": a.scaling_adjustment}
        if a.lower_bound is not None:
            item["MetricIntervalLowerBound"] = a.lower_bound
        if a.upper_bound is not None:
            item["MetricIntervalUpperBound"] = a.upper_bound
        adjustments.append(item)
    config: dict[str, Any] = {"StepAdjustments": adjustments}
    for key, value in (
        ("AdjustmentType", step.adjustment_type or None),
        ("MinAdjustmentMagnitude", step.min_adjustment_magnitude),
        ("Cooldown", step.cooldown),
        ("MetricAggregationType", step.metric_aggregation_type or None),
    ):
        if value is not None:
            config[key] = value
    return config
