"""spec.search: each candidate built, served at weight 0 beside the current best, compared
with it, and kept or not; then the winner goes on to the usual rollout.

One candidate at a time (pipeline/search.py decides which): its jobs, then an endpoint
config with the baseline at weight 1 (users stay on it), the current best at weight 0
(when the best is not the baseline itself) and the candidate at weight 0, then a paired
comparison pinned to the candidate and the current best (TargetVariant), judged with the
same benchmark and eval as the rollout's. Its row in status.search is the only memory:
names derive from the stack, so a restart finds what it made. When the search is done,
the winner is built (its jobs already ran), deployed and judged against the baseline as
any candidate is; when nothing paid, traffic never left the baseline and the candidates'
config goes.
"""

from __future__ import annotations

from endpoint_optimizer.api import Phase, SearchRow, SearchStatus
from endpoint_optimizer.pipeline import autoscaling, plan, pricing
from endpoint_optimizer.pipeline.model import IN_PROGRESS_ENDPOINT, IN_PROGRESS_JOB, ActionKind
from endpoint_optimizer.pipeline.phases import build, deploy, generation, outside, rollback
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.search import Done, State, advance
from endpoint_optimizer.pipeline.search_status import (
    budget,
    from_state,
    in_flight,
    ladder,
    to_state,
)
from endpoint_optimizer.pipeline.wakeup import DONE, Outcome, Planned, added
from endpoint_optimizer.sagemaker import requests as rq


def _price(w: Planned, search: SearchStatus) -> None:
    """The price each row's cost is computed from: the spec's, else what was looked up."""
    given = pricing.from_spec(w.declared)
    if given is not None:
        search.price, search.price_problem = given, ""
    elif w.obs.price is not None:
        search.price, search.price_problem = w.obs.price, ""
    elif w.obs.price_problem and search.price is None:
        search.price_problem = w.obs.price_problem[:512]
    known = {p.instance_type for p in search.prices}
    search.prices = [*search.prices, *(p for p in w.obs.prices if p.instance_type not in known)][:8]


def _memory(w: Planned, search: SearchStatus) -> None:
    """A measured candidate's peak GPU memory, as CloudWatch read it this wake-up."""
    if w.obs.gpu_memory is None:
        return
    name, peak = w.obs.gpu_memory
    row = next((r for r in search.rows if r.name == name), None)
    if row is not None and not row.gpu_memory_read:
        row.gpu_memory_read = True
        row.peak_gpu_memory_percent = round(peak, 2) if peak is not None else None


def searching(w: Planned) -> Outcome:
    endpoint = w.obs.endpoint
    sm = w.status.sagemaker
    if endpoint is None:
        return w.fail(Reason.ENDPOINT_DISAPPEARED, f"endpoint {w.endpoint_name} no longer exists")
    if endpoint.status in IN_PROGRESS_ENDPOINT:
        return w.wait(f"endpoint {w.endpoint_name} is {endpoint.status}")
    if endpoint.config_name != sm.baseline_endpoint_config and not w.made_here(
        endpoint.config_name
    ):
        return outside.config_changed(w, endpoint)
    declared = w.declared
    state, action = advance(ladder(declared), budget(declared), to_state(_search(w)))
    w.status.search = from_state(
        state, w.status.search, w.declared.objective.metric.lower_is_better
    )
    _price(w, w.status.search)
    _memory(w, w.status.search)
    w.searched()
    if isinstance(action, Done):
        return _finish(w, action)
    row = in_flight(w.status.search)
    assert row is not None and row.name == action.name
    stack = (*action.base, action.name)
    label = f"{row.name} on [{', '.join(action.base) or 'baseline'}]"
    if not row.started_at and (found := build.refused(w, w.spec)) is not None:
        # A stack SageMaker would refuse (the alternatives passed alone at Pending): the
        # candidate is not measured, nothing is made, and the search goes on without it.
        reason, message = found
        row.measured = True
        row.why = f"refused before any AWS call: {message}"[:512]
        w.event("Warning", reason.value, f"search candidate {label}: {message}")
        w.record(Reason.SEARCH_CANDIDATE_REFUSED, f"{label}: {message}")
        return w.wait(f"search candidate {label} refused; going on")
    job = w.obs.jobs.get(w.names.job)
    if job is not None and job.status not in IN_PROGRESS_JOB and job.status != "COMPLETED":
        # This candidate cannot be built; the search goes on without it (a job failed for
        # a fixed spec.optimizations ends the pipeline instead: there is nothing else).
        return _drop(
            w, row, label, f"job {job.name} {job.status}: {job.failure_reason or 'no reason'}"
        )
    _build_ahead(w, state, action.base)
    if (out := build.jobs(w)) is not None:
        return out
    config_name = plan.search_config(w.res.owner, w.generation, stack)
    if endpoint.config_name != config_name:
        if not endpoint.in_service:
            return w.fail(
                Reason.ENDPOINT_FAILED, f"endpoint {w.endpoint_name} is {endpoint.status}"
            )
        if row.started_at is not None and endpoint.failure_reason:
            # We asked for its config and SageMaker went back to the one before: the
            # candidate does not deploy (capacity, a container that does not start).
            return _drop(
                w, row, label, f"UpdateEndpoint to {config_name} failed: {endpoint.failure_reason}"
            )
        return _deploy(w, config_name, action.base, label)
    if not endpoint.in_service:
        return w.fail(Reason.ENDPOINT_FAILED, f"endpoint {w.endpoint_name} is {endpoint.status}")
    sm.serving_endpoint_config = endpoint.config_name
    row.variant = w.names.candidate_variant
    row.started_at = row.started_at or w.now
    if row.in_service_seconds is None:
        # From the UpdateEndpoint that deployed it to InService as first seen, in the spec's
        # time (the seed's reason to quantize ahead of time is a faster cold start).
        waited = (w.now - row.started_at).total_seconds()
        row.in_service_seconds = round(waited / w.scaled(1.0), 1)
    # Its comparison, once: pipeline/record.py marks the row measured, and the next
    # wake-up's advance() moves on to the next candidate.
    if (out := w.retry_pending(ActionKind.COMPARE)) is not None:
        return out
    w.measure(
        ActionKind.COMPARE,
        w.endpoint_name,
        request={},
        baseline_variant=_reference_variant(w, action.base),
        candidate_variant=w.names.candidate_variant,
        step=0,
    )
    return w.wait(f"comparing search candidate {label}")


def _build_ahead(w: Planned, state: State, base: tuple[str, ...]) -> None:
    """Start the jobs of the next alternatives of the rung being walked (search.parallelJobs
    in all, the one measured included), so a rung's jobs build side by side instead of
    one after the other. They are built on the same base; one the search never reaches
    (the budget ends it first) is stopped when it ends (_stop_unreached)."""
    declared = w.declared
    assert declared.search is not None
    seen = {r.name for r in state.rows}
    pending = [a.name for a in ladder(declared).rung(state.rung) if a.name not in seen]
    ahead = declared.search.parallel_jobs - 1
    if declared.search.budget.candidates is not None:
        # Never build what the candidate budget cannot measure.
        ahead = min(ahead, declared.search.budget.candidates - state.candidates)
    for name in pending[: max(0, ahead)]:
        stack = (*base, name)
        spec = declared.searched(stack)
        if build.refused(w, spec) is not None:
            continue  # refused when its turn comes, with the reason
        started = build.start_ahead(w, spec, _names(w, stack))
        if started:
            w.record(Reason.SEARCH_BUILDING_AHEAD, f"{name}: {', '.join(started)}")


def _drop(w: Planned, row: SearchRow, label: str, why: str) -> Outcome:
    """The candidate is not measured: GateFailed with `why`; the search goes on."""
    row.measured = True
    row.why = why[:512]
    w.event("Warning", Reason.SEARCH_CANDIDATE_FAILED, f"search candidate {label}: {why}")
    w.record(Reason.SEARCH_CANDIDATE_FAILED, f"{label}: {why}")
    return Phase.SEARCHING


def _search(w: Planned) -> SearchStatus:
    if w.status.search is None:
        w.status.search = SearchStatus()
    return w.status.search


def _names(w: Planned, stack: tuple[str, ...]) -> plan.Names:
    return plan.search_names(
        plan.Names.of(w.res.owner, w.generation), w.res.owner, w.generation, stack
    )


def _reference_variant(w: Planned, base: tuple[str, ...]) -> str:
    """What the candidate is measured against: the current best's variant, or the
    baseline's while the best is the baseline itself."""
    return _names(w, base).candidate_variant if base else w.baseline_variant


def _deploy(w: Planned, config_name: str, base: tuple[str, ...], label: str) -> Outcome:
    """The baseline at weight 1, the current best and the candidate at weight 0."""
    sm = w.status.sagemaker
    job = w.obs.jobs.get(w.names.job)
    try:
        model = plan.candidate_model(w.spec, w.names, job, w.obs.sources)
    except plan.PlanError as exc:
        return w.fail(Reason.UNSUPPORTED_SPEC, str(exc))
    if (held := autoscaling.clear_before_update(w)) is not None:
        return held
    # Each on its own instance type: the baseline as declared, the best as its stack says.
    variants = [plan.variant(w.declared, w.baseline_variant, sm.baseline_model, 1.0)]
    if base:
        best = _names(w, base)
        on = w.declared.searched(base)
        variants.append(plan.variant(on, best.candidate_variant, best.candidate_model, 0.0))
    variants.append(plan.variant(w.spec, w.names.candidate_variant, model.name, 0.0))
    deploy.update_to(
        w, model, config_name, rq.create_endpoint_config(config_name, variants, w.owner_tag)
    )
    row = in_flight(_search(w))
    assert row is not None
    row.started_at = w.now
    row.variant = w.names.candidate_variant
    sm.models = added(sm.models, model.name)
    sm.endpoint_configs = added(sm.endpoint_configs, config_name)
    return w.wait(f"deploying search candidate {label} at weight 0 on {config_name}")


def _stop_unreached(w: Planned, search: SearchStatus) -> None:
    """Stop the jobs started ahead (search.parallelJobs) for candidates the search never
    reached: the budget ended it, or the ladder moved on first. Nothing will use them, and
    a quantization job bills its instance until it ends. A job that already ended answers
    the stop with ValidationException, which aws/perform.py takes as done."""
    # At the end every reached candidate is measured (or dropped, or refused); the rows of
    # the others (NotRun) name the base they would have had.
    reached = {_names(w, (*row.base, row.name)).job for row in search.rows if row.measured}
    generation.stop_jobs(w, lambda job: job not in reached)


def _finish(w: Planned, done: Done) -> Outcome:
    search = w.status.search
    assert search is not None
    _stop_unreached(w, search)
    if not done.stack:
        return rollback.begin(w, Reason.NO_IMPROVEMENT, f"search: {done.why}")
    w.status.candidate_techniques = w.spec.optimizations.techniques() or ["containerSettings"]
    if w.spec.container.model_dump(exclude_none=True) and w.spec.optimizations.techniques():
        w.status.candidate_techniques = ["containerSettings", *w.status.candidate_techniques]
    w.goto(
        Phase.OPTIMIZING,
        Reason.SEARCH_DONE,
        f"search done ({done.why}); rolling out {' + '.join(done.stack)}",
    )
    # The next wake-up observes the winner's jobs (this one described the last candidate's).
    return DONE
