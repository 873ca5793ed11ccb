"""Ownership proven against SageMaker, not assumed: the calls behind sagemaker/ownership.py.

- An endpoint create answered "already exists" is the operator's own (a create retried after
  a crash or a lost answer) only if the endpoint serves the config the create named (names
  are deterministic) or carries this resource's owner tag; otherwise it is someone else's,
  and the create fails as NOT_OURS naming spec.endpointName. Nothing of theirs is touched.
- An adoption by tag reads the endpoint's tags (ListTags), only while the proof is pending.
- The execution role passed to SageMaker must be one the operator was given (--execution-role,
  the chart's aws.executionRoleArns): refused before the call, like IAM's PassRole would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.errors import ErrorKind, SageMakerError
from endpoint_optimizer.pipeline.model import Action
from endpoint_optimizer.sagemaker.naming import OWNER_TAG_KEY

# Request members that hand SageMaker a role (CreateModel; optimization and training jobs).
_ROLE_MEMBERS = ("ExecutionRoleArn", "RoleArn")


async def endpoint_tags(aws: AwsClients, region: str, arn: str) -> dict[str, str]:
    out = await aws.call("sagemaker", region, "ListTags", f"endpoint {arn}", ResourceArn=arn)
    return {str(t.get("Key")): str(t.get("Value", "")) for t in out.get("Tags", [])}


async def prove_endpoint_ours(aws: AwsClients, region: str, request: Mapping[str, Any]) -> None:
    """After CreateEndpoint answered "already exists": return if it is ours, else NOT_OURS."""
    name = str(request["EndpointName"])
    out = await aws.call(
        "sagemaker", region, "DescribeEndpoint", f"endpoint {name}", EndpointName=name
    )
    serving = str(out.get("EndpointConfigName", ""))
    if serving == request.get("EndpointConfigName"):
        return
    owner = next((t["Value"] for t in request.get("Tags", []) if t["Key"] == OWNER_TAG_KEY), None)
    arn = str(out.get("EndpointArn", ""))
    tags = await endpoint_tags(aws, region, arn) if arn else {}
    named = request.get("EndpointConfigName")
    if owner is not None and tags.get(OWNER_TAG_KEY) == owner:
        return
    raise SageMakerError(
        ErrorKind.NOT_OURS,
        "EndpointNotOurs",
        f"spec.endpointName: endpoint {name} already exists and was not made by this "
        f"resource: it serves config {serving or '(none)'}, not {named}, "
        f"and carries no {OWNER_TAG_KEY} tag of this resource. Someone else made it while the "
        "operator was creating it; point spec.endpointName at a new name, or adopt it with "
        "spec.adoptExisting and spec.adoption",
        "CreateEndpoint",
        f"endpoint {name}",
    )


def check_passed_role(action: Action, allowed: Sequence[str]) -> None:
    """Refuse a request that would pass SageMaker a role the operator was not given."""
    if not allowed:
        return
    for member in _ROLE_MEMBERS:
        role = action.request.get(member)
        if isinstance(role, str) and role not in allowed:
            raise SageMakerError(
                ErrorKind.ACCESS_DENIED,
                "ExecutionRoleNotAllowed",
                f"spec.executionRoleArn: {role} is not one of the execution roles this operator "
                f"may pass to SageMaker ({', '.join(allowed)}): use one of them, or add it to "
                "the chart's aws.executionRoleArns (and to iam:PassRole in the operator's policy)",
                action.kind.value,
                action.resource,
                advice="",
            )
