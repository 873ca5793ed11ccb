"""Deletion (pure): what the finalizer does, one wake-up at a time, until nothing is left.

Order: stop running optimization jobs; with deletionPolicy Retain, put the
endpoint back on a config the operator keeps (the baseline, or the promoted
candidate after a success) and remove every other model and config it made;
with Delete, delete the endpoint, then everything it made. Alarms always go.
"""

from __future__ import annotations

from dataclasses import dataclass

from endpoint_optimizer.api import DeletionPolicy, OptimizedEndpointStatus
from endpoint_optimizer.pipeline.model import (
    IN_PROGRESS_ENDPOINT,
    IN_PROGRESS_JOB,
    Action,
    ActionKind,
    Observations,
)
from endpoint_optimizer.sagemaker import requests as rq


@dataclass(frozen=True)
class Cleanup:
    actions: list[Action]
    done: bool
    message: str


def cleanup(
    status: OptimizedEndpointStatus, observations: Observations, policy: DeletionPolicy
) -> Cleanup:
    sm = status.sagemaker
    actions: list[Action] = []
    for job in sm.optimization_jobs:
        view = observations.jobs.get(job)
        if view is not None and view.status in IN_PROGRESS_JOB - {"STOPPING"}:
            actions.append(
                Action(ActionKind.STOP_OPTIMIZATION_JOB, job, {"OptimizationJobName": job})
            )
    for job in sm.training_jobs:
        view = observations.jobs.get(job)
        if view is not None and view.status in IN_PROGRESS_JOB - {"STOPPING"}:
            actions.append(Action(ActionKind.STOP_TRAINING_JOB, job, {"TrainingJobName": job}))
    endpoint = observations.endpoint
    keep_configs: set[str] = set()
    keep_models: set[str] = set()
    if endpoint is not None and sm.endpoint_name:
        if endpoint.status in IN_PROGRESS_ENDPOINT:
            return Cleanup(actions, False, f"endpoint {endpoint.name} is {endpoint.status}")
        if policy is DeletionPolicy.DELETE and not sm.adopted:
            actions.append(
                Action(ActionKind.DELETE_ENDPOINT, endpoint.name, {"EndpointName": endpoint.name})
            )
            return Cleanup(actions, False, f"deleting endpoint {endpoint.name}")
        # Retain (or an adopted endpoint): it keeps serving; keep what it serves.
        serving = endpoint.config_name
        rollout_live = serving in sm.endpoint_configs and serving not in (
            sm.baseline_endpoint_config,
            *[c for c in sm.endpoint_configs if "-promoted-" in c],
        )
        if rollout_live and sm.baseline_endpoint_config and endpoint.in_service:
            actions.append(
                Action(
                    ActionKind.UPDATE_ENDPOINT,
                    endpoint.name,
                    rq.update_endpoint(endpoint.name, sm.baseline_endpoint_config),
                )
            )
            return Cleanup(actions, False, "returning the endpoint to the baseline config")
        keep_configs.add(serving)
        keep_models.update(v.model_name for v in observations.config_variants.get(serving, ()))
        if not keep_models and serving == sm.baseline_endpoint_config:
            keep_models.add(sm.baseline_model)
    if any(a.kind is ActionKind.STOP_OPTIMIZATION_JOB for a in actions):
        return Cleanup(actions, False, "stopping optimization jobs")
    for config in sm.endpoint_configs:
        if config not in keep_configs:
            actions.append(
                Action(ActionKind.DELETE_ENDPOINT_CONFIG, config, {"EndpointConfigName": config})
            )
    for model in sm.models:
        if model not in keep_models:
            actions.append(Action(ActionKind.DELETE_MODEL, model, {"ModelName": model}))
    if sm.alarms:
        actions.append(Action(ActionKind.DELETE_ALARMS, "alarms", {"AlarmNames": sm.alarms}))
    return Cleanup(actions, True, "cleaned up")
