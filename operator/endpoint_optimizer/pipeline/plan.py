"""From a spec to SageMaker blueprints: the baseline model, the optimization job, the candidate.

Pure: the names come from `Owner.resource_name` at the pipeline's generation, the
default image from the SDK's table, and the job's results (image, artifacts) from
what DescribeOptimizationJob reported. What each technique contributes comes from the
techniques table (sagemaker/techniques/), read in its order. The candidate's
environment carries the baseline's, then each technique's settings, then each job
element's OverrideEnvironment (as the SageMaker SDK does), then the options set at
deployment (speculative decoding's).
"""

from __future__ import annotations

from dataclasses import dataclass

from endpoint_optimizer.api import OptimizedEndpointSpec
from endpoint_optimizer.pipeline.model import JobView
from endpoint_optimizer.sagemaker import images, techniques, training
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker.naming import Owner
from endpoint_optimizer.sagemaker.techniques import TECHNIQUES


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
        )


def _image(spec: OptimizedEndpointSpec, compiled: bool = False) -> str:
    if spec.model.image:
        return spec.model.image
    try:
        return images.default_image(
            spec.region, images.framework_for(spec.instance_type, compiled=compiled)
        )
    except images.ImageLookupError as exc:
        raise PlanError(f"spec.model.image: {exc}") from None


def _weights(spec: OptimizedEndpointSpec) -> str:
    if spec.model.s3_uri is None:
        raise PlanError(
            "spec.model.jumpStartModelId: resolving JumpStart ids needs the SageMaker SDK and "
            "network access to its model manifests, which this operator does not have; set "
            "spec.model.s3Uri to the model's S3 prefix"
        )
    return spec.model.s3_uri


def baseline_model(spec: OptimizedEndpointSpec, names: Names) -> rq.ServingModel:
    return rq.ServingModel(
        name=names.baseline_model,
        image=_image(spec),
        model_s3_uri=_weights(spec),
        role_arn=spec.execution_role_arn,
        environment=dict(spec.model.environment),
        accept_eula=spec.model.accept_eula,
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
    )


def _environment(spec: OptimizedEndpointSpec) -> dict[str, str]:
    """The baseline's environment plus every technique's settings (the job builds with them)."""
    environment = dict(spec.model.environment)
    for technique in TECHNIQUES:
        environment.update(technique.environment(spec))
    return environment


def optimization_job(spec: OptimizedEndpointSpec, names: Names) -> rq.OptimizationJob | None:
    """The job the candidate needs, or None when no technique writes new artifacts."""
    configs = techniques.job_configs(spec)
    members = [config.member for config in configs]
    for technique in TECHNIQUES:
        if (conflict := technique.job_conflict(spec, members)) is not None:
            raise PlanError(conflict)
    if not configs:
        return None
    output = (spec.output_s3_uri or "").rstrip("/") + f"/{names.job}/"
    return rq.OptimizationJob(
        name=names.job,
        role_arn=spec.execution_role_arn,
        model_s3_uri=_weights(spec),
        instance_type=spec.instance_type,
        output_s3_uri=output,
        configs=configs,
        accept_eula=spec.model.accept_eula,
        environment=_environment(spec),
    )


def training_job(
    spec: OptimizedEndpointSpec, names: Names
) -> training.QuantizationTrainingJob | None:
    """The training job a technique builds its weights in (llm-compressor), or None."""
    try:
        for technique in TECHNIQUES:
            job = technique.training_job(spec, names.job)
            if job is not None:
                job.training_image  # noqa: B018 -- resolve the image now: refuse before AWS
                return job
    except (ValueError, training.TrainingImageError) as exc:
        raise PlanError(str(exc)) from None
    return None


def has_candidate(spec: OptimizedEndpointSpec) -> bool:
    """Whether the spec asks for any change at all (settings or a technique)."""
    return bool(techniques.requested(spec))


def candidate_model(
    spec: OptimizedEndpointSpec, names: Names, job: JobView | None
) -> rq.ServingModel:
    """The candidate model; with a job, its recommended image and output artifacts."""
    job_plan = optimization_job(spec, names)
    environment = _environment(spec)
    image = _image(spec, compiled=any(t.compiles(spec) for t in TECHNIQUES))
    weights = _weights(spec)
    training_plan = training_job(spec, names)
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
    draft: rq.DraftModel | None = None
    try:
        for technique in TECHNIQUES:
            draft = technique.draft_model(spec) or draft
            environment.update(technique.serving_environment(spec))
    except techniques.TechniqueError as exc:
        raise PlanError(str(exc)) from None
    return rq.ServingModel(
        name=names.candidate_model,
        image=image,
        model_s3_uri=weights,
        role_arn=spec.execution_role_arn,
        environment=environment,
        accept_eula=spec.model.accept_eula,
        draft=draft,
    )
