"""spec.inferenceComponent: the phases of an endpoint whose model is an inference component.

Callers invoke a component by its name (InferenceComponentName); an endpoint built for
components answers no request without one. So a second component gets no user traffic
whatever its copy count, and moving copies from the adopted component to it would only
take capacity from the name users call. Therefore:

- the adopted component is the baseline; the candidate is a second component on the same
  endpoint and variant (deterministic name per generation, owner tag), serving the
  candidate's Model with the baseline's copy count and compute requirements;
- both are benchmarked and evaluated by InferenceComponentName (pinned, like blueGreen's
  weight-0 judging: users see only the baseline meanwhile);
- the promotion is SageMaker's own rolling update of the adopted component to the
  candidate's Model (users keep the name they call): batches of the first canary step's
  weight (CAPACITY_PERCENT; 100 for blueGreen), each baked for the step's pause under
  auto-rollback alarms on the component's metrics. The candidate component is deleted
  first: its accelerators are the headroom the update's new batch needs;
- a rollback before the promotion deletes the candidate component (the baseline never
  stopped serving its callers); after it, the adopted component is updated back to the
  Model it served when adopted, which the operator never deletes.

Status is the only memory (sagemaker.baselineComponent, candidateComponent,
componentPromoted); every create is create-or-adopt under a deterministic name, and each
wake-up reads the components before it acts.
"""

from __future__ import annotations

import math

from endpoint_optimizer.api import (
    ColdStartPart,
    Phase,
    RolloutStrategy,
    ScaleToZero,
    VariantMeasurements,
    duration_seconds,
)
from endpoint_optimizer.pipeline import plan, scale_to_zero, verdicts
from endpoint_optimizer.pipeline.model import ActionKind, ComponentView
from endpoint_optimizer.pipeline.phases import analyze, generation
from endpoint_optimizer.pipeline.phases import rollback as way_back
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.wakeup import DONE, Outcome, Planned, Wakeup, added
from endpoint_optimizer.sagemaker import instances as sm_instances
from endpoint_optimizer.sagemaker import requests as rq

FIELD = "spec.inferenceComponent.name"
_BUSY = frozenset({"Creating", "Updating"})


def adopt_baseline(w: Planned) -> Outcome | None:
    """While baselining: the named component, checked and recorded as the baseline."""
    assert w.spec.inference_component is not None
    name = w.spec.inference_component.name
    sm = w.status.sagemaker
    found = w.obs.components.get(name)
    if found is None:
        return w.fail(
            Reason.UNSUPPORTED_SPEC,
            f"{FIELD}: inference component {name} not found (DescribeInferenceComponent); "
            f"name a component that runs on endpoint {w.endpoint_name}",
        )
    if found.endpoint_name != w.endpoint_name:
        return w.fail(
            Reason.UNSUPPORTED_SPEC,
            f"{FIELD}: inference component {name} runs on endpoint {found.endpoint_name}, "
            f"not on spec.endpointName {w.endpoint_name}",
        )
    if found.status in _BUSY:
        return w.wait(f"inference component {name} is {found.status}")
    if not found.in_service:
        return w.fail(
            Reason.UNSUPPORTED_SPEC,
            f"{FIELD}: inference component {name} is {found.status}: "
            f"{found.failure_reason or 'no FailureReason'}",
        )
    if not found.model_name:
        return w.fail(
            Reason.UNSUPPORTED_SPEC,
            f"{FIELD}: inference component {name} names no Model (its Specification has only "
            "a Container); the operator optimizes components that serve a SageMaker Model, "
            "which a rollback can return to",
        )
    if (
        not sm.baseline_component
        or w.status.baseline is None
        or (w.status.baseline.measured_at is None)
    ):
        # Until this generation's baseline is measured nothing of ours changes the
        # component: what it serves now is the baseline, and what a rollback returns to
        # (after a promotion, the previous generation's candidate, as with variants).
        sm.baseline_component = name
        sm.baseline_component_model = found.model_name
    sm.baseline_model = sm.baseline_component_model
    if w.status.baseline is None or w.status.baseline.variant_name != name:
        # Measurements name the component where they otherwise name a variant.
        w.status.baseline = VariantMeasurements(variant_name=name)
    return None


def _baseline(w: Wakeup) -> ComponentView | None:
    return w.obs.components.get(w.status.sagemaker.baseline_component)


def _gone(w: Wakeup) -> Outcome:
    name = w.status.sagemaker.baseline_component
    return w.fail(
        Reason.ENDPOINT_DISAPPEARED,
        f"inference component {name} ({FIELD}) no longer exists: deleted outside the operator",
    )


def deploying(w: Planned) -> Outcome:
    """The candidate component: created with the baseline's copies and compute, then judged."""
    job = w.obs.jobs.get(w.names.job)
    try:
        model = plan.candidate_model(w.spec, w.names, job, w.obs.sources)
    except plan.PlanError as exc:
        return w.fail(Reason.UNSUPPORTED_SPEC, str(exc))
    base = _baseline(w)
    if base is None:
        return _gone(w)
    name = w.names.candidate_component
    candidate = w.obs.components.get(name)
    if candidate is None:
        if base.status in _BUSY:
            return w.wait(f"inference component {base.name} is {base.status}")
        specification = rq.component_specification(base.specification, model.name)
        w.act(ActionKind.CREATE_MODEL, model.name, rq.create_model(model, w.owner_tag))
        w.act(
            ActionKind.CREATE_INFERENCE_COMPONENT,
            name,
            rq.create_inference_component(
                name,
                w.endpoint_name,
                base.variant_name,
                specification,
                base.desired_copies,
                w.owner_tag,
            ),
        )
        _record_candidate(w, model.name, name)
        # The instance count before: a rise while the candidate starts times provisioning.
        w.status.scale_to_zero = ScaleToZero(
            instances_at_candidate_create=_instances(w, base.variant_name)
        )
        return w.wait(
            f"creating inference component {name} ({base.desired_copies} copies of "
            f"{model.name}) beside {base.name}"
        )
    # Recorded again: a crash may have come between the create and the status write.
    _record_candidate(w, model.name, name)
    if candidate.status == "Failed":
        return way_back.begin(
            w,
            Reason.UPDATE_FAILED,
            f"inference component {name} failed: {candidate.failure_reason or 'no FailureReason'}",
        )
    if not candidate.in_service:
        return w.wait(f"inference component {name} is {candidate.status}")
    _time_cold_start(w, candidate)
    w.status.candidate = VariantMeasurements(variant_name=name)
    rollout = w.status.rollout
    rollout.step_index = 0
    rollout.step_started_at = w.now
    rollout.canary_weight = 0
    return w.goto(
        Phase.ANALYZING,
        Reason.CANDIDATE_DEPLOYED,
        f"candidate inference component {name} serves {candidate.current_copies} copies; "
        f"callers still invoke {base.name}",
    )


def _instances(w: Wakeup, variant: str) -> int | None:
    endpoint = w.obs.endpoint
    found = [v for v in endpoint.variants if v.name == variant] if endpoint else []
    return found[0].current_instance_count if found else None


def _time_cold_start(w: Planned, candidate: ComponentView) -> None:
    """The candidate's start, CreateInferenceComponent to InService, as SageMaker timed it.

    LastModifiedTime of this first look that sees it InService, when SageMaker moved it
    past CreationTime; else this look's time. Either way the resolution is the poll.
    Both ends are read from SageMaker's clock: the wakeup's `now` is taken before the
    describe that saw InService, so capping LastModifiedTime by it would cut the start
    short (a busy host measured 0.56 s of a modelled 0.60 s).
    """
    record = w.status.scale_to_zero or ScaleToZero()
    if record.cold_start_seconds is not None or candidate.created_at is None:
        return
    ended = w.now
    if candidate.modified_at is not None and candidate.modified_at > candidate.created_at:
        ended = candidate.modified_at
    record.cold_start_seconds = round(max(0.0, (ended - candidate.created_at).total_seconds()), 3)
    record.cold_start_measured = [ColdStartPart.COMPONENT_START]
    record.window_start = w.now
    w.status.scale_to_zero = record
    _note_instance_rise(w, candidate.variant_name)


def _note_instance_rise(w: Wakeup, variant: str) -> None:
    """The variant's instance count rose since the candidate's create: its start waited for
    that provisioning. Checked until the promotion too, since DescribeEndpoint may have run
    just before the look that saw the candidate InService; nothing of ours changes the
    variant's copies meanwhile."""
    record = w.status.scale_to_zero
    if record is None or record.cold_start_seconds is None:
        return
    before, after = record.instances_at_candidate_create, _instances(w, variant)
    if (
        before is not None
        and after is not None
        and after > before
        and ColdStartPart.INSTANCE_PROVISION not in record.cold_start_measured
    ):
        record.cold_start_measured = [*record.cold_start_measured, ColdStartPart.INSTANCE_PROVISION]


def _compare_scale_to_zero(w: Planned, base: ComponentView) -> None:
    """At the promotion: the promoted copies always-on versus scaled to zero, at the
    traffic the adopted component served since the candidate started."""
    record = w.status.scale_to_zero
    traffic = w.obs.component_invocations
    if record is None or not traffic or record.measured_at is not None:
        return
    assert w.spec.inference_component is not None
    devices = base.specification.get("ComputeResourceRequirements", {}).get(
        "NumberOfAcceleratorDevicesRequired", 0
    )
    instances = scale_to_zero.instances_held(
        base.desired_copies,
        float(devices or 0),
        sm_instances.devices(w.spec.instance_type),
        _instances(w, base.variant_name) or 0,
    )
    idle = max(
        1, math.ceil(w.scaled(duration_seconds(w.spec.inference_component.idle_release)) / 60)
    )
    out = scale_to_zero.compare(traffic, instances, idle, record.cold_start_seconds or 0.0)
    record.window_minutes = out.window_minutes
    record.requests_in_window = float(sum(traffic))
    record.instances = instances
    record.idle_release_minutes = idle
    record.always_on_instance_hours_per_day = round(out.always_on_instance_hours_per_day, 3)
    record.scale_to_zero_instance_hours_per_day = round(out.scale_to_zero_instance_hours_per_day, 3)
    record.cold_starts_per_day = round(out.cold_starts_per_day, 3)
    record.requests_meeting_cold_start_per_day = round(out.requests_meeting_cold_start_per_day, 3)
    record.measured_at = w.now
    measured = "+".join(p.value for p in record.cold_start_measured) or "nothing"
    w.event(
        "Normal",
        Reason.SCALE_TO_ZERO_COMPARED,
        f"inference component {base.name}: {record.always_on_instance_hours_per_day:g} "
        f"instance-hours/day always-on, {record.scale_to_zero_instance_hours_per_day:g} scaled "
        f"to zero after {idle} idle min, {record.cold_starts_per_day:g} cold starts/day of "
        f"{record.cold_start_seconds}s ({measured} measured) over {out.window_minutes} min of "
        "traffic",
    )


def _record_candidate(w: Planned, model: str, component: str) -> None:
    sm = w.status.sagemaker
    sm.candidate_model = model
    sm.candidate_component = component
    sm.models = added(sm.models, model)
    sm.inference_components = added(sm.inference_components, component)


def analyzing(w: Planned) -> Outcome:
    """Paired comparisons by component name at each step, the verdicts, then promotion."""
    base = _baseline(w)
    if base is None:
        return _gone(w)
    sm = w.status.sagemaker
    candidate = w.obs.components.get(sm.candidate_component)
    if candidate is None or candidate.status in ("Failed", "Deleting"):
        return way_back.begin(
            w,
            Reason.CANDIDATE_GONE,
            f"inference component {sm.candidate_component} is "
            f"{candidate.status if candidate else 'gone'}",
        )
    if base.model_name != sm.baseline_component_model:
        return way_back.begin(
            w,
            Reason.CANDIDATE_GONE,
            f"inference component {base.name} serves {base.model_name}, not "
            f"{sm.baseline_component_model}: changed outside the operator",
        )
    _note_instance_rise(w, candidate.variant_name)
    if base.status in _BUSY or candidate.status in _BUSY:
        return w.wait(f"inference components {base.name}, {candidate.name} settling")
    rollout = w.status.rollout
    if rollout.compared_step != rollout.step_index:
        if (pending := w.retry_pending(ActionKind.COMPARE)) is not None:
            return pending
        w.measure(
            ActionKind.COMPARE,
            w.endpoint_name,
            baseline_variant=base.name,
            candidate_variant=candidate.name,
            step=rollout.step_index,
        )
        return w.wait(
            f"comparing inference component {candidate.name} with {base.name} at step "
            f"{rollout.step_index + 1}"
        )
    if (out := verdicts.apply(w)) is not None:
        return out
    if verdicts.hold(w):
        return w.wait(w.status.message)
    return analyze.advance_step_or_promote(w)


def _alarm_names(w: Planned, component: str) -> list[str]:
    """Auto-rollback alarms on the component's own metrics (as blueGreen's on a variant)."""
    sm = w.status.sagemaker
    slo = w.spec.benchmark.slo
    max_error_rate = slo.max_error_rate if slo and slo.max_error_rate is not None else 0.05
    baseline = w.status.baseline.level(w.spec.judged_concurrency()) if w.status.baseline else None
    ceiling = (baseline.e2e_p99_ms or 0.0) * 2.0 if baseline else 0.0
    alarms = rq.component_alarms(
        component, w.names.alarm_prefix, max_error_rate, ceiling or 60_000.0, w.owner_tag
    )
    for alarm in alarms:
        w.act(ActionKind.PUT_ALARM, str(alarm["AlarmName"]), alarm)
        sm.alarms = added(sm.alarms, str(alarm["AlarmName"]))
    return [str(a["AlarmName"]) for a in alarms]


def promoting(w: Planned) -> Outcome:
    """A rolling update of the adopted component to the candidate's Model."""
    base = _baseline(w)
    if base is None:
        return _gone(w)
    sm = w.status.sagemaker
    target = sm.candidate_model or w.names.candidate_model
    if base.status in _BUSY:
        return w.wait(f"inference component {base.name} is {base.status}: rolling update")
    rollout = w.status.rollout
    if base.in_service and base.model_name == target:
        sm.component_promoted = target
        _compare_scale_to_zero(w, base)
        return w.goto(
            Phase.SUCCEEDED,
            Reason.CANDIDATE_PROMOTED,
            f"inference component {base.name} serves {target} (rolling update); its adopted "
            f"model {sm.baseline_component_model} is kept: optimizer.dev/rollback updates it "
            "back",
        )
    requested = f"component:{base.name}:{target}"
    if rollout.promotion_requested == requested and base.in_service:
        return way_back.begin(
            w,
            Reason.PROMOTION_ROLLED_BACK,
            f"SageMaker kept {base.model_name} on inference component {base.name} instead "
            f"of {target}: {base.failure_reason or 'an auto-rollback alarm fired'}",
        )
    candidate = w.obs.components.get(sm.candidate_component)
    if candidate is not None:
        # Its accelerators are the headroom the rolling update's first batch needs; no
        # caller invokes it.
        if candidate.status != "Deleting":
            w.act(
                ActionKind.DELETE_INFERENCE_COMPONENT,
                candidate.name,
                {"InferenceComponentName": candidate.name},
            )
        return w.wait(f"deleting inference component {candidate.name} before the rolling update")
    steps = w.spec.rollout.steps
    if w.spec.rollout.strategy is RolloutStrategy.CANARY:
        batch, pause = w.step_weight(0), steps[0].pause
    else:
        batch, pause = 100, steps[-1].pause
    wait_s = int(w.scaled(duration_seconds(pause)))
    alarms = _alarm_names(w, base.name)
    specification = rq.component_specification(base.specification, target)
    w.act(
        ActionKind.UPDATE_INFERENCE_COMPONENT,
        base.name,
        rq.update_inference_component(
            base.name, specification, batch_percent=batch or 100, wait_s=wait_s, alarms=alarms
        ),
    )
    rollout.promotion_requested = requested
    return w.wait(
        f"rolling inference component {base.name} to {target} in batches of {batch or 100} % "
        f"of its copies, each baked {wait_s}s under alarms {', '.join(alarms)}"
    )


def rolling_back(w: Wakeup) -> Outcome:
    """From status alone: the adopted component back on its model, the candidate deleted."""
    sm = w.status.sagemaker
    base = _baseline(w)
    if base is None:
        return _gone(w)
    if base.status in _BUSY:
        return w.wait(f"inference component {base.name} is {base.status}")
    if base.model_name != sm.baseline_component_model:
        specification = rq.component_specification(base.specification, sm.baseline_component_model)
        w.act(
            ActionKind.UPDATE_INFERENCE_COMPONENT,
            base.name,
            rq.update_inference_component(base.name, specification),
        )
        return w.wait(
            f"updating inference component {base.name} back to {sm.baseline_component_model}"
        )
    sm.component_promoted = ""
    candidate = w.obs.components.get(sm.candidate_component)
    if candidate is not None and candidate.status != "Deleting":
        w.act(
            ActionKind.DELETE_INFERENCE_COMPONENT,
            candidate.name,
            {"InferenceComponentName": candidate.name},
        )
        return w.wait(f"deleting inference component {candidate.name}")
    restart = w.status.rollout.restart_generation
    w.status.rollout.restart_generation = None
    if restart is not None and restart == w.res.generation and isinstance(w, Planned):
        return generation.start_generation(w)
    back = f"inference component {base.name} serves its model {base.model_name} again"
    failing = w.status.rollout.failing
    if failing is not None:
        w.status.rollout.failing = None
        w.status.last_error = failing.message
        w.goto(Phase.FAILED, failing.reason, f"{failing.message} ({back})", warning=True)
        return DONE
    w.goto(Phase.ROLLED_BACK, Reason.ROLLED_BACK, back)
    return DONE
