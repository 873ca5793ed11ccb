"""The way back: traffic returns to the baseline, which never stopped serving.

It works from status alone (what was made, where), never from a spec that may have
changed or no longer parse.
"""

from __future__ import annotations

from endpoint_optimizer.api import Phase
from endpoint_optimizer.pipeline import autoscaling
from endpoint_optimizer.pipeline.model import IN_PROGRESS_ENDPOINT, ActionKind
from endpoint_optimizer.pipeline.phases import generation
from endpoint_optimizer.pipeline.reasons import Reason, rollback_label
from endpoint_optimizer.pipeline.wakeup import DONE, Outcome, Planned, Wakeup
from endpoint_optimizer.sagemaker import requests as rq

# Before a candidate is deployed: nothing to take back, the jobs are stopped.
_BEFORE_CANDIDATE = frozenset({Phase.PENDING, Phase.BASELINING, Phase.OPTIMIZING})


def begin(w: Wakeup, reason: Reason, message: str) -> Outcome:
    """Start a rollback for `reason`; RolledBack at once while no candidate was deployed."""
    w.status.rollout.rollback_reason = rollback_label(reason, w.status.checks)
    if w.status.phase in _BEFORE_CANDIDATE:
        generation.stop_jobs(w)
        w.goto(Phase.ROLLED_BACK, reason, f"{message}; the baseline never stopped serving")
        return DONE
    return w.goto(Phase.ROLLING_BACK, reason, message, warning=True)


def rolling_back(w: Wakeup) -> Outcome:
    endpoint = w.obs.endpoint
    sm = w.status.sagemaker
    baseline = sm.baseline_endpoint_config
    if endpoint is None:
        return w.fail(Reason.ENDPOINT_DISAPPEARED, f"endpoint {sm.endpoint_name} no longer exists")
    if endpoint.status in IN_PROGRESS_ENDPOINT:
        return w.wait(f"endpoint {endpoint.name} is {endpoint.status}")
    sm.serving_endpoint_config = endpoint.config_name
    if endpoint.config_name == baseline or not baseline:
        restart = w.status.rollout.restart_generation
        w.status.rollout.restart_generation = None
        if restart is not None and restart == w.res.generation and isinstance(w, Planned):
            return generation.start_generation(w)
        sm.baseline_retained_until = None
        back = f"endpoint {endpoint.name} serves the baseline config {baseline} again"
        failing = w.status.rollout.failing
        if failing is not None:
            # The error that began this rollback ends it: traffic is safe, a person is needed.
            w.status.rollout.failing = None
            w.status.last_error = failing.message
            w.goto(Phase.FAILED, failing.reason, f"{failing.message} ({back})", warning=True)
            return DONE
        w.goto(Phase.ROLLED_BACK, Reason.ROLLED_BACK, back)
        return DONE
    if not endpoint.in_service:
        return w.fail(Reason.ENDPOINT_FAILED, f"endpoint {endpoint.name} is {endpoint.status}")
    candidate = endpoint.variant(w.names.candidate_variant)
    if (
        candidate is not None
        and (candidate.current_weight or 0.0) > 0.0
        and endpoint.variant(w.baseline_variant) is not None
    ):
        # Weights move in seconds, a config update in minutes: users leave the
        # candidate first, then the candidate variant goes.
        w.act(
            ActionKind.UPDATE_WEIGHTS,
            endpoint.name,
            rq.update_weights(
                endpoint.name,
                rq.canary_weights(w.baseline_variant, w.names.candidate_variant, 0),
            ),
        )
        return w.wait("moving all traffic back to the baseline variant")
    if (held := autoscaling.clear_before_update(w)) is not None:
        return held
    w.act(
        ActionKind.UPDATE_ENDPOINT,
        endpoint.name,
        rq.update_endpoint(
            endpoint.name, baseline, keep_instance_counts=autoscaling.held_off(w.status)
        ),
    )
    return w.wait(f"updating endpoint {endpoint.name} back to {baseline}")
