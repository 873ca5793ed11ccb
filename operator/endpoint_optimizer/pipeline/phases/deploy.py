"""The candidate goes live next to the baseline, on the config its strategy asks for."""

from __future__ import annotations

from endpoint_optimizer.api import Phase, VariantMeasurements
from endpoint_optimizer.pipeline import autoscaling, plan
from endpoint_optimizer.pipeline.model import IN_PROGRESS_ENDPOINT, ActionKind
from endpoint_optimizer.pipeline.phases import outside
from endpoint_optimizer.pipeline.reasons import Reason, rollback_label
from endpoint_optimizer.pipeline.wakeup import DONE, Outcome, Planned, added
from endpoint_optimizer.sagemaker import requests as rq


def deploying(w: Planned) -> Outcome:
    endpoint = w.obs.endpoint
    sm = w.status.sagemaker
    job = w.obs.jobs.get(w.names.job)
    try:
        model = plan.candidate_model(w.spec, w.names, job, w.obs.sources)
    except plan.PlanError as exc:
        return w.fail(Reason.UNSUPPORTED_SPEC, str(exc))
    config_name, config = w.strategy.candidate_config(w)
    if endpoint is None:
        return w.fail(Reason.ENDPOINT_DISAPPEARED, f"endpoint {w.endpoint_name} no longer exists")
    if endpoint.status in IN_PROGRESS_ENDPOINT:
        return w.wait(f"endpoint {w.endpoint_name} is {endpoint.status}")
    if endpoint.config_name != sm.baseline_endpoint_config and not w.made_here(
        endpoint.config_name
    ):
        return outside.config_changed(w, endpoint)
    sm.serving_endpoint_config = endpoint.config_name
    if endpoint.in_service and endpoint.config_name == config_name:
        # Recorded again: after a crash between the update and the status write, the
        # config (deterministic name) is found serving but status never named it.
        sm.candidate_model = model.name
        sm.candidate_endpoint_config = config_name
        sm.models = added(sm.models, model.name)
        sm.endpoint_configs = added(sm.endpoint_configs, config_name)
        w.status.candidate = VariantMeasurements(variant_name=w.names.candidate_variant)
        rollout = w.status.rollout
        rollout.step_index = 0
        rollout.step_started_at = w.now
        rollout.canary_weight = w.strategy.initial_weight(w)
        w.goto(Phase.ANALYZING, Reason.CANDIDATE_DEPLOYED, f"candidate live on {config_name}")
        return DONE
    if sm.candidate_endpoint_config == config_name and endpoint.failure_reason:
        # We asked for this config and SageMaker went back: never report it as success.
        w.status.last_error = endpoint.failure_reason[:4096]
        w.status.rollout.rollback_reason = rollback_label(Reason.UPDATE_FAILED)
        w.goto(
            Phase.ROLLED_BACK,
            Reason.UPDATE_FAILED,
            f"UpdateEndpoint to {config_name} failed and SageMaker kept "
            f"{endpoint.config_name}: {endpoint.failure_reason}",
            warning=True,
        )
        return DONE
    if not endpoint.in_service:
        return w.fail(Reason.ENDPOINT_FAILED, f"endpoint {w.endpoint_name} is {endpoint.status}")
    if (held := autoscaling.clear_before_update(w)) is not None:
        return held
    update_to(w, model, config_name, config)
    sm.candidate_model = model.name
    sm.candidate_endpoint_config = config_name
    sm.models = added(sm.models, model.name)
    sm.endpoint_configs = added(sm.endpoint_configs, config_name)
    return w.wait(f"updating endpoint {w.endpoint_name} to {config_name}")


def update_to(
    w: Planned, model: rq.ServingModel, config_name: str, config: dict[str, object]
) -> None:
    """Create `model` and the endpoint config `config_name` (its CreateEndpointConfig
    request), then update the endpoint to it, keeping the instance counts autoscaling set."""
    w.act(ActionKind.CREATE_MODEL, model.name, rq.create_model(model, w.owner_tag))
    w.act(ActionKind.CREATE_ENDPOINT_CONFIG, config_name, config)
    w.act(
        ActionKind.UPDATE_ENDPOINT,
        w.endpoint_name,
        rq.update_endpoint(
            w.endpoint_name, config_name, keep_instance_counts=autoscaling.held_off(w.status)
        ),
    )
