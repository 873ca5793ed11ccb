"""Changes someone else made to the endpoint during a rollout: humans win.

The operator never silently reverts a person. A change to the variant weights or to
the serving config that the operator did not make pauses the rollout and says so
(Event, condition, history); it stays until a person pulls a lever:

- optimizer.dev/approve adopts it: weights changed, the rollout resumes from where it
  was (its weights are applied again); config changed, the config serving now is the
  new baseline, measured again before a candidate is deployed next to it;
- optimizer.dev/rollback returns traffic to the baseline, as any rollback does.
"""

from __future__ import annotations

from endpoint_optimizer.api import OutsideChange, Phase, VariantMeasurements
from endpoint_optimizer.pipeline.model import APPROVE, ROLLBACK, EndpointView
from endpoint_optimizer.pipeline.phases import rollback
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.wakeup import DONE, Outcome, Planned, Wakeup

_LEVERS = "annotate optimizer.dev/approve=<new value> to adopt it, or optimizer.dev/rollback"


def candidate_share(w: Wakeup, endpoint: EndpointView) -> float:
    """The candidate variant's share of production traffic, percent, as SageMaker reports."""
    observed = endpoint.variant(w.names.candidate_variant)
    total = sum((v.current_weight or 0.0) for v in endpoint.variants) or 1.0
    return 100.0 * (observed.current_weight or 0.0) / total if observed else 0.0


def weights_changed(w: Planned, endpoint: EndpointView) -> Outcome | None:
    """The candidate's share is not what the operator set last: someone moved it."""
    set_last = w.status.rollout.canary_weight
    share = candidate_share(w, endpoint)
    if any(abs(share - weight) <= 0.5 for weight in w.strategy.weights_set(w)):
        return None
    return _pause(
        w,
        OutsideChange(
            kind="weights",
            seen=f"the candidate variant serves {share:.0f} % of traffic; the operator set "
            f"{set_last} %",
            at=w.now,
        ),
    )


def config_changed(w: Wakeup, endpoint: EndpointView) -> Outcome:
    """The endpoint serves a config the operator did not make."""
    return _pause(
        w,
        OutsideChange(
            kind="config",
            seen=f"endpoint {endpoint.name} serves {endpoint.config_name}, a config the "
            f"operator did not make (it expected {_expected(w)})",
            config=endpoint.config_name,
            at=w.now,
        ),
    )


def _expected(w: Wakeup) -> str:
    sm = w.status.sagemaker
    if w.status.phase in (Phase.ANALYZING, Phase.AWAITING_APPROVAL, Phase.PROMOTING):
        return sm.candidate_endpoint_config or sm.baseline_endpoint_config
    return sm.baseline_endpoint_config


def _pause(w: Wakeup, change: OutsideChange) -> Outcome:
    status = w.status
    status.rollout.outside_change = change
    status.paused = True
    message = f"paused: {change.seen}; the operator leaves it as it is. {_LEVERS}"
    w.event("Warning", Reason.OUTSIDE_CHANGE, message)
    w.record(Reason.OUTSIDE_CHANGE, message)
    return w.wait(message)


def resolve(w: Planned) -> Outcome:
    """While an outside change holds the rollout: act on a lever, or keep waiting."""
    change = w.status.rollout.outside_change
    assert change is not None
    status = w.status
    if w.lever_pending(ROLLBACK):
        w.consume_lever(ROLLBACK)
        status.rollout.outside_change = None
        status.paused = False
        return rollback.begin(
            w, Reason.MANUAL_ROLLBACK, f"rollback requested by annotation after: {change.seen}"
        )
    if not w.lever_pending(APPROVE):
        status.paused = True
        return w.wait(f"paused: {change.seen}; the operator leaves it as it is. {_LEVERS}")
    w.consume_lever(APPROVE)
    status.rollout.outside_change = None
    status.paused = False
    endpoint = w.obs.endpoint
    if change.kind == "weights":
        # The weights found become the last ones set: the strategy moves on from there.
        share = candidate_share(w, endpoint) if endpoint is not None else 0.0
        status.rollout.canary_weight = round(share)
        w.record(Reason.OUTSIDE_CHANGE_ADOPTED, f"resuming the rollout after: {change.seen}")
        return status.phase
    if status.sagemaker.candidate_endpoint_config:
        # A candidate config was deployed and replaced: its comparison is void. What
        # serves now stays; a new spec generation optimizes again from it.
        status.rollout.rollback_reason = Reason.MANUAL_ROLLBACK.rollback
        w.goto(
            Phase.ROLLED_BACK,
            Reason.OUTSIDE_CHANGE_ADOPTED,
            f"{change.config} serves (approved); the candidate is not rolled out. Change "
            "the spec to optimize again from what serves now",
        )
        return DONE
    return _adopt_config(w, change)


def _adopt_config(w: Planned, change: OutsideChange) -> Outcome:
    """Before any candidate config: the config serving now is the new baseline, measured
    again before the candidate is deployed next to it."""
    status = w.status
    sm = status.sagemaker
    endpoint = w.obs.endpoint
    heaviest = (
        max(endpoint.variants, key=lambda v: v.current_weight or 0.0, default=None)
        if endpoint is not None
        else None
    )
    sm.baseline_endpoint_config = change.config
    sm.baseline_model = heaviest.model_name if heaviest else ""
    sm.serving_endpoint_config = change.config
    status.baseline = VariantMeasurements(variant_name=heaviest.name if heaviest else "")
    w.goto(
        Phase.BASELINING,
        Reason.OUTSIDE_CHANGE_ADOPTED,
        f"{change.config} is the new baseline (approved); measuring it before the candidate "
        "is deployed next to it",
    )
    return DONE
