"""Shadow: the candidate answers a copy of production traffic that users never see.

A shadow variant cannot be invoked with TargetVariant and its answers are only in its
logs, so checks that need the candidate's own answers (an eval set, an acceptance
floor) are made first in a pinned stage: the candidate serves as a weight-0 production
variant (users see only the baseline, as in blueGreen), is compared on pinned requests,
then moves to the shadow config and shadows production (`ShadowStage`).
"""

from __future__ import annotations

from datetime import datetime

from endpoint_optimizer.api import RolloutStrategy, ShadowStage
from endpoint_optimizer.pipeline import assess, autoscaling, plan, verdicts
from endpoint_optimizer.pipeline.model import ActionKind, EndpointView
from endpoint_optimizer.pipeline.phases import rollback
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.record import live_state
from endpoint_optimizer.pipeline.strategies.base import Strategy, paired_config
from endpoint_optimizer.pipeline.wakeup import Outcome, Planned, added
from endpoint_optimizer.sagemaker import requests as rq


def pinned_first(w: Planned) -> bool:
    """Checks that need the candidate's own answers: judged pinned before shadowing."""
    evaluation = w.spec.evaluation
    return (
        evaluation is not None and evaluation.has_eval_set
    ) or w.spec.optimizations.speculative_decoding is not None


def pinned_stage(w: Planned) -> bool:
    return pinned_first(w) and w.status.rollout.shadow_stage is None


def shadow_config(w: Planned) -> tuple[str, dict[str, object]]:
    """One production variant (the baseline) and the candidate as its shadow."""
    base = plan.variant(w.declared, w.baseline_variant, w.status.sagemaker.baseline_model)
    shadow = plan.variant(w.spec, w.names.candidate_variant, w.names.candidate_model)
    name = w.names.rollout_config
    return name, rq.create_endpoint_config(name, [base], w.owner_tag, shadow)


class Shadow(Strategy):
    kind = RolloutStrategy.SHADOW

    def candidate_config(self, w: Planned) -> tuple[str, dict[str, object]]:
        if pinned_stage(w):
            return paired_config(w, w.names.pinned_config, 0)
        return shadow_config(w)

    def switching(self, w: Planned, endpoint: EndpointView) -> Outcome | None:
        """From the pinned config to the shadow config; DONE while it is not serving yet."""
        if not pinned_first(w):
            return None
        rollout = w.status.rollout
        sm = w.status.sagemaker
        shadow = w.names.rollout_config
        if endpoint.config_name == shadow and rollout.shadow_stage is not ShadowStage.LIVE:
            # Serving (also after a crash that lost the status write of after_checks): the
            # shadow window starts now, with its own comparison and live intervals.
            if rollout.shadow_stage is None:
                # Only after_checks moves the endpoint here, after the pinned checks passed;
                # its history entry went with the lost write.
                w.record(
                    Reason.PINNED_CHECKS_PASSED,
                    f"checks on pinned requests passed; the candidate shadows production on "
                    f"{shadow} (recorded after a restart)",
                )
            rollout.shadow_stage = ShadowStage.LIVE
            rollout.compared_step = None
            sm.candidate_endpoint_config = shadow
            sm.endpoint_configs = added(sm.endpoint_configs, shadow)
            rollout.step_index = 0
            rollout.step_started_at = w.now
            w.record(Reason.SHADOW_STARTED, f"candidate shadows on {shadow}")
            return None
        if rollout.shadow_stage is ShadowStage.DEPLOYING:
            if endpoint.config_name == w.names.pinned_config and endpoint.failure_reason:
                return rollback.begin(
                    w,
                    Reason.UPDATE_FAILED,
                    f"UpdateEndpoint to the shadow config {shadow} failed: "
                    f"{endpoint.failure_reason}",
                )
            if endpoint.config_name == w.names.pinned_config:
                return w.wait(f"waiting for endpoint {endpoint.name} to serve {shadow}")
        return None

    def compare_request(self, w: Planned) -> dict[str, object]:
        # Shadow's pinned stage: both are production variants, invoke each. Otherwise the
        # benchmark goes to production and the shadow's copy is what is compared.
        return {"pinned": True} if pinned_stage(w) else {"invokeCandidate": False}

    def probes_live(self, w: Planned) -> bool:
        # A shadow variant cannot be invoked with TargetVariant; the live judge compares
        # the shadow's copy of production traffic on CloudWatch instead.
        return pinned_stage(w)

    def after_checks(self, w: Planned) -> Outcome | None:
        """The pinned checks passed: move the candidate to a shadow variant of the baseline."""
        if not pinned_stage(w):
            return None
        sm = w.status.sagemaker
        name, config = shadow_config(w)
        w.act(ActionKind.CREATE_ENDPOINT_CONFIG, name, config)
        w.act(
            ActionKind.UPDATE_ENDPOINT,
            w.endpoint_name,
            rq.update_endpoint(
                w.endpoint_name, name, keep_instance_counts=autoscaling.held_off(w.status)
            ),
        )
        sm.candidate_endpoint_config = name
        sm.endpoint_configs = added(sm.endpoint_configs, name)
        w.status.rollout.shadow_stage = ShadowStage.DEPLOYING
        w.record(
            Reason.PINNED_CHECKS_PASSED,
            f"checks on pinned requests passed; the candidate shadows production on {name}",
        )
        return w.wait(f"updating endpoint {w.endpoint_name} to the shadow config {name}")

    def live_from(self, w: Planned) -> datetime:
        # The shadow's copy of the comparison's traffic is what there is to judge.
        return w.status.rollout.step_started_at or w.now

    def before_promotion(self, w: Planned) -> Outcome | None:
        """The objective on the shadow's CloudWatch aggregates, judged with the rest."""
        check = assess.shadow_objective_check(w.spec, live_state(w.status))
        status = w.status
        previous = next((c for c in status.checks if c.name == check.name), None)
        status.checks = [c for c in status.checks if c.name != check.name] + [check]
        if check.candidate is not None:
            latency = w.spec.objective.metric.lower_is_better
            gain = 1.0 - check.candidate if latency else check.candidate - 1.0
            status.objective_gain = round(gain, 4)
        if previous != check:
            w.record(Reason.SHADOW_OBJECTIVE_JUDGED, check.reason)
        return verdicts.apply_or_hold(w)
