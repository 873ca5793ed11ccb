"""Read an endpoint's Application Auto Scaling: its variants' scalable targets and policies.

Two Describe calls (one more per registered variant), made only on the wake-ups that can
update the endpoint or put its scaling back (pipeline.autoscaling.wanted). The writes
(Register, Deregister, PutScalingPolicy) are the pipeline's actions, performed by
aws.perform like every other call.
"""

from __future__ import annotations

from collections.abc import Iterable

from endpoint_optimizer.api.status import ScalableTargetRecord
from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.sagemaker import autoscaling as aas

SERVICE = "application-autoscaling"


async def describe_scaling(
    aws: AwsClients, region: str, endpoint: str, variants: Iterable[str]
) -> tuple[ScalableTargetRecord, ...]:
    """The targets registered on `variants` of `endpoint`, each with its policies.

    Raises aas.UnsupportedPolicy for a policy the operator could not put back as it was
    (before anything is deregistered: status says which and why).
    """
    resources = sorted({aas.resource_id(endpoint, v) for v in variants if v})
    if not resources:
        return ()
    where = f"endpoint {endpoint}"
    out = await aws.call(
        SERVICE,
        region,
        "DescribeScalableTargets",
        where,
        ServiceNamespace=aas.NAMESPACE,
        ResourceIds=resources,
        ScalableDimension=aas.DIMENSION,
    )
    records = []
    for target in out.get("ScalableTargets", []):
        policies = await aws.call(
            SERVICE,
            region,
            "DescribeScalingPolicies",
            where,
            ServiceNamespace=aas.NAMESPACE,
            ResourceId=target["ResourceId"],
            ScalableDimension=aas.DIMENSION,
        )
        records.append(aas.record(endpoint, target, policies.get("ScalingPolicies", [])))
    return tuple(sorted(records, key=lambda r: r.variant))
