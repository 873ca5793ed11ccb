"""One wake-up of one resource: observe -> decide -> act -> record, and the status patch it makes.

Everything a wake-up uses arrives in `Dependencies` (AWS clients, metrics, options,
the freshness cache, a clock): nothing is read from module state and nothing here
imports kopf, so a test drives a wake-up with a plain body and the sandbox. The
handlers apply the patch and post the events; which Describe calls a wake-up makes is
pipeline.cadence's decision, from status.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from endpoint_optimizer.api import (
    OptimizedEndpointSpec,
    OptimizedEndpointStatus,
    Phase,
    SpecError,
    parse_spec,
    parse_status,
)
from endpoint_optimizer.aws import ownership
from endpoint_optimizer.aws.autoscaling import describe_scaling
from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.cloudwatch import component_invocations, peak_gpu_memory
from endpoint_optimizer.aws.errors import SageMakerError, classify
from endpoint_optimizer.aws.jumpstart import read_sources
from endpoint_optimizer.aws.observe import describe_components, observe
from endpoint_optimizer.aws.perform import perform_call
from endpoint_optimizer.aws.pricing import read_price
from endpoint_optimizer.controller import retry
from endpoint_optimizer.controller.benchjobs import shard_launcher
from endpoint_optimizer.controller.configmaps import (
    ConfigMapProblem,
    ConfigMapReader,
    StaticConfigMaps,
    publish_spot_check,
    read_datasets,
)
from endpoint_optimizer.controller.freshness import Freshness
from endpoint_optimizer.controller.options import OperatorOptions
from endpoint_optimizer.controller.progress import (
    FIELD as PROGRESS,
)
from endpoint_optimizer.controller.progress import (
    SHOWN_FIRST,
    ProgressReporter,
    StatusWriter,
    no_status_writes,
)
from endpoint_optimizer.controller.secrets import perform_with_token
from endpoint_optimizer.logs import get_logger
from endpoint_optimizer.metrics.exporter import OperatorMetrics, process_metrics
from endpoint_optimizer.pipeline import (
    autoscaling,
    cadence,
    plan,
    pricing,
    scale_to_zero,
    search_status,
)
from endpoint_optimizer.pipeline.decide import decide, status_patch
from endpoint_optimizer.pipeline.model import (
    ANNOTATION_PREFIX,
    ActionKind,
    Decision,
    Event,
    Observations,
    RawMeasurement,
    Resource,
    Timing,
)
from endpoint_optimizer.pipeline.record import fold, with_fallback_in_conditions
from endpoint_optimizer.pipeline.search_status import served_stack
from endpoint_optimizer.sagemaker import matrix
from endpoint_optimizer.sagemaker.naming import Owner

# kopf's indexes, as the handlers receive them: key -> the values indexed under it.
Index = Mapping[Any, Collection[Any]]


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Dependencies:
    """What every wake-up uses: one per operator process, shared by all resources."""

    aws: AwsClients
    metrics: OperatorMetrics
    options: OperatorOptions
    freshness: Freshness = field(default_factory=Freshness)
    clock: Callable[[], datetime] = _utc_now
    # Each resource's last observation (by uid): pipeline.cadence reuses what a wake-up
    # does not describe again. After a restart there is none, and observe() describes all.
    observed: dict[str, Observations] = field(default_factory=dict)
    # The ConfigMaps a spec names, read on demand (controller/configmaps.py).
    config_maps: ConfigMapReader = field(default_factory=StaticConfigMaps)
    # The retry backoff's jitter: uniform in [0, 1).
    draw: Callable[[], float] = random.random
    # Writes a running measurement's progress to status mid-wake-up (controller/progress.py).
    status_writer: StatusWriter = no_status_writes

    @classmethod
    def start(
        cls,
        options: OperatorOptions,
        config_maps: ConfigMapReader,
        status_writer: StatusWriter = no_status_writes,
    ) -> Dependencies:
        """The process's dependencies: its metrics, and AWS clients they instrument."""
        metrics = process_metrics()
        aws = AwsClients(
            max_concurrency=options.aws_concurrency,
            on_new_client=metrics.instrument,
            max_measurements=options.measure_concurrency,
        )
        return cls(
            aws=aws,
            metrics=metrics,
            options=options,
            config_maps=config_maps,
            status_writer=status_writer,
        )

    def forget(self, uid: str) -> None:
        """The resource is gone: drop what this process remembered of it."""
        self.freshness.forget(uid)
        self.observed.pop(uid, None)

    @property
    def backoff(self) -> retry.Backoff:
        o = self.options
        ceiling = max(o.poll_interval, o.retry_max_delay)
        return retry.Backoff(o.poll_interval, ceiling, o.retry_limit)


@dataclass(frozen=True)
class Woken:
    """What a wake-up changes: the status merge patch, and the Events to post, in order."""

    status_patch: dict[str, Any]
    events: list[Event] = field(default_factory=list)


async def wake(deps: Dependencies, body: Mapping[str, Any], claims: Index) -> Woken:
    """One wake-up of the resource in `body`; `claims`: kopf's endpoint_claims index."""
    res = resource(body, claims)
    with deps.metrics.timed_reconcile(), _log_context(body):
        return await _reconcile(deps, body, res)


async def _reconcile(deps: Dependencies, body: Mapping[str, Any], res: Resource) -> Woken:
    # A measurement's progress is for people, never decided on (controller/progress.py):
    # one left in the body (a wake-up that measured, or one killed mid-measurement) goes.
    shown = PROGRESS in (body.get("status") or {})
    before = deps.freshness.status(res.owner.uid, body.get("status") or {})
    raw_spec = dict(body.get("spec") or {})
    try:
        spec: OptimizedEndpointSpec | None = parse_spec(raw_spec)
    except SpecError:
        spec = None
    log = get_logger("reconcile").bind(
        namespace=res.owner.namespace,
        name=res.owner.name,
        generation=res.generation,
        phase=before.get("phase", "Pending"),
    )
    now = deps.clock()
    waiting = retry.holding(parse_status(before), res, now)
    if waiting is not None:
        # Backing off: no AWS call, no status write until the time status.retry names.
        log.debug("backing off", reason=waiting.reason, attempt=waiting.attempt)
        return Woken({})
    try:
        observations = await _observe(deps, spec, raw_spec, before, res, now)
    except Exception as exc:  # whatever it is, status says so and backs off
        broken = _failure("observe", exc)
        log.warning("observe failed", error=broken.message)
        after, events = retry.failed(before, before, broken, deps.backoff, now, deps.draw)
        return _written(deps, res, before, after, events, shown)
    decision = decide(raw_spec, parse_status(before), observations, res, now, _timing(deps))
    # Names only (kind and resource): a request body may carry environment values.
    log.debug("decided", actions=[f"{a.kind}:{a.resource}" for a in decision.actions])
    region = _region(parse_status(before), spec, raw_spec)
    after, warnings, failure, measured = await _act(deps, spec, region, decision, res, log)
    # After the decision and any measurement: the conditions name a synthetic fallback.
    after = with_fallback_in_conditions(after)
    if failure is None:
        after = retry.cleared(after)
    else:
        after, told = retry.failed(before, after, failure, deps.backoff, now, deps.draw)
        warnings = [*told, *warnings]
    log.info("reconciled", new_phase=after.get("phase"), actions=len(decision.actions))
    deps.metrics.reconciled(res.owner.namespace, res.owner.name, after, raw_spec)
    return _written(deps, res, before, after, [*warnings, *decision.events], shown or measured)


def _written(
    deps: Dependencies,
    res: Resource,
    before: dict[str, Any],
    after: dict[str, Any],
    events: list[Event],
    progress_shown: bool = False,
) -> Woken:
    changes = status_patch(before, after)
    if progress_shown:
        # A progress write may have changed these since `before`: they end as `after` says.
        changes[PROGRESS] = None
        changes.update({k: after.get(k) for k in SHOWN_FIRST})
    if changes:
        deps.freshness.wrote(res.owner.uid, before, after)
    return Woken(changes, events)


def _failure(what: str, exc: BaseException) -> retry.Failure:
    """A failure by what it is: AWS errors classified, anything else retried with its type."""
    if isinstance(exc, ConfigMapProblem):
        return retry.Failure(exc.reason, exc.message, retryable=True)
    try:
        error = classify(exc, what)
    except Exception:  # not an AWS error: a broken measurement, or a bug
        return retry.Failure("ActionFailed", f"{what}: {type(exc).__name__}: {exc}", True)
    return retry.Failure(error.kind.value, error.describe(), error.retryable)


def _region(
    status: OptimizedEndpointStatus,
    spec: OptimizedEndpointSpec | None,
    raw_spec: Mapping[str, Any],
) -> str:
    """Where status says things were made; the spec's region only for a status naming none."""
    recorded = str(status.sagemaker.region or "")
    if recorded:
        return recorded
    return spec.region if spec is not None else str(raw_spec.get("region") or "")


def _unclaimed(status_data: dict[str, Any]) -> dict[str, Any]:
    """The status without the endpoint a failed CreateEndpoint would have made.

    Status names an endpoint as the operator's only once SageMaker said it made it (or it
    is found serving a config of ours): after a create that failed, or whose answer was
    lost, an endpoint of that name may be someone else's, created meanwhile, and must
    never be rolled over or deleted as ours.
    """
    status = parse_status(status_data)
    if not status.sagemaker.endpoint_name or status.sagemaker.adopted:
        return status_data
    status.sagemaker.endpoint_name = ""
    return status.dump()


def _timing(deps: Dependencies) -> Timing:
    return Timing(deps.options.time_scale, deps.options.poll_interval)


async def _observe(
    deps: Dependencies,
    spec: OptimizedEndpointSpec | None,
    raw_spec: Mapping[str, Any],
    status: dict[str, Any],
    res: Resource,
    now: datetime,
) -> Observations:
    current = parse_status(status)
    sm = current.sagemaker
    refused = spec is None or bool(matrix.check_optimizations(spec))
    if refused and not sm.endpoint_name:
        # Refused before any AWS call: decide() turns the violations into Terminal.
        return Observations(endpoint=None)
    # A spec that no longer parses (or that the matrix refuses) still has a way back: what
    # status says was made, where; decide() returns traffic to the baseline from it.
    endpoint_name = sm.endpoint_name if refused or spec is None else spec.endpoint_name
    generation = current.observed_generation or res.generation
    names = plan.Names.of(res.owner, generation)
    if spec is not None and spec.search is not None:
        # The search candidate in flight (or the winner) has jobs of its own name.
        names = plan.search_names(names, res.owner, generation, served_stack(current))
    region = _region(current, spec, raw_spec)
    # Every job status names, where a wake-up may stop them all: the deletion, and a new
    # generation (a search's jobs built ahead are not the one in flight).
    every_job = res.deleting or res.generation > current.observed_generation > 0
    observed = await observe(
        deps.aws,
        region,
        endpoint_name,
        jobs=[j for j in sm.optimization_jobs if j == names.job or every_job],
        training_jobs=[j for j in sm.training_jobs if j == names.job or every_job],
        plan=cadence.observe_plan(current, res, now, deps.options.endpoint_recheck_s),
        last=deps.observed.get(res.owner.uid),
    )
    adoption = spec.adoption if spec is not None and not refused else None
    if (
        adoption is not None
        and adoption.by_tag
        and not sm.endpoint_name
        and observed.endpoint is not None
        and observed.endpoint.arn
    ):
        # The adopt tag is the proof this spec states: read it while adoption waits on it.
        tags = await ownership.endpoint_tags(deps.aws, region, observed.endpoint.arn)
        observed = dataclasses.replace(observed, endpoint_tags=tags)
    if spec is not None and not refused:
        # JumpStart ids are planned from the region's metadata (cached for hours).
        observed = dataclasses.replace(observed, sources=await read_sources(deps.aws, spec))
    if spec is not None and not refused and current.phase is Phase.SEARCHING:
        observed = await _observe_search(deps, spec, current, observed, region, now)
    if observed.endpoint is not None and autoscaling.wanted(
        current, res, observed.endpoint_described
    ):
        # The endpoint's variants as last described: before an update of ours, and until
        # the scaling held off for one is back (pipeline/autoscaling.py).
        scaling = await describe_scaling(
            deps.aws, region, observed.endpoint.name, [v.name for v in observed.endpoint.variants]
        )
        observed = dataclasses.replace(observed, scaling=scaling)
    component = spec.inference_component if spec is not None and not refused else None
    wanted = [
        sm.baseline_component or (component.name if component is not None else ""),
        sm.candidate_component,
        *sm.inference_components,
    ]
    if any(wanted):
        # Components change without the endpoint's status changing: described every wake-up.
        found = await describe_components(deps.aws, region, wanted)
        observed = dataclasses.replace(observed, components=found)
        if (window := scale_to_zero.traffic_window(current, found)) is not None:
            # Once, on the wake-up that records the promotion (status.scaleToZero). A failed
            # read leaves the comparison unmeasured rather than holding the promotion back.
            try:
                traffic = await component_invocations(deps.aws, region, *window, now)
            except SageMakerError as exc:
                get_logger("reconcile").warning(
                    "scale-to-zero traffic unread", component=window[0], error=str(exc)
                )
            else:
                observed = dataclasses.replace(observed, component_invocations=traffic)
    deps.observed[res.owner.uid] = observed
    return observed


async def _observe_search(
    deps: Dependencies,
    spec: OptimizedEndpointSpec,
    current: OptimizedEndpointStatus,
    observed: Observations,
    region: str,
    now: datetime,
) -> Observations:
    """What a search reads besides the endpoint: the instance prices its costs need
    (cached a day per type), and the peak GPU memory of the candidate just measured."""
    search = current.search
    if pricing.wanted(spec, search.price if search is not None else None):
        price, problem = await read_price(
            deps.aws,
            spec.instance_type,
            spec.region,
            deps.options.instance_prices,
            deps.options.price_lookup,
        )
        observed = dataclasses.replace(observed, price=price, price_problem=problem)
    # The smaller instance types the search may try: for the rows' costs and a cost
    # objective across instance types.
    looked_up = []
    for instance_type in pricing.missing_types(spec, search):
        other, _ = await read_price(
            deps.aws,
            instance_type,
            spec.region,
            deps.options.instance_prices,
            deps.options.price_lookup,
        )
        if other is not None:
            looked_up.append(other)
    observed = dataclasses.replace(observed, prices=tuple(looked_up))
    unread = search_status.memory_unread(search)
    if unread is None or unread.started_at is None or observed.endpoint is None:
        return observed
    # The candidate just measured, while its variant is still on the endpoint. A failed
    # read leaves it unread (tried again next wake-up); it never holds the search.
    try:
        peak = await peak_gpu_memory(
            deps.aws, region, observed.endpoint.name, unread.variant, unread.started_at, now
        )
    except SageMakerError as exc:
        get_logger("reconcile").warning(
            "search candidate GPU memory unread", candidate=unread.name, error=str(exc)
        )
        return observed
    return dataclasses.replace(observed, gpu_memory=(unread.name, peak))


_MEASURES = frozenset({ActionKind.MEASURE_BASELINE, ActionKind.COMPARE, ActionKind.JUDGE_LIVE})


async def _act(
    deps: Dependencies,
    spec: OptimizedEndpointSpec | None,
    region: str,
    decision: Decision,
    res: Resource,
    log: structlog.stdlib.BoundLogger,
) -> tuple[dict[str, Any], list[Event], retry.Failure | None, bool]:
    """Perform the decision's actions in order, each measurement recorded as it comes.

    The datasets the measurements use are read and parsed first, so a missing or malformed
    ConfigMap sends no traffic. The first failure stops the rest and is returned; the
    caller records it (retry.failed). Returns the status, the Events of the measurements,
    the failure, and whether a measurement's progress was written to status meanwhile.
    """
    after, events = decision.status, list[Event]()
    progress_written = False
    try:
        datasets = (
            await read_datasets(deps.config_maps, spec, res.owner.namespace, decision.actions)
            if spec is not None
            else None
        )
    except ConfigMapProblem as exc:
        log.warning("datasets unusable", reason=exc.reason, error=exc.message)
        return after, events, _failure("datasets", exc), False
    for action in decision.actions:
        try:
            ownership.check_passed_role(action, deps.options.execution_roles)
            if spec is None:
                # The way back from a spec that no longer parses: AWS calls only, no
                # measurement (decide plans none without a spec).
                assert action.kind not in _MEASURES, action
                await perform_call(deps.aws, region, action)
                raw = None
            else:
                assert datasets is not None
                reporter = ProgressReporter(
                    deps.status_writer,
                    res.owner.namespace,
                    res.owner.name,
                    action.kind.value,
                    deps.options.progress_interval,
                    # What the decision says now, not what the last wake-up wrote.
                    first={k: decision.status.get(k) for k in SHOWN_FIRST},
                )
                try:
                    raw = await perform_with_token(
                        deps.aws,
                        # What the variants serve (spec.search's candidate in flight).
                        search_status.served_spec(spec, parse_status(decision.status)),
                        action,
                        res.owner.namespace,
                        datasets.evaluation,
                        datasets.benchmark,
                        progress=reporter,
                        launcher=shard_launcher(deps.options, res.owner),
                    )
                finally:
                    progress_written = await reporter.close() or progress_written
        except Exception as exc:  # classified; a later wake-up retries
            failure = _failure(f"{action.kind.value} {action.resource}", exc)
            log.warning("action failed", action=action.kind.value, error=failure.message)
            if action.kind is ActionKind.CREATE_ENDPOINT:
                after = _unclaimed(after)
            return after, events, failure, progress_written
        if raw is not None:
            assert spec is not None
            try:
                after = await _record(deps, res, spec, after, raw, events)
            except ConfigMapProblem as exc:
                # The comparison is not kept: the samples a person must read before
                # promotion are written first, or the comparison is measured again.
                log.warning("spot check unwritable", reason=exc.reason, error=exc.message)
                return after, events, _failure("spot check", exc), progress_written
    return after, events, None, progress_written


async def _record(
    deps: Dependencies,
    res: Resource,
    spec: OptimizedEndpointSpec,
    status: dict[str, Any],
    raw: RawMeasurement,
    events: list[Event],
) -> dict[str, Any]:
    """The status with the measurement judged into it; its Events appended to `events`.

    A spot check's samples are written to their ConfigMap first (ConfigMapProblem if they
    cannot be).
    """
    # Judging scores every eval answer and bootstraps intervals: CPU work sized by the
    # tenant's data, so it runs in a thread and the loop keeps serving the rest.
    folded = await asyncio.to_thread(fold, status, raw, spec, deps.clock(), _timing(deps))
    after = folded.status
    if folded.spot_check is not None:
        after = await publish_spot_check(deps.config_maps, res.owner, folded)
    events.extend(folded.events)
    if raw.series:
        # The dashboard's live panels: the same periods the live judge just read.
        deps.metrics.observe_live(res.owner.namespace, res.owner.name, raw.series, raw.probes)
    return after


def resource(body: Mapping[str, Any], claims: Index | None = None) -> Resource:
    """The object's identity, levers and rivals (others naming the same SageMaker endpoint)."""
    meta = body.get("metadata") or {}
    owner = Owner(str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid")))
    annotations = {
        k: str(v)
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith(ANNOTATION_PREFIX)
    }
    spec = body.get("spec") or {}
    rivals: tuple[tuple[str, str], ...] = ()
    if claims is not None:
        rivals = tuple(
            (created, who)
            for created, who, uid in claims.get((spec.get("region"), spec.get("endpointName")), [])
            if uid != owner.uid
        )
    return Resource(
        owner=owner,
        generation=int(meta.get("generation", 1)),
        annotations=annotations,
        deleting=bool(meta.get("deletionTimestamp")),
        created=str(meta.get("creationTimestamp") or ""),
        rivals=rivals,
    )


def claim(body: Mapping[str, Any]) -> dict[Any, Any]:
    """The endpoint_claims index entry: which object names (region, endpointName), since when.

    decide() refuses every claimant but the oldest.
    """
    meta, spec = body.get("metadata") or {}, body.get("spec") or {}
    who = f"{meta.get('namespace')}/{meta.get('name')}"
    entry = (str(meta.get("creationTimestamp") or ""), who, str(meta.get("uid")))
    return {(spec.get("region"), spec.get("endpointName")): entry}


def levers_moved(
    deps: Dependencies, event_type: str | None, body: Mapping[str, Any], woken: object
) -> dict[str, str] | None:
    """The lever annotations, when a watch event should wake the resource for them; else None.

    Every watch event asks, the operator's own status patches too; only lever annotations
    that differ from status.observedLevers wake, and each set of them once per process
    (`woken`: the set that last woke), so a wake-up whose observe fails is retried by the
    heartbeat, never in a loop.
    """
    meta = body.get("metadata") or {}
    if event_type == "DELETED" or meta.get("deletionTimestamp"):
        return None
    annotations = {k: str(v) for k, v in (meta.get("annotations") or {}).items()}
    levers = cadence.lever_annotations(annotations)
    uid = str(meta.get("uid"))
    status = body.get("status") or {}
    latest = deps.freshness.latest(uid) or {}
    if not levers and not status.get("observedLevers") and not latest.get("observedLevers"):
        return None  # the common case, most events being status patches: no lever, none before
    if levers == woken:
        return None
    if not cadence.levers_changed(parse_status(deps.freshness.status(uid, status)), levers):
        return None
    return levers


@contextmanager
def _log_context(body: Mapping[str, Any]) -> Iterator[None]:
    """Every log line of this wake-up (perform, observe, benchmark) names the resource.

    contextvars are per asyncio task, so resources reconciled at once do not mix.
    """
    meta = body.get("metadata") or {}
    with structlog.contextvars.bound_contextvars(
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        generation=int(meta.get("generation", 1)),
        phase=str((body.get("status") or {}).get("phase", "Pending")),
    ):
        yield
