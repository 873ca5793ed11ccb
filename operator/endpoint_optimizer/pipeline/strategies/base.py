"""What every rollout strategy answers (Flagger's switch), with the defaults.

The phases ask the strategy wherever the strategies differ, and nowhere else: which
endpoint config deploys the candidate, how traffic moves during the analysis, what a
comparison measures, what happens after the checks pass, whether live CloudWatch
intervals are judged, and how the promotion is made. A new strategy is a module here,
a value of `RolloutStrategy` in the api, and its sandbox behaviour.
"""

from __future__ import annotations

from datetime import datetime

from endpoint_optimizer.api import RolloutStrategy
from endpoint_optimizer.pipeline import plan
from endpoint_optimizer.pipeline.model import EndpointView
from endpoint_optimizer.pipeline.wakeup import Outcome, Planned
from endpoint_optimizer.sagemaker import requests as rq


class Strategy:
    """The defaults; each strategy overrides where it differs."""

    kind: RolloutStrategy
    # Live CloudWatch intervals of the candidate are judged during the analysis.
    judges_live = True

    def candidate_config(self, w: Planned) -> tuple[str, dict[str, object]]:
        """The endpoint config (name, CreateEndpointConfig request) that deploys the candidate."""
        return paired_config(w, w.names.rollout_config, 0)

    def initial_weight(self, w: Planned) -> int:
        """The candidate's share of traffic once deployed, percent."""
        return 0

    def switching(self, w: Planned, endpoint: EndpointView) -> Outcome | None:
        """While the candidate moves between configs of the strategy's own: wait."""
        return None

    def weights_set(self, w: Planned) -> set[int]:
        """The candidate shares (percent) the operator may have set by now: any other
        share SageMaker reports was set by someone else."""
        return {w.status.rollout.canary_weight}

    def traffic(self, w: Planned, endpoint: EndpointView) -> Outcome | None:
        """Move traffic to where the current step wants it."""
        return None

    def compare_request(self, w: Planned) -> dict[str, object]:
        """What the comparison of this step measures (the Compare action's request)."""
        return {}

    def after_checks(self, w: Planned) -> Outcome | None:
        """The step's checks passed: anything before the step's pause?"""
        return None

    def probes_live(self, w: Planned) -> bool:
        """Whether probe requests can be pinned to the candidate (TargetVariant) live."""
        return True

    def live_from(self, w: Planned) -> datetime:
        """Live intervals are judged from the first whole period after this moment."""
        return w.now

    def before_promotion(self, w: Planned) -> Outcome | None:
        """Every step passed: a last judgement before promoting?"""
        return None

    def promotion_deployment(self, w: Planned) -> dict[str, object] | None:
        """UpdateEndpoint's DeploymentConfig for the promotion (None: SageMaker's default)."""
        return None


def paired_config(w: Planned, name: str, candidate_weight: int) -> tuple[str, dict[str, object]]:
    """Baseline and candidate as production variants, the candidate at `candidate_weight` %."""
    baseline_variant = w.baseline_variant
    candidate_variant = w.names.candidate_variant
    weights = rq.canary_weights(baseline_variant, candidate_variant, candidate_weight)
    variants = [
        # The baseline as declared: a search's winner may run on another instance type.
        plan.variant(
            w.declared,
            baseline_variant,
            w.status.sagemaker.baseline_model,
            weights[baseline_variant],
        ),
        plan.variant(
            w.spec,
            candidate_variant,
            w.names.candidate_model,
            weights[candidate_variant],
        ),
    ]
    return name, rq.create_endpoint_config(name, variants, w.owner_tag)
