"""After a promotion: the bake (phases/bake.py), then the retained baseline, deleted when
rollout.baselineRetention ends; while it is retained after a clean bake, the acceptance
watch (phases/watch.py) keeps judging a speculative candidate's live acceptance.

Level-triggered: an attempt asks for every delete and notes what it asked for; the next
wake-up confirms it (baselineDeletedAt) only if no failed action was recorded, and
otherwise says so; a later wake-up with a fresh view of the endpoint asks again. So a
delete that keeps failing costs one attempt per endpoint recheck at most.
"""

from __future__ import annotations

from endpoint_optimizer.api import BaselineDelete
from endpoint_optimizer.pipeline.model import IN_PROGRESS_ENDPOINT, ActionKind
from endpoint_optimizer.pipeline.phases import bake, watch
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.wakeup import DONE, Outcome, Planned, Wakeup


def succeeded(w: Wakeup) -> Outcome:
    # The bake ends before the retention does (spec: bake <= baselineRetention).
    if isinstance(w, Planned) and (out := bake.baking(w)) is not None:
        return out
    # After a clean bake, until the retention ends: live acceptance only.
    if isinstance(w, Planned) and (out := watch.watching(w)) is not None:
        return out
    sm = w.status.sagemaker
    until = sm.baseline_retained_until
    if until is None or sm.baseline_deleted_at is not None or w.now < until:
        return DONE
    why = f"baseline retention ended at {until:%Y-%m-%dT%H:%M:%SZ}"
    if _read_last_attempt(w, why):
        return DONE
    deletes = baseline_deletes(w)
    if deletes is None:
        return DONE
    configs, models = deletes
    rollout = w.status.rollout
    previous = rollout.baseline_delete
    attempt = (previous.attempt if previous else 0) + 1
    _emit_deletes(w, configs, models)
    rollout.baseline_delete = BaselineDelete(
        at=w.now,
        attempt=attempt,
        configs=configs,
        models=models,
        reported=previous.reported if previous else "",
    )
    # The edge writes lastError for a failed action and nothing for one that succeeded
    # (a delete of something already gone succeeds): cleared, it is this attempt's verdict.
    w.status.last_error = ""
    again = f" (attempt {attempt})" if attempt > 1 else ""
    w.status.message = (f"{why}: deleting {', '.join([*configs, *models]) or 'nothing'}{again}")[
        :1024
    ]
    return DONE


def _read_last_attempt(w: Wakeup, why: str) -> bool:
    """Read how the last attempt went, once; True when this wake-up read it.

    No failed action recorded: it deleted everything it asked for (confirmed). A
    failure is reported once per distinct error (Event, history, message), so a
    delete that keeps failing does not flood the resource's Events.
    """
    rollout = w.status.rollout
    pending = rollout.baseline_delete
    if pending is None or pending.failed:
        return False
    error = w.status.last_error
    if not error:
        rollout.baseline_delete = None
        w.status.sagemaker.baseline_deleted_at = pending.at or w.now
        message = (
            f"{why}: deleted {', '.join([*pending.configs, *pending.models]) or 'nothing'}; "
            "optimizer.dev/rollback has nothing to return to now"
        )
        w.event("Normal", Reason.BASELINE_DELETED, message)
        w.record(Reason.BASELINE_DELETED, message)
        w.status.message = message[:1024]
        return True
    asked = {f"{ActionKind.DELETE_ENDPOINT_CONFIG.value} {c}" for c in pending.configs} | {
        f"{ActionKind.DELETE_MODEL.value} {m}" for m in pending.models
    }
    pending.failed = True
    # Something else failed in between (a Describe of a later wake-up): the deletes are
    # not confirmed, so they are asked for again, but nothing is said about them.
    if error.split(":", 1)[0] in asked and error != pending.reported:
        pending.reported = error
        message = (
            f"{why}, but deleting the baseline failed: {error}. What was deleted stays "
            "deleted; the operator tries again on its next look at the endpoint "
            "(optimizer.dev/rollback stays refused)"
        )
        w.event("Warning", Reason.BASELINE_DELETE_FAILED, message)
        w.record(Reason.BASELINE_DELETE_FAILED, message)
        w.status.message = message[:1024]
    return True


def baseline_deletes(w: Wakeup) -> tuple[list[str], list[str]] | None:
    """The configs and model of the baseline that the operator may delete now.

    Only names in status.sagemaker (made by this resource, deterministic names) are
    deleted, never the config the endpoint serves or the models it uses. None while
    that cannot be told (no fresh view of the endpoint, or it is changing), and when
    the baseline serves again (then it is kept). The names stay listed, so the
    finalizer deletes again whatever is left.
    """
    sm = w.status.sagemaker
    endpoint = w.obs.endpoint
    if not w.obs.endpoint_described:
        return None  # a finished resource's last view may be old: delete only on a fresh one
    if endpoint is None or endpoint.status in IN_PROGRESS_ENDPOINT:
        return None  # decided on the next look, never while the endpoint moves
    baseline = sm.baseline_endpoint_config
    if endpoint.config_name == baseline:
        # Someone returned the endpoint to it by hand: it serves, so it stays.
        sm.baseline_retained_until = None
        w.status.rollout.baseline_delete = None
        w.record(Reason.BASELINE_KEPT, f"{baseline} serves again; kept")
        return None
    in_use = {v.model_name for v in w.obs.config_variants.get(endpoint.config_name, ())}
    in_use |= {v.model_name for v in endpoint.variants}
    # The rollout config holds the baseline model too: without it, it is unusable. After a
    # switch to the speculation-free twin in the canary, both rollout configs hold it.
    rollout_configs = dict.fromkeys((sm.candidate_endpoint_config, w.names.rollout_config))
    configs = [
        c
        for c in (baseline, *rollout_configs, w.names.pinned_config)
        if c
        and c in sm.endpoint_configs
        and c != endpoint.config_name
        and c != w.names.promoted_config
    ]
    models = [m for m in (sm.baseline_model,) if m and m in sm.models and m not in in_use]
    return configs, models


def _emit_deletes(w: Wakeup, configs: list[str], models: list[str]) -> None:
    for config in configs:
        w.act(ActionKind.DELETE_ENDPOINT_CONFIG, config, {"EndpointConfigName": config})
    for model in models:
        w.act(ActionKind.DELETE_MODEL, model, {"ModelName": model})


def release_baseline(w: Wakeup, why: str) -> None:
    """A new generation: the retained baseline is no rollback target any more.

    Deleted in the same wake-up that starts the generation; a delete that fails is
    reported by the edge and left to the finalizer (the names stay in status).
    """
    deletes = baseline_deletes(w)
    if deletes is None:
        return
    configs, models = deletes
    _emit_deletes(w, configs, models)
    message = (
        f"{why}: deleting {', '.join([*configs, *models]) or 'nothing'} (what a failed "
        "delete leaves stays in status.sagemaker; the finalizer deletes it)"
    )
    w.event("Normal", Reason.BASELINE_RELEASED, message)
    w.record(Reason.BASELINE_RELEASED, message)
