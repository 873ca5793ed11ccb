"""onAcceptanceDrift: disableSpeculation: the candidate's traffic moves to its
speculation-free twin.

Once the live judge has counted failureLimit intervals with the candidate's acceptance
confidently below speculativeDecoding.minAcceptanceRate, the operator makes the twin (the
candidate's job, image, weights and settings, speculation off: plan.speculation_free_model)
and a config that serves it where the candidate served, and updates the endpoint:

- during the canary, the twin takes the candidate variant's name and weight next to the
  baseline (twin_rollout_config). Once SageMaker serves it the step starts again, with
  its pinned comparison and a fresh live judge: the twin is judged as the candidate was,
  and promoted or rolled back like it;
- during the bake, the twin serves alone (twin_promoted_config); the bake's judge starts
  afresh against the same frozen baseline figures, and the retained baseline stays the
  way back (the lever, a failed bake);
- after a clean bake, while the baseline is retained (the acceptance watch,
  phases/watch.py: the `retention` stage), the twin serves alone as in the bake, and the
  retained baseline stays the way back (the lever) until the retention ends.

From then on the pipeline serves the spec without speculativeDecoding (Planned.spec), so
no judge asks the twin for an acceptance rate. Crash-safe like the rest: the names are
deterministic, status.rollout.speculationDisabled is written by the wake-up that asks for
the update, a create repeated after a crash adopts its own resource, and a twin config
found serving without a status record is recorded, never made again.
"""

from __future__ import annotations

from endpoint_optimizer.analysis.live_acceptance import CHECK_NAME as ACCEPTANCE_CHECK
from endpoint_optimizer.api import (
    AcceptanceDriftPolicy,
    BakeStatus,
    CheckKind,
    ConditionStatus,
    ConditionType,
    SpeculationDisabled,
    SpeculationStage,
    VariantMeasurements,
    Verdict,
)
from endpoint_optimizer.api.live import LiveState
from endpoint_optimizer.pipeline import autoscaling, plan
from endpoint_optimizer.pipeline.model import EndpointView
from endpoint_optimizer.pipeline.phases import deploy, promote, rollback
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.wakeup import Outcome, Planned, added
from endpoint_optimizer.sagemaker import requests as rq


def begin(w: Planned, stage: SpeculationStage, judge: LiveState | None) -> Outcome | None:
    """The switch, when the policy asks for it and the judge counted enough drift; None
    otherwise (and once speculation is off: the twin has nothing left to switch)."""
    if (
        w.declared.rollout.on_acceptance_drift is not AcceptanceDriftPolicy.DISABLE_SPECULATION
        or w.status.rollout.speculation_disabled is not None
        or judge is None
    ):
        return None
    limit = max(1, w.spec.rollout.analysis.failure_limit)
    if judge.acceptance_below_floor < limit:
        return None
    check = next((c for c in w.status.checks if c.name == ACCEPTANCE_CHECK), None)
    said = check.reason if check is not None and check.verdict is Verdict.FAIL else ""
    after = "after the bake, " if stage is SpeculationStage.RETENTION else ""
    reason = (
        f"{after}live acceptance confidently below the floor in {judge.acceptance_below_floor} "
        f"interval(s) (failureLimit {limit})" + (f"; the latest: {said}" if said else "")
    )
    return _switch(w, stage, reason)


def switching(w: Planned, endpoint: EndpointView, stage: SpeculationStage) -> Outcome | None:
    """A switch asked for: recorded once the twin serves, asked again while SageMaker has
    not taken it, rolled back when SageMaker refused it. None: the phase goes on."""
    switch = w.status.rollout.speculation_disabled
    if switch is None:
        if endpoint.config_name != twin_config(w, stage) or not endpoint.in_service:
            return None
        # The update was asked for and its status write was lost: record what serves.
        switch = _record(
            w,
            stage,
            w.names.twin_model,
            twin_config(w, stage),
            "the switch was found serving after a restart (its status write was lost)",
        )
    if switch.during is not stage:
        return None  # switched in the canary: the promoted twin is the candidate now
    if endpoint.config_name == switch.endpoint_config:
        if switch.serving_at is None and endpoint.in_service:
            _serving(w, switch)
        return None
    if endpoint.config_name != _speculative_config(w, stage):
        return None  # the phase decides what else serves (gone, stopped, someone else)
    if not w.obs.endpoint_described:
        return w.wait(f"switching speculation off: waiting for a fresh view of {endpoint.name}")
    if endpoint.failure_reason:
        return _back(
            w,
            stage,
            Reason.SPECULATION_SWITCH_FAILED,
            f"UpdateEndpoint to the speculation-free config {switch.endpoint_config} failed "
            f"and SageMaker kept {endpoint.config_name}: {endpoint.failure_reason}",
        )
    # Not taken (the update call failed, or was never made): ask again, same names.
    try:
        model = plan.speculation_free_model(
            w.declared, w.names, w.obs.jobs.get(w.names.job), w.obs.sources
        )
    except plan.PlanError as exc:
        return _back(w, stage, Reason.SPECULATION_SWITCH_FAILED, f"no twin to switch to: {exc}")
    if (held := autoscaling.clear_before_update(w)) is not None:
        return held
    _request(w, model, stage)
    return w.wait(
        f"switching speculation off: updating endpoint {w.endpoint_name} to "
        f"{switch.endpoint_config} (again)"
    )


def twin_config(w: Planned, stage: SpeculationStage) -> str:
    return (
        w.names.twin_rollout_config
        if stage is SpeculationStage.CANARY
        else w.names.twin_promoted_config
    )


def promoted_config(w: Planned) -> str:
    """The config the bake watches: the promoted one, or its twin once the bake switched."""
    switch = w.status.rollout.speculation_disabled
    if switch is not None and switch.during is SpeculationStage.BAKE:
        return switch.endpoint_config
    return w.names.promoted_config


def _speculative_config(w: Planned, stage: SpeculationStage) -> str:
    if stage is SpeculationStage.CANARY:
        found = w.status.rollout.speculation_cutoff
        if found is not None and found.serving_at is not None:
            return found.endpoint_config  # the candidate re-made with the cut-off (cutoff.py)
        return w.names.rollout_config
    return w.names.promoted_config


def _switch(w: Planned, stage: SpeculationStage, reason: str) -> Outcome | None:
    try:
        model = plan.speculation_free_model(
            w.declared, w.names, w.obs.jobs.get(w.names.job), w.obs.sources
        )
    except plan.PlanError as exc:
        return _back(
            w, stage, Reason.SPECULATION_SWITCH_FAILED, f"{reason}; no twin to switch to: {exc}"
        )
    if (held := autoscaling.clear_before_update(w)) is not None:
        return held
    name = twin_config(w, stage)
    _record(w, stage, model.name, name, reason)
    _request(w, model, stage)
    message = (
        f"{reason}: switching speculation off (onAcceptanceDrift: disableSpeculation): the "
        f"twin {model.name} (same weights, no speculation) takes the candidate's place on "
        f"{name}"
    )
    w.event("Warning", Reason.SPECULATION_DISABLING, message)
    w.record(Reason.SPECULATION_DISABLING, message)
    return w.wait(message)


def _record(
    w: Planned, stage: SpeculationStage, model: str, config: str, reason: str
) -> SpeculationDisabled:
    switch = SpeculationDisabled(
        at=w.now, during=stage, reason=reason[:1024], model=model, endpoint_config=config
    )
    w.status.rollout.speculation_disabled = switch
    sm = w.status.sagemaker
    sm.candidate_model = model
    sm.models = added(sm.models, model)
    sm.endpoint_configs = added(sm.endpoint_configs, config)
    if stage is SpeculationStage.CANARY:
        sm.candidate_endpoint_config = config
    return switch


def _request(w: Planned, model: rq.ServingModel, stage: SpeculationStage) -> None:
    """CreateModel, CreateEndpointConfig and UpdateEndpoint of the twin (create-or-adopt)."""
    serve_remade(w, model, twin_config(w, stage), canary=stage is SpeculationStage.CANARY)


def serve_remade(w: Planned, model: rq.ServingModel, config: str, *, canary: bool) -> None:
    """A re-made candidate (the twin, the cut-off) onto the endpoint under the candidate
    variant's name: CreateModel, CreateEndpointConfig (beside the baseline at the step's
    weights in a canary, alone otherwise) and UpdateEndpoint; create-or-adopt."""
    variant = w.names.candidate_variant
    if canary:
        weights = rq.canary_weights(w.baseline_variant, variant, w.status.rollout.canary_weight)
        variants = [
            plan.variant(
                w.declared,
                w.baseline_variant,
                w.status.sagemaker.baseline_model,
                weights[w.baseline_variant],
            ),
            plan.variant(w.spec, variant, model.name, weights[variant]),
        ]
    else:
        variants = [plan.variant(w.spec, variant, model.name)]
    deploy.update_to(w, model, config, rq.create_endpoint_config(config, variants, w.owner_tag))


def _serving(w: Planned, switch: SpeculationDisabled) -> None:
    """The twin serves: its judges start afresh (what they knew was of the candidate)."""
    status = w.status
    rollout = status.rollout
    switch.serving_at = w.now
    status.checks = [c for c in status.checks if c.kind is not CheckKind.LIVE]
    if switch.during is SpeculationStage.CANARY:
        noise = rollout.live_judge.noise if rollout.live_judge is not None else None
        rollout.live_judge = LiveState(noise=noise)
        rollout.live_read_until = None
        rollout.compared_step = None
        rollout.step_started_at = w.now
        status.candidate = VariantMeasurements(variant_name=w.names.candidate_variant)
        again = (
            f"step {rollout.step_index + 1} starts again for it at {rollout.canary_weight} %, "
            "with its pinned comparison and a fresh live judge"
        )
    elif switch.during is SpeculationStage.RETENTION:
        until = status.sagemaker.baseline_retained_until
        kept = f" until {until:%Y-%m-%dT%H:%M:%SZ}" if until is not None else ""
        again = (
            "the acceptance watch ends (the twin does not speculate); the retained "
            f"baseline {status.sagemaker.baseline_endpoint_config} stays the way back{kept}"
        )
    else:
        bake = rollout.bake
        if bake is not None and bake.active:
            _restart_bake(bake)
        again = (
            "the bake judges it afresh against the baseline's figures; the retained "
            f"baseline {status.sagemaker.baseline_endpoint_config} stays the way back"
        )
    message = (
        f"speculation off: the twin {switch.model} serves on {switch.endpoint_config} "
        f"({switch.reason}); {again}"
    )
    w.event("Normal", Reason.SPECULATION_DISABLED, message)
    w.record(Reason.SPECULATION_DISABLED, message)
    status.message = message[:1024]
    if status.condition(ConditionType.ACCEPTANCE_DRIFT) is not None:
        status.set_condition(
            ConditionType.ACCEPTANCE_DRIFT,
            ConditionStatus.FALSE,
            Reason.SPECULATION_DISABLED.value,
            message,
            w.now,
            status.observed_generation,
        )


def _restart_bake(bake: BakeStatus) -> None:
    bake.judge = LiveState(noise=bake.judge.noise)
    bake.read_until = None


def _back(w: Planned, stage: SpeculationStage, reason: Reason, message: str) -> Outcome | None:
    """No twin serves: back to the baseline (the candidate is drifting below its floor)."""
    if stage is SpeculationStage.CANARY:
        return rollback.begin(w, reason, message)
    return promote.rollback_promoted(
        w, reason, f"{message}; returning to the retained baseline config"
    )
