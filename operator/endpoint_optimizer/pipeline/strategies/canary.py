"""Canary: the candidate takes each step's weight of production traffic, judged live."""

from __future__ import annotations

from endpoint_optimizer.api import RolloutStrategy
from endpoint_optimizer.pipeline.model import ActionKind, EndpointView
from endpoint_optimizer.pipeline.phases.outside import candidate_share
from endpoint_optimizer.pipeline.strategies.base import Strategy, paired_config
from endpoint_optimizer.pipeline.wakeup import Outcome, Planned
from endpoint_optimizer.sagemaker import requests as rq


class Canary(Strategy):
    kind = RolloutStrategy.CANARY

    def candidate_config(self, w: Planned) -> tuple[str, dict[str, object]]:
        return paired_config(w, w.names.rollout_config, w.step_weight(0))

    def initial_weight(self, w: Planned) -> int:
        return w.step_weight(0)

    def weights_set(self, w: Planned) -> set[int]:
        # A crash can lose the status write of a step's advance after its weight shift.
        index = w.status.rollout.step_index
        steps = range(index, min(index + 2, len(w.spec.rollout.steps)))
        return {w.status.rollout.canary_weight, *(w.step_weight(i) for i in steps)}

    def traffic(self, w: Planned, endpoint: EndpointView) -> Outcome | None:
        """The candidate's share as SageMaker reports it, moved to the step's weight."""
        rollout = w.status.rollout
        wanted = w.step_weight(rollout.step_index)
        if abs(candidate_share(w, endpoint) - wanted) <= 0.5:
            return None
        weights = rq.canary_weights(w.baseline_variant, w.names.candidate_variant, wanted)
        w.act(
            ActionKind.UPDATE_WEIGHTS, w.endpoint_name, rq.update_weights(w.endpoint_name, weights)
        )
        rollout.canary_weight = wanted
        return w.wait(f"shifting {wanted} % of traffic to the candidate")
