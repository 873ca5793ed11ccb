"""kopf wiring only: what wakes the operator up, and the observe -> decide -> act -> patch loop.

Wake-ups: one timer per resource, the level-triggered heartbeat, every
--poll-interval; and a watch event whose lever annotations (approve, rollback,
pause, refresh) differ from those status.observedLevers says were last acted on,
so a lever acts at once instead of at the next beat. Both run the same reconcile
under the same per-object lock, on the freshest status this process knows (a
body can be older than the status the last wake-up wrote). The lock also keeps
the finalizer off a resource being reconciled. Which Describe calls a wake-up
makes is pipeline.cadence's decision, from status. Deletion is a finalizer with
the project's own name. Status is written only through the status subresource,
as a merge patch.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any

import kopf
import structlog

from endpoint_optimizer import GROUP, PLURAL, VERSION
from endpoint_optimizer.api import (
    ConfigMapRef,
    OptimizedEndpointSpec,
    SpecError,
    parse_spec,
    parse_status,
)
from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.errors import SageMakerError
from endpoint_optimizer.aws.jumpstart import read_sources
from endpoint_optimizer.aws.observe import observe
from endpoint_optimizer.aws.perform import perform
from endpoint_optimizer.controller.run import current_options
from endpoint_optimizer.controller.secrets import perform_with_token
from endpoint_optimizer.logs import get_logger
from endpoint_optimizer.metrics.exporter import OperatorMetrics, process_metrics
from endpoint_optimizer.pipeline import cadence, plan
from endpoint_optimizer.pipeline.cleanup import cleanup
from endpoint_optimizer.pipeline.decide import decide, status_patch
from endpoint_optimizer.pipeline.model import ANNOTATION_PREFIX, Observations, Resource, Timing
from endpoint_optimizer.pipeline.record import (
    SYNTHETIC_EVENT,
    engine_notes,
    record,
    record_error,
    with_fallback_in_conditions,
)
from endpoint_optimizer.sagemaker import matrix
from endpoint_optimizer.sagemaker.naming import Owner

OPTIONS = current_options()
RESOURCE = (GROUP, VERSION, PLURAL)

# Called after every reconcile with (namespace, name, status, spec); the metrics exporter's
# `reconciled` is registered at startup.
ReconcileHook = Callable[[str, str, dict[str, Any], dict[str, Any] | None], None]
reconcile_hooks: list[ReconcileHook] = []


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # Watches can go silent without an error (kopf #204, #698): the server closes each
    # watch after ~4.5 min and the client gives up after 5, so a dead one is replaced.
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    settings.posting.level = 20  # INFO: transitions and failed checks become Events
    metrics = process_metrics()
    memo.metrics = metrics
    if metrics.reconciled not in reconcile_hooks:
        reconcile_hooks.append(metrics.reconciled)
    memo.aws = AwsClients(
        max_concurrency=OPTIONS.aws_concurrency,
        on_new_client=metrics.instrument,
        max_measurements=OPTIONS.measure_concurrency,
    )


@kopf.on.cleanup()
def close(memo: kopf.Memo, **_: Any) -> None:
    aws: AwsClients | None = getattr(memo, "aws", None)
    if aws is not None:
        aws.close()


def _lock(memo: kopf.Memo) -> asyncio.Lock:
    lock: asyncio.Lock | None = getattr(memo, "reconcile_lock", None)
    if lock is None:
        lock = asyncio.Lock()
        memo.reconcile_lock = lock
    return lock


def _fresh_status(status: kopf.Status, memo: kopf.Memo) -> dict[str, Any]:
    """The status to decide from: the body's, unless it is one this process already replaced.

    A timer can fire before the watch delivers the status it patched last time; deciding
    from that older status would repeat a phase (and e.g. mistake our own new endpoint for
    a foreign one). Status is written only here, so a body equal to a status we replaced
    is stale, and the status we wrote since is the truth.
    """
    observed: dict[str, Any] = json.loads(json.dumps(dict(status)))
    superseded: list[dict[str, Any]] = getattr(memo, "status_superseded", [])
    latest: dict[str, Any] | None = getattr(memo, "status_latest", None)
    if latest is not None and observed != latest and observed in superseded:
        return copy.deepcopy(latest)
    return observed


def _remember(memo: kopf.Memo, before: dict[str, Any], after: dict[str, Any]) -> None:
    superseded: list[dict[str, Any]] = getattr(memo, "status_superseded", [])
    memo.status_superseded = [*superseded, before][-8:]
    memo.status_latest = copy.deepcopy(after)


def _resource(
    meta: kopf.Meta, body: kopf.Body, claims: kopf.Index[Any, Any] | None = None
) -> Resource:
    owner = Owner(str(meta.namespace), str(meta.name), str(meta.uid))
    annotations = {
        k: str(v) for k, v in meta.annotations.items() if k.startswith(ANNOTATION_PREFIX)
    }
    spec = body.get("spec", {})
    rivals: tuple[tuple[str, str], ...] = ()
    if claims is not None:
        rivals = tuple(
            (created, who)
            for created, who, uid in claims.get((spec.get("region"), spec.get("endpointName")), [])
            if uid != owner.uid
        )
    return Resource(
        owner=owner,
        generation=int(body.get("metadata", {}).get("generation", 1)),
        annotations=annotations,
        deleting=bool(meta.deletion_timestamp),
        created=str(meta.creation_timestamp or ""),
        rivals=rivals,
    )


@kopf.index(*RESOURCE)
def endpoint_claims(
    namespace: str | None, name: str, meta: kopf.Meta, spec: kopf.Spec, **_: Any
) -> dict[Any, Any]:
    """Which OptimizedEndpoints name each (region, endpointName): decide() refuses a second."""
    claim = (str(meta.creation_timestamp or ""), f"{namespace}/{name}", str(meta.uid))
    return {(spec.get("region"), spec.get("endpointName")): claim}


async def _observe(
    aws: AwsClients,
    spec: OptimizedEndpointSpec | None,
    status: Any,
    res: Resource,
    memo: kopf.Memo,
    now: datetime,
) -> Observations:
    if spec is None or matrix.check_optimizations(spec):
        # Refused before any AWS call: decide() turns the violations into Terminal.
        return Observations(endpoint=None)
    current = parse_status(status)
    names = plan.Names.of(res.owner, current.observed_generation or res.generation)
    sm = current.sagemaker
    jobs = [j for j in sm.optimization_jobs if j == names.job or res.deleting]
    trained = [j for j in sm.training_jobs if j == names.job or res.deleting]
    # What is not described now comes from this process's last observation; after a
    # restart there is none, and observe() describes everything.
    observed = await observe(
        aws,
        spec.region,
        spec.endpoint_name,
        jobs=jobs,
        training_jobs=trained,
        plan=cadence.observe_plan(current, res, now, OPTIONS.endpoint_recheck_s),
        last=getattr(memo, "last_observations", None),
    )
    # JumpStart ids are planned from the region's metadata (cached for hours).
    observed = dataclasses.replace(observed, sources=await read_sources(aws, spec))
    memo.last_observations = observed
    return observed


async def _reconcile(
    body: kopf.Body,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    config_maps: kopf.Index[Any, Any],
    claims: kopf.Index[Any, Any],
) -> None:
    aws: AwsClients = memo.aws
    res = _resource(meta, body, claims)
    before = _fresh_status(status, memo)
    try:
        parsed: OptimizedEndpointSpec | None = parse_spec(dict(spec))
    except SpecError:
        parsed = None
    log = get_logger("reconcile").bind(
        namespace=res.owner.namespace,
        name=res.owner.name,
        generation=res.generation,
        phase=before.get("phase", "Pending"),
    )
    now = datetime.now(UTC)
    try:
        observations = await _observe(aws, parsed, before, res, memo, now)
    except SageMakerError as exc:
        after = record_error(before, exc.describe(), not exc.retryable, now, exc.kind.value)
        log.warning("observe failed", error=exc.describe())
        patch.status.update(status_patch(before, after))
        return
    decision = decide(
        dict(spec), parse_status(before), observations, res, now, Timing(OPTIONS.time_scale)
    )
    after = decision.status
    for action in decision.actions:
        assert parsed is not None  # decide acts only on a valid spec
        try:
            evaluation, bench = parsed.evaluation, parsed.benchmark.dataset
            eval_ref = evaluation.dataset.config_map_ref if evaluation else None
            bench_ref = bench.config_map_ref if bench else None
            measured = await perform_with_token(
                aws,
                parsed,
                action,
                res.owner.namespace,
                _config_map_text(eval_ref, res.owner.namespace, config_maps),
                _config_map_text(bench_ref, res.owner.namespace, config_maps),
            )
        except SageMakerError as exc:
            after = record_error(after, exc.describe(), not exc.retryable, now, exc.kind.value)
            kopf.warn(body, reason=exc.kind.value, message=exc.describe()[:1024])
            log.warning("action failed", action=action.kind.value, error=exc.describe())
            break
        except Exception as exc:  # a benchmark that broke: try again next wake-up
            message = f"{action.kind.value} {action.resource}: {type(exc).__name__}: {exc}"
            after = record_error(after, message, False, now, "ActionFailed")
            log.warning("action failed", action=action.kind.value, error=message)
            break
        if measured is not None:
            after = record(after, measured, parsed, datetime.now(UTC))
            for note in engine_notes(measured):
                kopf.warn(body, reason=SYNTHETIC_EVENT, message=note[:1024])
            if measured.series:
                # The dashboard's live panels: the same periods the live judge just read.
                metrics: OperatorMetrics = memo.metrics
                metrics.observe_live(res.owner.namespace, res.owner.name, measured.series)
    for event in decision.events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message[:1024])
    # After the decision and any measurement: the conditions name a synthetic fallback.
    after = with_fallback_in_conditions(after)
    changes = status_patch(before, after)
    if changes:
        patch.status.update(changes)
        _remember(memo, before, after)
    log.info("reconciled", new_phase=after.get("phase"), actions=len(decision.actions))
    for hook in reconcile_hooks:
        hook(res.owner.namespace, res.owner.name, after, dict(spec))


@kopf.index("", "v1", "configmaps")
def config_maps(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """ConfigMap data by (namespace, name): eval and benchmark datasets are read from here."""
    return {(namespace, name): dict(body.get("data") or {})}


def _config_map_text(
    ref: ConfigMapRef | None, namespace: str, index: kopf.Index[Any, Any]
) -> str | None:
    """The text at ref's ConfigMap key in the namespace; None when unset or not there."""
    if ref is None:
        return None
    for data in index.get((namespace, ref.name), []):
        text = data.get(ref.key)
        if isinstance(text, str):
            return text
    return None


@kopf.timer(*RESOURCE, interval=OPTIONS.poll_interval, initial_delay=0)
async def heartbeat(
    body: kopf.Body,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    async with _lock(memo):
        await _wake(body, meta, spec, status, patch, memo, kwargs)


@kopf.on.event(*RESOURCE)
async def lever_changed(
    event: kopf.RawEvent,
    body: kopf.Body,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    """A lever annotation set, changed or removed: the same reconcile, now, not at the beat.

    Every watch event comes here, the operator's own status patches too; only lever
    annotations that differ from status.observedLevers wake, and each set of them once per
    process, so a wake-up whose observe fails is retried by the heartbeat, never in a loop.
    """
    if event.get("type") == "DELETED" or meta.deletion_timestamp:
        return
    levers = cadence.lever_annotations({k: str(v) for k, v in meta.annotations.items()})
    latest: dict[str, Any] = getattr(memo, "status_latest", None) or {}
    if not levers and not status.get("observedLevers") and not latest.get("observedLevers"):
        return  # the common case, most events being status patches: no lever, none before
    if levers == getattr(memo, "levers_woken", None):
        return
    if not cadence.levers_changed(parse_status(_fresh_status(status, memo)), levers):
        return
    async with _lock(memo):
        # The heartbeat may have acted on them while this waited for the lock.
        if not cadence.levers_changed(parse_status(_fresh_status(status, memo)), levers):
            return
        memo.levers_woken = levers
        await _wake(body, meta, spec, status, patch, memo, kwargs)


async def _wake(
    body: kopf.Body,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    kwargs: dict[str, Any],
) -> None:
    # kopf passes each index as a keyword named after its function.
    index: kopf.Index[Any, Any] = kwargs["config_maps"]
    metrics: OperatorMetrics = memo.metrics
    with metrics.timed_reconcile(), _log_context(meta, body, status):
        await _reconcile(body, meta, spec, status, patch, memo, index, kwargs["endpoint_claims"])


def _log_context(
    meta: kopf.Meta, body: kopf.Body, status: kopf.Status
) -> AbstractContextManager[None]:
    """Every log line of this wake-up (executor, observe, benchmark) names the resource.

    contextvars are per asyncio task, so resources reconciled at once do not mix.
    """
    return structlog.contextvars.bound_contextvars(
        namespace=str(meta.namespace),
        name=str(meta.name),
        generation=int(body.get("metadata", {}).get("generation", 1)),
        phase=str(status.get("phase", "Pending")),
    )


@kopf.on.delete(*RESOURCE)
async def finalize(
    body: kopf.Body,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    aws: AwsClients = memo.aws
    res = _resource(meta, body)
    try:
        parsed = parse_spec(dict(spec))
    except SpecError:
        return  # nothing was ever made for a spec that never parsed
    current = parse_status(dict(status))
    async with _lock(memo):
        try:
            observations = await observe(
                aws,
                parsed.region,
                parsed.endpoint_name,
                jobs=current.sagemaker.optimization_jobs,
                training_jobs=current.sagemaker.training_jobs,
            )
            result = cleanup(current, observations, parsed.deletion_policy)
            for action in result.actions:
                await perform(aws, parsed, action)
        except SageMakerError as exc:
            raise kopf.TemporaryError(exc.describe(), delay=OPTIONS.poll_interval) from exc
    if not result.done:
        raise kopf.TemporaryError(result.message, delay=OPTIONS.poll_interval)
    metrics_of_process: OperatorMetrics = memo.metrics
    metrics_of_process.forget(res.owner.namespace, res.owner.name)
    get_logger("finalize").info("cleaned up", namespace=res.owner.namespace, name=res.owner.name)
