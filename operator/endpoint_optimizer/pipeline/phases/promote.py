"""Promotion: the candidate alone on a new config; the baseline config retained for a while."""

from __future__ import annotations

from datetime import timedelta

from endpoint_optimizer.api import (
    AcceptanceWatchOutcome,
    BakeOutcome,
    BakeStatus,
    Phase,
    duration_seconds,
)
from endpoint_optimizer.pipeline import autoscaling, plan
from endpoint_optimizer.pipeline.model import IN_PROGRESS_ENDPOINT, ActionKind
from endpoint_optimizer.pipeline.phases import rollback
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.wakeup import Outcome, Planned, added
from endpoint_optimizer.sagemaker import requests as rq


def promoting(w: Planned) -> Outcome:
    endpoint = w.obs.endpoint
    sm = w.status.sagemaker
    name = w.names.promoted_config
    if endpoint is None:
        return w.fail(Reason.ENDPOINT_DISAPPEARED, f"endpoint {w.endpoint_name} no longer exists")
    if endpoint.status in IN_PROGRESS_ENDPOINT:
        return w.wait(f"endpoint {w.endpoint_name} is {endpoint.status}")
    sm.serving_endpoint_config = endpoint.config_name
    if endpoint.in_service and endpoint.config_name == name:
        # Named again: a crash may have come before status recorded the promoted config,
        # and the finalizer removes only what status names.
        sm.endpoint_configs = added(sm.endpoint_configs, name)
        retained = retain_baseline(w, name)
        return w.goto(Phase.SUCCEEDED, Reason.CANDIDATE_PROMOTED, retained + start_bake(w))
    rollout = w.status.rollout
    if rollout.promotion_requested == name and endpoint.in_service:
        # We asked for the promoted config, the update finished, and the endpoint
        # serves something else: SageMaker rolled it back (alarm or failure).
        return rollback.begin(
            w,
            Reason.PROMOTION_ROLLED_BACK,
            f"SageMaker kept {endpoint.config_name} instead of {name}: "
            f"{endpoint.failure_reason or 'an auto-rollback alarm fired during the bake'}",
        )
    if (held := autoscaling.clear_before_update(w)) is not None:
        return held
    # The candidate's model, or its speculation-free twin (phases/speculation.py).
    model = sm.candidate_model or w.names.candidate_model
    config = rq.create_endpoint_config(
        name, [plan.variant(w.spec, w.names.candidate_variant, model)], w.owner_tag
    )
    w.act(ActionKind.CREATE_ENDPOINT_CONFIG, name, config)
    deployment = w.strategy.promotion_deployment(w)
    w.act(
        ActionKind.UPDATE_ENDPOINT,
        w.endpoint_name,
        rq.update_endpoint(w.endpoint_name, name, deployment),
    )
    rollout.promotion_requested = name
    sm.endpoint_configs = added(sm.endpoint_configs, name)
    return w.wait(f"updating endpoint {w.endpoint_name} to {name}")


def retain_baseline(w: Planned, promoted: str) -> str:
    """Start the baseline's retention window; the promotion's message says until when."""
    sm = w.status.sagemaker
    baseline = sm.baseline_endpoint_config
    model = sm.candidate_model or w.names.candidate_model
    said = f"candidate {model} serves all traffic on {promoted}"
    if not baseline:
        return said
    if baseline not in sm.endpoint_configs:
        # Adopted: the user's own config. Never ours to delete, so rollback stays open.
        sm.baseline_retained_until = None
        return (
            f"{said}; baseline config {baseline} is not the operator's (adopted): it is "
            "kept, and optimizer.dev/rollback returns to it while it exists"
        )
    window = w.scaled(duration_seconds(w.spec.rollout.baseline_retention))
    until = w.now + timedelta(seconds=window)
    sm.baseline_retained_until = until
    sm.baseline_deleted_at = None
    return (
        f"{said}; baseline config {baseline} kept for optimizer.dev/rollback until "
        f"{until:%Y-%m-%dT%H:%M:%SZ} (rollout.baselineRetention "
        f"{w.spec.rollout.baseline_retention})"
    )


def start_bake(w: Planned) -> str:
    """At the promotion: begin the bake (phases/bake.py); the promotion's message says
    until when.

    No bake when it is off (0s), when the strategy does not judge live, when no baseline
    is retained to return to, or when the live judge never measured the baseline (then
    there is nothing to compare with, and the message says so).
    """
    rollout = w.status.rollout
    rollout.bake = None
    seconds = w.spec.rollout.bake_seconds()
    if seconds <= 0 or not w.strategy.judges_live:
        return ""
    sm = w.status.sagemaker
    if not sm.baseline_endpoint_config:
        return ""
    reference = rollout.baseline_live
    if reference is None or reference.empty:
        message = (
            "no bake: the live judge never measured the baseline during the rollout (too "
            "little traffic and no probes), so there is nothing to compare the promoted "
            "variant with"
        )
        w.record(Reason.BAKE_SKIPPED, message)
        return f"; {message}"
    until = w.now + timedelta(seconds=w.scaled(seconds))
    if sm.baseline_retained_until is not None:
        # The rollback target must exist for the whole bake.
        until = min(until, sm.baseline_retained_until)
    rollout.bake = BakeStatus(until=until, reference=reference)
    return (
        f"; baking until {until:%Y-%m-%dT%H:%M:%SZ} (rollout.bake): the live judge compares "
        "it with the baseline's last live figures and rolls back on a confident regression"
    )


def rollback_promoted(
    w: Planned, reason: Reason = Reason.MANUAL_ROLLBACK, message: str = ""
) -> Outcome | None:
    """Back to the baseline config after a promotion (the rollback lever, or a failed
    bake) while it is retained; otherwise refused with the reason (None: the wake-up
    goes on)."""
    sm = w.status.sagemaker
    baseline = sm.baseline_endpoint_config
    promoted = w.names.promoted_config
    refusal = ""
    if promoted not in sm.endpoint_configs or not baseline:
        refusal = (
            "no candidate was promoted; the endpoint serves its baseline, nothing to roll back"
        )
    elif sm.baseline_deleted_at is not None or (
        sm.baseline_retained_until is not None and w.now >= sm.baseline_retained_until
    ):
        expired = sm.baseline_retained_until or sm.baseline_deleted_at or w.now
        refusal = (
            f"baseline expired at {expired:%Y-%m-%dT%H:%M:%SZ}: its config {baseline} is "
            "deleted after rollout.baselineRetention, nothing to roll back to. Update the "
            "endpoint by hand, or change the spec to optimize again from what serves now"
        )
    if refusal:
        message = f"rollback refused: {refusal}"
        w.event("Warning", Reason.ROLLBACK_REFUSED, message)
        w.status.message = message[:1024]
        w.record(Reason.ROLLBACK_REFUSED, message)
        return None
    bake = w.status.rollout.bake
    if bake is not None and bake.active:
        bake.ended_at = w.now
        bake.outcome = BakeOutcome.FAILED if reason is Reason.BAKE_FAILED else BakeOutcome.STOPPED
    watch = w.status.rollout.acceptance_watch
    if watch is not None and watch.active:
        watch.ended_at = w.now
        watch.outcome = AcceptanceWatchOutcome.STOPPED
    return rollback.begin(
        w,
        reason,
        message
        or f"rollback of the promoted candidate requested by annotation: returning to the "
        f"retained baseline config {baseline}",
    )
