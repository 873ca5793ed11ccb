"""From a spec to SageMaker blueprints: the baseline model, the optimization job, the candidate.

Pure: the names come from `Owner.resource_name` at the pipeline's generation, the
default image from the SDK's table, a JumpStart model's image, artifacts, environment
and drafts from its resolved metadata (`sources`, an observation the controller reads
through aws.jumpstart), and the job's results (image, artifacts) from what
DescribeOptimizationJob reported. What each technique contributes comes from the
techniques table (sagemaker/techniques/), read in its order. The candidate's
environment carries the baseline's, then each technique's settings, then each job
element's OverrideEnvironment (as the SageMaker SDK does), then the options set at
deployment (speculative decoding's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from endpoint_optimizer.api import (
    DraftProvider,
    OptimizedEndpointSpec,
    QuantizationVia,
    SpeculativeMethod,
)
from endpoint_optimizer.pipeline.model import JobView
from endpoint_optimizer.pipeline.search import stack_key
from endpoint_optimizer.sagemaker import images, jumpstart, techniques, training
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker.naming import Owner
from endpoint_optimizer.sagemaker.techniques import TECHNIQUES
from endpoint_optimizer.sagemaker.techniques.speculative import with_batch_cutoff


class PlanError(ValueError):
    """The spec asks for something this operator cannot build; the message names the field."""


@dataclass(frozen=True)
class Names:
    """Every SageMaker name of one pipeline generation."""

    baseline_model: str
    baseline_config: str
    baseline_variant: str
    candidate_model: str
    candidate_variant: str
    rollout_config: str
    # Shadow with an eval set or an acceptance floor: the candidate first serves as a
    # weight-0 production variant here, so pinned requests (TargetVariant) can reach it.
    pinned_config: str
    promoted_config: str
    job: str
    alarm_prefix: str
    # onAcceptanceDrift: disableSpeculation: the candidate's speculation-free twin, and the
    # configs that serve it in the canary's place or in the promoted config's.
    twin_model: str
    twin_rollout_config: str
    twin_promoted_config: str
    # speculativeDecoding.concurrencyCutoff: apply: the candidate re-made with the engine's
    # batch-size cut-off, and the canary config that serves it in the candidate's place.
    cutoff_model: str
    cutoff_rollout_config: str
    # spec.inferenceComponent: the candidate as a second inference component.
    candidate_component: str

    @classmethod
    def of(cls, owner: Owner, generation: int) -> Names:
        return cls(
            baseline_model=owner.resource_name("base", generation),
            baseline_config=owner.resource_name("base", generation),
            baseline_variant=owner.variant_name("baseline", generation),
            candidate_model=owner.resource_name("cand", generation),
            candidate_variant=owner.variant_name("candidate", generation),
            rollout_config=owner.resource_name("rollout", generation),
            pinned_config=owner.resource_name("pinned", generation),
            promoted_config=owner.resource_name("promoted", generation),
            job=owner.resource_name("opt", generation),
            alarm_prefix=owner.resource_name("alarm", generation),
            twin_model=owner.resource_name("nospec", generation),
            twin_rollout_config=owner.resource_name("nospec-rollout", generation),
            twin_promoted_config=owner.resource_name("nospec-promoted", generation),
            cutoff_model=owner.resource_name("cutoff", generation),
            cutoff_rollout_config=owner.resource_name("cutoff-rollout", generation),
            candidate_component=owner.resource_name("ic", generation),
        )


def search_names(names: Names, owner: Owner, generation: int, stack: Sequence[str]) -> Names:
    """The names of the search candidate `stack` (spec.search alternatives, in rung order):
    its model, variant and job, deterministic in the stack, so a restart finds what it made.
    The generation's other names stay: the winner is rolled out on the usual configs."""
    if not stack:
        return names
    key = stack_key(stack)
    return replace(
        names,
        candidate_model=owner.resource_name(f"c{key}", generation),
        candidate_variant=owner.variant_name(f"c{key}", generation),
        job=owner.resource_name(f"o{key}", generation),
    )


def search_config(owner: Owner, generation: int, stack: Sequence[str]) -> str:
    """The endpoint config that serves the search candidate `stack` at weight 0."""
    return owner.resource_name(f"s{stack_key(stack)}", generation)


def _jumpstart(
    spec: OptimizedEndpointSpec, sources: jumpstart.ModelSources | None
) -> jumpstart.JumpStartModel | None:
    """The resolved JumpStart model of spec.model, or None for another source."""
    model_id = spec.model.jump_start_model_id
    if model_id is None:
        return None
    if sources is None or sources.model is None:
        raise PlanError(
            sources.problem
            if sources is not None and sources.problem
            else f"{jumpstart.MODEL_FIELD}: the JumpStart metadata of {model_id} has not been "
            "read; it is read from the region's JumpStart bucket before planning"
        )
    if sources.model.gated and not spec.model.accept_eula:
        raise PlanError(
            f"spec.model.acceptEula: {model_id} is a gated model whose licence must be "
            f"accepted ({sources.model.eula_uri(spec.region)}); read it and set "
            "spec.model.acceptEula: true"
        )
    return sources.model


def _image(
    spec: OptimizedEndpointSpec,
    compiled: bool = False,
    sources: jumpstart.ModelSources | None = None,
) -> str:
    if spec.model.image:
        return spec.model.image
    resolved = _jumpstart(spec, sources)
    if resolved is not None and resolved.image is not None and not compiled:
        return resolved.image
    try:
        return images.default_image(
            spec.region, images.framework_for(spec.instance_type, compiled=compiled)
        )
    except images.ImageLookupError as exc:
        raise PlanError(f"spec.model.image: {exc}") from None


def _weights(
    spec: OptimizedEndpointSpec, sources: jumpstart.ModelSources | None = None
) -> str | None:
    """The S3 prefix of the weights; None for a Hugging Face id (the container downloads)."""
    resolved = _jumpstart(spec, sources)
    if resolved is not None:
        return resolved.artifact_s3_uri
    return spec.model.s3_uri


# LMI reads a Hub model from these; the SDK drops them when weights come from S3.
_HUB_ENVIRONMENT = ("HF_MODEL_ID", "HF_REVISION")


def _model_environment(
    spec: OptimizedEndpointSpec, sources: jumpstart.ModelSources | None
) -> dict[str, str]:
    """The source's default environment under the spec's (the spec wins, as in the SDK)."""
    resolved = _jumpstart(spec, sources)
    defaults = dict(resolved.environment) if resolved is not None else {}
    if spec.model.hf_model_id is not None:
        defaults["HF_MODEL_ID"] = spec.model.hf_model_id
        if spec.model.hf_revision is not None:
            defaults["HF_REVISION"] = spec.model.hf_revision
    return {**defaults, **spec.model.environment}


def network(spec: OptimizedEndpointSpec) -> rq.Network | None:
    """spec.network for the request builders; refuses what isolation would break."""
    net = spec.network
    if net is None:
        return None
    if net.enable_network_isolation:
        speculative = spec.optimizations.speculative_decoding
        draft = speculative.draft_model if speculative is not None else None
        quantization = spec.optimizations.quantization
        downloads = [
            (spec.model.hf_model_id is not None, "model.hfModelId (the container downloads it)"),
            (
                draft is not None and draft.hf_model_id is not None,
                "a Hugging Face draft (the container downloads it)",
            ),
            (
                quantization is not None and quantization.via is QuantizationVia.LLM_COMPRESSOR,
                "quantization via llmCompressor (the job installs llm-compressor from PyPI)",
            ),
        ]
        for present, what in downloads:
            if present:
                raise PlanError(
                    f"spec.network.enableNetworkIsolation: an isolated container has no network, "
                    f"but {what}; turn isolation off or give the weights in S3"
                )
    return rq.Network(
        subnets=tuple(net.subnets or ()),
        security_group_ids=tuple(net.security_group_ids or ()),
        isolation=net.enable_network_isolation,
        volume_kms_key_id=net.volume_kms_key_id,
        output_kms_key_id=net.output_kms_key_id,
    )


def _accept_eula(spec: OptimizedEndpointSpec, sources: jumpstart.ModelSources | None) -> bool:
    resolved = _jumpstart(spec, sources)
    return spec.model.accept_eula and (resolved is None or resolved.gated)


def baseline_model(
    spec: OptimizedEndpointSpec, names: Names, sources: jumpstart.ModelSources | None = None
) -> rq.ServingModel:
    return rq.ServingModel(
        name=names.baseline_model,
        image=_image(spec, sources=sources),
        model_s3_uri=_weights(spec, sources),
        role_arn=spec.execution_role_arn,
        environment=_model_environment(spec, sources),
        accept_eula=_accept_eula(spec, sources),
        network=network(spec),
    )


def variant(
    spec: OptimizedEndpointSpec, name: str, model_name: str, weight: float = 1.0
) -> rq.Variant:
    return rq.Variant(
        name=name,
        model_name=model_name,
        instance_type=spec.instance_type,
        instance_count=spec.instance_count,
        weight=weight,
        download_timeout_s=spec.timeouts.model_data_download_seconds,
        startup_timeout_s=spec.timeouts.container_startup_health_check_seconds,
        volume_kms_key_id=spec.network.volume_kms_key_id if spec.network else None,
    )


def _environment(
    spec: OptimizedEndpointSpec, sources: jumpstart.ModelSources | None
) -> dict[str, str]:
    """The baseline's environment plus every technique's settings (the job builds with them)."""
    environment = _model_environment(spec, sources)
    for technique in TECHNIQUES:
        environment.update(technique.environment(spec))
    return environment


def optimization_job(
    spec: OptimizedEndpointSpec, names: Names, sources: jumpstart.ModelSources | None = None
) -> rq.OptimizationJob | None:
    """The job the candidate needs, or None when no technique writes new artifacts.

    Also refuses a draft the candidate could not use (planning's first wake-up asks for
    the job of every candidate spec), so an unaccepted draft licence stops before AWS.
    """
    _draft(spec, sources)
    configs = techniques.job_configs(spec)
    members = [config.member for config in configs]
    for technique in TECHNIQUES:
        if (conflict := technique.job_conflict(spec, members)) is not None:
            raise PlanError(conflict)
    if not configs:
        return None
    output = (spec.output_s3_uri or "").rstrip("/") + f"/{names.job}/"
    weights = _weights(spec, sources)
    if weights is None and spec.adopt_existing:
        raise PlanError(
            "spec.model.hfModelId: an optimization job reads S3 weights or a SageMaker Model "
            "the operator made; with adoptExisting there is none: set spec.model.s3Uri"
        )
    return rq.OptimizationJob(
        name=names.job,
        role_arn=spec.execution_role_arn,
        model_s3_uri=weights,
        source_model=names.baseline_model if weights is None else None,
        instance_type=spec.instance_type,
        output_s3_uri=output,
        configs=configs,
        accept_eula=_accept_eula(spec, sources),
        environment=_environment(spec, sources),
        network=network(spec),
    )


def training_job(
    spec: OptimizedEndpointSpec, names: Names, sources: jumpstart.ModelSources | None = None
) -> training.QuantizationTrainingJob | None:
    """The training job a technique builds its weights in (llm-compressor), or None."""
    try:
        for technique in TECHNIQUES:
            job = technique.training_job(spec, names.job, network(spec))
            if job is not None:
                job.training_image  # noqa: B018 -- resolve the image now: refuse before AWS
                return job
    except (ValueError, training.TrainingImageError) as exc:
        raise PlanError(str(exc)) from None
    return None


def has_candidate(spec: OptimizedEndpointSpec) -> bool:
    """Whether the spec asks for any change at all (settings or a technique)."""
    return bool(techniques.requested(spec))


def _draft(
    spec: OptimizedEndpointSpec, sources: jumpstart.ModelSources | None
) -> rq.DraftModel | None:
    """The draft model a draftModel spec attaches, from its source or resolved metadata."""
    speculative = spec.optimizations.speculative_decoding
    if speculative is None or speculative.method is not SpeculativeMethod.DRAFT_MODEL:
        return None
    source = speculative.draft_model
    assert source is not None  # the spec validator requires it
    accept_field = f"{jumpstart.DRAFT_FIELD}.acceptEula"
    if source.model_provider is DraftProvider.SAGEMAKER:
        provided = _jumpstart(spec, sources)
        assert provided is not None  # the spec validator requires a JumpStart model
        if provided.draft is None:
            raise PlanError(
                f"{jumpstart.DRAFT_FIELD}.modelProvider: {provided.model_id} has no "
                "SageMaker-provided draft; name a draft with jumpStartModelId, s3Uri or hfModelId"
            )
        if provided.draft.gated and not source.accept_eula:
            raise PlanError(
                f"{accept_field}: the SageMaker-provided draft of {provided.model_id} is gated; "
                "set draftModel.acceptEula: true to accept its licence"
            )
        return rq.DraftModel(s3_uri=provided.draft.s3_uri, accept_eula=provided.draft.gated)
    if source.jump_start_model_id is not None:
        if sources is None or sources.draft is None:
            raise PlanError(
                sources.problem
                if sources is not None and sources.problem
                else f"{jumpstart.DRAFT_FIELD}.jumpStartModelId: the JumpStart metadata of "
                f"{source.jump_start_model_id} has not been read"
            )
        draft = sources.draft
        if draft.gated and not source.accept_eula:
            raise PlanError(
                f"{accept_field}: {draft.model_id} is a gated model whose licence must be "
                f"accepted ({draft.eula_uri(spec.region)}); read it and set "
                "draftModel.acceptEula: true"
            )
        return rq.DraftModel(s3_uri=draft.artifact_s3_uri, accept_eula=draft.gated)
    return rq.DraftModel(
        s3_uri=source.s3_uri, hub_id=source.hf_model_id, accept_eula=source.accept_eula
    )


def candidate_model(
    spec: OptimizedEndpointSpec,
    names: Names,
    job: JobView | None,
    sources: jumpstart.ModelSources | None = None,
) -> rq.ServingModel:
    """The candidate model; with a job, its recommended image and output artifacts.

    Planned from `without_speculation(spec)` and named `names.twin_model`, it is the
    candidate's speculation-free twin: the same job, image, weights and settings; no
    speculative environment and no draft (`speculation_free_model`).
    """
    job_plan = optimization_job(spec, names, sources)
    environment = _environment(spec, sources)
    compiled = any(t.compiles(spec) for t in TECHNIQUES)
    image = _image(spec, compiled=compiled, sources=sources)
    weights = _weights(spec, sources)
    training_plan = training_job(spec, names, sources)
    if training_plan is not None:
        if job is None or job.status != "COMPLETED":
            raise PlanError(f"training job {names.job} has not completed")
        try:
            served = training.candidate_serving(
                training.TrainingJobState(job.name, "Completed", "", job.output_s3_uri),
                region=spec.region,
                instance_type=spec.instance_type,
                image=spec.model.image,
            )
        except (ValueError, images.ImageLookupError) as exc:
            raise PlanError(str(exc)) from None
        environment.update(served.environment)
        image, weights = served.image, served.model_s3_uri
    if job_plan is not None:
        if job is None or job.status != "COMPLETED":
            raise PlanError(f"optimization job {names.job} has not completed")
        environment.update(rq.serving_environment(job_plan))
        image = job.recommended_image or image
        weights = job.output_s3_uri or job_plan.output_s3_uri
    if weights is not None and spec.model.hf_model_id is not None:
        # Optimized weights in S3: the container must not download the Hub model instead.
        for name in _HUB_ENVIRONMENT:
            environment.pop(name, None)
    try:
        for technique in TECHNIQUES:
            environment.update(technique.serving_environment(spec))
    except techniques.TechniqueError as exc:
        raise PlanError(str(exc)) from None
    return rq.ServingModel(
        name=names.candidate_model,
        image=image,
        model_s3_uri=weights,
        role_arn=spec.execution_role_arn,
        environment=environment,
        accept_eula=_accept_eula(spec, sources),
        draft=_draft(spec, sources),
        network=network(spec),
    )


def without_speculation(spec: OptimizedEndpointSpec) -> OptimizedEndpointSpec:
    """The spec as served once onAcceptanceDrift: disableSpeculation switched speculation
    off: the same, without optimizations.speculativeDecoding. Its judges then treat the
    twin as what it is (no acceptance floor, no acceptance gate)."""
    optimizations = spec.optimizations.model_copy(update={"speculative_decoding": None})
    return spec.model_copy(update={"optimizations": optimizations})


def speculation_free_model(
    declared: OptimizedEndpointSpec,
    names: Names,
    job: JobView | None,
    sources: jumpstart.ModelSources | None = None,
) -> rq.ServingModel:
    """The candidate's twin with speculation off, under its own deterministic name.

    n-gram and draft-model speculation are serving options only (their job elements are
    empty), so the twin has the candidate's job, image and weights; the spec refuses
    disableSpeculation for EAGLE, whose heads are built into the optimized weights.
    """
    model = candidate_model(without_speculation(declared), names, job, sources)
    return replace(model, name=names.twin_model)


def cutoff_model(
    spec: OptimizedEndpointSpec,
    names: Names,
    job: JobView | None,
    batch_size: int,
    sources: jumpstart.ModelSources | None = None,
) -> rq.ServingModel:
    """The candidate with speculation off above `batch_size` running requests per instance,
    under its own deterministic name: the same job, image, weights, draft and settings."""
    model = candidate_model(spec, names, job, sources)
    try:
        environment = with_batch_cutoff(dict(model.environment), batch_size)
    except ValueError as exc:
        raise PlanError(f"speculativeDecoding.concurrencyCutoff: {exc}") from None
    return replace(model, name=names.cutoff_model, environment=environment)
