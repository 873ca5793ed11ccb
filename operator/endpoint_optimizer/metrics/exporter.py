"""Prometheus exporter: every `endpoint_optimizer_*` family the operator serves on /metrics.

Two kinds of families live here.

* Per-resource families are rows of `FAMILIES` (name, help, type, labels, and how
  the samples are read from a resource's snapshot); a custom Collector loops over
  the table at scrape time, for every resource in an in-memory map keyed by
  (namespace, name). The operator calls `reconciled` after each reconcile and
  `forget` on delete, so a deleted resource's series (its gauges and its
  rollback/promotion counters alike) vanish on the next scrape instead of
  lingering as stale label sets.
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
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, Protocol

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from endpoint_optimizer import __version__
from endpoint_optimizer.analysis.live import ProbeSamples
from endpoint_optimizer.analysis.series import IntervalPoint, LiveMetric, VariantRole, VariantSeries
from endpoint_optimizer.api import Phase, RollbackReason
from endpoint_optimizer.api.checks import CheckKind, Verdict
from endpoint_optimizer.logs import get_logger
from endpoint_optimizer.metrics.snapshot import (
    EndpointSnapshot,
    LevelFigures,
    LiveAcceptance,
    Quantiles,
    SearchCandidate,
    VariantFigures,
    snapshot_from_resource,
)
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


# For a failed check that began a rollback in a status of release 0.1: the check's kind.
_CHECK_REASONS: Mapping[CheckKind, RollbackReason] = {
    CheckKind.BENCHMARK: RollbackReason.BENCHMARK,
    CheckKind.OBJECTIVE: RollbackReason.NO_IMPROVEMENT,
    CheckKind.LIVE: RollbackReason.LIVE,
    CheckKind.ACCEPTANCE: RollbackReason.ACCEPTANCE,
    CheckKind.EVAL: RollbackReason.EVAL,
    CheckKind.EVAL_SLICE: RollbackReason.EVAL,
    CheckKind.REFUSAL: RollbackReason.REFUSAL,
    CheckKind.SPOT_CHECK: RollbackReason.MANUAL,
}


# For a status written before `status.rollout.rollbackReason` existed: the history event
# that began the rollback -> the reason label. "ChecksFailed" is refined by the kind of
# the first failed check; any other event (CandidateGone, NewGeneration) is OTHER.
_EVENT_REASONS: Mapping[str, RollbackReason] = {
    "NoImprovement": RollbackReason.NO_IMPROVEMENT,
    "ChecksInconclusive": RollbackReason.INCONCLUSIVE,
    "ManualRollback": RollbackReason.MANUAL,
    "UpdateFailed": RollbackReason.UPDATE_FAILED,
    # SageMaker's deployment guardrails undid the promotion's UpdateEndpoint.
    "PromotionRolledBack": RollbackReason.UPDATE_FAILED,
    "LiveCheckFailed": RollbackReason.LIVE,
    "BakeFailed": RollbackReason.BAKE,
}
_ROLLBACK_PHASES = frozenset({Phase.ROLLING_BACK, Phase.ROLLED_BACK})


def rollback_reason(status: Mapping[str, Any]) -> RollbackReason:
    """Why the rollout in this (camelCase) status is being rolled back, as a bounded label.

    The pipeline records it in `status.rollout.rollbackReason` when a rollback begins
    (pipeline.reasons knows each reason's label). A status written
    by an earlier release has no such field: there the reason is the event of the entry
    that began the trailing run of history entries in RollingBack/RolledBack (a rollback
    that starts and finishes within one reconcile also records a closing "RolledBack"
    entry, which says nothing about why).
    """
    rollout = status.get("rollout")
    recorded = rollout.get("rollbackReason") if isinstance(rollout, Mapping) else None
    if isinstance(recorded, str) and recorded:
        try:
            return RollbackReason(recorded)
        except ValueError:
            if (reason := _event_reason(recorded, status)) is not None:
                return reason
    history = status.get("history")
    event = ""
    for entry in reversed(history) if isinstance(history, list) else ():
        if not isinstance(entry, Mapping) or entry.get("phase") not in _ROLLBACK_PHASES:
            break
        event = str(entry.get("event", ""))
    return _event_reason(event, status) or RollbackReason.OTHER


def _event_reason(event: str, status: Mapping[str, Any]) -> RollbackReason | None:
    if event in _EVENT_REASONS:
        return _EVENT_REASONS[event]
    if event == "ChecksFailed":
        checks = status.get("checks")
        for check in checks if isinstance(checks, list) else ():
            if isinstance(check, Mapping) and check.get("verdict") == Verdict.FAIL.value:
                try:
                    return _CHECK_REASONS.get(CheckKind(str(check.get("kind"))))
                except ValueError:
                    break
    return None


class _EventSource(Protocol):
    def register(
        self, event_name: str, handler: Callable[..., Any], unique_id: str | None = None
    ) -> None: ...


class _InstrumentedClient(Protocol):
    @property
    def meta(self) -> Any: ...


@dataclass
class ResourceState:
    """Everything known about one resource; a scrape reads a copy taken under the lock."""

    snapshot: EndpointSnapshot = field(default_factory=EndpointSnapshot)
    seen: bool = False  # False until the first update: a restarted operator knows no past
    live: dict[VariantRole, IntervalPoint] = field(default_factory=dict)  # newest period
    live_period_end: float | None = None
    probes: dict[VariantRole, ProbeSamples] = field(default_factory=dict)  # newest interval
    promotions: int = 0
    rollbacks: dict[RollbackReason, int] = field(
        default_factory=lambda: dict.fromkeys(RollbackReason, 0)
    )

    def copy(self) -> ResourceState:
        return replace(
            self, live=dict(self.live), probes=dict(self.probes), rollbacks=dict(self.rollbacks)
        )


# A family's samples for one resource: label values after namespace and name, and the value.
Samples = Iterable[tuple[tuple[str, ...], float]]
RESOURCE_LABELS = ("namespace", "name")


@dataclass(frozen=True)
class Family:
    """One per-resource family: what Prometheus shows, and how each sample is read."""

    name: str  # after the `endpoint_optimizer_` prefix; a counter's samples add `_total`
    help: str
    labels: tuple[str, ...]  # after namespace and name
    read: Callable[[ResourceState], Samples]
    type: Literal["gauge", "counter"] = "gauge"

    def collect(self, resources: Iterable[tuple[tuple[str, str], ResourceState]]) -> Metric:
        kind = CounterMetricFamily if self.type == "counter" else GaugeMetricFamily
        family = kind(f"{PREFIX}_{self.name}", self.help, labels=[*RESOURCE_LABELS, *self.labels])
        for key, resource in resources:
            for labels, value in self.read(resource):
                family.add_metric([*key, *labels], value)
        return family


def _scalar(read: Callable[[EndpointSnapshot], float | None]) -> Callable[[ResourceState], Samples]:
    """One unlabelled sample per resource, absent while the snapshot has no figure."""

    def samples(state: ResourceState) -> Samples:
        value = read(state.snapshot)
        return [] if value is None else [((), float(value))]

    return samples


def _per_variant(
    read: Callable[[VariantFigures], float | None],
) -> Callable[[ResourceState], Samples]:
    def samples(state: ResourceState) -> Samples:
        for role, figures in sorted(state.snapshot.variants.items()):
            if (value := read(figures)) is not None:
                yield (role.value,), value

    return samples


def _levels(state: ResourceState) -> Iterator[tuple[tuple[str, str], LevelFigures]]:
    """(variant, concurrency) and the benchmark figures at that level."""
    for role, figures in sorted(state.snapshot.variants.items()):
        for level in figures.levels:
            yield (role.value, str(level.concurrency)), level


def _quantiles(read: Callable[[LevelFigures], Quantiles]) -> Callable[[ResourceState], Samples]:
    def samples(state: ResourceState) -> Samples:
        for at, level in _levels(state):
            for quantile, seconds in read(level).items():
                yield (*at, quantile), seconds

    return samples


def _per_level(read: Callable[[LevelFigures], float | None]) -> Callable[[ResourceState], Samples]:
    def samples(state: ResourceState) -> Samples:
        for at, level in _levels(state):
            if (value := read(level)) is not None:
                yield at, float(value)

    return samples


def _live(metric: LiveMetric) -> Callable[[ResourceState], Samples]:
    def samples(state: ResourceState) -> Samples:
        for role, point in sorted(state.live.items()):
            if (value := point.value(metric)) is not None:
                yield (role.value,), value

    return samples


def _live_acceptance(
    read: Callable[[LiveAcceptance], float | None],
) -> Callable[[ResourceState], Samples]:
    def samples(state: ResourceState) -> Samples:
        for role, found in sorted(state.snapshot.live_acceptance.items()):
            if (value := read(found)) is not None:
                yield (role.value,), value

    return samples


def _probe(metric: Literal["ttft", "tpot"]) -> Callable[[ResourceState], Samples]:
    def samples(state: ResourceState) -> Samples:
        for role, probes in sorted(state.probes.items()):
            values = sorted(probes.ttft_s if metric == "ttft" else probes.tpot_s)
            if values:
                yield (role.value,), values[len(values) // 2]

    return samples


def _info(state: ResourceState) -> Samples:
    snap = state.snapshot
    return [((snap.endpoint_name, snap.objective, snap.strategy), 1.0)]


def _phase(state: ResourceState) -> Samples:
    current = state.snapshot.phase
    phases = KNOWN_PHASES if current in KNOWN_PHASES else (*KNOWN_PHASES, current)
    return [((phase,), float(phase == current)) for phase in phases]


def _eval_score(state: ResourceState) -> Samples:
    snap = state.snapshot
    return [
        ((role.value, snap.eval_metric), figures.eval_score)
        for role, figures in sorted(snap.variants.items())
        if figures.eval_score is not None
    ]


def _eval_max_drop(state: ResourceState) -> Samples:
    snap = state.snapshot
    return [] if snap.eval_max_drop is None else [((snap.eval_metric,), snap.eval_max_drop)]


def _verdicts(state: ResourceState) -> Samples:
    return [
        ((check.name, check.kind, verdict.value), float(check.verdict == verdict))
        for check in state.snapshot.checks
        for verdict in Verdict
    ]


# What a search candidate's row may end as (pipeline/search.py's verdicts); "" while measured.
SEARCH_VERDICTS = ("", "Kept", "Beaten", "NoGain", "GateFailed", "Skipped", "NotRun")


def _search_verdicts(state: ResourceState) -> Samples:
    return [
        ((c.name, c.rung, verdict or "Measuring"), float(c.verdict == verdict))
        for c in state.snapshot.search
        for verdict in SEARCH_VERDICTS
    ]


def _per_candidate(
    read: Callable[[SearchCandidate], float | None],
) -> Callable[[ResourceState], Samples]:
    def samples(state: ResourceState) -> Samples:
        for candidate in state.snapshot.search:
            if (value := read(candidate)) is not None:
                yield (candidate.name, candidate.rung), value

    return samples


_LIVE_HELP = "from CloudWatch over the last analysis interval"
_ACCEPTANCE_HELP = (
    "from the serving container's SpecDecoding log lines over the newest analysis interval "
    "that had any"
)
_PROBE_HELP = "median of the live probes pinned to the variant in the newest interval"
_LEVEL = ("variant", "concurrency")

# Every per-resource family, in the order a scrape lists them.
FAMILIES: tuple[Family, ...] = (
    Family("info", "One series per OptimizedEndpoint; the labels say what it is.",
           ("endpoint_name", "objective", "strategy"), _info),
    Family("phase", "1 for the resource's current phase, 0 for the others.", ("phase",), _phase),
    Family("phase_entered_timestamp_seconds", "Unix time when the current phase began.", (),
           _scalar(lambda snap: snap.phase_entered_at)),
    Family("phase_deadline_seconds",
           "How long the current phase may last before the rollout counts as stuck.", (),
           _scalar(lambda snap: snap.phase_deadline_seconds)),
    Family("rollout_step", "Index of the current rollout step (0-based).", (),
           _scalar(lambda snap: snap.rollout_step)),
    Family("canary_weight_ratio", "Share of production traffic sent to the candidate.", (),
           _scalar(lambda snap: snap.canary_weight)),
    Family("ttft_seconds", "Time to first token, benchmark quantile.", (*_LEVEL, "quantile"),
           _quantiles(lambda level: level.ttft)),
    Family("itl_seconds", "Inter-token latency (per token, not per chunk), benchmark quantile.",
           (*_LEVEL, "quantile"), _quantiles(lambda level: level.itl)),
    Family("e2e_latency_seconds", "End-to-end request latency, benchmark quantile.",
           (*_LEVEL, "quantile"), _quantiles(lambda level: level.e2e)),
    Family("benchmark_requests", "Successful requests the benchmark figures rest on.", _LEVEL,
           _per_level(lambda level: level.requests)),
    Family("output_tokens_per_second", "Output tokens per second at this concurrency.", _LEVEL,
           _per_level(lambda level: level.output_tokens_per_second)),
    Family("acceptance_rate_ratio", "Speculative decoding accepted/drafted tokens.",
           ("variant",), _per_variant(lambda figures: figures.acceptance_rate)),
    Family("acceptance_rate_floor_ratio", "The spec's minimum acceptance rate.", (),
           _scalar(lambda snap: snap.acceptance_floor)),
    Family("eval_score", "Score on the evaluation set.", ("variant", "metric"), _eval_score),
    Family("eval_max_drop", "The spec's maximum absolute eval drop.", ("metric",),
           _eval_max_drop),
    Family("refusal_rate_ratio", "Refused eval items / items.", ("variant",),
           _per_variant(lambda figures: figures.refusal_rate)),
    Family("check_verdict", "1 for each check's current verdict, 0 for the other verdicts.",
           ("check", "kind", "verdict"), _verdicts),
    Family("live_invocations", f"Invocations {_LIVE_HELP}.", ("variant",),
           _live(LiveMetric.INVOCATIONS)),
    Family("live_invocations_per_instance", f"InvocationsPerInstance {_LIVE_HELP}.",
           ("variant",), _live(LiveMetric.INVOCATIONS_PER_INSTANCE)),
    Family("live_5xx_errors", f"Invocation5XXErrors {_LIVE_HELP}.", ("variant",),
           _live(LiveMetric.ERRORS_5XX)),
    Family("live_model_latency_seconds", f"Average ModelLatency {_LIVE_HELP}.", ("variant",),
           _live(LiveMetric.MODEL_LATENCY)),
    Family("live_model_latency_p99_seconds", f"p99 ModelLatency {_LIVE_HELP}.", ("variant",),
           _live(LiveMetric.MODEL_LATENCY_P99)),
    Family("live_overhead_latency_seconds", f"Average OverheadLatency {_LIVE_HELP}.",
           ("variant",), _live(LiveMetric.OVERHEAD_LATENCY)),
    Family("gpu_utilization_percent",
           f"Average GPUUtilization (0..100 x GPUs) {_LIVE_HELP}.", ("variant",),
           _live(LiveMetric.GPU_UTILIZATION)),
    Family("gpu_memory_utilization_percent",
           f"Average GPUMemoryUtilization (0..100 x GPUs) {_LIVE_HELP}.", ("variant",),
           _live(LiveMetric.GPU_MEMORY_UTILIZATION)),
    Family("live_acceptance_drafted_tokens", f"Draft tokens proposed, {_ACCEPTANCE_HELP}.",
           ("variant",), _live_acceptance(lambda found: found.drafted)),
    Family("live_acceptance_accepted_tokens", f"Draft tokens accepted, {_ACCEPTANCE_HELP}.",
           ("variant",), _live_acceptance(lambda found: found.accepted)),
    Family("live_acceptance_rate_ratio", f"Accepted/drafted tokens, {_ACCEPTANCE_HELP}.",
           ("variant",), _live_acceptance(lambda found: found.rate)),
    Family("live_acceptance_rate_lower_ratio",
           f"Lower bound of the live acceptance rate, {_ACCEPTANCE_HELP}.",
           ("variant",), _live_acceptance(lambda found: found.low)),
    Family("live_acceptance_rate_upper_ratio",
           f"Upper bound of the live acceptance rate, {_ACCEPTANCE_HELP}; below the floor: "
           "confidently below.", ("variant",), _live_acceptance(lambda found: found.high)),
    Family("live_acceptance_below_floor_intervals",
           "Live intervals whose acceptance was confidently below the floor so far.", (),
           _scalar(lambda snap: snap.acceptance_below_floor)),
    Family("speculation_disabled_timestamp_seconds",
           "Unix time the candidate's speculation was switched off on acceptance drift "
           "(onAcceptanceDrift: disableSpeculation); absent while it serves as built.", (),
           _scalar(lambda snap: snap.speculation_disabled_at)),
    Family("live_probe_ttft_seconds", f"Time to first token, {_PROBE_HELP}.", ("variant",),
           _probe("ttft")),
    Family("live_probe_itl_seconds", f"Mean inter-token latency per probe, {_PROBE_HELP}.",
           ("variant",), _probe("tpot")),
    Family("live_period_end_timestamp_seconds",
           "Unix time at the end of the newest CloudWatch period read.", (),
           lambda state: [] if state.live_period_end is None else [((), state.live_period_end)]),
    Family("search_candidate_verdict",
           "spec.search: 1 for each candidate's verdict (Measuring while compared), 0 for the "
           "others.", ("candidate", "rung", "verdict"), _search_verdicts),
    Family("search_candidate_gain_ratio",
           "spec.search: the candidate's objective gain over the stack it was built on.",
           ("candidate", "rung"), _per_candidate(lambda c: c.gain)),
    Family("search_candidate_output_tokens_per_second",
           "spec.search: the candidate's output tokens per second at the judged concurrency.",
           ("candidate", "rung"), _per_candidate(lambda c: c.output_tokens_per_second)),
    Family("search_candidate_latency_seconds",
           "spec.search: the candidate's e2e latency p50 at the judged concurrency.",
           ("candidate", "rung"), _per_candidate(lambda c: c.latency_seconds)),
    Family("search_candidate_in_service_seconds",
           "spec.search: from the update that deployed the candidate to InService.",
           ("candidate", "rung"), _per_candidate(lambda c: c.in_service_seconds)),
    Family("search_candidate_instance_hours",
           "spec.search: instance-hours the candidate's weight-0 variant ran while measured.",
           ("candidate", "rung"), _per_candidate(lambda c: c.instance_hours)),
    Family("search_candidate_peak_gpu_memory_percent",
           "spec.search: the candidate variant's highest CloudWatch GPUMemoryUtilization while "
           "measured (0-100 x GPUs).",
           ("candidate", "rung"), _per_candidate(lambda c: c.peak_gpu_memory_percent)),
    Family("search_candidate_cost_per_million_tokens_dollars",
           "spec.search: USD per 1M output tokens at the candidate's measured throughput.",
           ("candidate", "rung"), _per_candidate(lambda c: c.cost_per_million_tokens)),
    Family("search_instance_hours", "spec.search: instance-hours all candidates ran so far.",
           (), _scalar(lambda snap: snap.search_instance_hours)),
    Family("promotions", "Candidates promoted to serve all traffic.", (),
           lambda state: [((), float(state.promotions))], type="counter"),
    # Every reason is listed from 0, so `increase()` sees the first rollback as a step up.
    Family("rollbacks", "Rollouts returned to the baseline, by reason.", ("reason",),
           lambda state: [((r.value,), float(n)) for r, n in state.rollbacks.items()],
           type="counter"),
)  # fmt: skip


class EndpointCollector(Collector):
    """Derives the per-resource families from the in-memory map at every scrape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._resources: dict[tuple[str, str], ResourceState] = {}

    # --- called by the control loop ---------------------------------------------------

    def update(self, namespace: str, name: str, snapshot: EndpointSnapshot) -> str | None:
        """Store the snapshot; return the phase before it (None the first time)."""
        with self._lock:
            resource = self._resources.setdefault((namespace, name), ResourceState())
            previous = resource.snapshot.phase if resource.seen else None
            resource.snapshot = snapshot
            resource.seen = True
            return previous

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._resources.pop((namespace, name), None)

    def observe_live(
        self,
        namespace: str,
        name: str,
        series: Mapping[VariantRole, VariantSeries],
        probes: Mapping[VariantRole, ProbeSamples] | None = None,
    ) -> None:
        with self._lock:
            resource = self._resources.setdefault((namespace, name), ResourceState())
            if probes:
                resource.probes = dict(probes)
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
            self._resources.setdefault((namespace, name), ResourceState()).promotions += 1

    def record_rollback(self, namespace: str, name: str, reason: RollbackReason) -> None:
        with self._lock:
            self._resources.setdefault((namespace, name), ResourceState()).rollbacks[reason] += 1

    # --- called by prometheus_client at scrape time -----------------------------------

    def describe(self) -> Iterable[Metric]:
        # Unchecked registration: the label sets are only known at scrape time.
        return []

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            resources = [(key, state.copy()) for key, state in sorted(self._resources.items())]
        tracked = GaugeMetricFamily(
            f"{PREFIX}_resources", "OptimizedEndpoints the operator currently tracks.", labels=[]
        )
        tracked.add_metric([], float(len(resources)))
        yield tracked
        for family in FAMILIES:
            yield family.collect(resources)


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
        from `rollback_reason`. Pass the spec for the
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
                    self.endpoints.record_rollback(namespace, name, rollback_reason(status))
                elif current == Phase.SUCCEEDED:
                    self.endpoints.record_promotion(namespace, name)
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

    def forget(self, namespace: str, name: str) -> None:
        """On delete: drop every per-resource series of this resource."""
        self.endpoints.forget(namespace, name)

    def observe_live(
        self,
        namespace: str,
        name: str,
        series: Mapping[VariantRole, VariantSeries],
        probes: Mapping[VariantRole, ProbeSamples] | None = None,
    ) -> None:
        """After each CloudWatch read: export the newest period of each variant, and the
        probes sent with it."""
        self.endpoints.observe_live(namespace, name, series, probes)

    # --- operator-wide events ---------------------------------------------------------

    def observe_reconcile(
        self, duration_seconds: float, *, failed: bool = False, finished_at: float | None = None
    ) -> None:
        self._reconcile_duration.observe(duration_seconds)
        if failed:
            self._reconcile_errors.inc()
        self._last_reconcile.set(finished_at if finished_at is not None else time.time())

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
