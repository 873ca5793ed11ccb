"""Deletion: stop the jobs, return traffic to the baseline, remove what the operator made.

It works from status, never from the spec: `status.sagemaker` names what was made and in
which region (the spec's region only for a status written before status kept one), so an
instanceType edit, a spec that no longer parses or a rename cannot point the cleanup at
anything else. The only thing read from the spec is deletionPolicy, leniently: a value
that does not parse keeps the endpoint (Retain). kopf holds the object until this reports
done; until then it is retried every poll.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from endpoint_optimizer.api import (
    DeletionPolicy,
    OptimizedEndpointStatus,
    SpecError,
    parse_spec,
    parse_status,
)
from endpoint_optimizer.aws.autoscaling import describe_scaling
from endpoint_optimizer.aws.errors import SageMakerError
from endpoint_optimizer.aws.observe import (
    describe_components,
    describe_job,
    describe_training_job,
    observe,
)
from endpoint_optimizer.aws.perform import perform_call
from endpoint_optimizer.aws.sweep import find_made
from endpoint_optimizer.controller.reconcile import Dependencies, resource
from endpoint_optimizer.logs import get_logger
from endpoint_optimizer.pipeline.cleanup import cleanup, recorded_with
from endpoint_optimizer.pipeline.model import JobView, Observations
from endpoint_optimizer.sagemaker.naming import Owner


async def finalize(deps: Dependencies, body: Mapping[str, Any]) -> str | None:
    """One attempt at the cleanup: None when it is done, else what it still waits for."""
    res = resource(body)
    raw_spec = body.get("spec") or {}
    current = parse_status(dict(body.get("status") or {}))
    region = current.sagemaker.region or str(raw_spec.get("region") or "")
    try:
        if region and (_spec_parses(raw_spec) or not _made_nothing(current)):
            current = await _with_unrecorded(deps, region, res.owner, raw_spec, current)
    except SageMakerError as exc:
        return exc.describe()
    if _made_nothing(current):
        _done(deps, res.owner.namespace, res.owner.name, res.owner.uid)
        return None
    sm = current.sagemaker
    try:
        observations = (
            await observe(
                deps.aws,
                region,
                sm.endpoint_name,
                jobs=sm.optimization_jobs,
                training_jobs=sm.training_jobs,
            )
            if sm.endpoint_name
            else await _jobs_only(deps, region, current)
        )
        if observations.endpoint is not None:
            scaling = await describe_scaling(
                deps.aws,
                region,
                observations.endpoint.name,
                [v.name for v in observations.endpoint.variants],
            )
            observations = dataclasses.replace(observations, scaling=scaling)
        if sm.baseline_component or sm.inference_components:
            components = await describe_components(
                deps.aws, region, [sm.baseline_component, *sm.inference_components]
            )
            observations = dataclasses.replace(observations, components=components)
        result = cleanup(current, observations, _policy(raw_spec))
        for action in result.actions:
            await perform_call(deps.aws, region, action)
    except SageMakerError as exc:
        return exc.describe()
    if not result.done:
        return result.message
    _done(deps, res.owner.namespace, res.owner.name, res.owner.uid)
    return None


async def _with_unrecorded(
    deps: Dependencies,
    region: str,
    owner: Owner,
    raw_spec: Mapping[str, Any],
    status: OptimizedEndpointStatus,
) -> OptimizedEndpointStatus:
    """Status plus what this resource made that a crash kept out of it (aws/sweep.py)."""
    endpoint = "" if status.sagemaker.endpoint_name else str(raw_spec.get("endpointName") or "")
    # Leniently, like deletionPolicy: anything but an explicit false counts as an adoption,
    # whose endpoint is never the operator's to delete.
    adopted = raw_spec.get("adoptExisting", False) is not False
    found = await find_made(deps.aws, region, owner, endpoint, adopted=adopted)
    return recorded_with(
        status,
        models=found.models,
        endpoint_configs=found.endpoint_configs,
        optimization_jobs=found.optimization_jobs,
        training_jobs=found.training_jobs,
        inference_components=found.inference_components,
        alarms=found.alarms,
        endpoint=found.endpoint,
    )


def _spec_parses(raw_spec: Mapping[str, Any]) -> bool:
    """A spec that does not parse never reached AWS (and never will): nothing to look for."""
    try:
        parse_spec(dict(raw_spec))
    except SpecError:
        return False
    return True


def _made_nothing(status: OptimizedEndpointStatus) -> bool:
    sm = status.sagemaker
    return not (
        sm.endpoint_name
        or sm.models
        or sm.endpoint_configs
        or sm.optimization_jobs
        or sm.training_jobs
        or sm.alarms
    )


async def _jobs_only(
    deps: Dependencies, region: str, status: OptimizedEndpointStatus
) -> Observations:
    """No endpoint of ours (never created, or refused as someone else's): jobs only."""
    sm = status.sagemaker
    jobs: dict[str, JobView] = {}
    for job in sm.optimization_jobs:
        if (view := await describe_job(deps.aws, region, job)) is not None:
            jobs[job] = view
    for job in sm.training_jobs:
        if (view := await describe_training_job(deps.aws, region, job)) is not None:
            jobs[job] = view
    return Observations(endpoint=None, jobs=jobs)


def _policy(raw_spec: Mapping[str, Any]) -> DeletionPolicy:
    try:
        return DeletionPolicy(raw_spec.get("deletionPolicy", DeletionPolicy.RETAIN.value))
    except ValueError:
        return DeletionPolicy.RETAIN


def _done(deps: Dependencies, namespace: str, name: str, uid: str) -> None:
    deps.metrics.forget(namespace, name)
    deps.forget(uid)
    get_logger("finalize").info("cleaned up", namespace=namespace, name=name)
