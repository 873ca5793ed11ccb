"""Observe: the few Describe calls one wake-up makes, reduced to the pipeline's view."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.errors import ErrorKind, SageMakerError
from endpoint_optimizer.pipeline.cadence import FULL, EndpointCadence, ObservePlan
from endpoint_optimizer.pipeline.model import (
    IN_PROGRESS_JOB,
    ComponentView,
    EndpointView,
    JobView,
    Observations,
    VariantView,
)
from endpoint_optimizer.sagemaker import training


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def _time(value: Any) -> datetime | None:
    """botocore parses SageMaker's timestamps into aware datetimes."""
    return value if isinstance(value, datetime) else None


def _variants(items: Iterable[dict[str, Any]]) -> tuple[VariantView, ...]:
    return tuple(
        VariantView(
            name=str(v.get("VariantName", "")),
            model_name=str(v.get("ModelName", "")),
            current_weight=v.get("CurrentWeight", v.get("InitialVariantWeight")),
            desired_weight=v.get("DesiredWeight"),
            current_instance_count=_count(v.get("CurrentInstanceCount")),
        )
        for v in items
    )


async def describe_endpoint(aws: AwsClients, region: str, name: str) -> EndpointView | None:
    try:
        out = await aws.call(
            "sagemaker", region, "DescribeEndpoint", f"endpoint {name}", EndpointName=name
        )
    except SageMakerError as exc:
        if exc.kind is ErrorKind.NOT_FOUND:
            return None
        raise
    return EndpointView(
        name=name,
        status=str(out.get("EndpointStatus", "")),
        config_name=str(out.get("EndpointConfigName", "")),
        failure_reason=str(out.get("FailureReason", "")),
        variants=_variants(out.get("ProductionVariants", [])),
        shadow_variants=_variants(out.get("ShadowProductionVariants", [])),
        arn=str(out.get("EndpointArn", "")),
    )


# Endpoint configs cannot be changed once made, so one DescribeEndpointConfig per name is
# enough: without this every wake-up costs two calls per resource (endpoint and its config),
# four a minute at a 30 s poll, twice issue 7's budget while waiting.
_CONFIG_CACHE: dict[tuple[str, str], tuple[VariantView, ...]] = {}
_CONFIG_CACHE_SIZE = 4096


async def config_variants(
    aws: AwsClients, region: str, name: str
) -> tuple[VariantView, ...] | None:
    cached = _CONFIG_CACHE.get((region, name))
    if cached is not None:
        return cached
    try:
        out = await aws.call(
            "sagemaker",
            region,
            "DescribeEndpointConfig",
            f"endpoint config {name}",
            EndpointConfigName=name,
        )
    except SageMakerError as exc:
        if exc.kind is ErrorKind.NOT_FOUND:
            return None
        raise
    variants = _variants(out.get("ProductionVariants", []))
    if len(_CONFIG_CACHE) >= _CONFIG_CACHE_SIZE:
        del _CONFIG_CACHE[next(iter(_CONFIG_CACHE))]
    _CONFIG_CACHE[(region, name)] = variants
    return variants


async def describe_job(aws: AwsClients, region: str, name: str) -> JobView | None:
    try:
        out = await aws.call(
            "sagemaker",
            region,
            "DescribeOptimizationJob",
            f"optimization job {name}",
            OptimizationJobName=name,
        )
    except SageMakerError as exc:
        if exc.kind is ErrorKind.NOT_FOUND:
            return None
        raise
    return JobView(
        name=name,
        status=str(out.get("OptimizationJobStatus", "")),
        failure_reason=str(out.get("FailureReason", "")),
        output_s3_uri=str(out.get("OutputConfig", {}).get("S3OutputLocation", "")),
        recommended_image=str(
            out.get("OptimizationOutput", {}).get("RecommendedInferenceImage", "")
        ),
    )


async def describe_training_job(aws: AwsClients, region: str, name: str) -> JobView | None:
    """DescribeTrainingJob, as the optimization job's view (statuses in its spelling)."""
    try:
        out = await aws.call(
            "sagemaker", region, "DescribeTrainingJob", f"training job {name}", TrainingJobName=name
        )
    except SageMakerError as exc:
        # DescribeTrainingJob answers a missing job with ValidationException
        # "Requested resource not found", which the generic classifier calls invalid.
        if exc.kind is ErrorKind.NOT_FOUND or "resource not found" in exc.aws_message.lower():
            return None
        raise
    state = training.training_job_state(out)
    return JobView(
        name=name,
        status=state.optimization_status,
        failure_reason=state.failure_reason,
        output_s3_uri=state.model_s3_uri,
    )


async def observe(
    aws: AwsClients,
    region: str,
    endpoint_name: str,
    jobs: Iterable[str] = (),
    configs: Iterable[str] = (),
    training_jobs: Iterable[str] = (),
    plan: ObservePlan = FULL,
    last: Observations | None = None,
) -> Observations:
    """DescribeEndpoint, plus the jobs and endpoint configs the current phase waits on.

    With a sparse `plan` (pipeline.cadence), what it skips comes from `last`, the previous
    wake-up's observations; without them everything is described.
    """
    if last is None:
        plan = FULL  # nothing to reuse: the first wake-up after a start
    jobs, training_jobs = list(jobs), list(training_jobs)
    views: dict[str, JobView] = {}
    if plan.jobs:
        for job in jobs:
            view = await describe_job(aws, region, job)
            if view is not None:
                views[job] = view
        for job in training_jobs:
            view = await describe_training_job(aws, region, job)
            if view is not None:
                views[job] = view
    elif last is not None:
        views = {j: v for j, v in last.jobs.items() if j in jobs or j in training_jobs}
    describe = plan.endpoint is EndpointCadence.DESCRIBE or (
        plan.endpoint is EndpointCadence.IF_JOBS_SETTLED
        and any(
            views.get(job) is None or views[job].status not in IN_PROGRESS_JOB
            for job in [*jobs, *training_jobs]
        )
    )
    if not describe and last is not None:
        return Observations(
            endpoint=last.endpoint,
            jobs=views,
            config_variants=last.config_variants,
            endpoint_described=False,
            complete=False,
        )
    endpoint = await describe_endpoint(aws, region, endpoint_name)
    variants: dict[str, tuple[VariantView, ...]] = {}
    wanted = set(configs)
    if endpoint is not None and endpoint.config_name:
        wanted.add(endpoint.config_name)
    for config in wanted:
        found = await config_variants(aws, region, config)
        if found is not None:
            variants[config] = found
    if endpoint is not None and endpoint.config_name in variants:
        # DescribeEndpoint's variant summaries carry no model names; the config has them.
        models = {v.name: v.model_name for v in variants[endpoint.config_name]}
        endpoint = EndpointView(
            name=endpoint.name,
            status=endpoint.status,
            config_name=endpoint.config_name,
            failure_reason=endpoint.failure_reason,
            variants=tuple(
                VariantView(
                    v.name,
                    models.get(v.name, ""),
                    v.current_weight,
                    v.desired_weight,
                    v.current_instance_count,
                )
                for v in endpoint.variants
            ),
            shadow_variants=endpoint.shadow_variants,
            arn=endpoint.arn,
        )
    return Observations(endpoint=endpoint, jobs=views, config_variants=variants, complete=plan.jobs)


async def describe_component(aws: AwsClients, region: str, name: str) -> ComponentView | None:
    """DescribeInferenceComponent, reduced; None when SageMaker does not know the name."""
    try:
        out = await aws.call(
            "sagemaker",
            region,
            "DescribeInferenceComponent",
            f"inference component {name}",
            InferenceComponentName=name,
        )
    except SageMakerError as exc:
        if exc.kind is ErrorKind.NOT_FOUND:
            return None
        raise
    spec = dict(out.get("Specification") or {})
    runtime = out.get("RuntimeConfig") or {}
    return ComponentView(
        name=name,
        status=str(out.get("InferenceComponentStatus", "")),
        endpoint_name=str(out.get("EndpointName", "")),
        variant_name=str(out.get("VariantName", "")),
        model_name=str(spec.get("ModelName", "")),
        failure_reason=str(out.get("FailureReason", "")),
        desired_copies=int(runtime.get("DesiredCopyCount", 0)),
        current_copies=int(runtime.get("CurrentCopyCount", 0)),
        specification=spec,
        created_at=_time(out.get("CreationTime")),
        modified_at=_time(out.get("LastModifiedTime")),
    )


async def describe_components(
    aws: AwsClients, region: str, names: Iterable[str]
) -> dict[str, ComponentView]:
    """The named components SageMaker knows, by name (each name described once)."""
    found: dict[str, ComponentView] = {}
    for name in dict.fromkeys(n for n in names if n):
        view = await describe_component(aws, region, name)
        if view is not None:
            found[name] = view
    return found
