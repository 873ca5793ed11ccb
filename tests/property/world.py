"""One OptimizedEndpoint, the operator process that reconciles it, and the model of SageMaker.

A wake-up is the real `controller.reconcile.wake` with the model as AWS (`ModelClients`),
on the body kopf would hand over (or, once, the body before the last status patch: a
stale watch), and its status patch applied as the apiserver applies a merge patch. Only
the measurements are the model's, through two seams that World installs and `close()`
restores: `reconcile.perform_with_token` answers measurement actions (benchmark reports
whose requests all failed, judged by the real judge; a CloudWatch window, judged by the
real live judge; or a `Chosen` measurement whose verdicts the rules picked) and passes
every other action to the real one; `pipeline.record.judge` returns a `Chosen`
measurement's verdicts as they are. `reconcile.decide` is wrapped only to keep the
decision for the per-wake-up bounds. Deletion runs the real `controller.finalize`
until it reports done.

A crash (`Crash`) ends a wake-up between two actions: what was done stays in the model,
the status patch is lost, and the next process starts with nothing in memory. The
status of the Kubernetes object is always what the last finished wake-up wrote.

`check()` holds the invariants; they read the model's record of who made what and what
serves, never the operator's word for it.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from botocore.exceptions import ClientError

from endpoint_optimizer.analysis.series import IntervalPoint, VariantRole, VariantSeries
from endpoint_optimizer.api import (
    ConditionStatus,
    ConditionType,
    LevelMeasurement,
    OptimizedEndpointSpec,
    OptimizedEndpointStatus,
    Phase,
    SpecError,
    VariantMeasurements,
    parse_status,
)
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.api.live import LiveDecision
from endpoint_optimizer.api.status import EvalNoise
from endpoint_optimizer.aws import observe as aws_observe
from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.errors import classify
from endpoint_optimizer.aws.perform import ProgressSink
from endpoint_optimizer.bench.models import (
    Acceptance,
    BenchConfig,
    BenchReport,
    BenchTarget,
    Distribution,
    LevelReport,
    RequestSample,
    Slo,
    Validity,
    Window,
)
from endpoint_optimizer.bench.shards import ShardLauncher
from endpoint_optimizer.bench.stats import black_box_acceptance, summarize
from endpoint_optimizer.controller import reconcile
from endpoint_optimizer.controller.configmaps import StaticConfigMaps
from endpoint_optimizer.controller.finalize import finalize
from endpoint_optimizer.controller.options import OperatorOptions
from endpoint_optimizer.controller.reconcile import Dependencies
from endpoint_optimizer.controller.secrets import perform_with_token
from endpoint_optimizer.metrics.exporter import OperatorMetrics
from endpoint_optimizer.pipeline import record as pipeline_record
from endpoint_optimizer.pipeline.assess import measurement_plan
from endpoint_optimizer.pipeline.decide import decide
from endpoint_optimizer.pipeline.model import (
    APPROVE,
    PAUSE,
    ROLLBACK,
    Action,
    ActionKind,
    Decision,
    Measurement,
    RawMeasurement,
    VariantRun,
)
from endpoint_optimizer.pipeline.plan import Names
from endpoint_optimizer.sagemaker.naming import Owner
from tests.property.sagemaker_model import (
    OPERATOR,
    PERSON,
    ApiError,
    ConnectionReset,
    Crash,
    Endpoint,
    Fault,
    ModelClients,
    SageMaker,
    client_error,
)
from tests.unit.api.admission import _draft4, _strict_problems, admit, root_schema

OWNER = Owner("ml", "chat", "uid-1")
ENDPOINT = "chat"
REGION = "us-east-1"
POLL_S = 30.0
START = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"

# The most AWS actions one decide() asks for: a new generation stops the last one's jobs
# (an optimization and a training job: 2), releases a retained baseline (its config, the
# candidate and pinned configs, and its model: 4), then measures the new baseline (a
# measurement, counted apart). Every other phase asks for at most 4 (the promotion:
# CreateEndpointConfig, two PutMetricAlarm, UpdateEndpoint). design.md: "performs at most
# a few idempotent actions"; this is the bound the code keeps.
MAX_AWS_ACTIONS = 6
# One measurement per wake-up at most: a benchmark or a live window, never both.
MAX_MEASUREMENTS = 1
# Describe calls of one wake-up: the endpoint, its serving config (cached per process),
# and the generation's optimization and training job.
MAX_DESCRIBES = 4
# The finalizer also looks for what a lost status write left unnamed (aws/sweep.py): one
# List per kind (models, configs, optimization and training jobs, inference components,
# alarms by prefix), and, while status names no endpoint, DescribeEndpoint and ListTags
# of spec.endpointName.
MAX_LISTS_FINALIZE = 6
MAX_DESCRIBES_FINALIZE = MAX_DESCRIBES + 2
# docs/resilience.md and pipeline/cadence.py: while a job runs and nothing of the
# operator's changes the endpoint, one Describe per wake-up.
MAX_DESCRIBES_WAITING = 1

# What a person or the operator may be doing to the candidate while it holds traffic.
PROGRESSING = frozenset(
    {Phase.DEPLOYING, Phase.ANALYZING, Phase.AWAITING_APPROVAL, Phase.PROMOTING, Phase.ROLLING_BACK}
)
# Endpoint states in which production variants answer users.
SERVING = frozenset(
    {"InService", "Updating", "SystemUpdating", "RollingBack", "UpdateRollbackFailed"}
)

BASELINE_LATENCY_S = 1.0
# The candidate's latency on live traffic, by what it turns out to be.
CANDIDATE_LATENCY = {"pass": 0.7, "noImprovement": 1.0, "inconclusive": 1.0, "fail": 2.5}
QUALITIES = ("pass", "fail", "inconclusive", "noImprovement", "errors")


def spec(**overrides: Any) -> dict[str, Any]:
    """A spec the operator accepts: an FP8 canary on an instance that has FP8."""
    base: dict[str, Any] = {
        "endpointName": ENDPOINT,
        "region": REGION,
        "executionRoleArn": "arn:aws:iam::123456789012:role/sagemaker-exec",
        "model": {"s3Uri": "s3://models/llama/", "image": IMAGE},
        "instanceType": "ml.g6.12xlarge",
        "optimizations": {"quantization": {"scheme": "fp8"}},
        "outputS3Uri": "s3://models/out/",
        "benchmark": {"concurrency": [1, 8], "requests": 40},
        # FP8 changes numerics: an eval set or a waiver (the rules choose the verdicts).
        "evaluation": {"waiver": "the model's rules choose the verdicts"},
        "rollout": {
            "strategy": "canary",
            "steps": [{"weight": 10, "pause": "1m"}, {"weight": 50, "pause": "1m"}],
            "analysis": {"interval": "1m", "minInvocations": 5},
            "baselineRetention": "2m",
        },
    }
    base.update(overrides)
    return base


EVAL_SET = "\n".join(
    json.dumps({"prompt": f"What is {i} + {i}?", "reference": str(2 * i)}) for i in range(20)
)


@dataclass(frozen=True)
class Chosen(RawMeasurement):
    """A measurement whose verdicts the rules chose (what the candidate turned out to be):
    `judge` returns them as they are; every other RawMeasurement goes to the real judge."""

    chosen: Measurement | None = None


_REAL_JUDGE = pipeline_record.judge
_REAL_PERFORM = reconcile.perform_with_token
_REAL_DECIDE = reconcile.decide


def _judge(
    spec: OptimizedEndpointSpec, raw: RawMeasurement, eval_noise: EvalNoise | None = None
) -> Measurement:
    if isinstance(raw, Chosen) and raw.chosen is not None:
        return raw.chosen
    return _REAL_JUDGE(spec, raw, eval_noise)


@functools.cache
def names(generation: int) -> Names:
    return Names.of(OWNER, generation)


@dataclass
class Wakeup:
    """What one wake-up did, for the per-wake-up invariants."""

    kind: str  # reconcile | finalize | crashed | raised
    decision: Decision | None = None
    describes: int = 0
    lists: int = 0
    phase_before: Phase = Phase.PENDING
    phase_after: Phase = Phase.PENDING
    fresh_process: bool = False
    levers_changed: bool = False
    new_generation: bool = False
    ready_before: bool = False
    error: str = ""


@dataclass
class Memory:
    """What the invariants remember between steps (the model's side, never the operator's)."""

    # Models users may be on: made by a person, the operator's baseline, a promoted winner.
    approved: set[str] = field(default_factory=set)
    # Made by a wake-up that crashed before its status write: adopted by a later one.
    unrecorded: set[str] = field(default_factory=set)
    # A person changed the routing and has not pulled a lever, edited or deleted since.
    person_routing_untouched: bool = False
    # When the finalizer reported done: the retained endpoint and what it served, theirs
    # from then on (a person may delete the endpoint later; its config and models stay
    # theirs to remove, not a leak of the operator's).
    handed_over: set[str] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)
    # The candidate's latest comparison (this step) was made of failed requests.
    compared_on_errors: bool = False
    # The baseline was recorded from a benchmark whose every request failed.
    baseline_from_errors: bool = False


class World:
    """The resource, the operator process and SageMaker; one hypothesis example."""

    def __init__(self, spec_data: dict[str, Any], adopt: bool = False) -> None:
        self.sagemaker = SageMaker(region=REGION)
        self.aws = ModelClients(self.sagemaker)
        self.loop = asyncio.new_event_loop()
        self.now = START
        self.spec, refused = admitted_spec(spec_data)
        assert not refused, refused
        self.generation = 1
        self.annotations: dict[str, str] = {}
        self.lever_count = 0
        self.status: dict[str, Any] = {}
        self.parsed = OptimizedEndpointStatus()
        self.deleting = False
        self.gone = False
        # How the serving containers behave when measured.
        self.candidate_quality = "pass"
        self.network_reset = False  # every benchmark request's connection is reset
        self.eval_model_errors = 0  # the next evals meet a ModelError from the container
        self.traffic_per_minute = 600.0
        self.memory = Memory()
        self.last: Wakeup | None = None
        self.wakeups = 0
        # The status kopf last delivered before the newest patch (a stale body), and
        # whether the next wake-up gets it.
        self.superseded: dict[str, Any] | None = None
        self.stale_next = False
        self.decided: Decision | None = None
        # Measurements of this wake-up made of failed requests: (kind, baseline, candidate).
        self.on_errors: list[tuple[ActionKind, bool, bool]] = []
        self.deps = self._start_process()
        self.fresh_process = True
        # The seams where the model answers for what it cannot reach: a measurement's
        # traffic (perform_with_token), and the verdicts the rules chose (judge).
        reconcile.perform_with_token = self._perform  # type: ignore[assignment]
        reconcile.decide = self._decide
        pipeline_record.judge = _judge
        if adopt:
            self._person_endpoint()

    def close(self) -> None:
        reconcile.perform_with_token = _REAL_PERFORM
        reconcile.decide = _REAL_DECIDE
        pipeline_record.judge = _REAL_JUDGE
        self.loop.close()

    # ------------------------------------------------------------------ the process

    def _start_process(self) -> Dependencies:
        # A new process: nothing remembered (observed views, freshness, the config cache).
        aws_observe._CONFIG_CACHE.clear()
        self.fresh_process = True
        return Dependencies(
            aws=cast(AwsClients, self.aws),
            metrics=OperatorMetrics(),
            options=OperatorOptions(poll_interval=POLL_S),
            clock=lambda: self.now,
            config_maps=StaticConfigMaps({(OWNER.namespace, "evals"): {"items.jsonl": EVAL_SET}}),
            draw=lambda: 0.5,
        )

    def restart(self) -> None:
        """The operator process is restarted between wake-ups: its first LIST reads the
        status as stored (no stale body after a start)."""
        self.deps = self._start_process()
        self.stale_next = False
        # A new process has delivered no body yet: the status it superseded is not one its
        # watch can hand over late (a staleBody drawn after the restart found the very
        # first status, {}, from before the restart).
        self.superseded = None

    def outage(self, polls: int) -> None:
        """The operator is down for `polls` poll intervals, then a new process starts."""
        for _ in range(polls):
            self.now += timedelta(seconds=POLL_S)
            self.sagemaker.tick()
        self.restart()

    def crash_next_wakeup(self, after_changes: int) -> None:
        """The next wake-up dies after `after_changes` actions (changes or measurements)."""
        self.aws.crash_after = after_changes

    def body(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "namespace": OWNER.namespace,
            "name": OWNER.name,
            "uid": OWNER.uid,
            "generation": self.generation,
            "creationTimestamp": "2026-11-29T11:00:00Z",
            "annotations": dict(self.annotations),
        }
        if self.deleting:
            meta["deletionTimestamp"] = "2026-11-29T13:00:00Z"
        return {"metadata": meta, "spec": self.spec, "status": self.status}

    def _run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def wake(self) -> Wakeup | None:
        """A poll interval passes: SageMaker moves on, then the operator wakes (kopf's timer)."""
        self.now += timedelta(seconds=POLL_S)
        self.sagemaker.tick()
        if self.gone:
            return None
        self.wakeups += 1
        self.on_errors = []
        self.status_before = self.parsed
        before_models = self._operator_resources()
        describes, lists = self.aws.describes, self.aws.lists
        try:
            woken = self._finalize() if self.deleting else self._reconcile()
        except Crash:
            made = self._operator_resources() - before_models
            self.memory.unrecorded |= made
            woken = Wakeup("crashed")
            self.restart()
        except Exception as exc:  # kopf would log it and retry; the operator catches its own
            woken = Wakeup("raised", error=f"{type(exc).__name__}: {exc}")
            self.fail(f"the wake-up raised {woken.error}")
        else:
            self.fresh_process = False
        woken.describes = self.aws.describes - describes
        woken.lists = self.aws.lists - lists
        self.last = woken
        self._after_wakeup(woken)
        return woken

    def wake_until_the_phase_changes(self, most: int = 8) -> None:
        """Wake-ups until the phase changes (or `most` of them)."""
        phase = self.status.get("phase")
        for _ in range(most):
            self.wake()
            if self.gone or self.status.get("phase") != phase:
                return

    def _reconcile(self) -> Wakeup:
        """The real `reconcile.wake` on the body kopf would hand over, its patch applied."""
        previous = self.parsed
        woken = Wakeup(
            "reconcile",
            phase_before=previous.phase,
            fresh_process=self.fresh_process,
            levers_changed=_levers(previous) != _lever_values(self.annotations),
            new_generation=previous.observed_generation not in (0, self.generation),
            ready_before=_ready(previous),
        )
        body = self.body()
        if self.stale_next and self.superseded is not None:
            # The watch has not delivered the last status patch yet: the timer fires on
            # the body before it (kopf hands over what it last saw).
            body["status"] = self.superseded
        self.stale_next = False
        self.decided = None
        result = self._run(reconcile.wake(self.deps, body, {}))
        woken.decision = self.decided
        self._patch(result.status_patch)
        woken.phase_after = self.parsed.phase
        return woken

    async def _perform(
        self,
        aws: AwsClients,
        spec: OptimizedEndpointSpec,
        action: Action,
        namespace: str,
        *datasets: str | None,
        progress: ProgressSink | None = None,
        launcher: ShardLauncher | None = None,
    ) -> RawMeasurement | None:
        """controller/secrets.py `perform_with_token` as `reconcile._act` calls it: AWS calls
        through the real aws.perform (to the model), measurements from the model."""
        if action.is_measurement:
            self.aws.step()
            return self._measure(spec, action)
        self._humans_win(action)
        return await perform_with_token(
            aws, spec, action, namespace, *datasets, progress=progress, launcher=launcher
        )

    def _decide(self, *args: Any, **kwargs: Any) -> Decision:
        decision = decide(*args, **kwargs)
        self.decided = decision
        return decision

    def _humans_win(self, action: Action) -> None:
        """A person's routing stays until a person acts again (a lever, an edit, a delete):
        an update that would move users off the models the person left them on reverts it."""
        endpoint = self.sagemaker.endpoints.get(ENDPOINT)
        if (
            action.kind not in (ActionKind.UPDATE_ENDPOINT, ActionKind.UPDATE_WEIGHTS)
            or endpoint is None
            or endpoint.routed_by != PERSON
            or not self.memory.person_routing_untouched
            or endpoint.deployed is None
        ):
            return
        weights = {
            v.name: endpoint.weights.get(v.name, v.weight) for v in endpoint.deployed.variants
        }
        now = _model_shares(endpoint.deployed.variants, weights)
        if action.kind is ActionKind.UPDATE_ENDPOINT:
            target = self.sagemaker.configs.get(str(action.request.get("EndpointConfigName")))
            if target is None:
                return  # refused by SageMaker: nothing moves
            wanted = _model_shares(target.variants, {v.name: v.weight for v in target.variants})
        else:
            desired = {
                str(d["VariantName"]): float(d["DesiredWeight"])
                for d in action.request.get("DesiredWeightsAndCapacities", [])
            }
            wanted = _model_shares(endpoint.deployed.variants, {**weights, **desired})
        moved = {
            m for m in now.keys() | wanted.keys() if abs(now.get(m, 0) - wanted.get(m, 0)) > 0.005
        }
        if moved:
            self.fail(
                f"{action.kind.value} moves users a person routed on {endpoint.config} "
                f"({_percent(now)} -> {_percent(wanted)}) before any lever, edit or delete"
            )

    def _patch(self, patch: dict[str, Any]) -> None:
        """The status merge patch, applied as the apiserver applies it to what it holds."""
        if not patch:
            return
        self.superseded = self.status
        self.status = _apply_merge_patch(self.status, patch)
        try:
            self.parsed = parse_status(json.loads(json.dumps(self.status, allow_nan=False)))
        except (TypeError, ValueError, SpecError) as exc:
            self.fail(f"the status is not JSON that parse_status reads back: {exc}")
            return
        self._check_schema()

    def _finalize(self) -> Wakeup:
        """kopf's finalizer handler: one attempt; done when it returns None."""
        before = self.parsed.phase
        changes = self.aws.changes
        waiting = self._run(finalize(self.deps, self.body()))
        woken = Wakeup("finalize", phase_before=before, phase_after=before)
        sm = self.parsed.sagemaker
        bound = len(sm.optimization_jobs) + len(sm.training_jobs) + len(sm.endpoint_configs)
        bound += len(sm.models) + 2  # the endpoint's update or delete, and the alarms
        if self.aws.changes - changes > bound:
            self.fail(f"the finalizer made {self.aws.changes - changes} calls, more than {bound}")
        if waiting is None:
            self.gone = True
            self.memory.handed_over = self._handed_over()
        return woken

    def _check_schema(self) -> None:
        problems = status_problems(self.status)
        if problems:
            self.fail(f"the status is not valid against the CRD's schema: {problems[:3]}")

    # ------------------------------------------------------------------ measurements

    def _measure(self, spec: OptimizedEndpointSpec, action: Action) -> RawMeasurement:
        """What perform() would bring back: a CloudWatch window; benchmark reports whose
        requests all failed (judged by the real judge); or the verdicts the rules chose."""
        now = self.now
        if action.kind is ActionKind.JUDGE_LIVE:
            return RawMeasurement(action, series=self._cloudwatch(action))
        if action.kind is ActionKind.MEASURE_BASELINE:
            # What a person routed before the baseline was measured is the baseline now.
            self.memory.person_routing_untouched = False
        plan = measurement_plan(spec, action)
        variants = [
            action.baseline_variant,
            *([action.candidate_variant] if plan.candidate else []),
        ]
        failing = {v for v in variants if self.network_reset or not self._invocable(v)}
        if plan.candidate and self.candidate_quality == "errors":
            failing.add(action.candidate_variant)
        if plan.evaluate:
            # aws/evaluate.py: InvokeEndpoint pinned to each variant, after the benchmark.
            if self.network_reset:
                raise classify(_reset(), "InvokeEndpoint", f"endpoint {ENDPOINT}")
            for variant in variants:
                if not self._invocable(variant):
                    error = ApiError("ValidationError", f"Variant {variant} not found.")
                    raise classify(client_error(error, "InvokeEndpoint"), "InvokeEndpoint")
            if self.eval_model_errors > 0:
                self.eval_model_errors -= 1
                error = ApiError(
                    "ModelError",
                    "Received server error (503) from primary with message "
                    '"Service Unavailable". See the CloudWatch log group.',
                    424,
                )
                raise classify(client_error(error, "InvokeEndpoint"), "InvokeEndpoint")
        if failing:
            # Reports as the benchmark returns them; the pipeline judges them.
            levels = spec.benchmark.concurrency
            runs = [
                VariantRun(v, bench_report(v, levels, spec.benchmark.requests, v in failing))
                for v in variants
            ]
            self.on_errors.append(
                (
                    action.kind,
                    action.baseline_variant in failing,
                    action.candidate_variant in failing,
                )
            )
            return RawMeasurement(
                action,
                baseline=runs[0],
                candidate=runs[1] if plan.candidate else None,
                benchmarked_at=now,
            )
        return Chosen(action, chosen=self._chosen(spec, action, plan.candidate, now))

    def _chosen(
        self, spec: OptimizedEndpointSpec, action: Action, candidate: bool, now: datetime
    ) -> Measurement:
        levels = spec.benchmark.concurrency
        requests = spec.benchmark.requests
        evaluated = spec.evaluation is not None
        baseline = measured(action.baseline_variant, levels, requests, BASELINE_LATENCY_S, now)
        if evaluated:
            baseline = baseline.model_copy(
                update={"eval_score": 0.8, "refusal_rate": 0.0, "eval_items": 50}
            )
        if action.kind is ActionKind.MEASURE_BASELINE or not candidate:
            return Measurement(action.kind, action.step, baseline)
        quality = self.candidate_quality
        latency = CANDIDATE_LATENCY.get(quality, 1.0)
        cand = measured(action.candidate_variant, levels, requests, latency, now)
        verdict = {
            "pass": (Verdict.PASS, Verdict.PASS),
            "fail": (Verdict.FAIL, Verdict.FAIL),
            "inconclusive": (Verdict.INCONCLUSIVE, Verdict.INCONCLUSIVE),
            "noImprovement": (Verdict.PASS, Verdict.NO_IMPROVEMENT),
        }[quality]
        at = max(levels)
        checks = [
            Check(
                name=f"e2e_p50@c{at}", kind=CheckKind.BENCHMARK, verdict=verdict[0], reason=quality
            ),
            Check(
                name="objective",
                kind=CheckKind.OBJECTIVE,
                verdict=verdict[1],
                reason=quality,
                # The latencies it compared (ms), so a gain is read from it (spec.search).
                baseline=BASELINE_LATENCY_S * 1000,
                candidate=latency * 1000,
                interval_high=latency / BASELINE_LATENCY_S,
            ),
        ]
        if evaluated:
            cand = cand.model_copy(
                update={"eval_score": 0.8, "refusal_rate": 0.0, "eval_items": 50}
            )
            checks.append(
                Check(
                    name="eval_exact_match", kind=CheckKind.EVAL, verdict=verdict[0], reason=quality
                )
            )
        if spec.optimizations.speculative_decoding is not None:
            cand = cand.model_copy(update={"acceptance_rate": 0.6})
            checks.append(
                Check(
                    name="acceptance_rate",
                    kind=CheckKind.ACCEPTANCE,
                    verdict=verdict[0],
                    reason=quality,
                )
            )
        return Measurement(action.kind, action.step, baseline, cand, tuple(checks))

    def _invocable(self, variant: str) -> bool:
        """InvokeEndpoint with TargetVariant reaches it: a production variant that serves."""
        endpoint = self.sagemaker.endpoints.get(ENDPOINT)
        if endpoint is None or endpoint.status not in SERVING or endpoint.deployed is None:
            return False
        return any(v.name == variant for v in endpoint.deployed.variants)

    def _cloudwatch(self, action: Action) -> dict[VariantRole, VariantSeries]:
        """GetMetricData's answer for the window: each variant's share of production traffic."""
        fault = self.sagemaker.faults.get("GetMetricData")
        if fault is not None:
            self.sagemaker.call("GetMetricData", {})  # raises the armed error
        start = datetime.fromisoformat(str(action.request["start"])).timestamp()
        end = datetime.fromisoformat(str(action.request["end"])).timestamp()
        period = int(action.request["periodSeconds"])
        shares = self._shares()
        quality = self.candidate_quality
        series = {}
        for role, variant in (
            (VariantRole.BASELINE, action.baseline_variant),
            (VariantRole.CANDIDATE, action.candidate_variant),
        ):
            share = shares.get(variant, 0.0)
            candidate = role is VariantRole.CANDIDATE
            latency = CANDIDATE_LATENCY.get(quality, 1.0) if candidate else BASELINE_LATENCY_S
            error_share = {"errors": 1.0, "fail": 0.2}.get(quality, 0.0) if candidate else 0.0
            points = []
            moment = start
            while moment < end:
                calls = round(self.traffic_per_minute * period / 60.0 * share)
                jitter = 1.0 + 0.05 * ((int(moment) // period) % 5 - 2) / 2
                points.append(
                    IntervalPoint(
                        start=moment,
                        invocations=float(calls),
                        model_latency_seconds=latency * jitter if calls else None,
                        model_latency_p99_seconds=latency * 2.0 * jitter if calls else None,
                        errors_5xx=float(round(calls * error_share)),
                    )
                )
                moment += period
            series[role] = VariantSeries(
                role=role, variant_name=variant, period_seconds=period, points=tuple(points)
            )
        return series

    def _shares(self) -> dict[str, float]:
        """Each variant's share of production requests (shadows get a copy of all of them)."""
        endpoint = self.sagemaker.endpoints.get(ENDPOINT)
        if endpoint is None or endpoint.status not in SERVING or endpoint.deployed is None:
            return {}
        weights = {
            v.name: endpoint.weights.get(v.name, v.weight) for v in endpoint.deployed.variants
        }
        total = sum(weights.values())
        shares = {name: w / total for name, w in weights.items()} if total > 0 else {}
        shares.update({v.name: 1.0 for v in endpoint.deployed.shadows})
        return shares

    # ------------------------------------------------------------------ people and the world

    def edit_spec(self, spec_data: dict[str, Any]) -> list[str]:
        """kubectl apply: the apiserver's defaults, schema and CEL rules, then a new
        generation when the spec changed. Returns the apiserver's refusals (then nothing
        changes)."""
        admitted, problems = admitted_spec(spec_data)
        if problems:
            return problems
        if admitted != self.spec:
            self.spec = admitted
            self.generation += 1
            self.memory.person_routing_untouched = False
        return []

    def lever(self, key: str, on: bool = True) -> None:
        if key == PAUSE:
            if on:
                self.annotations[PAUSE] = "true"
            else:
                self.annotations.pop(PAUSE, None)
            return
        self.lever_count += 1
        self.annotations[key] = str(self.lever_count)
        self.memory.person_routing_untouched = False

    def delete(self) -> None:
        """kubectl delete: the finalizer runs from the next wake-up on."""
        if not self.gone:
            self.deleting = True
            self.memory.person_routing_untouched = False

    def person(self, operation: str, params: dict[str, Any]) -> None:
        """A person's own call (console, CLI): it fails as SageMaker says, or takes effect."""
        try:
            self.sagemaker.call(operation, params, by=PERSON)
        except ApiError:
            return
        if operation in ("UpdateEndpoint", "UpdateEndpointWeightsAndCapacities", "DeleteEndpoint"):
            self.memory.person_routing_untouched = True

    def person_weights(self, candidate_percent: int) -> None:
        """Someone sets the variant weights by hand (e.g. drains the canary)."""
        endpoint = self.sagemaker.endpoints.get(ENDPOINT)
        if endpoint is None or endpoint.deployed is None or len(endpoint.deployed.variants) < 2:
            return
        first, second = endpoint.deployed.variants[:2]
        weights = [
            {"VariantName": first.name, "DesiredWeight": float(100 - candidate_percent)},
            {"VariantName": second.name, "DesiredWeight": float(candidate_percent)},
        ]
        self.person(
            "UpdateEndpointWeightsAndCapacities",
            {"EndpointName": ENDPOINT, "DesiredWeightsAndCapacities": weights},
        )

    def person_config(self, tag: str) -> None:
        """Someone updates the endpoint to a config of their own (a hot fix)."""
        model, config = f"hotfix-model-{tag}", f"hotfix-config-{tag}"
        self.person("CreateModel", {"ModelName": model})
        self.person(
            "CreateEndpointConfig",
            {
                "EndpointConfigName": config,
                "ProductionVariants": [
                    {
                        "VariantName": f"hotfix-{tag}",
                        "ModelName": model,
                        "InitialVariantWeight": 1.0,
                    }
                ],
            },
        )
        self.person("UpdateEndpoint", {"EndpointName": ENDPOINT, "EndpointConfigName": config})

    def _person_endpoint(self) -> None:
        """A person's endpoint, serving before the operator ever touched it (adoptExisting)."""
        self.person("CreateModel", {"ModelName": "team-model"})
        self.person(
            "CreateEndpointConfig",
            {
                "EndpointConfigName": "team-config",
                "ProductionVariants": [
                    {
                        "VariantName": "AllTraffic",
                        "ModelName": "team-model",
                        "InitialVariantWeight": 1.0,
                    }
                ],
            },
        )
        self.person(
            "CreateEndpoint", {"EndpointName": ENDPOINT, "EndpointConfigName": "team-config"}
        )
        self.sagemaker.tick()
        self.memory.person_routing_untouched = False

    def fault(self, operation: str, error: ApiError | ConnectionReset, count: int = 1) -> None:
        self.sagemaker.faults[operation] = Fault(error, count)

    # ------------------------------------------------------------------ the invariants

    def fail(self, message: str) -> None:
        self.memory.violations.append(message)

    def _operator_resources(self) -> set[str]:
        sm = self.sagemaker
        made: Iterable[tuple[str, str]] = [
            *((f"model {m.name}", m.creator) for m in sm.models.values()),
            *((f"config {c.name}", c.creator) for c in sm.configs.values()),
            *((f"endpoint {e.name}", e.creator) for e in sm.endpoints.values()),
            *((f"job {j.name}", j.creator) for j in sm.jobs.values()),
            *((f"alarm {a.name}", a.creator) for a in sm.alarms.values()),
        ]
        return {name for name, creator in made if creator == OPERATOR}

    def _after_wakeup(self, woken: Wakeup) -> None:
        """Per wake-up: the call bounds, and what the model learns (approved winners)."""
        decision = woken.decision
        if decision is not None:
            aws = [a for a in decision.actions if not a.is_measurement]
            measurements = [a for a in decision.actions if a.is_measurement]
            if len(aws) > MAX_AWS_ACTIONS or len(measurements) > MAX_MEASUREMENTS:
                self.fail(
                    f"one wake-up asked for {[a.kind.value for a in decision.actions]}: more "
                    f"than {MAX_AWS_ACTIONS} AWS actions or {MAX_MEASUREMENTS} measurement"
                )
        if woken.kind == "reconcile" and (woken.describes > MAX_DESCRIBES or woken.lists):
            self.fail(f"one wake-up made {woken.describes} Describe and {woken.lists} List calls")
        if woken.kind == "finalize" and (
            woken.describes > MAX_DESCRIBES_FINALIZE or woken.lists > MAX_LISTS_FINALIZE
        ):
            self.fail(
                f"one finalizer attempt made {woken.describes} Describe and {woken.lists} List "
                "calls"
            )
        if (
            woken.kind == "reconcile"
            and woken.phase_before is Phase.OPTIMIZING
            and woken.phase_after is Phase.OPTIMIZING
            and woken.ready_before
            and not (woken.fresh_process or woken.levers_changed or woken.new_generation)
            and self._job_running_throughout()
            and woken.describes > MAX_DESCRIBES_WAITING
        ):
            self.fail(f"waiting on a job, one wake-up made {woken.describes} Describe calls")
        self._check_verdicts_on_errors()
        status = self.parsed
        endpoint = self.sagemaker.endpoints.get(ENDPOINT)
        promoted = names(status.observed_generation or 1).promoted_config
        if (
            status.phase is Phase.SUCCEEDED
            and endpoint is not None
            and endpoint.status == "InService"
            and endpoint.config == promoted
            and endpoint.deployed is not None
        ):
            # The winner, promoted after every check passed: users may stay on it.
            self.memory.approved |= {v.model for v in endpoint.deployed.variants}
        config = self.sagemaker.configs.get(promoted)
        if status.phase is Phase.PROMOTING and config is not None and config.creator == OPERATOR:
            # Promoting is entered only once every gating check passed (and any approval
            # was given): the promotion's winner is a winner from then on, so a deletion
            # that lands while its update runs may leave users on it, as one a moment
            # later (Succeeded) does (pipeline/cleanup.py keeps the promoted config).
            self.memory.approved |= {v.model for v in config.variants}

    def _check_verdicts_on_errors(self) -> None:
        """A measurement made of failed requests is no measurement of the variant that
        failed: no baseline recorded from it, no Pass resting on it, no promotion after it."""
        before, after = self.status_before, self.parsed
        # A baseline without levels is the placeholder that names the variant to measure
        # (pipeline/phases/build.py, written by the wake-up that asks for the measurement):
        # nothing measured is in it.
        recorded = after.baseline is not None and bool(after.baseline.levels)
        for kind, baseline_failed, candidate_failed in self.on_errors:
            if baseline_failed and recorded and after.baseline != before.baseline:
                self.fail(f"{kind.value}: the baseline was recorded from requests that all failed")
            if candidate_failed:
                kept = {c.name: c for c in before.checks}
                passed = [
                    c.name
                    for c in after.checks
                    if c.kind is not CheckKind.LIVE
                    and c.verdict is Verdict.PASS
                    and kept.get(c.name) != c
                ]
                if passed:
                    self.fail(
                        f"{kind.value}: {passed} passed on a candidate whose requests all failed"
                    )
                if after.phase in (Phase.PROMOTING, Phase.SUCCEEDED) and before.phase not in (
                    Phase.PROMOTING,
                    Phase.SUCCEEDED,
                ):
                    self.fail(
                        f"{kind.value}: promoted after a comparison whose requests all failed"
                    )

    def _job_running_throughout(self) -> bool:
        status = self.parsed
        job = self.sagemaker.jobs.get(names(status.observed_generation or 1).job)
        return job is not None and job.status == "INPROGRESS" and job.ticks > 0

    def candidate_traffic(self) -> list[str]:
        """Production variants with weight on a model users were never meant to stay on."""
        endpoint = self.sagemaker.endpoints.get(ENDPOINT)
        if endpoint is None or endpoint.status not in SERVING or endpoint.deployed is None:
            return []
        shares = self._shares()
        shadows = {v.name for v in endpoint.deployed.shadows}
        return [
            f"{v.name} ({v.model}) at {100 * shares.get(v.name, 0.0):.0f} %"
            for v in endpoint.deployed.variants
            if v.name not in shadows and shares.get(v.name, 0.0) > 0 and not self._approved(v.model)
        ]

    def _approved(self, model: str) -> bool:
        made = self.sagemaker.models.get(model)
        if made is not None and made.creator == PERSON:
            return True
        if model.startswith("team-") or model.startswith("hotfix-"):
            return True  # a person's, even once its record is deleted
        if any(model == names(g).baseline_model for g in range(1, self.generation + 1)):
            return True
        return model in self.memory.approved

    def check(self) -> list[str]:
        """Every invariant on the world as it is now; the violations, empty when none."""
        problems = list(self.memory.violations) + list(self.sagemaker.violations)
        status = self.parsed
        self._check_traffic(status, problems)
        self._check_owner_records(status, problems)
        return problems

    def _check_traffic(self, status: OptimizedEndpointStatus, problems: list[str]) -> None:
        on_candidate = self.candidate_traffic()
        endpoint = self.sagemaker.endpoints.get(ENDPOINT)
        if not on_candidate or endpoint is None:
            return
        if endpoint.routed_by == PERSON and self.memory.person_routing_untouched:
            return  # a person's own routing: the operator leaves it as it is
        where = f"users on {', '.join(on_candidate)}"
        if self.gone:
            problems.append(f"the resource is deleted and left {where}")
            return
        if self.deleting:
            return  # the finalizer is at work; judged once it reports done
        if status.phase not in PROGRESSING:
            problems.append(f"phase {status.phase.value} with {where}")
            return
        failed = [
            c.name
            for c in status.checks
            if c.kind is not CheckKind.LIVE and c.verdict is Verdict.FAIL
        ]
        live = status.rollout.live_judge
        if live is not None and live.decision is LiveDecision.ROLLBACK:
            failed.append("live judge")
        if status.paused and failed and status.phase is not Phase.ROLLING_BACK:
            problems.append(f"paused with failed checks {failed} and {where}")

    def _check_owner_records(self, status: OptimizedEndpointStatus, problems: list[str]) -> None:
        made = self._operator_resources() - self.memory.unrecorded
        if self.gone:
            kept = self.memory.handed_over
            left = sorted(made - kept)
            running = [
                j.name
                for j in self.sagemaker.jobs.values()
                if j.creator == OPERATOR and j.status in ("STARTING", "INPROGRESS")
            ]
            left = [r for r in left if not r.startswith("job ")] + [f"job {j}" for j in running]
            if left:
                problems.append(f"deleted, and left {left} with no owner record")
            return
        sm = status.sagemaker
        recorded = {
            *(f"model {m}" for m in sm.models),
            *(f"config {c}" for c in sm.endpoint_configs),
            *(f"job {j}" for j in (*sm.optimization_jobs, *sm.training_jobs)),
            *(f"alarm {a}" for a in sm.alarms),
        }
        if sm.endpoint_name:
            recorded.add(f"endpoint {sm.endpoint_name}")
        missing = sorted(made - recorded)
        if missing:
            problems.append(f"{missing} made by the operator, not named in status.sagemaker")

    def _handed_over(self) -> set[str]:
        """After the finalizer: the retained endpoint and what it serves stay, nothing else."""
        endpoint = self.sagemaker.endpoints.get(ENDPOINT)
        if endpoint is None or endpoint.deployed is None:
            return set()
        return {
            f"endpoint {endpoint.name}",
            f"config {endpoint.config}",
            *(
                f"model {v.model}"
                for v in (*endpoint.deployed.variants, *endpoint.deployed.shadows)
            ),
        }

    def settle(self, wakeups: int = 10) -> None:
        """No more faults or people: the resource must come to rest with its invariants."""
        self.sagemaker.faults.clear()
        self.sagemaker.before.clear()
        self.sagemaker.next_update_failure = ""
        self.aws.crash_after = None
        self.network_reset = False
        self.eval_model_errors = 0
        for _ in range(wakeups):
            self.wake()
            if self.gone or (not self.deleting and self._at_rest()):
                break
        self.memory.unrecorded.clear()

    def _at_rest(self) -> bool:
        status = self.parsed
        return status.phase is not Phase.ROLLING_BACK and not self.memory.unrecorded


def admitted_spec(spec_data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The spec as the apiserver stores it (defaulted), or its refusals.

    Memoized: CEL costs ~0.1 s a spec. The CRD's only transition rules (endpointName and
    region are immutable) hold for every edit here, as no rule changes either.
    """
    stored, problems = _admitted(json.dumps(spec_data, sort_keys=True))
    return json.loads(stored), list(problems)


@functools.lru_cache(maxsize=4096)
def _admitted(spec_json: str) -> tuple[str, tuple[str, ...]]:
    resource = {
        "apiVersion": "optimizer.dev/v1alpha1",
        "kind": "OptimizedEndpoint",
        "metadata": {"name": OWNER.name, "namespace": OWNER.namespace},
        "spec": json.loads(spec_json),
    }
    stored, problems = admit(resource)
    return json.dumps(stored["spec"]), tuple(problems)


@functools.cache
def _status_validator() -> Any:
    import jsonschema

    return jsonschema.Draft4Validator(_draft4(root_schema()["properties"]["status"]))


def status_problems(status: dict[str, Any]) -> list[str]:
    """The CRD's status schema (types, enums, bounds; unknown fields are errors)."""
    problems = [
        f"status.{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in _status_validator().iter_errors(status)
    ]
    _strict_problems(root_schema()["properties"]["status"], status, "status", problems)
    return problems


def _model_shares(variants: Iterable[Any], weights: dict[str, float]) -> dict[str, float]:
    """Each model's share of production requests under these variant weights."""
    total = sum(weights.get(v.name, 0.0) for v in variants)
    shares: dict[str, float] = {}
    for v in variants:
        if total > 0:
            shares[v.model] = shares.get(v.model, 0.0) + weights.get(v.name, 0.0) / total
    return shares


def _percent(shares: dict[str, float]) -> str:
    return ", ".join(f"{model} {100 * share:.0f} %" for model, share in sorted(shares.items()))


def _ready(status: OptimizedEndpointStatus) -> bool:
    ready = status.condition(ConditionType.READY)
    return ready is not None and ready.status is ConditionStatus.TRUE


def _levers(status: OptimizedEndpointStatus) -> dict[str, str]:
    return dict(status.observed_levers or {})


def _lever_values(annotations: dict[str, str]) -> dict[str, str]:
    from endpoint_optimizer.pipeline.cadence import lever_annotations

    return lever_annotations(annotations)


def _reset() -> Exception:
    from botocore.exceptions import ConnectionClosedError

    return ConnectionClosedError(endpoint_url=f"https://runtime.sagemaker.{REGION}.amazonaws.com")


def _apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, as the apiserver applies a status merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _apply_merge_patch(result.get(key), value)
    return result


def measured(
    variant: str, levels: list[int], requests: int, latency_s: float, now: datetime
) -> VariantMeasurements:
    """A variant's benchmark summary, as the judge writes it."""
    ms = latency_s * 1000.0
    return VariantMeasurements(
        variant_name=variant,
        levels=[
            LevelMeasurement(
                concurrency=c,
                requests=requests,
                ttft_p50_ms=ms / 10,
                ttft_p99_ms=ms / 5,
                e2e_p50_ms=ms,
                e2e_p99_ms=ms * 2,
            )
            for c in levels
        ],
        measured_at=now,
    )


def bench_report(variant: str, levels: list[int], requests: int, failed: bool) -> BenchReport:
    """What run_benchmark returns: every request answered in about a second, or all failed."""
    level_reports = []
    for concurrency in levels:
        samples = []
        for i in range(requests):
            sent = float(i)
            e2e = BASELINE_LATENCY_S * (1.0 + 0.01 * (i % 7))
            samples.append(
                RequestSample(
                    index=i,
                    inference_id=f"{variant}-{concurrency}-{i}",
                    scheduled_at=sent,
                    sent_at=sent,
                    end_at=sent + (0.001 if failed else e2e),
                    client_queue_s=0.0,
                    ttft_s=None if failed else e2e / 10,
                    e2e_s=0.001 if failed else e2e,
                    tpot_s=None if failed else e2e / 64,
                    itl_s=[] if failed else [e2e / 64] * 4,
                    output_tokens=None if failed else 64,
                    error_kind="ConnectionClosedError" if failed else None,
                    error_message="Connection was closed before we received a valid response"
                    if failed
                    else None,
                )
            )
        empty = Distribution(n=0)
        level_reports.append(
            LevelReport(
                concurrency=concurrency,
                samples=samples,
                summary=summarize(samples, Slo(), float(requests)),
                acceptance=Acceptance(black_box=black_box_acceptance(samples, None)),
                validity=Validity(valid=True, send_lag_s=empty, loop_lag_s=empty, wake_lag_s=empty),
                window=Window(
                    start_at=0.0,
                    end_at=float(requests),
                    active_s=float(requests),
                    mean_in_flight=float(concurrency),
                    client_cpu_s=0.1,
                ),
            )
        )
    return BenchReport(
        target=BenchTarget(endpoint_name=ENDPOINT, variant=variant),
        config=BenchConfig(concurrency=levels, requests=requests),
        levels=level_reports,
    )


__all__ = [
    "APPROVE",
    "ENDPOINT",
    "PAUSE",
    "QUALITIES",
    "ROLLBACK",
    "ClientError",
    "ConnectionReset",
    "Endpoint",
    "World",
    "names",
    "spec",
]
