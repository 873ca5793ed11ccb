"""From a new generation to a built candidate: plan, measure the baseline, run the jobs."""

from __future__ import annotations

import re
from collections.abc import Callable

from endpoint_optimizer.api import OptimizedEndpointSpec, Phase, VariantMeasurements
from endpoint_optimizer.pipeline import fit, plan
from endpoint_optimizer.pipeline.model import IN_PROGRESS_ENDPOINT, IN_PROGRESS_JOB, ActionKind
from endpoint_optimizer.pipeline.phases import components, outside
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.wakeup import DONE, Outcome, Planned, added
from endpoint_optimizer.sagemaker import matrix, ownership, training
from endpoint_optimizer.sagemaker import requests as rq

# sagemaker.naming's resource names end -g<generation>-<hash>.
_GENERATION = re.compile(r"-g(\d+)-[0-9a-f]+$")


def pending(w: Planned) -> Outcome:
    """Plan everything before any AWS call: a spec SageMaker would refuse fails here."""
    if w.status.observed_generation == 0:
        w.status.observed_generation = w.res.generation
        w.names = plan.Names.of(w.res.owner, w.res.generation)
    violations = matrix.check_optimizations(w.spec)
    if violations:
        for violation in violations:
            w.event("Warning", Reason.UNSUPPORTED_COMBINATION, violation.text())
        return w.fail(Reason.UNSUPPORTED_COMBINATION, "; ".join(v.text() for v in violations))
    try:
        plan.baseline_model(w.spec, w.names, w.obs.sources)
        if plan.has_candidate(w.spec):
            plan.optimization_job(w.spec, w.names, w.obs.sources)
            plan.training_job(w.spec, w.names, w.obs.sources)
    except plan.PlanError as exc:
        return w.fail(Reason.UNSUPPORTED_SPEC, str(exc))
    if (refused := refused_alternatives(w)) is not None:
        reason, message = refused
        w.event("Warning", reason, message)
        return w.fail(reason, message)
    w.status.candidate_techniques = w.spec.optimizations.techniques() or (
        ["containerSettings"] if plan.has_candidate(w.spec) else []
    )
    if w.declared.search is not None:
        w.status.candidate_techniques = [
            rung for rung, alternatives in w.declared.search.rungs().items() if alternatives
        ]
    evaluation = w.spec.evaluation
    waiver = evaluation.waiver if evaluation is not None else None
    w.status.evaluation_waiver = waiver or ""
    if waiver is not None:
        # A numerical change let through unjudged: said where people look, every generation.
        w.event(
            "Warning",
            Reason.EVALUATION_WAIVED,
            f"spec.evaluation.waiver: quality is not judged for "
            f"{', '.join(w.status.candidate_techniques) or 'this generation'}: {waiver}",
        )
    return w.goto(
        Phase.BASELINING, Reason.BASELINE_STARTED, f"measuring endpoint {w.endpoint_name}"
    )


def refused(
    w: Planned, spec: OptimizedEndpointSpec, memory: bool = True
) -> tuple[Reason, str] | None:
    """Why `spec`'s candidate cannot be built (the matrix, planning, or, with `memory`, the
    memory fit of another instance type), before any AWS call."""
    violations = matrix.check_optimizations(spec)
    if violations:
        return Reason.UNSUPPORTED_COMBINATION, "; ".join(v.text() for v in violations)
    try:
        plan.optimization_job(spec, w.names, w.obs.sources)
        plan.training_job(spec, w.names, w.obs.sources)
    except plan.PlanError as exc:
        return Reason.UNSUPPORTED_SPEC, str(exc)
    return _does_not_fit(w, spec) if memory else None


def _does_not_fit(w: Planned, spec: OptimizedEndpointSpec) -> tuple[Reason, str] | None:
    """A search stack on another instance type than the declared one: refused, with the
    numbers, when the quantized model and its KV cache cannot fit its accelerator memory."""
    search = w.declared.search
    if search is None or search.memory_fit is None:
        return None
    if spec.instance_type == w.declared.instance_type:
        return None
    shape = search.memory_fit
    q = spec.optimizations.quantization
    if q is None:
        scheme = None
    elif q.scheme is not None:
        scheme = q.scheme.value
    else:  # llm-compressor: W4A16 (the default) stores ~4.25 bits, W8A8 eight
        w4 = str(q.weight_activation.value if q.weight_activation else "W4A16").startswith("W4")
        scheme = "awq" if w4 else "int8"
    found = fit.stack_fit(
        spec.instance_type,
        fit.ModelShape(shape.parameters_billion, shape.layers, shape.kv_heads, shape.head_dim),
        scheme=scheme,
        kv_cache_dtype=spec.container.kv_cache_dtype,
        max_model_len=shape.max_model_len or spec.container.max_model_len or 8192,
        batch=shape.batch or spec.container.max_rolling_batch_size or spec.judged_concurrency(),
        tensor_parallel_degree=spec.container.tensor_parallel_degree,
        utilization=spec.container.gpu_memory_utilization,
    )
    if found.fits:
        return None
    return Reason.UNSUPPORTED_COMBINATION, f"does not fit: {found.why}"


def refused_alternatives(w: Planned) -> tuple[Reason, str] | None:
    """spec.search: every alternative is planned alone first, so one SageMaker would refuse
    fails the spec before any AWS call (stacks of them are planned when they are reached)."""
    search = w.declared.search
    if search is None:
        return None
    for rung, alternatives in search.rungs().items():
        for index, alternative in enumerate(alternatives):
            # An instance type alone is never tried (only on a kept quantization): its
            # memory is checked with the stack it is reached on.
            found = refused(w, w.declared.searched([alternative.name]), memory=False)
            if found is not None:
                reason, message = found
                return reason, f"spec.search.{rung}[{index}] ({alternative.name}): {message}"
    return None


def baselining(w: Planned) -> Outcome:
    sm = w.status.sagemaker
    sm.region = sm.region or w.spec.region
    endpoint = w.obs.endpoint
    if endpoint is None:
        # Seen serving (or adopted) once and now gone: someone deleted it. Recreating it
        # silently would hide that; only a create that never took effect is repeated.
        if sm.endpoint_name and (
            sm.serving_endpoint_config or sm.adopted or sm.baseline_endpoint_config == ""
        ):
            return w.fail(
                Reason.ENDPOINT_DISAPPEARED,
                f"endpoint {w.endpoint_name} was deleted outside the operator; "
                "recreate it or delete this resource",
            )
        return _create_endpoint(w)
    made = _made_with(w, endpoint.config_name)
    if made is not None and not sm.endpoint_name:
        # Made by this resource (deterministic names) before its status was written:
        # pick up where the crash or the stale read left off.
        sm.endpoint_name = w.endpoint_name
        sm.baseline_model = sm.baseline_model or made.baseline_model
        sm.baseline_endpoint_config = sm.baseline_endpoint_config or made.baseline_config
        sm.models = added(sm.models, made.baseline_model)
        sm.endpoint_configs = added(sm.endpoint_configs, made.baseline_config)
        if w.status.baseline is None:
            w.status.baseline = VariantMeasurements(variant_name=made.baseline_variant)
    if not sm.endpoint_name:
        if not w.spec.adopt_existing:
            return w.fail(
                Reason.ENDPOINT_EXISTS,
                f"endpoint {w.endpoint_name} already exists and was not made by this "
                "resource; set spec.adoptExisting: true to optimize it",
            )
        refused = ownership.adoption_refused(
            w.spec.adoption, w.res.owner, w.endpoint_name, endpoint.arn, w.obs.endpoint_tags
        )
        if refused is not None:
            return w.fail(Reason.ADOPTION_NOT_PROVEN, refused)
        sm.endpoint_name = w.endpoint_name
        sm.adopted = True
    if endpoint.status in IN_PROGRESS_ENDPOINT:
        return w.wait(f"endpoint {w.endpoint_name} is {endpoint.status}")
    if (
        sm.baseline_endpoint_config
        and endpoint.config_name != sm.baseline_endpoint_config
        and not w.made_here(endpoint.config_name)
    ):
        return outside.config_changed(w, endpoint)
    if not endpoint.in_service:
        return w.fail(
            Reason.ENDPOINT_FAILED,
            f"endpoint {w.endpoint_name} is {endpoint.status}: "
            f"{endpoint.failure_reason or 'no FailureReason'}",
        )
    if not sm.baseline_endpoint_config:
        # Adopted, or inherited from the previous generation: the serving config is the
        # baseline; its heaviest production variant is the one measured and kept warm.
        sm.baseline_endpoint_config = endpoint.config_name
        heaviest = max(endpoint.variants, key=lambda v: v.current_weight or 0.0, default=None)
        sm.baseline_model = heaviest.model_name if heaviest else ""
        w.status.baseline = VariantMeasurements(variant_name=heaviest.name if heaviest else "")
    sm.serving_endpoint_config = endpoint.config_name
    if w.spec.inference_component is not None and (out := components.adopt_baseline(w)) is not None:
        return out
    baseline = w.status.baseline or VariantMeasurements()
    if baseline.measured_at is None:
        if (out := w.retry_pending(ActionKind.MEASURE_BASELINE)) is not None:
            return out
        w.measure(
            ActionKind.MEASURE_BASELINE, w.endpoint_name, baseline_variant=baseline.variant_name
        )
        return w.wait(f"benchmarking the baseline variant {baseline.variant_name}")
    if w.declared.search is not None:
        return w.goto(
            Phase.SEARCHING,
            Reason.SEARCH_STARTED,
            f"baseline measured; searching {len(w.declared.search.names())} alternatives",
        )
    if not plan.has_candidate(w.spec):
        w.goto(
            Phase.SUCCEEDED,
            Reason.NOTHING_TO_OPTIMIZE,
            "baseline measured; the spec asks for no setting or technique",
        )
        return DONE
    return w.goto(
        Phase.OPTIMIZING, Reason.BASELINE_MEASURED, "baseline measured; building the candidate"
    )


def _made_with(w: Planned, config: str) -> plan.Names | None:
    """The names `config` was made with, if it is this resource's: this generation's
    baseline, rollout or promoted config, or an earlier generation's baseline config (the
    first wake-up created the endpoint and lost its status write, then the spec changed)."""
    if config in (w.names.baseline_config, w.names.rollout_config, w.names.promoted_config):
        return w.names
    found = _GENERATION.search(config)
    if found is None or int(found.group(1)) >= w.res.generation:
        return None
    earlier = plan.Names.of(w.res.owner, int(found.group(1)))
    return earlier if config == earlier.baseline_config else None


def _create_endpoint(w: Planned) -> Outcome:
    sm = w.status.sagemaker
    model = plan.baseline_model(w.spec, w.names, w.obs.sources)
    config = rq.create_endpoint_config(
        w.names.baseline_config,
        [plan.variant(w.declared, w.names.baseline_variant, model.name)],
        w.owner_tag,
    )
    w.act(ActionKind.CREATE_MODEL, model.name, rq.create_model(model, w.owner_tag))
    w.act(ActionKind.CREATE_ENDPOINT_CONFIG, w.names.baseline_config, config)
    w.act(
        ActionKind.CREATE_ENDPOINT,
        w.endpoint_name,
        rq.create_endpoint(w.endpoint_name, w.names.baseline_config, w.owner_tag),
    )
    sm.endpoint_name = w.endpoint_name
    sm.baseline_model = model.name
    sm.baseline_endpoint_config = w.names.baseline_config
    sm.models = added(sm.models, model.name)
    sm.endpoint_configs = added(sm.endpoint_configs, w.names.baseline_config)
    w.status.baseline = VariantMeasurements(variant_name=w.names.baseline_variant)
    return w.wait(f"creating endpoint {w.endpoint_name}")


def optimizing(w: Planned) -> Outcome:
    sm = w.status.sagemaker
    endpoint = w.obs.endpoint
    if (
        endpoint is not None
        and endpoint.status not in IN_PROGRESS_ENDPOINT
        and endpoint.config_name != sm.baseline_endpoint_config
        and not w.made_here(endpoint.config_name)
    ):
        return outside.config_changed(w, endpoint)
    if (out := jobs(w)) is not None:
        return out
    return w.goto(Phase.DEPLOYING, Reason.CANDIDATE_BUILT, "deploying the candidate")


def jobs(w: Planned) -> Outcome | None:
    """Start the candidate's training and optimization jobs and wait on them; None once
    every job it needs has COMPLETED (or it needs none)."""
    trained = plan.training_job(w.spec, w.names, w.obs.sources)
    if (
        trained is not None
        and (
            out := _job(
                w,
                "llm-compressor training job",
                trained.name,
                lambda: _start_training(w, trained),
                Reason.TRAINING_JOB_FAILED,
            )
        )
        is not None
    ):
        return out
    job = plan.optimization_job(w.spec, w.names, w.obs.sources)
    if (
        job is not None
        and (
            out := _job(
                w,
                "optimization job",
                job.name,
                lambda: _start_optimization(w, job),
                Reason.OPTIMIZATION_JOB_FAILED,
            )
        )
        is not None
    ):
        return out
    return None


def start_ahead(w: Planned, spec: OptimizedEndpointSpec, names: plan.Names) -> list[str]:
    """Start the jobs `spec`'s candidate needs under `names` before its turn (spec.search
    builds a rung's alternatives side by side); the names of those started now. A job
    status already names was started before: SageMaker has it (or adopts it again)."""
    sm = w.status.sagemaker
    started = []
    trained = plan.training_job(spec, names, w.obs.sources)
    if trained is not None and trained.name not in sm.training_jobs:
        _start_training(w, trained)
        started.append(trained.name)
    job = plan.optimization_job(spec, names, w.obs.sources)
    if job is not None and job.name not in sm.optimization_jobs:
        _start_optimization(w, job)
        started.append(job.name)
    return started


def _start_training(w: Planned, trained: training.QuantizationTrainingJob) -> None:
    sm = w.status.sagemaker
    w.act(
        ActionKind.PUT_OBJECT,
        trained.source_s3_uri,
        training.upload_source_request(trained.source_s3_uri),
    )
    w.act(
        ActionKind.CREATE_TRAINING_JOB,
        trained.name,
        training.create_training_job(trained, w.owner_tag),
    )
    sm.training_jobs = added(sm.training_jobs, trained.name)


def _start_optimization(w: Planned, job: rq.OptimizationJob) -> None:
    sm = w.status.sagemaker
    w.act(
        ActionKind.CREATE_OPTIMIZATION_JOB, job.name, rq.create_optimization_job(job, w.owner_tag)
    )
    sm.optimization_jobs = added(sm.optimization_jobs, job.name)


def _job(
    w: Planned, what: str, name: str, start: Callable[[], None], failed: Reason
) -> Outcome | None:
    """Start the job when SageMaker does not have it, wait while it runs; None once done.

    Any end but COMPLETED fails the resource (Terminal): a failed job is never started
    again under the same name, since the name is derived from the generation.
    """
    observed = w.obs.jobs.get(name)
    if observed is None:
        start()
        return w.wait(f"starting {what} {name}")
    if observed.status in IN_PROGRESS_JOB:
        return w.wait(f"{what} {name} is {observed.status}")
    if observed.status != "COMPLETED":
        return w.fail(
            failed,
            f"{what} {name} {observed.status}: "
            f"{observed.failure_reason or 'no FailureReason'}; the baseline keeps "
            "serving. A failed job is not started again unchanged: fix what "
            "FailureReason names, then change the spec to start a new generation",
        )
    return None
