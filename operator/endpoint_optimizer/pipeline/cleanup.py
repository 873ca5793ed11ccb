"""Deletion (pure): what the finalizer does, one wake-up at a time, until nothing is left.

Order: stop running optimization jobs; with deletionPolicy Retain, put the
endpoint back on a config the operator keeps (the baseline, or the promoted
candidate after a success) and remove every other model and config it made;
with Delete, delete the endpoint, then everything it made. Alarms always go. With Retain,
autoscaling the operator held off during the rollout (status.autoscaling) goes back on the
variant that serves before the cleanup is done (pipeline/autoscaling.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from endpoint_optimizer.api import DeletionPolicy, OptimizedEndpointStatus
from endpoint_optimizer.pipeline import autoscaling
from endpoint_optimizer.pipeline.model import (
    IN_PROGRESS_ENDPOINT,
    IN_PROGRESS_JOB,
    Action,
    ActionKind,
    Observations,
)
from endpoint_optimizer.pipeline.wakeup import added
from endpoint_optimizer.sagemaker import autoscaling as aas
from endpoint_optimizer.sagemaker import requests as rq


def recorded_with(
    status: OptimizedEndpointStatus,
    *,
    models: Iterable[str] = (),
    endpoint_configs: Iterable[str] = (),
    optimization_jobs: Iterable[str] = (),
    training_jobs: Iterable[str] = (),
    inference_components: Iterable[str] = (),
    alarms: Iterable[str] = (),
    endpoint: str = "",
) -> OptimizedEndpointStatus:
    """A copy of `status` that also names what the operator made and a lost status write
    left unnamed (aws/sweep.py found it), so cleanup() removes it, or keeps it where a
    retained endpoint serves it, like everything else it made."""
    out = status.model_copy(deep=True)
    sm = out.sagemaker
    for name in models:
        sm.models = added(sm.models, name)
    for name in endpoint_configs:
        sm.endpoint_configs = added(sm.endpoint_configs, name)
    for name in optimization_jobs:
        sm.optimization_jobs = added(sm.optimization_jobs, name)
    for name in training_jobs:
        sm.training_jobs = added(sm.training_jobs, name)
    for name in inference_components:
        if name != sm.baseline_component:  # the adopted one is the user's, never ours
            sm.inference_components = added(sm.inference_components, name)
    for name in alarms:
        sm.alarms = added(sm.alarms, name)
    if endpoint and not sm.endpoint_name:
        sm.endpoint_name = endpoint
    return out


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
            unsaved = [
                t.variant
                for t in observations.scaling or ()
                if status.autoscaling is None or t not in status.autoscaling.saved
            ]
            if unsaved:
                # Registered during the rollout by someone else: the finalizer keeps no
                # status to save them in, and SageMaker refuses the update while they are.
                return Cleanup(
                    actions,
                    False,
                    f"variant(s) {', '.join(unsaved)} of endpoint {endpoint.name} were "
                    "registered with Application Auto Scaling during the rollout: deregister "
                    "them (DeregisterScalableTarget) so the endpoint can go back to "
                    f"{sm.baseline_endpoint_config}, then register them again",
                )
            for target in observations.scaling or ():
                actions.append(
                    Action(
                        ActionKind.DEREGISTER_SCALABLE_TARGET,
                        target.variant,
                        aas.deregister_request(endpoint.name, target.variant),
                    )
                )
            actions.append(
                Action(
                    ActionKind.UPDATE_ENDPOINT,
                    endpoint.name,
                    rq.update_endpoint(
                        endpoint.name,
                        sm.baseline_endpoint_config,
                        keep_instance_counts=autoscaling.held_off(status),
                    ),
                )
            )
            return Cleanup(actions, False, "returning the endpoint to the baseline config")
        if autoscaling.held_off(status) and endpoint.in_service:
            assert status.autoscaling is not None
            if observations.scaling is None:
                return Cleanup(actions, False, "reading the endpoint's autoscaling")
            restoring, placed = autoscaling.restore_actions(
                status.autoscaling.saved, endpoint, observations.scaling
            )
            if restoring or not placed:
                return Cleanup(
                    actions + restoring,
                    False,
                    f"putting the autoscaling back on endpoint {endpoint.name}",
                )
        keep_configs.add(serving)
        keep_models.update(v.model_name for v in observations.config_variants.get(serving, ()))
        if not keep_models and serving == sm.baseline_endpoint_config:
            keep_models.add(sm.baseline_model)
    if any(a.kind is ActionKind.STOP_OPTIMIZATION_JOB for a in actions):
        return Cleanup(actions, False, "stopping optimization jobs")
    if sm.baseline_component or sm.inference_components:
        waiting = _components(status, observations, actions, keep_models)
        if waiting:
            return Cleanup(actions, False, waiting)
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


def _components(
    status: OptimizedEndpointStatus,
    observations: Observations,
    actions: list[Action],
    keep_models: set[str],
) -> str:
    """spec.inferenceComponent: delete the components the operator made (users invoke only
    the adopted one, so none holds their traffic) and keep the Model the adopted component
    serves. What to wait for, or "" when the components are settled."""
    sm = status.sagemaker
    baseline = observations.components.get(sm.baseline_component)
    if baseline is not None:
        if baseline.status in ("Creating", "Updating"):
            # A promotion's rolling update (or its rollback) in flight: let it settle.
            return f"inference component {baseline.name} is {baseline.status}"
        keep_models.add(baseline.model_name)
    elif sm.component_promoted:
        keep_models.add(sm.component_promoted)
    pending = ""
    for name in sm.inference_components:
        view = observations.components.get(name)
        if view is None:
            continue
        pending = pending or f"deleting inference component {name}"
        if view.status != "Deleting":
            actions.append(
                Action(
                    ActionKind.DELETE_INFERENCE_COMPONENT,
                    name,
                    {"InferenceComponentName": name},
                )
            )
    return pending
