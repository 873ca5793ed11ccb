"""speculativeDecoding.concurrencyCutoff: apply: the candidate is re-made with the engine's
switch for the concurrency above which speculation stops winning, before the canary goes on.

The step's comparison measured the candidate at every benchmark level; record.py wrote the
cut-off it found (status.rollout.speculationCutoff). When there is one, the operator makes
the cut-off candidate (plan.cutoff_model: the candidate's job, image, weights and settings,
with vLLM's num_speculative_tokens_per_batch_size drafting nothing above the cut-off) and a
config that serves it under the candidate variant's name and weight next to the baseline,
and updates the endpoint. Once SageMaker serves it, the step starts again with a fresh
comparison and live judge: the re-made candidate is judged as the candidate was, and
promoted (promote.py serves status.sagemaker.candidateModel) or rolled back like it. Once
only, in the canary (the strategy whose comparison comes before most traffic moves); other
strategies record the cut-off and leave the candidate as it is.

Crash-safe like the speculation-free twin (speculation.py): the names are deterministic,
the cut-off record names its model and config in the wake-up that asks for the update, a
create repeated after a crash adopts its own resource, and the config found serving without
that record is recorded, never made again.
"""

from __future__ import annotations

from endpoint_optimizer.api import (
    ConcurrencyCutoff,
    RolloutStrategy,
    SpeculationCutoff,
    VariantMeasurements,
)
from endpoint_optimizer.api.live import LiveState
from endpoint_optimizer.pipeline import autoscaling, plan
from endpoint_optimizer.pipeline.model import EndpointView
from endpoint_optimizer.pipeline.phases import rollback, speculation
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.wakeup import Outcome, Planned, added
from endpoint_optimizer.sagemaker import requests as rq


def begin(w: Planned) -> Outcome | None:
    """The re-made candidate asked for, when a comparison found a cut-off to apply."""
    found = w.status.rollout.speculation_cutoff
    speculative = w.spec.optimizations.speculative_decoding
    if (
        found is None
        or found.batch_size is None
        or found.model
        or speculative is None
        or speculative.concurrency_cutoff is not ConcurrencyCutoff.APPLY
        or w.spec.rollout.strategy is not RolloutStrategy.CANARY
        or w.status.rollout.speculation_disabled is not None
    ):
        return None
    try:
        model = _model(w, found)
    except plan.PlanError as exc:
        found.switch = f"nothing: {exc}"[:1024]
        return None
    if (held := autoscaling.clear_before_update(w)) is not None:
        return held
    _record(w, found, model.name)
    _request(w, model)
    message = (
        f"{found.reason}: re-making the candidate as {model.name} with no drafts above "
        f"{found.batch_size} running requests per instance (concurrencyCutoff: apply); it "
        f"takes the candidate's place on {found.endpoint_config}"
    )
    w.event("Normal", Reason.SPECULATION_CUTOFF_APPLYING, message)
    w.record(Reason.SPECULATION_CUTOFF_APPLYING, message)
    return w.wait(message)


def switching(w: Planned, endpoint: EndpointView) -> Outcome | None:
    """Asked for: recorded once it serves, asked again while SageMaker has not taken it,
    rolled back when SageMaker refused it. None: the phase goes on."""
    found = w.status.rollout.speculation_cutoff
    config = w.names.cutoff_rollout_config
    if found is None:
        return None
    if not found.model:
        if endpoint.config_name != config or found.batch_size is None:
            return None
        # The update was asked for and its status write was lost: record what serves.
        _record(w, found, w.names.cutoff_model)
    if endpoint.config_name == found.endpoint_config:
        if found.serving_at is None and endpoint.in_service:
            _serving(w, found)
        return None
    if endpoint.config_name != w.names.rollout_config or found.serving_at is not None:
        return None  # the phase decides what else serves (gone, the twin, someone else)
    if not w.obs.endpoint_described:
        return w.wait(f"applying the cut-off: waiting for a fresh view of {endpoint.name}")
    if endpoint.failure_reason:
        return rollback.begin(
            w,
            Reason.SPECULATION_CUTOFF_FAILED,
            f"UpdateEndpoint to the cut-off config {found.endpoint_config} failed and "
            f"SageMaker kept {endpoint.config_name}: {endpoint.failure_reason}",
        )
    try:
        model = _model(w, found)
    except plan.PlanError as exc:
        return rollback.begin(w, Reason.SPECULATION_CUTOFF_FAILED, f"no cut-off model: {exc}")
    if (held := autoscaling.clear_before_update(w)) is not None:
        return held
    _request(w, model)
    return w.wait(
        f"applying the cut-off: updating endpoint {w.endpoint_name} to "
        f"{found.endpoint_config} (again)"
    )


def _model(w: Planned, found: SpeculationCutoff) -> rq.ServingModel:
    assert found.batch_size is not None
    return plan.cutoff_model(
        w.spec, w.names, w.obs.jobs.get(w.names.job), found.batch_size, w.obs.sources
    )


def _record(w: Planned, found: SpeculationCutoff, model: str) -> None:
    found.model = model
    found.endpoint_config = w.names.cutoff_rollout_config
    found.switch = (
        f"OPTION_SPECULATIVE_CONFIG num_speculative_tokens_per_batch_size on {model}: no "
        f"drafts above {found.batch_size} running requests per instance (vLLM 0.25 or later)"
    )
    sm = w.status.sagemaker
    sm.candidate_model = model
    sm.candidate_endpoint_config = found.endpoint_config
    sm.models = added(sm.models, model)
    sm.endpoint_configs = added(sm.endpoint_configs, found.endpoint_config)


def _request(w: Planned, model: rq.ServingModel) -> None:
    """CreateModel, CreateEndpointConfig and UpdateEndpoint (create-or-adopt)."""
    speculation.serve_remade(w, model, w.names.cutoff_rollout_config, canary=True)


def _serving(w: Planned, found: SpeculationCutoff) -> None:
    """It serves: the step starts again (what the judges knew was of the candidate
    without the cut-off)."""
    status = w.status
    rollout = status.rollout
    found.serving_at = w.now
    status.checks = []
    noise = rollout.live_judge.noise if rollout.live_judge is not None else None
    rollout.live_judge = LiveState(noise=noise)
    rollout.live_read_until = None
    rollout.compared_step = None
    rollout.step_started_at = w.now
    status.candidate = VariantMeasurements(variant_name=w.names.candidate_variant)
    message = (
        f"the cut-off candidate {found.model} serves on {found.endpoint_config} (no drafts "
        f"above {found.batch_size} running requests per instance); step "
        f"{rollout.step_index + 1} starts again for it at {rollout.canary_weight} %, with its "
        "pinned comparison and a fresh live judge"
    )
    w.event("Normal", Reason.SPECULATION_CUTOFF_APPLIED, message)
    w.record(Reason.SPECULATION_CUTOFF_APPLIED, message)
    status.message = message[:1024]
