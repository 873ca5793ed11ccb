"""The decision function: (spec, status, observations, levers, now) -> actions, status, events.

Level-triggered: nothing here remembers having seen an event. Each wake-up reads the
phase and the SageMaker resources as they are, and returns the few idempotent actions
that move the resource one step on. Status is the only memory, and every SageMaker name
is derived from (namespace, name, uid, generation), so a crash between an action and
the status write repeats a create that then adopts its own resource.

One wake-up: the guards (pause, a new generation, the levers, a broken or claimed
endpoint), then the phase loop: each phase function returns the next phase to run in
the same wake-up, or DONE. `PHASES` is the transition map:

Pending -> Baselining (-> Searching, spec.search) -> Optimizing -> Deploying -> Analyzing
(-> AwaitingApproval) -> Promoting -> Succeeded; or RollingBack -> RolledBack; or Failed. A new spec
generation returns traffic to the baseline and starts again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from endpoint_optimizer.api import (
    TERMINAL_PHASES,
    OptimizedEndpointStatus,
    Phase,
    SpecError,
    parse_spec,
)
from endpoint_optimizer.pipeline import autoscaling, cadence, strategies
from endpoint_optimizer.pipeline.model import (
    PAUSE,
    ROLLBACK,
    Decision,
    Observations,
    Resource,
    Timing,
)
from endpoint_optimizer.pipeline.phases import (
    analyze,
    bake,
    build,
    components,
    deploy,
    generation,
    outside,
    promote,
    retain,
    rollback,
    searching,
)
from endpoint_optimizer.pipeline.phases.conditions import set_conditions
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.wakeup import (
    CANDIDATE_LIVE,
    Outcome,
    Planned,
    Wakeup,
    truthy,
)

PHASES: dict[Phase, Callable[[Planned], Outcome]] = {
    Phase.PENDING: build.pending,
    Phase.BASELINING: build.baselining,
    Phase.SEARCHING: searching.searching,
    Phase.OPTIMIZING: build.optimizing,
    Phase.DEPLOYING: deploy.deploying,
    Phase.ANALYZING: analyze.analyzing,
    Phase.AWAITING_APPROVAL: analyze.awaiting_approval,
    Phase.PROMOTING: promote.promoting,
    Phase.ROLLING_BACK: rollback.rolling_back,
    Phase.SUCCEEDED: retain.succeeded,
}
# spec.inferenceComponent: the phases that differ (pipeline/phases/components.py).
COMPONENT_PHASES: dict[Phase, Callable[[Planned], Outcome]] = PHASES | {
    Phase.DEPLOYING: components.deploying,
    Phase.ANALYZING: components.analyzing,
    Phase.PROMOTING: components.promoting,
    Phase.ROLLING_BACK: components.rolling_back,
}
# The longest chain one wake-up walks (Pending to Deploying, a step advanced, a rollback
# started and a generation restarted) is well below this; more is a loop, a bug.
MAX_TRANSITIONS = 16


def decide(
    spec: object,
    status: OptimizedEndpointStatus,
    observations: Observations,
    resource: Resource,
    now: datetime,
    timing: Timing | None = None,
) -> Decision:
    """One wake-up's decision. `status` is not modified; the new status is returned as JSON."""
    current = status.model_copy(deep=True)
    timing = timing or Timing()
    try:
        parsed = parse_spec(spec)
    except SpecError as exc:
        w = Wakeup(current, observations, resource, now, timing)
        _invalid_spec(w, exc)
    else:
        w = Planned(
            parsed,
            strategies.of(parsed.rollout.strategy),
            current,
            observations,
            resource,
            now,
            timing,
        )
        _run(w)
    autoscaling.restore(w)
    cadence.stamp(w.status, observations, resource, now)
    set_conditions(w)
    return Decision(actions=w.actions, status=w.status.dump(), events=w.events)


def _invalid_spec(w: Wakeup, exc: SpecError) -> None:
    """A spec that does not parse: Failed, after traffic is back on the baseline.

    The way back needs no spec: it works from status (what was made, where).
    """
    status = w.status
    if status.phase is not Phase.ROLLING_BACK:
        if status.phase in TERMINAL_PHASES and not _new_generation(w):
            return
        if w.fail(Reason.INVALID_SPEC, str(exc)) is not Phase.ROLLING_BACK:
            status.observed_generation = w.res.generation
            return
    _rolling_back(w)
    if status.phase is Phase.FAILED:
        status.observed_generation = w.res.generation


def _rolling_back(w: Wakeup) -> None:
    """The way back, from status alone: an inference component's, or the endpoint's."""
    if w.status.sagemaker.baseline_component:
        components.rolling_back(w)
    else:
        rollback.rolling_back(w)


def _run(w: Planned) -> None:
    out = _guards(w)
    phase = w.status.phase if out is None else out
    table = PHASES
    if w.spec.inference_component is not None or w.status.sagemaker.baseline_component:
        table = COMPONENT_PHASES
    for _ in range(MAX_TRANSITIONS):
        if not isinstance(phase, Phase) or phase not in table:
            return
        phase = table[phase](w)
    raise RuntimeError(f"more than {MAX_TRANSITIONS} phase transitions in one wake-up")


def _guards(w: Planned) -> Outcome | None:
    """What comes before the phase: an Outcome when a guard decided, else None."""
    status = w.status
    status.paused = truthy(w.res.annotations.get(PAUSE))
    if _new_generation(w):
        return _restart(w)
    if status.rollout.outside_change is not None:
        return outside.resolve(w)
    if status.paused:
        if status.phase is Phase.ANALYZING and (out := analyze.watch_while_paused(w)) is not None:
            return out
        if status.phase is Phase.SUCCEEDED and (out := bake.watch_while_paused(w)) is not None:
            return out
        return w.wait(
            "paused by the optimizer.dev/pause annotation; remove it to resume (a candidate "
            "taking traffic, or baking after its promotion, stays watched by the live judge)"
        )
    if w.lever_pending(ROLLBACK) and status.phase not in TERMINAL_PHASES:
        w.consume_lever(ROLLBACK)
        if status.phase is Phase.AWAITING_APPROVAL and status.spot_check is not None:
            status.spot_check.approved = False
            return rollback.begin(
                w, Reason.MANUAL_ROLLBACK, "spot check rejected: rollback requested by annotation"
            )
        return rollback.begin(w, Reason.MANUAL_ROLLBACK, "rollback requested by annotation")
    if (
        w.lever_pending(ROLLBACK)
        and status.phase is Phase.SUCCEEDED
        and status.sagemaker.component_promoted
    ):
        # The adopted component's model is never deleted: it can always be returned to.
        w.consume_lever(ROLLBACK)
        return rollback.begin(
            w,
            Reason.MANUAL_ROLLBACK,
            f"rollback requested by annotation: inference component "
            f"{status.sagemaker.baseline_component} back to "
            f"{status.sagemaker.baseline_component_model}",
        )
    if w.lever_pending(ROLLBACK) and status.phase is Phase.SUCCEEDED:
        w.consume_lever(ROLLBACK)
        if (out := promote.rollback_promoted(w)) is not None:
            return out
    if status.phase not in TERMINAL_PHASES and (out := _endpoint_broken(w)) is not None:
        return out
    if status.phase in (Phase.PENDING, Phase.BASELINING) and (out := _claimed(w)) is not None:
        return out
    return None


def _new_generation(w: Wakeup) -> bool:
    return w.status.observed_generation != 0 and w.res.generation > w.status.observed_generation


def _restart(w: Planned) -> Outcome:
    """A new generation: route traffic back to the baseline first, then start again.

    Also after an outcome, if a rollout config of ours still serves (a failure that
    could not route back): the next generation must never measure a candidate as its
    baseline.
    """
    if (
        w.status.phase in CANDIDATE_LIVE
        or w.status.phase is Phase.ROLLING_BACK
        or _rollout_config_serves(w)
    ):
        w.status.rollout.restart_generation = w.res.generation
        if w.status.phase is not Phase.ROLLING_BACK:
            w.status.rollout.rollback_reason = Reason.NEW_GENERATION.rollback
            w.goto(
                Phase.ROLLING_BACK,
                Reason.NEW_GENERATION,
                f"spec generation {w.res.generation}: returning traffic to the baseline "
                "before starting again",
            )
        return Phase.ROLLING_BACK
    return generation.start_generation(w)


def _rollout_config_serves(w: Wakeup) -> bool:
    endpoint = w.obs.endpoint
    sm = w.status.sagemaker
    if endpoint is None or not endpoint.in_service or not sm.baseline_endpoint_config:
        return False
    ours = {sm.candidate_endpoint_config, w.names.rollout_config, w.names.pinned_config}
    if endpoint.config_name != sm.baseline_endpoint_config and w.search_config(
        endpoint.config_name
    ):
        return True
    return endpoint.config_name in ours - {"", sm.baseline_endpoint_config}


def _endpoint_broken(w: Planned) -> Outcome | None:
    """Failed and UpdateRollbackFailed need a person (sagemaker-api.md §2.5): never retry.

    SystemUpdating and RollingBack end by themselves, so the phases wait them out.
    """
    endpoint = w.obs.endpoint
    if endpoint is None:
        return None
    reason = endpoint.failure_reason or "no FailureReason"
    if endpoint.status == "Failed":
        return w.fail(
            Reason.ENDPOINT_FAILED,
            f"endpoint {endpoint.name} is Failed: {reason}. SageMaker allows only "
            "DeleteEndpoint on a failed endpoint, so the operator does not retry: fix the "
            "cause, delete the endpoint, then change the spec to start again",
        )
    if endpoint.status == "UpdateRollbackFailed":
        baseline = w.status.sagemaker.baseline_endpoint_config or "a known config"
        return w.fail(
            Reason.ENDPOINT_UPDATE_ROLLBACK_FAILED,
            f"endpoint {endpoint.name} is UpdateRollbackFailed: an update and its "
            f"automatic rollback both failed, and it serves a mix of old and new configs "
            f"({reason}). The operator does not retry: update the endpoint by hand to "
            f"{baseline}, then change the spec to start again",
        )
    return None


def _claimed(w: Planned) -> Outcome | None:
    """Two resources on one endpoint would undo each other's rollouts: the older keeps it."""
    me = (w.res.created, f"{w.res.owner.namespace}/{w.res.owner.name}")
    older = sorted(rival for rival in w.res.rivals if rival < me)
    if not older:
        return None
    # Never ours: the finalizer must not touch it (a race may have set it this far).
    w.status.sagemaker.endpoint_name = ""
    return w.fail(
        Reason.ENDPOINT_CONFLICT,
        f"spec.endpointName: endpoint {w.endpoint_name} is already optimized by "
        f"OptimizedEndpoint {older[0][1]}; one endpoint takes one resource at a time: "
        "point spec.endpointName at another endpoint, or delete the other resource first",
    )


def status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The status merge patch (null removes a key that the new status no longer has)."""
    patch: dict[str, Any] = merge_patch(old, new)
    return patch


def merge_patch(old: Any, new: Any) -> Any:
    """The RFC 7386 merge patch that turns `old` into `new` (null removes a key)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value)
    return patch
