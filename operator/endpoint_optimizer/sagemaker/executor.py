"""Perform the pipeline's actions: AWS calls (create-or-adopt) and benchmark measurements.

A create that finds its own resource already there adopts it (the name is
deterministic, so it can only be ours); a delete or stop of something already
gone is done. Everything else that fails is raised as a classified SageMakerError
for the edge (handlers) to turn into a retry or a Terminal condition.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from endpoint_optimizer.api import OptimizedEndpointSpec, duration_seconds
from endpoint_optimizer.bench.models import BenchConfig, BenchReport, BenchTarget
from endpoint_optimizer.bench.runner import run_benchmark
from endpoint_optimizer.evaluation.dataset import EvalDatasetError, parse_dataset
from endpoint_optimizer.logs import get_logger
from endpoint_optimizer.pipeline import assess
from endpoint_optimizer.pipeline.model import SERVICE, Action, ActionKind, Measurement
from endpoint_optimizer.sagemaker import evaluate
from endpoint_optimizer.sagemaker.clients import AwsClients
from endpoint_optimizer.sagemaker.errors import ErrorKind, SageMakerError

_CREATES = frozenset(
    {
        ActionKind.CREATE_MODEL,
        ActionKind.CREATE_ENDPOINT_CONFIG,
        ActionKind.CREATE_ENDPOINT,
        ActionKind.CREATE_OPTIMIZATION_JOB,
        ActionKind.CREATE_TRAINING_JOB,
    }
)
_REMOVALS = frozenset(
    {
        ActionKind.DELETE_MODEL,
        ActionKind.DELETE_ENDPOINT_CONFIG,
        ActionKind.DELETE_ENDPOINT,
        ActionKind.STOP_OPTIMIZATION_JOB,
        ActionKind.STOP_TRAINING_JOB,
        ActionKind.DELETE_ALARMS,
    }
)

log = get_logger(__name__)


def bench_config(spec: OptimizedEndpointSpec) -> BenchConfig:
    b = spec.benchmark
    speculative = spec.optimizations.speculative_decoding
    return BenchConfig(
        concurrency=list(b.concurrency),
        requests=b.requests,
        warmup=b.warmup,
        input_tokens=b.input_tokens,
        output_tokens=b.output_tokens,
        seed=b.seed,
        read_timeout_s=max(1.0, duration_seconds(b.request_timeout)),
        num_speculative_tokens=speculative.num_speculative_tokens if speculative else None,
        run_id="endpoint-optimizer",
    )


async def _bench(spec: OptimizedEndpointSpec, variant: str) -> BenchReport:
    target = BenchTarget(
        endpoint_name=spec.endpoint_name, variant=variant or None, region=spec.region
    )
    return await run_benchmark(target, bench_config(spec))


async def perform(
    aws: AwsClients,
    spec: OptimizedEndpointSpec,
    action: Action,
    eval_dataset: str | None = None,
) -> Measurement | None:
    """Perform one action; a measurement returns what it measured.

    `eval_dataset`: the JSONL text of spec.evaluation's ConfigMap key, when there is one.
    """
    if action.kind is ActionKind.MEASURE_BASELINE:
        report = await _bench(spec, action.baseline_variant)
        baseline = assess.variant_measurements(report, action.baseline_variant, datetime.now(UTC))
        return Measurement(action.kind, action.step, baseline)
    if action.kind is ActionKind.COMPARE:
        # Both variants at once: they share whatever else the host is doing, so the
        # ratio the judges read reflects the variants, not the minute they ran in.
        base_report, cand_report = await asyncio.gather(
            _bench(spec, action.baseline_variant), _bench(spec, action.candidate_variant)
        )
        baseline, candidate, checks = assess.compare(
            spec,
            base_report,
            cand_report,
            action.baseline_variant,
            action.candidate_variant,
            datetime.now(UTC),
        )
        if spec.evaluation is not None:
            if eval_dataset is None:
                ref = spec.evaluation.dataset.config_map_ref
                raise EvalDatasetError(
                    f"spec.evaluation.dataset: ConfigMap {ref.name} with key {ref.key} not "
                    "found in the resource's namespace; create it"
                )
            items = parse_dataset(eval_dataset, spec.evaluation.dataset.config_map_ref.key)
            items = items[: spec.evaluation.max_items or len(items)]
            prompts = [item.prompt for item in items]
            tokens = spec.evaluation.max_output_tokens
            base_answers, cand_answers = await asyncio.gather(
                evaluate.answers(
                    aws, spec.region, spec.endpoint_name, action.baseline_variant, prompts, tokens
                ),
                evaluate.answers(
                    aws, spec.region, spec.endpoint_name, action.candidate_variant, prompts, tokens
                ),
            )
            baseline, candidate, eval_checks = assess.evaluate(
                spec, items, base_answers, cand_answers, baseline, candidate
            )
            checks = [*checks, *eval_checks]
        return Measurement(action.kind, action.step, baseline, candidate, tuple(checks))
    try:
        await aws.call(
            SERVICE[action.kind], spec.region, action.kind.value, action.resource, **action.request
        )
    except SageMakerError as exc:
        if action.kind in _CREATES and exc.kind is ErrorKind.ALREADY_EXISTS:
            log.info(
                "adopted existing resource", action=action.kind.value, resource=action.resource
            )
            return None
        if action.kind in _REMOVALS and exc.kind is ErrorKind.NOT_FOUND:
            return None
        raise
    log.info("performed", action=action.kind.value, resource=action.resource)
    return None
