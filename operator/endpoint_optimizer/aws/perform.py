"""Perform the pipeline's actions: AWS calls (create-or-adopt) and measurements.

A create that finds its own resource already there adopts it: models, configs and jobs
have deterministic names with a hash of the resource's uid, so they can only be ours; the
endpoint's name is the user's, so it is adopted only with proof (aws/ownership.py). A
delete or stop of something already gone is done. Everything else that fails is raised as
a classified SageMakerError for the controller to turn into a retry or a Terminal condition.

A measurement judges nothing: it returns what came back (benchmark reports,
labelled eval answers, CloudWatch series) as a RawMeasurement, on the variants the
pipeline's plan names, and the pipeline judges it (pipeline.assess.judge).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import ValidationError

from endpoint_optimizer.analysis.live import ProbeSamples
from endpoint_optimizer.analysis.series import VariantRole, VariantSeries
from endpoint_optimizer.api import (
    ConfigMapRef,
    OptimizedEndpointSpec,
    RequestFormat,
    duration_seconds,
)
from endpoint_optimizer.aws import evaluate, ownership
from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.cloudwatch import CloudWatchReader
from endpoint_optimizer.aws.errors import ErrorKind, SageMakerError, classify
from endpoint_optimizer.aws.logs import ContainerLogReader, ContainerLogs
from endpoint_optimizer.bench.models import BenchConfig, BenchReport, BenchTarget, DatasetItem
from endpoint_optimizer.bench.models import RequestFormat as BenchFormat
from endpoint_optimizer.bench.rounds import merged
from endpoint_optimizer.bench.runner import run_side_by_side, tokens_per_s_read
from endpoint_optimizer.bench.shards import ShardLauncher
from endpoint_optimizer.bench.workload import DatasetError
from endpoint_optimizer.evaluation import noise
from endpoint_optimizer.evaluation.dataset import EvalDatasetError, EvalItem, parse_eval_set
from endpoint_optimizer.evaluation.suites import generated_items
from endpoint_optimizer.logs import get_logger
from endpoint_optimizer.pipeline.assess import (
    measurement_plan,
    measurement_void,
    next_rounds,
    probe_samples,
)
from endpoint_optimizer.pipeline.model import (
    SERVICE,
    Action,
    ActionKind,
    EvalAnswers,
    RawMeasurement,
    VariantRun,
)

# A bound on a comparison's rounds beside the judge's own budget (a round at least
# doubles nothing and adds at least benchmark.requests, so the budget ends it first).
MAX_ROUNDS = 64
# Each round draws other prompts: seed + round x stride.
_ROUND_SEED_STRIDE = 7_919


@dataclass(frozen=True)
class Progress:
    """Where a running measurement is: its stage, level and requests done of planned.

    `done` and `planned` count every variant together (warm-up not counted); in the eval
    they count answers. The controller writes it to status.measurement, rate-bounded.
    """

    stage: Literal["benchmark", "evaluation"]
    done: int
    planned: int
    concurrency: int = 0
    level: int = 0
    levels: int = 0
    round: int = 1


ProgressSink = Callable[[Progress], None]


def _ignore(_: Progress) -> None:
    return None


_CREATES = frozenset(
    {
        ActionKind.CREATE_MODEL,
        ActionKind.CREATE_ENDPOINT_CONFIG,
        ActionKind.CREATE_ENDPOINT,
        ActionKind.CREATE_OPTIMIZATION_JOB,
        ActionKind.CREATE_TRAINING_JOB,
        ActionKind.CREATE_INFERENCE_COMPONENT,
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
        ActionKind.DEREGISTER_SCALABLE_TARGET,
        ActionKind.DELETE_INFERENCE_COMPONENT,
    }
)

_STOPS = frozenset({ActionKind.STOP_OPTIMIZATION_JOB, ActionKind.STOP_TRAINING_JOB})

log = get_logger(__name__)


def bench_prompts(text: str | None, ref: ConfigMapRef) -> list[DatasetItem]:
    """spec.benchmark.dataset's JSONL text as benchmark prompts; errors name the ConfigMap/key.

    `text` is None when the ConfigMap or its key is absent from the resource's namespace.
    Prompts never reach the message: only the line number and what is wrong with it.
    """
    where = f"spec.benchmark.dataset: ConfigMap {ref.name} key {ref.key}"
    if text is None:
        raise DatasetError(f"{where} not found in the resource's namespace; create it")
    items: list[DatasetItem] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(DatasetItem.model_validate(json.loads(line)))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}, line {number}: not JSON ({exc.msg})") from None
        except ValidationError as exc:
            # The messages only: a validation error's repr would carry the prompt.
            reason = "; ".join(str(e["msg"]) for e in exc.errors(include_input=False))
            raise DatasetError(
                f"{where}, line {number}: {reason}; expected a JSON object with exactly one "
                "of prompt, messages or body (and optional outputTokens)"
            ) from None
    if not items:
        raise DatasetError(f"{where} holds no prompts; add JSON lines with a prompt each")
    return items


# spec.benchmark.requestFormat -> the benchmark client's body shape.
BENCH_FORMAT = {
    RequestFormat.LMI: BenchFormat.LMI,
    RequestFormat.CHAT: BenchFormat.OPENAI,
    RequestFormat.COMPLETIONS: BenchFormat.COMPLETIONS,
}


def bench_config(spec: OptimizedEndpointSpec, dataset: str | None = None) -> BenchConfig:
    """The benchmark settings of spec.benchmark; `dataset`: its ConfigMap text, if it sets one."""
    b = spec.benchmark
    speculative = spec.optimizations.speculative_decoding
    prompts = bench_prompts(dataset, b.dataset.config_map_ref) if b.dataset else None
    return BenchConfig(
        concurrency=list(b.concurrency),
        requests=b.requests,
        warmup=b.warmup,
        input_tokens=b.input_tokens,
        output_tokens=b.output_tokens,
        input_tokens_sd=b.input_tokens_sd,
        output_tokens_sd=b.output_tokens_sd,
        dataset=prompts,
        seed=b.seed,
        read_timeout_s=max(1.0, duration_seconds(b.request_timeout)),
        num_speculative_tokens=speculative.num_speculative_tokens if speculative else None,
        run_id="endpoint-optimizer",
        request_format=BENCH_FORMAT[b.request_format],
    )


async def perform(
    aws: AwsClients,
    spec: OptimizedEndpointSpec,
    action: Action,
    eval_dataset: str | None = None,
    bench_dataset: str | None = None,
    *,
    progress: ProgressSink | None = None,
    launcher: ShardLauncher | None = None,
) -> RawMeasurement | None:
    """Perform one action; a measurement returns what it measured, unjudged.

    `launcher`: runs a benchmark level that is above the operator's own limits on shard
    pods (controller/benchjobs.py); None: such a level is refused (bench.limits).

    `eval_dataset`: the JSONL text of spec.evaluation's ConfigMap key, when there is one;
    `bench_dataset`: that of spec.benchmark.dataset's (None when unset or not found);
    `progress`: told where a benchmark or eval is, after each request it completes.
    """
    if action.kind is ActionKind.JUDGE_LIVE:
        return await _read_live(aws, spec, action)
    if action.kind in (ActionKind.MEASURE_BASELINE, ActionKind.COMPARE):
        async with aws.measuring():
            return await _measure(
                aws, spec, action, eval_dataset, bench_dataset, progress or _ignore, launcher
            )
    await perform_call(aws, spec.region, action)
    return None


async def perform_call(aws: AwsClients, region: str, action: Action) -> None:
    """One AWS call of the pipeline's (a create, update, delete or stop) in `region`.

    Needs no spec: the finalizer and the way back from a spec that no longer parses work
    from status (what was made, where).
    """
    try:
        await aws.call(
            SERVICE[action.kind], region, action.kind.value, action.resource, **action.request
        )
    except SageMakerError as exc:
        if action.kind in _CREATES and exc.kind is ErrorKind.ALREADY_EXISTS:
            if action.kind is ActionKind.CREATE_ENDPOINT:
                # Its name is the user's: ours only with proof (else NOT_OURS is raised).
                await ownership.prove_endpoint_ours(aws, region, action.request)
            log.info(
                "adopted existing resource", action=action.kind.value, resource=action.resource
            )
            return
        if action.kind in _REMOVALS and exc.kind is ErrorKind.NOT_FOUND:
            return
        if action.kind in _STOPS and exc.kind is ErrorKind.INVALID:
            # SageMaker refuses to stop a job that already ended ("... is in status
            # Completed"): it is not running, which is what the stop was for.
            log.info("job already ended", action=action.kind.value, resource=action.resource)
            return
        raise
    log.info("performed", action=action.kind.value, resource=action.resource)


async def _measure(
    aws: AwsClients,
    spec: OptimizedEndpointSpec,
    action: Action,
    eval_dataset: str | None,
    bench_dataset: str | None,
    progress: ProgressSink,
    launcher: ShardLauncher | None = None,
) -> RawMeasurement:
    """Benchmark traffic, then eval answers, on the variants the pipeline's plan names."""
    plan = measurement_plan(spec, action)
    # Read first: a missing eval set should not cost a benchmark's traffic.
    items = _eval_items(spec, eval_dataset) if plan.evaluate else []
    variants = [action.baseline_variant, *([action.candidate_variant] if plan.candidate else [])]
    # Both variants at once: they share whatever else the host is doing, so the ratio the
    # judges read reflects the variants, not the minute they ran in.
    config = bench_config(spec, bench_dataset)
    targets = [_target(spec, v) for v in variants]
    first = await run_side_by_side(
        targets,
        config,
        progress=_levels(config, 1, progress),
        launcher=launcher,
        tokens_per_s=first_round_rates(action, len(targets)),
    )
    rounds = [[report] for report in first]
    if plan.candidate:
        await _more_rounds(spec, targets, config, rounds, progress, launcher, action.cost_ratio)
    benchmarked_at = datetime.now(UTC)
    reports = [merged(done) for done in rounds]
    # A benchmark that measured nothing judgeable voids the whole measurement (the judge
    # says so and judges none of it): its eval answers would be asked of the endpoint, the
    # production one included, for nothing.
    void = measurement_void(reports[0], reports[1] if plan.candidate else None)
    unevaluated: list[EvalAnswers | None] = [None] * len(variants)
    # The baseline alone asks some items twice, after the whole set: the A/A noise (not
    # for a void measurement, which asks no eval item at all).
    twice = plan.evaluate and not plan.candidate and not void
    repeated = _repeated(spec, items) if twice else []
    asked = [*items, *(items[i] for i in repeated)]
    answers = (
        await _answers(aws, spec, variants, asked, progress)
        if plan.evaluate and not void
        else unevaluated
    )
    answers, repeat_answers = _split_repeat(answers, len(items))
    runs = [
        VariantRun(variant, report, answer, tuple(done) if len(done) > 1 else ())
        for variant, report, done, answer in zip(variants, reports, rounds, answers, strict=True)
    ]
    return RawMeasurement(
        action,
        baseline=runs[0],
        candidate=runs[1] if plan.candidate else None,
        eval_items=tuple(items),
        benchmarked_at=benchmarked_at,
        repeated=tuple(repeated),
        repeat_answers=repeat_answers,
    )


def first_round_rates(action: Action, variants: int) -> dict[int, float]:
    """The first round's expected output tokens per second per level, all variants
    together: the baseline's own benchmark read per level, once per variant benchmarked
    side by side (the candidate is assumed to serve at about the baseline's rate; a faster
    one that overruns the client is caught by the saturation guard and escalated)."""
    return {c: rate * variants for c, rate in action.baseline_tokens_per_s.items()}


async def _more_rounds(
    spec: OptimizedEndpointSpec,
    targets: list[BenchTarget],
    config: BenchConfig,
    rounds: list[list[BenchReport]],
    progress: ProgressSink,
    launcher: ShardLauncher | None = None,
    cost_ratio: float | None = 1.0,
) -> None:
    """The sequential judge's rounds: both variants again, together, per level it names.

    The pipeline's pure judge says what to measure next; the budget it enforces
    (benchmark.maxRequests, maxDuration) ends the loop, and MAX_ROUNDS bounds it anyway.
    Each round draws its own prompts (seed + round) and warms up again. A level whose
    earlier rounds read more tokens per second than one process may (the operator's
    --bench-max-tokens-per-second) runs its next rounds on shard pods, where it can.
    """
    for number in range(1, MAX_ROUNDS):
        asks = next_rounds(spec, rounds[0], rounds[1], cost_ratio)
        if not asks:
            return
        for ask in asks:
            more = config.model_copy(
                update={
                    "concurrency": [ask.concurrency],
                    "requests": ask.requests,
                    "seed": config.seed + number * _ROUND_SEED_STRIDE,
                }
            )
            reports = await run_side_by_side(
                targets,
                more,
                progress=_levels(more, number + 1, progress),
                launcher=launcher,
                tokens_per_s=tokens_per_s_read(rounds),
            )
            for done, report in zip(rounds, reports, strict=True):
                done.append(report)
        log.info(
            "benchmark round",
            endpoint=spec.endpoint_name,
            round=number + 1,
            levels=[f"c{a.concurrency}+{a.requests}" for a in asks],
        )


def _levels(
    config: BenchConfig, round_: int, progress: ProgressSink
) -> Callable[[int, int, int], None]:
    """The benchmark's per-level counts (all variants together) as Progress."""
    levels = list(config.concurrency)

    def told(concurrency: int, done: int, planned: int) -> None:
        progress(
            Progress(
                "benchmark",
                done,
                planned,
                concurrency=concurrency,
                level=levels.index(concurrency) + 1,
                levels=len(levels),
                round=round_,
            )
        )

    return told


def _target(spec: OptimizedEndpointSpec, name: str) -> BenchTarget:
    """Where a measurement's requests go: pinned to a production variant (TargetVariant),
    or, with spec.inferenceComponent, to an inference component (the actions name the
    components where they otherwise name variants)."""
    if spec.inference_component is not None:
        return BenchTarget(
            endpoint_name=spec.endpoint_name, inference_component=name, region=spec.region
        )
    return BenchTarget(endpoint_name=spec.endpoint_name, variant=name or None, region=spec.region)


async def _answers(
    aws: AwsClients,
    spec: OptimizedEndpointSpec,
    variants: list[str],
    items: list[EvalItem],
    progress: ProgressSink,
) -> list[EvalAnswers | None]:
    """Each variant's answers to the same eval items, all variants at once."""
    assert spec.evaluation is not None
    prompts = [item.prompt for item in items]
    tokens = spec.evaluation.max_output_tokens
    planned = len(prompts) * len(variants)
    done = 0

    def answered() -> None:
        nonlocal done
        done += 1
        progress(Progress("evaluation", done, planned))

    progress(Progress("evaluation", 0, planned))
    answers = await asyncio.gather(
        *(
            evaluate.labelled_answers(
                aws,
                spec.region,
                spec.endpoint_name,
                v,
                prompts,
                tokens,
                answered,
                request_format=spec.eval_request_format(),
                seed=spec.benchmark.seed,
                component=spec.inference_component is not None,
            )
            for v in variants
        )
    )
    return list(answers)


def _repeated(spec: OptimizedEndpointSpec, items: list[EvalItem]) -> list[int]:
    """The eval items the baseline answers twice (evaluation/noise.py: the A/A noise)."""
    assert spec.evaluation is not None
    return noise.repeat_indexes(items, spec.evaluation.noise_items, spec.benchmark.seed)


def _split_repeat(
    answers: list[EvalAnswers | None], first: int
) -> tuple[list[EvalAnswers | None], EvalAnswers | None]:
    """Each variant's answers to the eval set, and the baseline's second answers (if any)."""
    base = answers[0] if answers else None
    if base is None or len(base.texts) <= first:
        return answers, None
    whole = EvalAnswers(base.texts[:first], base.served[:first])
    again = EvalAnswers(base.texts[first:], base.served[first:])
    return [whole, *answers[1:]], again


def _eval_items(spec: OptimizedEndpointSpec, eval_dataset: str | None) -> list[EvalItem]:
    """The dataset's items, then the generated suites' (evaluation/suites.py)."""
    assert spec.evaluation is not None
    if spec.evaluation.dataset is not None:
        ref = spec.evaluation.dataset.config_map_ref
        if eval_dataset is None:
            raise EvalDatasetError(
                f"spec.evaluation.dataset: ConfigMap {ref.name} with key {ref.key} not "
                "found in the resource's namespace; create it"
            )
    return parse_eval_set(eval_dataset, spec.evaluation, generated_items(spec))


async def _read_live(
    aws: AwsClients, spec: OptimizedEndpointSpec, action: Action
) -> RawMeasurement:
    """One analysis window of both variants: a single batched GetMetricData, in the pool.

    A variant without a name is not read: during the bake after a promotion the
    baseline no longer serves, and its side is the figures status kept of it.
    """
    start = datetime.fromisoformat(str(action.request["start"]))
    end = datetime.fromisoformat(str(action.request["end"]))
    reader = CloudWatchReader(
        aws.client("cloudwatch", spec.region), int(action.request["periodSeconds"])
    )
    named = {
        VariantRole.BASELINE: action.baseline_variant,
        VariantRole.CANDIDATE: action.candidate_variant,
    }
    variants = {role: name for role, name in named.items() if name}

    def read() -> dict[VariantRole, VariantSeries]:
        try:
            return reader.read(spec.endpoint_name, variants, start, end)
        except Exception as exc:
            raise classify(exc, "GetMetricData", f"endpoint {spec.endpoint_name}") from exc

    series: dict[VariantRole, VariantSeries] = await aws.run(read)
    logs = ContainerLogs({})
    if spec.optimizations.speculative_decoding is not None:
        logs = await _read_container_logs(aws, spec, variants, start, end)
    probes = spec.rollout.analysis.probes
    if not action.request.get("probes") or probes.per_interval == 0:
        return RawMeasurement(action, series=series, spec_lines=logs.lines)
    async with aws.measuring():
        sent = await _probe(spec, variants, int(end.timestamp()))
    return RawMeasurement(action, series=series, probes=sent, spec_lines=logs.lines)


async def _read_container_logs(
    aws: AwsClients,
    spec: OptimizedEndpointSpec,
    variants: dict[VariantRole, str],
    start: datetime,
    end: datetime,
) -> ContainerLogs:
    """The window's speculative-metrics lines; a failed read leaves acceptance without a
    verdict for the window (the latency judge goes on) and says why in the log."""
    reader = ContainerLogReader(aws.client("logs", spec.region))
    try:
        logs: ContainerLogs = await aws.run(
            lambda: reader.read(spec.endpoint_name, variants, start, end)
        )
    except Exception as exc:
        error = classify(exc, "FilterLogEvents", f"log group of endpoint {spec.endpoint_name}")
        log.warning(
            "container log read failed; acceptance not judged this window", error=str(error)
        )
        return ContainerLogs({})
    if logs.truncated:
        log.warning("container log window truncated", pages="bounded", endpoint=spec.endpoint_name)
    return logs


async def _probe(
    spec: OptimizedEndpointSpec, variants: dict[VariantRole, str], seed: int
) -> dict[VariantRole, ProbeSamples]:
    """spec.rollout.analysis.probes: `concurrency` at a time per variant, both variants
    together."""
    probes = spec.rollout.analysis.probes
    config = BenchConfig(
        concurrency=[probes.concurrency],
        requests=probes.per_interval,
        warmup=0,
        input_tokens=probes.input_tokens,
        output_tokens=probes.output_tokens,
        seed=seed,
        read_timeout_s=max(1.0, duration_seconds(spec.benchmark.request_timeout)),
        run_id="endpoint-optimizer-probe",
        request_format=BENCH_FORMAT[spec.benchmark.request_format],
    )
    roles = list(variants)
    targets = [_target(spec, variants[r]) for r in roles]
    reports = await run_side_by_side(targets, config, where="spec.rollout.analysis.probes")
    return {role: probe_samples(report) for role, report in zip(roles, reports, strict=True)}
