"""Autoscaled variants across a rollout (pure): hold the scaling off, then put it back.

SageMaker refuses an UpdateEndpoint that removes a variant registered with Application
Auto Scaling or changes its instance type; AWS's way is to deregister the variant, update,
then register the variant that serves and attach the policies again
(sagemaker/latest/dg/endpoint-scaling-update.html). The operator does that round trip:

1. Before any UpdateEndpoint of its own (deploying the candidate, promoting, rolling back,
   the finalizer's way back), the endpoint's registered targets and their policies are
   saved in status.autoscaling; nothing else happens in that wake-up, so the status write
   comes first.
2. The next wake-up deregisters them (which deletes their policies) and updates in the
   same breath. A crash anywhere after step 1 finds them in status.
3. Once the endpoint is settled (an outcome, or before a candidate is deployed), the saved
   targets go back on the variant that serves: the same variant if it still serves (a
   rollback), else the endpoint's only variant (a promotion), with the metric dimensions
   naming the endpoint and variant rewritten; status forgets them once Application Auto
   Scaling shows them there.

During a rollout the scaling stays off: both variants keep fixed instance counts (the
baseline its count when the scaling was held off, via RetainAllVariantProperties; the
candidate spec.instanceCount) and only their weights move. A comparison at fixed capacity
compares the variants, not what a policy did to one of them in the meantime
(docs/autoscaling.md).
"""

from __future__ import annotations

from endpoint_optimizer.api import TERMINAL_PHASES, OptimizedEndpointStatus, Phase
from endpoint_optimizer.api.status import AutoscalingStatus, ScalableTargetRecord
from endpoint_optimizer.pipeline.model import (
    ROLLBACK,
    Action,
    ActionKind,
    EndpointView,
    Resource,
)
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.wakeup import Outcome, Wakeup
from endpoint_optimizer.sagemaker import autoscaling as aas

# Phases whose wake-ups may update the endpoint, the phase changing on the way included
# (Optimizing -> Deploying, Analyzing -> Promoting or RollingBack): one
# DescribeScalableTargets more per endpoint describe while a rollout runs.
_UPDATING = frozenset(
    {
        Phase.OPTIMIZING,
        Phase.DEPLOYING,
        Phase.ANALYZING,
        Phase.AWAITING_APPROVAL,
        Phase.PROMOTING,
        Phase.ROLLING_BACK,
    }
)
# Phases in which the endpoint serves what it will keep serving for a while.
_SETTLED = TERMINAL_PHASES | {Phase.PENDING, Phase.BASELINING, Phase.OPTIMIZING}


def wanted(status: OptimizedEndpointStatus, res: Resource, described: bool = True) -> bool:
    """Whether this wake-up reads the endpoint's scaling (a Describe call or two).

    `described`: DescribeEndpoint ran this wake-up; a wake-up that reuses the last view of
    the endpoint (a job still running) cannot update it, and reads no scaling either.
    """
    saved = status.autoscaling is not None and bool(status.autoscaling.saved)
    rollback_asked = status.phase is Phase.SUCCEEDED and ROLLBACK in res.annotations
    return saved or res.deleting or rollback_asked or (described and status.phase in _UPDATING)


def _names(targets: list[ScalableTargetRecord]) -> str:
    return ", ".join(t.variant for t in targets)


def clear_before_update(w: Wakeup) -> Outcome | None:
    """Before an UpdateEndpoint of ours: save, then deregister, every registered target.

    None: go on with the update (the deregistrations, if any, come first); else the
    wake-up ends having saved what it found. Scaling not read (None) is taken as none:
    the controller reads it in every phase that can reach an update (`wanted`).
    """
    found = w.obs.scaling
    if not found:
        return None
    state = w.status.autoscaling or AutoscalingStatus()
    saved = {t.variant: t for t in state.saved}
    fresh = [t for t in found if saved.get(t.variant) != t]
    if fresh:
        saved.update({t.variant: t for t in fresh})
        state.saved = sorted(saved.values(), key=lambda t: t.variant)
        state.suspended_at = state.suspended_at or w.now
        w.status.autoscaling = state
        message = (
            f"saved the autoscaling of variant(s) {_names(fresh)} "
            f"({sum(len(t.policies) for t in fresh)} policies) before deregistering it for "
            "the update; it goes back on the serving variant when the rollout ends"
        )
        w.record(Reason.AUTOSCALING_SAVED, message)
        w.event("Normal", Reason.AUTOSCALING_SAVED, message)
        return w.wait(message)
    endpoint = w.obs.endpoint
    assert endpoint is not None  # scaling is read for an endpoint only
    for target in found:
        w.act(
            ActionKind.DEREGISTER_SCALABLE_TARGET,
            aas.resource_id(endpoint.name, target.variant),
            aas.deregister_request(endpoint.name, target.variant),
        )
    return None


def held_off(status: OptimizedEndpointStatus) -> bool:
    """Scaling is saved and not back: updates keep the instance counts SageMaker has now."""
    return status.autoscaling is not None and bool(status.autoscaling.saved)


def restore(w: Wakeup) -> None:
    """Settled: put the saved scaling back on the variant that serves (idempotent)."""
    state = w.status.autoscaling
    if state is None or not state.saved or w.status.phase not in _SETTLED:
        return
    endpoint = w.obs.endpoint
    if endpoint is None or not endpoint.in_service or w.obs.scaling is None:
        return
    actions, placed = restore_actions(state.saved, endpoint, w.obs.scaling)
    w.actions.extend(actions)
    if placed and not actions:
        message = (
            f"autoscaling of {_names(state.saved)} is back on variant(s) "
            f"{', '.join(placed)} of endpoint {endpoint.name}"
        )
        w.event("Normal", Reason.AUTOSCALING_RESTORED, message)
        w.status.autoscaling = AutoscalingStatus(restored_on=placed[0][:63], restored_at=w.now)


def restore_actions(
    saved: list[ScalableTargetRecord],
    endpoint: EndpointView,
    observed: tuple[ScalableTargetRecord, ...],
) -> tuple[list[Action], list[str]]:
    """The Register and PutScalingPolicy calls still needed, and the variants they go on.

    Nothing to do when Application Auto Scaling already shows each saved target (its
    capacities and every saved policy) on its variant. Empty variants: nowhere to go yet.
    """
    serving = [v.name for v in endpoint.variants]
    actions: list[Action] = []
    placed: list[str] = []
    for target in saved:
        if target.variant in serving:
            variant = target.variant
        elif len(serving) == 1:
            variant = serving[0]
        else:
            return [], []
        if variant in placed:
            continue  # one target per variant: the first saved one wins
        placed.append(variant)
        wanted_here = aas.moved(target, endpoint.name, variant)
        seen = next((t for t in observed if t.variant == variant), None)
        if seen is not None and _covers(seen, wanted_here):
            continue
        resource = aas.resource_id(endpoint.name, variant)
        actions.append(
            Action(
                ActionKind.REGISTER_SCALABLE_TARGET,
                resource,
                aas.register_request(endpoint.name, wanted_here),
            )
        )
        for policy in wanted_here.policies:
            actions.append(
                Action(
                    ActionKind.PUT_SCALING_POLICY,
                    f"{resource} policy {policy.name}",
                    aas.policy_request(endpoint.name, variant, policy),
                )
            )
    return actions, placed


def _covers(seen: ScalableTargetRecord, wanted_here: ScalableTargetRecord) -> bool:
    """The capacities, and each policy by name and type: Application Auto Scaling may answer
    a configuration with defaults filled in, and a put that succeeded wrote ours."""
    kinds = {(p.name, p.policy_type) for p in seen.policies}
    return (
        seen.min_capacity == wanted_here.min_capacity
        and seen.max_capacity == wanted_here.max_capacity
        and all((p.name, p.policy_type) in kinds for p in wanted_here.policies)
    )
