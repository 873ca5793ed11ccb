"""Deletion: stop the jobs, remove what the operator made, then apply deletionPolicy.

kopf holds the object until this reports done; until then it is retried every poll.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from endpoint_optimizer.api import SpecError, parse_spec, parse_status
from endpoint_optimizer.aws.errors import SageMakerError
from endpoint_optimizer.aws.observe import observe
from endpoint_optimizer.aws.perform import perform
from endpoint_optimizer.controller.reconcile import Dependencies, resource
from endpoint_optimizer.logs import get_logger
from endpoint_optimizer.pipeline.cleanup import cleanup


async def finalize(deps: Dependencies, body: Mapping[str, Any]) -> str | None:
    """One attempt at the cleanup: None when it is done, else what it still waits for."""
    res = resource(body)
    try:
        spec = parse_spec(dict(body.get("spec") or {}))
    except SpecError:
        return None  # nothing was ever made for a spec that never parsed
    current = parse_status(dict(body.get("status") or {}))
    try:
        observations = await observe(
            deps.aws,
            spec.region,
            spec.endpoint_name,
            jobs=current.sagemaker.optimization_jobs,
            training_jobs=current.sagemaker.training_jobs,
        )
        result = cleanup(current, observations, spec.deletion_policy)
        for action in result.actions:
            await perform(deps.aws, spec, action)
    except SageMakerError as exc:
        return exc.describe()
    if not result.done:
        return result.message
    deps.metrics.forget(res.owner.namespace, res.owner.name)
    deps.forget(res.owner.uid)
    get_logger("finalize").info("cleaned up", namespace=res.owner.namespace, name=res.owner.name)
    return None
