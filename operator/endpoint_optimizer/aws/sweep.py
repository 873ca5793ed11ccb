"""What the operator made and status does not name: the finalizer's last look before it
lets the resource go.

The wake-up acts, then writes status. A crash (or a lost write) between the two leaves a
model, config, job, inference component or even the endpoint that status does not name;
the next wake-up finds and records it (names are deterministic), but a deletion can come
first. Status is then not enough, so the finalizer lists by name (NameContains: the
owner's readable part) and keeps only the names `Owner.made` proves are this resource's
(the hash covers the uid): nothing of anyone else's is ever picked up. Alarms are listed
by prefix (DescribeAlarms) and known by their prefix, one of this owner's names. The
endpoint counts only when it carries this resource's owner tag, and never with
adoptExisting (an adopted endpoint is someone else's).
"""

from __future__ import annotations

from dataclasses import dataclass

from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.observe import describe_endpoint
from endpoint_optimizer.aws.ownership import endpoint_tags
from endpoint_optimizer.sagemaker.naming import OWNER_TAG_KEY, Owner

# (operation, the answer's list member, the summary's name member)
_LISTS = {
    "models": ("ListModels", "Models", "ModelName"),
    "endpoint_configs": ("ListEndpointConfigs", "EndpointConfigs", "EndpointConfigName"),
    "optimization_jobs": (
        "ListOptimizationJobs",
        "OptimizationJobSummaries",
        "OptimizationJobName",
    ),
    "training_jobs": ("ListTrainingJobs", "TrainingJobSummaries", "TrainingJobName"),
    # spec.inferenceComponent: the candidate component holds GPU copies while it lives.
    "inference_components": (
        "ListInferenceComponents",
        "InferenceComponents",
        "InferenceComponentName",
    ),
}
# Pages of one List call (100 names each): a namespace-name shared by more resources than
# this is answered with what was read, and the next attempt reads again.
_MAX_PAGES = 20


@dataclass(frozen=True)
class Found:
    """This owner's resources as SageMaker lists them now."""

    models: tuple[str, ...] = ()
    endpoint_configs: tuple[str, ...] = ()
    optimization_jobs: tuple[str, ...] = ()
    training_jobs: tuple[str, ...] = ()
    inference_components: tuple[str, ...] = ()
    alarms: tuple[str, ...] = ()
    endpoint: str = ""  # spec.endpointName, when it carries this resource's owner tag


async def find_made(
    aws: AwsClients, region: str, owner: Owner, endpoint_name: str, *, adopted: bool
) -> Found:
    """Five List calls and DescribeAlarms (more only past 100 names), plus DescribeEndpoint
    and ListTags when `endpoint_name` is given: what this owner made that exists now."""
    found: dict[str, tuple[str, ...]] = {}
    for key, (operation, member, name_key) in _LISTS.items():
        names = await _paged(
            aws,
            region,
            ("sagemaker", operation, member, name_key),
            f"{key} of {owner.name}",
            NameContains=owner.search_hint(),
            MaxResults=100,
        )
        found[key] = tuple(n for n in names if owner.made(n))
    alarms = await _alarms(aws, region, owner)
    endpoint = ""
    if endpoint_name and not adopted:
        view = await describe_endpoint(aws, region, endpoint_name)
        if view is not None and view.arn:
            tags = await endpoint_tags(aws, region, view.arn)
            if tags.get(OWNER_TAG_KEY) == owner.tag_value():
                endpoint = endpoint_name
    return Found(
        models=found["models"],
        endpoint_configs=found["endpoint_configs"],
        optimization_jobs=found["optimization_jobs"],
        training_jobs=found["training_jobs"],
        inference_components=found["inference_components"],
        alarms=alarms,
        endpoint=endpoint,
    )


async def _alarms(aws: AwsClients, region: str, owner: Owner) -> tuple[str, ...]:
    """The blue/green rollback alarms this owner made: `{alarm prefix}-{metric}`, where the
    prefix is one of its resource names (requests.rollback_alarms)."""
    names = await _paged(
        aws,
        region,
        ("cloudwatch", "DescribeAlarms", "MetricAlarms", "AlarmName"),
        f"alarms of {owner.name}",
        AlarmNamePrefix=owner.search_hint(),
        MaxRecords=100,
    )
    return tuple(n for n in names if owner.made(n.rpartition("-")[0]))


async def _paged(
    aws: AwsClients,
    region: str,
    listing: tuple[str, str, str, str],
    what: str,
    **filters: object,
) -> list[str]:
    """The names one List/Describe call answers, page after page (NextToken), at most
    `_MAX_PAGES`. `listing`: (service, operation, the answer's list member, its name key)."""
    service, operation, member, name_key = listing
    names: list[str] = []
    token = ""
    for _ in range(_MAX_PAGES):
        params = dict(filters, NextToken=token) if token else dict(filters)
        out = await aws.call(service, region, operation, what, **params)
        names += [str(row.get(name_key, "")) for row in out.get(member, [])]
        token = str(out.get("NextToken") or "")
        if not token:
            break
    return names
