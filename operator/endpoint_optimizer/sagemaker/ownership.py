"""Whose an endpoint is: the proofs the operator accepts before it touches one (pure).

Everything the operator creates carries `optimizer.dev/owner=<namespace>/<name>/<uid>`
(requests.tags). An endpoint it did not create is optimized only with the proof the spec
states (spec.adoption): its exact ARN, or the tag `optimizer.dev/adopt=<namespace>/<name>`
that whoever owns it put there. Nothing else makes an endpoint the operator's.
"""

from __future__ import annotations

from collections.abc import Mapping

from endpoint_optimizer.api.spec import ADOPT_TAG_KEY, Adoption
from endpoint_optimizer.sagemaker.naming import OWNER_TAG_KEY, Owner


def adopt_tag_value(owner: Owner) -> str:
    """The value the adopt tag must have for `owner` (namespace/name; any uid of it)."""
    return f"{owner.namespace}/{owner.name}"


def adoption_refused(
    adoption: Adoption | None,
    owner: Owner,
    endpoint_name: str,
    endpoint_arn: str,
    tags: Mapping[str, str] | None,
) -> str | None:
    """Why adopting the endpoint is refused, naming the field and what to do; None: proven.

    `tags`: the endpoint's tags (ListTags), None when they were not read.
    """
    if adoption is None:
        return (
            f"spec.adoption: endpoint {endpoint_name} exists and adoptExisting needs a proof it "
            "is yours to optimize: set adoption.endpointArn or adoption.byTag"
        )
    if adoption.endpoint_arn is not None:
        if adoption.endpoint_arn == endpoint_arn:
            return None
        return (
            f"spec.adoption.endpointArn: {adoption.endpoint_arn} is not endpoint "
            f"{endpoint_name}'s ARN ({endpoint_arn or 'unknown'}, as DescribeEndpoint reports "
            "it); the operator touches nothing of it until they match"
        )
    wanted = adopt_tag_value(owner)
    found = None if tags is None else tags.get(ADOPT_TAG_KEY)
    if found == wanted:
        return None
    seen = "not read yet" if tags is None else f"{found!r}" if found is not None else "absent"
    return (
        f"spec.adoption.byTag: endpoint {endpoint_name} does not carry the tag "
        f"{ADOPT_TAG_KEY}={wanted} (it is {seen}); whoever owns the endpoint adds it "
        f"(aws sagemaker add-tags --resource-arn {endpoint_arn or '<EndpointArn>'} --tags "
        f"Key={ADOPT_TAG_KEY},Value={wanted}); the operator touches nothing of it until then"
    )


def made_by(tags: Mapping[str, str], owner: Owner) -> bool:
    """The resource carries `owner`'s ownership tag: the operator made it for this resource."""
    return tags.get(OWNER_TAG_KEY) == owner.tag_value()
