"""One wake-up of one resource: observe -> decide -> act -> record, and the status patch it makes.

Everything a wake-up uses arrives in `Dependencies` (AWS clients, metrics, options,
the freshness cache, a clock): nothing is read from module state and nothing here
imports kopf, so a test drives a wake-up with a plain body and the sandbox. The
handlers apply the patch and post the events; which Describe calls a wake-up makes is
pipeline.cadence's decision, from status.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from endpoint_optimizer.api import (
    ConfigMapRef,
    OptimizedEndpointSpec,
    SpecError,
    parse_spec,
    parse_status,
)
from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.errors import SageMakerError
from endpoint_optimizer.aws.observe import observe
from endpoint_optimizer.aws.perform import perform
from endpoint_optimizer.controller.freshness import Freshness
from endpoint_optimizer.controller.options import OperatorOptions
from endpoint_optimizer.logs import get_logger
from endpoint_optimizer.metrics.exporter import OperatorMetrics, process_metrics
from endpoint_optimizer.pipeline import cadence, plan
from endpoint_optimizer.pipeline.decide import decide, status_patch
from endpoint_optimizer.pipeline.model import (
    ANNOTATION_PREFIX,
    Decision,
    Event,
    Observations,
    Resource,
    Timing,
)
from endpoint_optimizer.pipeline.record import fold, record_error, with_fallback_in_conditions
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

    @classmethod
    def start(cls, options: OperatorOptions) -> Dependencies:
        """The process's dependencies: its metrics, and AWS clients they instrument."""
        metrics = process_metrics()
        aws = AwsClients(
            max_concurrency=options.aws_concurrency,
            on_new_client=metrics.instrument,
            max_measurements=options.measure_concurrency,
        )
        return cls(aws=aws, metrics=metrics, options=options)

    def forget(self, uid: str) -> None:
        """The resource is gone: drop what this process remembered of it."""
        self.freshness.forget(uid)
        self.observed.pop(uid, None)


@dataclass(frozen=True)
class Woken:
    """What a wake-up changes: the status merge patch, and the Events to post, in order."""

    status_patch: dict[str, Any]
    events: list[Event] = field(default_factory=list)


async def wake(
    deps: Dependencies, body: Mapping[str, Any], config_maps: Index, claims: Index
) -> Woken:
    """One wake-up of the resource in `body`; `config_maps` and `claims`: kopf's indexes."""
    res = resource(body, claims)
    with deps.metrics.timed_reconcile(), _log_context(body):
        return await _reconcile(deps, body, res, config_maps)


async def _reconcile(
    deps: Dependencies, body: Mapping[str, Any], res: Resource, config_maps: Index
) -> Woken:
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
    try:
        observations = await _observe(deps, spec, before, res, now)
    except SageMakerError as exc:
        log.warning("observe failed", error=exc.describe())
        after = record_error(before, exc.describe(), not exc.retryable, now, exc.kind.value)
        return Woken(status_patch(before, after))
    decision = decide(raw_spec, parse_status(before), observations, res, now, _timing(deps))
    after, warnings = await _act(deps, spec, decision, res, config_maps, now, log)
    # After the decision and any measurement: the conditions name a synthetic fallback.
    after = with_fallback_in_conditions(after)
    changes = status_patch(before, after)
    if changes:
        deps.freshness.wrote(res.owner.uid, before, after)
    log.info("reconciled", new_phase=after.get("phase"), actions=len(decision.actions))
    deps.metrics.reconciled(res.owner.namespace, res.owner.name, after, raw_spec)
    return Woken(changes, [*warnings, *decision.events])


def _timing(deps: Dependencies) -> Timing:
    return Timing(deps.options.time_scale, deps.options.poll_interval)


async def _observe(
    deps: Dependencies,
    spec: OptimizedEndpointSpec | None,
    status: dict[str, Any],
    res: Resource,
    now: datetime,
) -> Observations:
    if spec is None or matrix.check_optimizations(spec):
        # Refused before any AWS call: decide() turns the violations into Terminal.
        return Observations(endpoint=None)
    current = parse_status(status)
    names = plan.Names.of(res.owner, current.observed_generation or res.generation)
    sm = current.sagemaker
    observed = await observe(
        deps.aws,
        spec.region,
        spec.endpoint_name,
        jobs=[j for j in sm.optimization_jobs if j == names.job or res.deleting],
        training_jobs=[j for j in sm.training_jobs if j == names.job or res.deleting],
        plan=cadence.observe_plan(current, res, now, deps.options.endpoint_recheck_s),
        last=deps.observed.get(res.owner.uid),
    )
    deps.observed[res.owner.uid] = observed
    return observed


async def _act(
    deps: Dependencies,
    spec: OptimizedEndpointSpec | None,
    decision: Decision,
    res: Resource,
    config_maps: Index,
    now: datetime,
    log: structlog.stdlib.BoundLogger,
) -> tuple[dict[str, Any], list[Event]]:
    """Perform the decision's actions in order, each measurement recorded as it comes.

    The first failure stops the rest: a permanent one is Terminal, any other is retried
    by a later wake-up. Returns the status and the Warnings to post.
    """
    after, warnings = decision.status, []
    for action in decision.actions:
        assert spec is not None  # decide acts only on a valid spec
        try:
            raw = await perform(deps.aws, spec, action, *_datasets(spec, res, config_maps))
        except SageMakerError as exc:
            after = record_error(after, exc.describe(), not exc.retryable, now, exc.kind.value)
            warnings.append(Event("Warning", exc.kind.value, exc.describe()))
            log.warning("action failed", action=action.kind.value, error=exc.describe())
            break
        except Exception as exc:  # a benchmark that broke: try again next wake-up
            message = f"{action.kind.value} {action.resource}: {type(exc).__name__}: {exc}"
            after = record_error(after, message, False, now, "ActionFailed")
            log.warning("action failed", action=action.kind.value, error=message)
            break
        if raw is not None:
            # Judging scores every eval answer and bootstraps intervals: CPU work sized by
            # the tenant's data, so it runs in a thread and the loop keeps serving the rest.
            folded = await asyncio.to_thread(fold, after, raw, spec, deps.clock(), _timing(deps))
            after = folded.status
            warnings.extend(folded.events)
            if raw.series:
                # The dashboard's live panels: the same periods the live judge just read.
                deps.metrics.observe_live(res.owner.namespace, res.owner.name, raw.series)
    return after, warnings


def _datasets(
    spec: OptimizedEndpointSpec, res: Resource, config_maps: Index
) -> tuple[str | None, str | None]:
    """The eval set's and the benchmark prompts' ConfigMap text (None: unset or not there)."""
    evaluation, bench = spec.evaluation, spec.benchmark.dataset
    eval_ref = evaluation.dataset.config_map_ref if evaluation else None
    bench_ref = bench.config_map_ref if bench else None
    namespace = res.owner.namespace
    return (
        config_map_text(eval_ref, namespace, config_maps),
        config_map_text(bench_ref, namespace, config_maps),
    )


def config_map_text(ref: ConfigMapRef | None, namespace: str, index: Index) -> str | None:
    """The text at ref's ConfigMap key in the namespace; None when unset or not there."""
    if ref is None:
        return None
    for data in index.get((namespace, ref.name), []):
        text = data.get(ref.key)
        if isinstance(text, str):
            return text
    return None


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
