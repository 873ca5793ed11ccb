"""Application Auto Scaling, for SageMaker endpoint variants: scalable targets and policies.

The wire format is botocore's `application-autoscaling` model (JSON 1.1, `X-Amz-Target:
AnyScaleFrontendService.<Operation>`); requests are validated against that model like the
SageMaker ones. Only the `sagemaker` namespace's variant dimension is modelled:
ResourceId `endpoint/<EndpointName>/variant/<VariantName>`, ScalableDimension
`sagemaker:variant:DesiredInstanceCount`. Targets and policies are stored and answered;
no scaling activity runs (the sandbox's capacity changes only through SageMaker's calls).

What follows AWS's documentation:
- RegisterScalableTarget registers or updates (API_RegisterScalableTarget: "Registers or
  updates a scalable target"); a new target needs MinCapacity and MaxCapacity; the
  resource must exist (endpoint-auto-scaling-add-policy.html: the variant must be InService
  on an endpoint); SageMaker uses the service-linked role
  AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint when no RoleARN is given.
- DeregisterScalableTarget deletes the target's policies with it
  (API_DeregisterScalableTarget: "Deregistering a scalable target deletes the scaling
  policies and the scheduled actions that are associated with it"); a missing target is
  ObjectNotFoundException.
- PutScalingPolicy needs a registered target (ObjectNotFoundException "No scalable target
  registered for service namespace: ..., resource ID: ..., scalable dimension: ...", the
  wording AWS answers); it creates or updates by name; a target-tracking policy answers the
  two CloudWatch alarms it manages (AlarmHigh, AlarmLow) in `Alarms`.
- DeleteScalingPolicy of a missing policy is ObjectNotFoundException.
- DeleteEndpoint deregisters the endpoint's targets
  (sagemaker/latest/dg/endpoint-delete-with-scaling.html: "Application Auto Scaling
  deregisters those models as scalable targets without notifying you").
- UpdateEndpoint's refusal is SageMaker's (sandbox/control.py reads `variants_of`).
Message wording not quoted by AWS above is the sandbox's ([unverified]).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from endpoint_optimizer.sandbox.control import (
    AwsError,
    ControlPlane,
    modelled,
    operation_handler,
    validation_error,
)

SERVICE = "application-autoscaling"
TARGET_PREFIX = "AnyScaleFrontendService"
NAMESPACE = "sagemaker"
DIMENSION = "sagemaker:variant:DesiredInstanceCount"
# The predefined metric a variant's target tracking may name (the model's enum has others
# for other namespaces; they are refused for a SageMaker variant).
VARIANT_METRICS = frozenset(
    {
        "SageMakerVariantInvocationsPerInstance",
        "SageMakerVariantConcurrentRequestsPerModelHighResolution",
    }
)
POLICY_TYPES = frozenset({"TargetTrackingScaling", "StepScaling"})

Key = tuple[str, str, str]  # (namespace, resource id, dimension)


def resource_id(endpoint: str, variant: str) -> str:
    return f"endpoint/{endpoint}/variant/{variant}"


def split_resource_id(value: str) -> tuple[str, str] | None:
    """(endpoint, variant) of `endpoint/<e>/variant/<v>`, or None when it is not that shape."""
    parts = value.split("/")
    if len(parts) != 4 or parts[0] != "endpoint" or parts[2] != "variant":
        return None
    if not parts[1] or not parts[3]:
        return None
    return parts[1], parts[3]


@dataclass
class ScalableTarget:
    key: Key
    min_capacity: int
    max_capacity: int
    role_arn: str
    arn: str
    created: datetime
    suspended: dict[str, bool] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        namespace, resource, dimension = self.key
        out: dict[str, Any] = {
            "ServiceNamespace": namespace,
            "ResourceId": resource,
            "ScalableDimension": dimension,
            "MinCapacity": self.min_capacity,
            "MaxCapacity": self.max_capacity,
            "RoleARN": self.role_arn,
            "CreationTime": self.created.timestamp(),
            "ScalableTargetARN": self.arn,
        }
        out["SuspendedState"] = {
            "DynamicScalingInSuspended": self.suspended.get("DynamicScalingInSuspended", False),
            "DynamicScalingOutSuspended": self.suspended.get("DynamicScalingOutSuspended", False),
            "ScheduledScalingSuspended": self.suspended.get("ScheduledScalingSuspended", False),
        }
        return out


@dataclass
class ScalingPolicy:
    key: Key
    name: str
    arn: str
    request: dict[str, Any]
    alarms: list[dict[str, str]]
    created: datetime

    def describe(self) -> dict[str, Any]:
        namespace, resource, dimension = self.key
        out: dict[str, Any] = {
            "PolicyARN": self.arn,
            "PolicyName": self.name,
            "ServiceNamespace": namespace,
            "ResourceId": resource,
            "ScalableDimension": dimension,
            "PolicyType": self.request["PolicyType"],
            "CreationTime": self.created.timestamp(),
            "Alarms": list(self.alarms),
        }
        for member in (
            "StepScalingPolicyConfiguration",
            "TargetTrackingScalingPolicyConfiguration",
        ):
            if member in self.request:
                out[member] = self.request[member]
        return out


def _not_registered(key: Key) -> AwsError:
    namespace, resource, dimension = key
    return AwsError(
        "ObjectNotFoundException",
        f"No scalable target registered for service namespace: {namespace}, resource ID: "
        f"{resource}, scalable dimension: {dimension}",
    )


class AutoScaling:
    """The Application Auto Scaling service's state over the SageMaker control plane's lock."""

    def __init__(self, control: ControlPlane) -> None:
        self.control = control
        self.reset()
        control.scaled_variants = self.variants_of
        control.endpoint_deleted = self.forget_endpoint

    def reset(self) -> None:
        with self.control.lock:
            self.targets: dict[Key, ScalableTarget] = {}
            self.policies: dict[tuple[Key, str], ScalingPolicy] = {}

    # -- what SageMaker asks of it ---------------------------------------------------------

    def variants_of(self, endpoint: str) -> frozenset[str]:
        """The variants of `endpoint` registered as scalable targets."""
        found = set()
        for namespace, resource, _dimension in self.targets:
            split = split_resource_id(resource)
            if namespace == NAMESPACE and split is not None and split[0] == endpoint:
                found.add(split[1])
        return frozenset(found)

    def forget_endpoint(self, endpoint: str) -> None:
        for key in [k for k in self.targets if (split_resource_id(k[1]) or ("",))[0] == endpoint]:
            self._deregister(key)

    # -- dispatch --------------------------------------------------------------------------

    def handle(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        """Run one operation; it goes into the control plane's call log either way."""
        resource = params.get("ResourceId") if isinstance(params.get("ResourceId"), str) else None
        error_code: str | None = None
        try:
            with self.control.lock:
                handler = operation_handler(self, SERVICE, TARGET_PREFIX, operation, params)
                self.control.advance()
                return modelled(SERVICE, operation, handler(params), "InternalServiceException")
        except AwsError as exc:
            error_code = exc.code
            raise
        finally:
            self.control.record_call(operation, resource or "", error_code)

    # -- checks ----------------------------------------------------------------------------

    def _key(self, p: dict[str, Any]) -> Key:
        namespace, resource, dimension = (
            p["ServiceNamespace"],
            p["ResourceId"],
            p["ScalableDimension"],
        )
        if namespace != NAMESPACE:
            raise validation_error(
                f"The sandbox models the sagemaker service namespace only, not {namespace}."
            )
        if dimension != DIMENSION or split_resource_id(resource) is None:
            # [unverified] wording; AWS answers ValidationException for this mismatch.
            raise validation_error(
                "Unsupported service namespace, resource type or scalable dimension"
            )
        return namespace, resource, dimension

    def _variant_exists(self, resource: str) -> None:
        endpoint_name, variant = split_resource_id(resource) or ("", "")
        endpoint = self.control.endpoints.get(endpoint_name)
        config = self.control.endpoint_configs.get(endpoint.config_name or "") if endpoint else None
        variants = {v["VariantName"] for v in config.variants()} if config else set()
        if endpoint is None or endpoint.delete_at is not None or variant not in variants:
            # [unverified] wording.
            raise validation_error(
                f"The endpoint variant {resource} does not exist: register a production "
                "variant of an InService endpoint."
            )

    # -- scalable targets ------------------------------------------------------------------

    def op_RegisterScalableTarget(self, p: dict[str, Any]) -> dict[str, Any]:
        key = self._key(p)
        existing = self.targets.get(key)
        if existing is None:
            self._variant_exists(key[1])
            if "MinCapacity" not in p or "MaxCapacity" not in p:
                # [unverified] wording.
                raise validation_error(
                    "MinCapacity and MaxCapacity are required to register a new scalable target."
                )
        low = int(p.get("MinCapacity", existing.min_capacity if existing else 0))
        high = int(p.get("MaxCapacity", existing.max_capacity if existing else 0))
        if low < 1:
            # Instance-based variants scale between 1 and their maximum; scale to zero is for
            # inference components (endpoint-auto-scaling-zero-instances.html).
            raise validation_error(
                f"MinCapacity {low} is below 1: an endpoint variant keeps at least one instance."
            )
        if low > high:
            raise validation_error(
                f"Minimum capacity ({low}) cannot be greater than maximum capacity ({high})."
            )
        if existing is not None:
            existing.min_capacity, existing.max_capacity = low, high
            existing.suspended.update(p.get("SuspendedState") or {})
            return {"ScalableTargetARN": existing.arn}
        region, account = self.control.config.region, self.control.config.account_id
        role = p.get("RoleARN") or (
            f"arn:aws:iam::{account}:role/aws-service-role/sagemaker.application-autoscaling."
            "amazonaws.com/AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
        )
        arn = (
            f"arn:aws:application-autoscaling:{region}:{account}:scalable-target/{uuid.uuid4().hex}"
        )
        self.targets[key] = ScalableTarget(
            key, low, high, role, arn, datetime.now(UTC), dict(p.get("SuspendedState") or {})
        )
        return {"ScalableTargetARN": arn}

    def _deregister(self, key: Key) -> None:
        del self.targets[key]
        for policy_key in [k for k in self.policies if k[0] == key]:
            del self.policies[policy_key]

    def op_DeregisterScalableTarget(self, p: dict[str, Any]) -> dict[str, Any]:
        key = self._key(p)
        if key not in self.targets:
            raise _not_registered(key)
        self._deregister(key)
        return {}

    def op_DescribeScalableTargets(self, p: dict[str, Any]) -> dict[str, Any]:
        namespace = p["ServiceNamespace"]
        wanted = set(p.get("ResourceIds") or [])
        dimension = p.get("ScalableDimension")
        rows = [
            t.describe()
            for key, t in sorted(self.targets.items())
            if key[0] == namespace
            and (not wanted or key[1] in wanted)
            and (dimension is None or key[2] == dimension)
        ]
        return _page(rows, p, "ScalableTargets")

    # -- scaling policies ------------------------------------------------------------------

    def op_PutScalingPolicy(self, p: dict[str, Any]) -> dict[str, Any]:
        key = self._key(p)
        if key not in self.targets:
            raise _not_registered(key)
        name = p["PolicyName"]
        existing = self.policies.get((key, name))
        kind = p.get("PolicyType") or (existing.request["PolicyType"] if existing else "")
        if kind not in POLICY_TYPES:
            raise validation_error(
                f"PolicyType {kind or '(none)'} is not valid for a SageMaker variant: use "
                "TargetTrackingScaling or StepScaling."
            )
        tracking = p.get("TargetTrackingScalingPolicyConfiguration")
        step = p.get("StepScalingPolicyConfiguration")
        if kind == "TargetTrackingScaling":
            if tracking is None or step is not None:
                raise validation_error(
                    "TargetTrackingScalingPolicyConfiguration is required for a policy of type "
                    "TargetTrackingScaling (and StepScalingPolicyConfiguration not allowed)."
                )
            self._check_tracking(tracking)
        else:
            if step is None or tracking is not None:
                raise validation_error(
                    "StepScalingPolicyConfiguration is required for a policy of type StepScaling "
                    "(and TargetTrackingScalingPolicyConfiguration not allowed)."
                )
            if not step.get("StepAdjustments"):
                raise validation_error("StepScalingPolicyConfiguration needs StepAdjustments.")
        region, account = self.control.config.region, self.control.config.account_id
        request = {k: v for k, v in p.items() if k != "PredictiveScalingPolicyConfiguration"}
        request["PolicyType"] = kind
        if existing is not None:
            arn = existing.arn
        else:
            arn = (
                f"arn:aws:autoscaling:{region}:{account}:scalingPolicy:{uuid.uuid4()}:"
                f"resource/{key[0]}/{key[1]}:policyName/{name}"
            )
        alarms: list[dict[str, str]] = []
        if kind == "TargetTrackingScaling":
            stamp = uuid.uuid4()
            for side in ("AlarmHigh", "AlarmLow"):
                alarm = f"TargetTracking-{key[1]}-{side}-{stamp}"
                alarms.append(
                    {
                        "AlarmName": alarm,
                        "AlarmARN": f"arn:aws:cloudwatch:{region}:{account}:alarm:{alarm}",
                    }
                )
        self.policies[(key, name)] = ScalingPolicy(
            key, name, arn, request, alarms, existing.created if existing else datetime.now(UTC)
        )
        out: dict[str, Any] = {"PolicyARN": arn}
        if alarms:
            out["Alarms"] = alarms
        return out

    def _check_tracking(self, tracking: dict[str, Any]) -> None:
        predefined = tracking.get("PredefinedMetricSpecification")
        customized = tracking.get("CustomizedMetricSpecification")
        if (predefined is None) == (customized is None):
            raise validation_error(
                "Specify exactly one of PredefinedMetricSpecification and "
                "CustomizedMetricSpecification."
            )
        if predefined is not None and predefined["PredefinedMetricType"] not in VARIANT_METRICS:
            raise validation_error(
                f"PredefinedMetricType {predefined['PredefinedMetricType']} is not valid for "
                "the scalable dimension sagemaker:variant:DesiredInstanceCount."
            )
        if customized is not None and "Metrics" not in customized:
            missing = [m for m in ("MetricName", "Namespace", "Statistic") if m not in customized]
            if missing:
                raise validation_error(
                    f"CustomizedMetricSpecification needs {', '.join(missing)} (or Metrics)."
                )

    def op_DescribeScalingPolicies(self, p: dict[str, Any]) -> dict[str, Any]:
        namespace = p["ServiceNamespace"]
        names = set(p.get("PolicyNames") or [])
        rows = [
            policy.describe()
            for (key, name), policy in sorted(self.policies.items(), key=lambda kv: kv[0])
            if key[0] == namespace
            and (p.get("ResourceId") is None or key[1] == p["ResourceId"])
            and (p.get("ScalableDimension") is None or key[2] == p["ScalableDimension"])
            and (not names or name in names)
        ]
        return _page(rows, p, "ScalingPolicies")

    def op_DeleteScalingPolicy(self, p: dict[str, Any]) -> dict[str, Any]:
        key = self._key(p)
        name = p["PolicyName"]
        if (key, name) not in self.policies:
            namespace, resource, dimension = key
            raise AwsError(
                "ObjectNotFoundException",
                f"No scaling policy found for service namespace: {namespace}, resource ID: "
                f"{resource}, scalable dimension: {dimension}, policy name: {name}",
            )
        del self.policies[(key, name)]
        return {}

    # -- admin ------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        with self.control.lock:
            return {
                "scalableTargets": [t.describe() for _, t in sorted(self.targets.items())],
                "scalingPolicies": [p.describe() for _, p in sorted(self.policies.items())],
            }


def _page(rows: list[dict[str, Any]], p: dict[str, Any], member: str) -> dict[str, Any]:
    """MaxResults/NextToken over `rows` (the token is the next row's index)."""
    limit = int(p.get("MaxResults") or 50)
    token = p.get("NextToken")
    try:
        start = int(token) if token else 0
    except ValueError:
        raise AwsError("InvalidNextTokenException", "The next token supplied is invalid.") from None
    out: dict[str, Any] = {member: rows[start : start + limit]}
    if start + limit < len(rows):
        out["NextToken"] = str(start + limit)
    return out
