"""Prometheus exporter: every `endpoint_optimizer_*` family the operator serves on /metrics.

Two kinds of families live here.

* Per-resource families are derived at scrape time by a custom Collector from
  an in-memory map keyed by (namespace, name). The operator calls `update`
  after each reconcile and `forget` on delete, so a deleted resource's series
  (its gauges and its rollback/promotion counters alike) vanish on the next
  scrape instead of lingering as stale label sets.
* Operator-wide families (reconcile duration, optimization job durations, AWS
  API calls) are ordinary prometheus_client metrics, fed by the control loop
  and by a botocore event hook on every client the operator makes.

TTFT, ITL and end-to-end latency are exported as quantile gauges (p50, p90,
p99 computed from the benchmark's raw samples), not as histograms. The judges
rule on exact sample quantiles; a histogram would force Grafana to interpolate
inside buckets and show a p99 that differs from the one in `status.checks` and
in the verdict. The figures also come from the persisted status, so they
survive an operator restart, which samples held in memory would not. The cost
(quantiles cannot be aggregated across endpoints) does not matter here: there
is no meaningful p99 across two different endpoints' benchmarks.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from endpoint_optimizer import __version__
from endpoint_optimizer.analysis.series import IntervalPoint, LiveMetric, VariantRole, VariantSeries
from endpoint_optimizer.api import Phase
from endpoint_optimizer.api.checks import CheckKind, Verdict
from endpoint_optimizer.logs import get_logger
from endpoint_optimizer.metrics.snapshot import EndpointSnapshot, snapshot_from_resource
from endpoint_optimizer.sagemaker.techniques import CONFIG_LABELS, TRAINING_LABELS

PREFIX = "endpoint_optimizer"
_log = get_logger("metrics")

# Phases the state-set family always lists (0 or 1), so a Grafana state timeline and
# `== 1` selectors see a stable set; an unknown phase the pipeline reports is added.
KNOWN_PHASES: tuple[str, ...] = tuple(phase.value for phase in Phase)

# Error codes botocore's standard retry mode treats as throttling (sagemaker-api.md §6).
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "PriorRequestNotComplete",
        "EC2ThrottledException",
    }
)

RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Optimization jobs take minutes to hours on SageMaker (seconds in the scaled sandbox).
JOB_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)


class RollbackReason(StrEnum):
    """The bounded `reason` label of rollbacks: what made the operator return to baseline."""

    BENCHMARK = "benchmark"  # candidate slower than baseline in the paired benchmark
    LIVE = "live"  # live CloudWatch checks failed `failureLimit` times during a step
    ACCEPTANCE = "acceptance"  # speculative acceptance rate below its floor
    EVAL = "eval"  # eval score dropped more than allowed
    REFUSAL = "refusal"  # refusal rate rose more than allowed
    NO_IMPROVEMENT = "noImprovement"  # not worse, but does not buy the objective
    DEADLINE = "deadline"  # a step did not finish within its progress deadline
    UPDATE_FAILED = "updateFailed"  # SageMaker UpdateEndpoint failed
    MANUAL = "manual"  # a person asked for it (rollback annotation)
    INCONCLUSIVE = "inconclusive"  # checks without enough data, with onNoData: fail
    OTHER = "other"  # the candidate vanished or an unknown cause

    @classmethod
    def from_check_kind(cls, kind: CheckKind) -> RollbackReason:
        """The reason to record when a failed check of this kind causes the rollback."""
        return {
            CheckKind.BENCHMARK: cls.BENCHMARK,
            CheckKind.OBJECTIVE: cls.NO_IMPROVEMENT,
            CheckKind.LIVE: cls.LIVE,
            CheckKind.ACCEPTANCE: cls.ACCEPTANCE,
            CheckKind.EVAL: cls.EVAL,
            CheckKind.REFUSAL: cls.REFUSAL,
            CheckKind.SPOT_CHECK: cls.MANUAL,
        }[kind]


# The pipeline's history event that begins a rollback -> the reason label.
# "ChecksFailed" is refined by the kind of the first failed check.
_EVENT_REASONS: Mapping[str, RollbackReason] = {
    "NoImprovement": RollbackReason.NO_IMPROVEMENT,
    "ChecksInconclusive": RollbackReason.INCONCLUSIVE,
    "ManualRollback": RollbackReason.MANUAL,
    "UpdateFailed": RollbackReason.UPDATE_FAILED,
    "PromotionFailed": RollbackReason.UPDATE_FAILED,
    "DeadlineExceeded": RollbackReason.DEADLINE,
    "LiveCheckFailed": RollbackReason.LIVE,
}
_ROLLBACK_PHASES = frozenset({Phase.ROLLING_BACK, Phase.ROLLED_BACK})


def rollback_reason(status: Mapping[str, Any]) -> RollbackReason:
    """Why the rollout in this (camelCase) status is being rolled back, as a bounded label.

    The reason is the event of the entry that began the trailing run of history
    entries in RollingBack/RolledBack: a rollback that starts and finishes within one
    reconcile also records a closing "RolledBack" entry, which says nothing about why.
    """
    history = status.get("history")
    event = ""
    for entry in reversed(history) if isinstance(history, list) else ():
        if not isinstance(entry, Mapping) or entry.get("phase") not in _ROLLBACK_PHASES:
            break
        event = str(entry.get("event", ""))
    if event in _EVENT_REASONS:
        return _EVENT_REASONS[event]
    if event == "ChecksFailed":
        checks = status.get("checks")
        for check in checks if isinstance(checks, list) else ():
            if isinstance(check, Mapping) and check.get("verdict") == Verdict.FAIL.value:
                try:
                    return RollbackReason.from_check_kind(CheckKind(str(check.get("kind"))))
                except ValueError:
                    break
    return RollbackReason.OTHER


class OptimizationTechnique(StrEnum):
    QUANTIZATION = "quantization"
    SPECULATIVE_DECODING = "speculativeDecoding"
    COMPILATION = "compilation"


class _EventSource(Protocol):
    def register(
        self, event_name: str, handler: Callable[..., Any], unique_id: str | None = None
    ) -> None: ...


class _InstrumentedClient(Protocol):
    @property
    def meta(self) -> Any: ...


class _Resource:
    """Everything known about one resource, guarded by the exporter's lock."""

    def __init__(self) -> None:
        self.snapshot = EndpointSnapshot()
        self.seen = False  # False until the first update: a restarted operator knows no past
        self.live: dict[VariantRole, IntervalPoint] = {}
        self.live_period_end: float | None = None
        self.promotions = 0
        # Every reason starts at 0 so `increase()` sees the first rollback as a step up.
        self.rollbacks: dict[RollbackReason, int] = dict.fromkeys(RollbackReason, 0)


def _gauge(name: str, documentation: str, labels: list[str], unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", documentation, labels=labels, unit=unit)


class EndpointCollector(Collector):
    """Derives the per-resource families from the in-memory map at every scrape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._resources: dict[tuple[str, str], _Resource] = {}

    # --- called by the control loop ---------------------------------------------------

    def update(self, namespace: str, name: str, snapshot: EndpointSnapshot) -> str | None:
        """Store the snapshot; return the phase before it (None the first time)."""
        with self._lock:
            resource = self._resources.setdefault((namespace, name), _Resource())
            previous = resource.snapshot.phase if resource.seen else None
            resource.snapshot = snapshot
            resource.seen = True
            return previous

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._resources.pop((namespace, name), None)

    def observe_live(
        self, namespace: str, name: str, series: Mapping[VariantRole, VariantSeries]
    ) -> None:
        with self._lock:
            resource = self._resources.setdefault((namespace, name), _Resource())
            resource.live = {}
            ends: list[float] = []
            for role, variant_series in series.items():
                point = variant_series.latest()
                if point is not None:
                    resource.live[role] = point
                    ends.append(point.start + variant_series.period_seconds)
            resource.live_period_end = max(ends) if ends else None

    def record_promotion(self, namespace: str, name: str) -> None:
        with self._lock:
            self._resources.setdefault((namespace, name), _Resource()).promotions += 1

    def record_rollback(self, namespace: str, name: str, reason: RollbackReason) -> None:
        with self._lock:
            self._resources.setdefault((namespace, name), _Resource()).rollbacks[reason] += 1

    def known(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(self._resources)

    # --- called by prometheus_client at scrape time -----------------------------------

    def describe(self) -> Iterable[Metric]:
        # Unchecked registration: the label sets are only known at scrape time.
        return []

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            items = [
                (
                    key,
                    resource.snapshot,
                    dict(resource.live),
                    resource.live_period_end,
                    resource.promotions,
                    dict(resource.rollbacks),
                )
                for key, resource in sorted(self._resources.items())
            ]
        ids = ["namespace", "name"]
        info = _gauge(
            "info",
            "One series per OptimizedEndpoint; the labels say what it is.",
            [*ids, "endpoint_name", "objective", "strategy"],
        )
        phase = _gauge(
            "phase", "1 for the resource's current phase, 0 for the others.", [*ids, "phase"]
        )
        phase_entered = _gauge(
            "phase_entered_timestamp_seconds",
            "Unix time when the current phase began.",
            ids,
        )
        phase_deadline = _gauge(
            "phase_deadline_seconds",
            "How long the current phase may last before the rollout counts as stuck.",
            ids,
        )
        step = _gauge("rollout_step", "Index of the current rollout step (0-based).", ids)
        weight = _gauge(
            "canary_weight_ratio", "Share of production traffic sent to the candidate.", ids
        )
        level_ids = [*ids, "variant", "concurrency"]
        ttft = _gauge(
            "ttft_seconds",
            "Time to first token, benchmark quantile.",
            [*level_ids, "quantile"],
        )
        itl = _gauge(
            "itl_seconds",
            "Inter-token latency (per token, not per chunk), benchmark quantile.",
            [*level_ids, "quantile"],
        )
        e2e = _gauge(
            "e2e_latency_seconds",
            "End-to-end request latency, benchmark quantile.",
            [*level_ids, "quantile"],
        )
        requests = _gauge(
            "benchmark_requests", "Successful requests the benchmark figures rest on.", level_ids
        )
        tokens_per_second = _gauge(
            "output_tokens_per_second", "Output tokens per second at this concurrency.", level_ids
        )
        variant_ids = [*ids, "variant"]
        acceptance = _gauge(
            "acceptance_rate_ratio", "Speculative decoding accepted/drafted tokens.", variant_ids
        )
        acceptance_floor = _gauge(
            "acceptance_rate_floor_ratio", "The spec's minimum acceptance rate.", ids
        )
        eval_score = _gauge("eval_score", "Score on the evaluation set.", [*variant_ids, "metric"])
        eval_max_drop = _gauge(
            "eval_max_drop", "The spec's maximum absolute eval drop.", [*ids, "metric"]
        )
        refusal = _gauge("refusal_rate_ratio", "Refused eval items / items.", variant_ids)
        verdict = _gauge(
            "check_verdict",
            "1 for each check's current verdict, 0 for the other verdicts.",
            [*ids, "check", "kind", "verdict"],
        )
        live_help = "from CloudWatch over the last analysis interval"
        live_invocations = _gauge("live_invocations", f"Invocations {live_help}.", variant_ids)
        live_errors = _gauge("live_5xx_errors", f"Invocation5XXErrors {live_help}.", variant_ids)
        live_model_latency = _gauge(
            "live_model_latency_seconds", f"Average ModelLatency {live_help}.", variant_ids
        )
        live_model_latency_p99 = _gauge(
            "live_model_latency_p99_seconds", f"p99 ModelLatency {live_help}.", variant_ids
        )
        live_overhead_latency = _gauge(
            "live_overhead_latency_seconds", f"Average OverheadLatency {live_help}.", variant_ids
        )
        gpu = _gauge(
            "gpu_utilization_percent",
            f"Average GPUUtilization (0..100 x GPUs) {live_help}.",
            variant_ids,
        )
        gpu_memory = _gauge(
            "gpu_memory_utilization_percent",
            f"Average GPUMemoryUtilization (0..100 x GPUs) {live_help}.",
            variant_ids,
        )
        live_end = _gauge(
            "live_period_end_timestamp_seconds",
            "Unix time at the end of the newest CloudWatch period read.",
            ids,
        )
        promotions = CounterMetricFamily(
            f"{PREFIX}_promotions", "Candidates promoted to serve all traffic.", labels=ids
        )
        rollbacks = CounterMetricFamily(
            f"{PREFIX}_rollbacks",
            "Rollouts returned to the baseline, by reason.",
            labels=[*ids, "reason"],
        )
        resources = _gauge("resources", "OptimizedEndpoints the operator currently tracks.", [])
        resources.add_metric([], float(len(items)))

        for (namespace, name), snap, live, live_period_end, promoted, rolled in items:
            key = [namespace, name]
            info.add_metric([*key, snap.endpoint_name, snap.objective, snap.strategy], 1.0)
            phases = KNOWN_PHASES if snap.phase in KNOWN_PHASES else (*KNOWN_PHASES, snap.phase)
            for candidate_phase in phases:
                phase.add_metric([*key, candidate_phase], float(candidate_phase == snap.phase))
            if snap.phase_entered_at is not None:
                phase_entered.add_metric(key, snap.phase_entered_at)
            if snap.phase_deadline_seconds is not None:
                phase_deadline.add_metric(key, snap.phase_deadline_seconds)
            if snap.rollout_step is not None:
                step.add_metric(key, float(snap.rollout_step))
            if snap.canary_weight is not None:
                weight.add_metric(key, snap.canary_weight)
            for role, figures in sorted(snap.variants.items()):
                for level in figures.levels:
                    level_key = [*key, role.value, str(level.concurrency)]
                    for family, quantiles in (
                        (ttft, level.ttft),
                        (itl, level.itl),
                        (e2e, level.e2e),
                    ):
                        for quantile, seconds in quantiles.items():
                            family.add_metric([*level_key, quantile], seconds)
                    requests.add_metric(level_key, float(level.requests))
                    if level.output_tokens_per_second is not None:
                        tokens_per_second.add_metric(level_key, level.output_tokens_per_second)
                if figures.acceptance_rate is not None:
                    acceptance.add_metric([*key, role.value], figures.acceptance_rate)
                if figures.eval_score is not None:
                    eval_score.add_metric([*key, role.value, snap.eval_metric], figures.eval_score)
                if figures.refusal_rate is not None:
                    refusal.add_metric([*key, role.value], figures.refusal_rate)
            if snap.acceptance_floor is not None:
                acceptance_floor.add_metric(key, snap.acceptance_floor)
            if snap.eval_max_drop is not None:
                eval_max_drop.add_metric([*key, snap.eval_metric], snap.eval_max_drop)
            for check in snap.checks:
                for candidate_verdict in Verdict:
                    verdict.add_metric(
                        [*key, check.name, check.kind, candidate_verdict.value],
                        float(check.verdict == candidate_verdict),
                    )
            for role, point in sorted(live.items()):
                role_key = [*key, role.value]
                for family, metric in (
                    (live_invocations, LiveMetric.INVOCATIONS),
                    (live_errors, LiveMetric.ERRORS_5XX),
                    (live_model_latency, LiveMetric.MODEL_LATENCY),
                    (live_model_latency_p99, LiveMetric.MODEL_LATENCY_P99),
                    (live_overhead_latency, LiveMetric.OVERHEAD_LATENCY),
                    (gpu, LiveMetric.GPU_UTILIZATION),
                    (gpu_memory, LiveMetric.GPU_MEMORY_UTILIZATION),
                ):
                    value = point.value(metric)
                    if value is not None:
                        family.add_metric(role_key, value)
            if live_period_end is not None:
                live_end.add_metric(key, live_period_end)
            promotions.add_metric(key, float(promoted))
            for reason, count in rolled.items():
                rollbacks.add_metric([*key, reason.value], float(count))

        yield from (
            resources, info, phase, phase_entered, phase_deadline, step, weight,
            ttft, itl, e2e, requests, tokens_per_second, acceptance, acceptance_floor,
            eval_score, eval_max_drop, refusal, verdict, live_invocations, live_errors,
            live_model_latency, live_model_latency_p99, live_overhead_latency, gpu, gpu_memory,
            live_end, promotions, rollbacks,
        )  # fmt: skip


class OperatorMetrics:
    """The operator's metrics: one registry, the per-resource collector and the event metrics.

    Make one per operator process, update it from the control loop, serve
    `registry` on the metrics port (`start_metrics_server`).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.endpoints = EndpointCollector()
        self.registry.register(self.endpoints)
        self._build_info = Gauge(
            f"{PREFIX}_build_info",
            "Always 1; the version label says which operator build is running.",
            ["version"],
            registry=self.registry,
        )
        self._build_info.labels(version=__version__).set(1)
        self._reconcile_duration = Histogram(
            f"{PREFIX}_reconcile_duration_seconds",
            "Wall time of one reconcile (observe, decide, act, write status).",
            buckets=RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self._reconcile_errors = Counter(
            f"{PREFIX}_reconcile_errors",
            "Reconciles that ended in an error (temporary or permanent).",
            registry=self.registry,
        )
        self._last_reconcile = Gauge(
            f"{PREFIX}_last_reconcile_timestamp_seconds",
            "Unix time when the last reconcile finished.",
            registry=self.registry,
        )
        self._job_duration = Histogram(
            f"{PREFIX}_optimization_job_duration_seconds",
            "SageMaker optimization job duration, creation to terminal status.",
            ["technique", "status"],
            buckets=JOB_BUCKETS,
            registry=self.registry,
        )
        self._api_calls = Counter(
            f"{PREFIX}_aws_api_calls",
            "AWS API calls the operator made, by final outcome (code is OK or the error code).",
            ["service", "operation", "code"],
            registry=self.registry,
        )
        self._jobs_lock = threading.Lock()
        self._finished_jobs: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._api_throttled = Counter(
            f"{PREFIX}_aws_api_throttled_attempts",
            "AWS API attempts answered with a throttling error, retried ones included.",
            ["service", "operation"],
            registry=self.registry,
        )

    # --- per-resource state -----------------------------------------------------------

    def reconciled(
        self,
        namespace: str,
        name: str,
        status: Mapping[str, Any] | None,
        spec: Mapping[str, Any] | None = None,
    ) -> None:
        """The reconcile hook: export the status just written, count what changed.

        Rollbacks and promotions are counted from phase transitions (into
        RollingBack, or straight into RolledBack; into Succeeded), with the reason
        taken from the history event that began the rollback. Pass the spec for the
        figures that live there (acceptance floor, allowed eval drop, step deadline).
        Never raises: metrics must not fail a reconcile.
        """
        try:
            status = status or {}
            snapshot = snapshot_from_resource(spec, status)
            previous = self.endpoints.update(namespace, name, snapshot)
            current = snapshot.phase
            if previous is not None and previous != current:
                if current in _ROLLBACK_PHASES and previous not in _ROLLBACK_PHASES:
                    self.record_rollback(namespace, name, rollback_reason(status))
                elif current == Phase.SUCCEEDED:
                    self.record_promotion(namespace, name)
            self._last_reconcile.set(time.time())
        except Exception:
            _log.exception("metrics update failed", namespace=namespace, name=name)

    @contextmanager
    def timed_reconcile(self) -> Iterator[None]:
        """Wrap a reconcile: observes its duration, counts it as failed if it raises."""
        started = time.monotonic()
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            self.observe_reconcile(time.monotonic() - started, failed=failed)

    def update(self, namespace: str, name: str, snapshot: EndpointSnapshot) -> None:
        """Replace what is exported for this resource (`reconciled` does this from a status)."""
        self.endpoints.update(namespace, name, snapshot)

    def forget(self, namespace: str, name: str) -> None:
        """On delete: drop every per-resource series of this resource."""
        self.endpoints.forget(namespace, name)

    def observe_live(
        self, namespace: str, name: str, series: Mapping[VariantRole, VariantSeries]
    ) -> None:
        """After each CloudWatch read: export the newest period of each variant."""
        self.endpoints.observe_live(namespace, name, series)

    def record_promotion(self, namespace: str, name: str) -> None:
        self.endpoints.record_promotion(namespace, name)

    def record_rollback(self, namespace: str, name: str, reason: RollbackReason) -> None:
        self.endpoints.record_rollback(namespace, name, reason)

    # --- operator-wide events ---------------------------------------------------------

    def observe_reconcile(
        self, duration_seconds: float, *, failed: bool = False, finished_at: float | None = None
    ) -> None:
        self._reconcile_duration.observe(duration_seconds)
        if failed:
            self._reconcile_errors.inc()
        self._last_reconcile.set(finished_at if finished_at is not None else time.time())

    def observe_optimization_job(
        self, technique: OptimizationTechnique, status: str, duration_seconds: float
    ) -> None:
        """`status` is SageMaker's terminal status: COMPLETED, FAILED or STOPPED."""
        self._job_duration.labels(technique=technique.value, status=status).observe(
            duration_seconds
        )

    def instrument(self, client: _InstrumentedClient) -> None:
        """Counts every call and throttled attempt of a boto3 client (sagemaker, runtime, ...)."""
        events: _EventSource = client.meta.events
        # unique_id makes a second instrument() of the same client a no-op, not a double count.
        for event, handler in (
            ("after-call.*.*", self._after_call),
            ("after-call-error.*.*", self._after_call_error),
            ("response-received.*.*", self._response_received),
        ):
            events.register(event, handler, unique_id=f"{PREFIX}-{id(self)}-{event}")

    # botocore passes event_name and keyword arguments; the names below are its contract.
    def _after_call(self, event_name: str, http_response: Any, parsed: Any, **_: Any) -> None:
        service, operation = _service_operation(event_name)
        code = "OK"
        if getattr(http_response, "status_code", 200) >= 300:
            code = _error_code(parsed) or f"HTTP{http_response.status_code}"
        self._api_calls.labels(service=service, operation=operation, code=code).inc()
        if code == "OK" and operation in _JOB_DESCRIBES and isinstance(parsed, Mapping):
            self._observe_finished_job(operation, parsed)

    def _observe_finished_job(self, operation: str, job: Mapping[str, Any]) -> None:
        """Job durations come from the Describe calls the operator already makes.

        The first Describe that shows a job terminal observes its duration once
        (creation to end); later polls of the same job are ignored.
        """
        kind = _JOB_DESCRIBES[operation]
        status = str(job.get(kind.status_field, "")).upper()
        name = str(job.get(kind.name_field, ""))
        created = job.get("CreationTime")
        ended = job.get(kind.end_field) or job.get("LastModifiedTime")
        if status not in _TERMINAL_JOB_STATUSES or not name:
            return
        if not isinstance(created, datetime) or not isinstance(ended, datetime):
            return
        with self._jobs_lock:
            if (operation, name) in self._finished_jobs:
                return
            self._finished_jobs[(operation, name)] = None
            while len(self._finished_jobs) > _REMEMBERED_JOBS:
                self._finished_jobs.popitem(last=False)
        self._job_duration.labels(technique=kind.technique(job), status=status).observe(
            max(0.0, (ended - created).total_seconds())
        )

    def _after_call_error(self, event_name: str, exception: BaseException, **_: Any) -> None:
        service, operation = _service_operation(event_name)
        # A class name, not the message: bounded, and messages can carry URLs.
        code = type(exception).__name__
        self._api_calls.labels(service=service, operation=operation, code=code).inc()

    def _response_received(self, event_name: str, parsed_response: Any, **_: Any) -> None:
        if _error_code(parsed_response) in THROTTLING_CODES:
            service, operation = _service_operation(event_name)
            self._api_throttled.labels(service=service, operation=operation).inc()


_TERMINAL_JOB_STATUSES = frozenset({"COMPLETED", "FAILED", "STOPPED"})
_REMEMBERED_JOBS = 10_000
# OptimizationConfigs member -> technique label: the techniques table's.
_CONFIG_TECHNIQUES = CONFIG_LABELS


def _optimization_technique(job: Mapping[str, Any]) -> str:
    """`quantization`, or `compilation+quantization` for a job that does several."""
    found = {
        technique
        for config in job.get("OptimizationConfigs") or ()
        if isinstance(config, Mapping)
        for key, technique in _CONFIG_TECHNIQUES.items()
        if key in config
    }
    return "+".join(sorted(found)) or "unknown"


@dataclass(frozen=True)
class _JobDescribe:
    name_field: str
    status_field: str
    end_field: str
    technique: Callable[[Mapping[str, Any]], str]


_JOB_DESCRIBES: Mapping[str, _JobDescribe] = {
    "DescribeOptimizationJob": _JobDescribe(
        "OptimizationJobName", "OptimizationJobStatus", "OptimizationEndTime",
        _optimization_technique,
    ),
    # The operator's training jobs build a technique's weights (llm-compressor quantization).
    "DescribeTrainingJob": _JobDescribe(
        "TrainingJobName", "TrainingJobStatus", "TrainingEndTime",
        lambda _: "+".join(sorted(TRAINING_LABELS)) or "unknown",
    ),
}  # fmt: skip


def _service_operation(event_name: str) -> tuple[str, str]:
    parts = event_name.split(".")
    if len(parts) < 3:
        return ("unknown", "unknown")
    return parts[1], parts[2]


def _error_code(parsed: Any) -> str | None:
    if not isinstance(parsed, Mapping):
        return None
    error = parsed.get("Error")
    if not isinstance(error, Mapping):
        return None
    code = error.get("Code")
    return str(code) if code else None


_process_metrics: OperatorMetrics | None = None
_process_lock = threading.Lock()


def process_metrics() -> OperatorMetrics:
    """The operator process's metrics, on prometheus_client's default REGISTRY.

    `prometheus_client.start_http_server(port)` (what `run --metrics-port` starts)
    serves them together with the process and platform collectors. Tests make
    their own `OperatorMetrics()` instead, each with a private registry.
    """
    global _process_metrics
    with _process_lock:
        if _process_metrics is None:
            _process_metrics = OperatorMetrics(registry=REGISTRY)
        return _process_metrics


class MetricsServer:
    """The /metrics HTTP endpoint in a daemon thread; `close()` stops it and joins the thread."""

    def __init__(self, metrics: OperatorMetrics, port: int, host: str = "0.0.0.0") -> None:
        self._server, self._thread = start_http_server(port, addr=host, registry=metrics.registry)

    @property
    def port(self) -> int:
        """The bound port (useful when started with port 0)."""
        return int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
