"""The decision function: (spec, status, observations, levers, now) -> actions, status, events.

Level-triggered: nothing here remembers having seen an event. Each wake-up reads
the phase and the SageMaker resources as they are, and returns the few idempotent
actions that move the resource one step on. Status is the only memory, and every
SageMaker name is derived from (namespace, name, uid, generation), so a crash
between an action and the status write repeats a create that then adopts its own
resource.

Phases: Pending -> Baselining -> Optimizing -> Deploying -> Analyzing
(-> AwaitingApproval) -> Promoting -> Succeeded; or RollingBack -> RolledBack; or
Failed. A new spec generation returns traffic to the baseline and starts again.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from endpoint_optimizer.analysis.live import LiveDecision
from endpoint_optimizer.api import (
    TERMINAL_PHASES,
    Approval,
    ConditionStatus,
    ConditionType,
    NoDataPolicy,
    OptimizedEndpointSpec,
    OptimizedEndpointStatus,
    Phase,
    RolloutStatus,
    RolloutStrategy,
    SageMakerResources,
    SpecError,
    VariantMeasurements,
    duration_seconds,
    parse_spec,
)
from endpoint_optimizer.api.checks import CheckKind, Verdict
from endpoint_optimizer.pipeline import assess, cadence, plan
from endpoint_optimizer.pipeline.model import (
    APPROVE,
    IN_PROGRESS_ENDPOINT,
    IN_PROGRESS_JOB,
    PAUSE,
    ROLLBACK,
    Action,
    ActionKind,
    Decision,
    EndpointView,
    Event,
    Observations,
    Resource,
    Timing,
)
from endpoint_optimizer.pipeline.record import COMPARED_KEY as _COMPARED_KEY
from endpoint_optimizer.pipeline.record import (
    ERROR_AFTER_OUTCOME,
    LIVE_PERIOD_KEY,
    LIVE_READ_KEY,
    live_state,
)
from endpoint_optimizer.sagemaker import matrix, training
from endpoint_optimizer.sagemaker import requests as rq

# Phases in which a candidate may be receiving traffic (so leaving them routes back).
_CANDIDATE_LIVE = frozenset(
    {Phase.DEPLOYING, Phase.ANALYZING, Phase.AWAITING_APPROVAL, Phase.PROMOTING}
)
# Free-form bookkeeping kept in status.rollout.liveJudgeState (preserved across restarts).
_LEVERS_KEY = "leversHandled"
_RESTART_KEY = "restartGeneration"
_PROMOTION_KEY = "promotionRequested"
# Shadow with an eval set or acceptance floor: absent while the candidate is judged on pinned
# requests as a weight-0 production variant; "deploying", then "live" as a shadow.
_SHADOW_STAGE_KEY = "shadowStage"
# The retention delete in flight: the configs and models asked for, when, the attempt, and
# the last failure reported. Confirmed (baselineDeletedAt) by the next wake-up.
_BASELINE_DELETE_KEY = "baselineDelete"
# Decisions after a promotion that the Progressing condition names (reason and message).
_AFTER_PROMOTION_EVENTS = frozenset(
    {"RollbackRefused", "BaselineDeleted", "BaselineDeleteFailed", ERROR_AFTER_OUTCOME}
)
# A step after the outcome that failed (and is retried): the outcome stands, but degraded.
_DEGRADING_AFTER_OUTCOME = frozenset({"BaselineDeleteFailed", ERROR_AFTER_OUTCOME})
# Periods one live read asks for at most (GetMetricData returns them in one call).
_MAX_LIVE_PERIODS = 10


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in ("", "false", "0", "no")


class _Wakeup:
    def __init__(
        self,
        status: OptimizedEndpointStatus,
        obs: Observations,
        res: Resource,
        now: datetime,
        timing: Timing,
    ) -> None:
        self.status = status
        self.obs = obs
        self.res = res
        self.now = now
        self.timing = timing
        self.actions: list[Action] = []
        self.events: list[Event] = []
        self.spec: OptimizedEndpointSpec | None = None
        self.names = plan.Names.of(res.owner, status.observed_generation or res.generation)
        self.owner_tag = res.owner.tag_value()

    # ----------------------------------------------------------------- helpers

    def goto(self, phase: Phase, event: str, message: str, warning: bool = False) -> None:
        if self.status.phase is not phase:
            self.events.append(
                Event("Warning" if warning else "Normal", event, f"{phase.value}: {message}")
            )
        self.status.phase = phase
        self.status.message = message[:1024]
        self.status.record(self.now, event, message)

    def wait(self, message: str) -> None:
        self.status.message = message[:1024]

    def act(self, kind: ActionKind, resource: str, request: dict[str, object]) -> None:
        self.actions.append(Action(kind, resource, dict(request)))

    def fail(self, reason: str, message: str) -> None:
        self.status.last_error = message[:4096]
        self.goto(Phase.FAILED, reason, message, warning=True)

    def lever_state(self) -> dict[str, str]:
        state = self.status.rollout.live_judge_state.get(_LEVERS_KEY, {})
        return dict(state) if isinstance(state, dict) else {}

    def lever_pending(self, key: str) -> bool:
        """A lever counts once per annotation value: a stale approve does not approve again."""
        value = self.res.annotations.get(key)
        return _truthy(value) and self.lever_state().get(key) != value

    def consume_lever(self, key: str) -> None:
        state = self.lever_state()
        state[key] = self.res.annotations.get(key, "")
        self.status.rollout.live_judge_state[_LEVERS_KEY] = state

    @property
    def endpoint_name(self) -> str:
        assert self.spec is not None
        return self.spec.endpoint_name

    def step_weight(self, index: int) -> int:
        assert self.spec is not None
        weight = self.spec.rollout.steps[index].weight
        return weight if weight is not None else 0

    # ----------------------------------------------------------------- entry

    def run(self, spec_data: object) -> None:
        try:
            self.spec = parse_spec(spec_data)
        except SpecError as exc:
            if self.status.phase not in TERMINAL_PHASES or self.new_generation():
                self.status.observed_generation = self.res.generation
                self.fail("InvalidSpec", str(exc))
            return
        self.status.paused = _truthy(self.res.annotations.get(PAUSE))
        if self.new_generation():
            self.restart()
            return
        if self.status.paused:
            self.wait("paused by the optimizer.dev/pause annotation; remove it to resume")
            return
        if self.lever_pending(ROLLBACK) and self.status.phase not in TERMINAL_PHASES:
            self.consume_lever(ROLLBACK)
            self.begin_rollback("ManualRollback", "rollback requested by annotation")
            return
        if self.lever_pending(ROLLBACK) and self.status.phase is Phase.SUCCEEDED:
            self.consume_lever(ROLLBACK)
            if self.rollback_promoted():
                return
        if self.status.phase not in TERMINAL_PHASES and self.endpoint_broken():
            return
        if self.status.phase in (Phase.PENDING, Phase.BASELINING) and self.endpoint_claimed():
            return
        handler = {
            Phase.PENDING: self.pending,
            Phase.BASELINING: self.baselining,
            Phase.OPTIMIZING: self.optimizing,
            Phase.DEPLOYING: self.deploying,
            Phase.ANALYZING: self.analyzing,
            Phase.AWAITING_APPROVAL: self.awaiting_approval,
            Phase.PROMOTING: self.promoting,
            Phase.ROLLING_BACK: self.rolling_back,
            Phase.SUCCEEDED: self.succeeded,
        }.get(self.status.phase)
        if handler is not None:
            handler()

    def endpoint_broken(self) -> bool:
        """Failed and UpdateRollbackFailed need a person (sagemaker-api.md §2.5): never retry.

        SystemUpdating and RollingBack end by themselves, so the phases wait them out.
        """
        endpoint = self.obs.endpoint
        if endpoint is None:
            return False
        reason = endpoint.failure_reason or "no FailureReason"
        if endpoint.status == "Failed":
            self.fail(
                "EndpointFailed",
                f"endpoint {endpoint.name} is Failed: {reason}. SageMaker allows only "
                "DeleteEndpoint on a failed endpoint, so the operator does not retry: fix the "
                "cause, delete the endpoint, then change the spec to start again",
            )
            return True
        if endpoint.status == "UpdateRollbackFailed":
            baseline = self.status.sagemaker.baseline_endpoint_config or "a known config"
            self.fail(
                "EndpointUpdateRollbackFailed",
                f"endpoint {endpoint.name} is UpdateRollbackFailed: an update and its "
                f"automatic rollback both failed, and it serves a mix of old and new configs "
                f"({reason}). The operator does not retry: update the endpoint by hand to "
                f"{baseline}, then change the spec to start again",
            )
            return True
        return False

    def endpoint_claimed(self) -> bool:
        """Two resources on one endpoint would undo each other's rollouts: the older keeps it."""
        me = (self.res.created, f"{self.res.owner.namespace}/{self.res.owner.name}")
        older = sorted(rival for rival in self.res.rivals if rival < me)
        if not older:
            return False
        # Never ours: the finalizer must not touch it (a race may have set it this far).
        self.status.sagemaker.endpoint_name = ""
        self.fail(
            "EndpointConflict",
            f"spec.endpointName: endpoint {self.endpoint_name} is already optimized by "
            f"OptimizedEndpoint {older[0][1]}; one endpoint takes one resource at a time: "
            "point spec.endpointName at another endpoint, or delete the other resource first",
        )
        return True

    def new_generation(self) -> bool:
        return self.status.observed_generation != 0 and (
            self.res.generation > self.status.observed_generation
        )

    def restart(self) -> None:
        """A new generation: route traffic back to the baseline first, then start again."""
        if self.status.phase in _CANDIDATE_LIVE or self.status.phase is Phase.ROLLING_BACK:
            self.status.rollout.live_judge_state[_RESTART_KEY] = self.res.generation
            if self.status.phase is not Phase.ROLLING_BACK:
                self.goto(
                    Phase.ROLLING_BACK,
                    "NewGeneration",
                    f"spec generation {self.res.generation}: returning traffic to the baseline "
                    "before starting again",
                )
            self.rolling_back()
            return
        self.start_generation()

    def start_generation(self) -> None:
        levers = self.lever_state()
        previous = self.status.sagemaker
        if previous.baseline_retained_until is not None and previous.baseline_deleted_at is None:
            # The new generation measures what serves now as its baseline: the retained
            # one is no rollback target any more.
            self.release_baseline(f"spec generation {self.res.generation} replaces the baseline")
        self.status.observed_generation = self.res.generation
        self.names = plan.Names.of(self.res.owner, self.res.generation)
        self.status.baseline = None
        self.status.candidate = None
        self.status.checks = []
        self.status.objective_gain = None
        self.status.last_error = ""
        self.status.candidate_techniques = []
        self.status.rollout = RolloutStatus(live_judge_state={_LEVERS_KEY: levers})
        # Keep what was made before (cleanup needs it); forget per-generation pointers.
        self.status.sagemaker = SageMakerResources(
            endpoint_name=previous.endpoint_name,
            models=previous.models,
            endpoint_configs=previous.endpoint_configs,
            optimization_jobs=previous.optimization_jobs,
            alarms=previous.alarms,
            adopted=previous.adopted,
            serving_endpoint_config=previous.serving_endpoint_config,
        )
        self.goto(
            Phase.PENDING, "GenerationStarted", f"pipeline for generation {self.res.generation}"
        )
        self.pending()

    # ----------------------------------------------------------------- phases

    def pending(self) -> None:
        assert self.spec is not None
        if self.status.observed_generation == 0:
            self.status.observed_generation = self.res.generation
            self.names = plan.Names.of(self.res.owner, self.res.generation)
        violations = matrix.check_optimizations(self.spec)
        if violations:
            for violation in violations:
                self.events.append(Event("Warning", "UnsupportedCombination", violation.text()))
            self.fail("UnsupportedCombination", "; ".join(v.text() for v in violations))
            return
        try:
            plan.baseline_model(self.spec, self.names, sources=self.obs.sources)
            if plan.has_candidate(self.spec):
                plan.optimization_job(self.spec, self.names, sources=self.obs.sources)
                plan.training_job(self.spec, self.names, sources=self.obs.sources)
        except plan.PlanError as exc:
            self.fail("UnsupportedSpec", str(exc))
            return
        self.status.candidate_techniques = self.spec.optimizations.techniques() or (
            ["containerSettings"] if plan.has_candidate(self.spec) else []
        )
        self.goto(Phase.BASELINING, "BaselineStarted", f"measuring endpoint {self.endpoint_name}")
        self.baselining()

    def baselining(self) -> None:
        assert self.spec is not None
        sm = self.status.sagemaker
        endpoint = self.obs.endpoint
        if endpoint is None:
            # Seen serving (or adopted) once and now gone: someone deleted it. Recreating it
            # silently would hide that; only a create that never took effect is repeated.
            if sm.endpoint_name and (
                sm.serving_endpoint_config or sm.adopted or sm.baseline_endpoint_config == ""
            ):
                self.fail(
                    "EndpointDisappeared",
                    f"endpoint {self.endpoint_name} was deleted outside the operator; "
                    "recreate it or delete this resource",
                )
                return
            model = plan.baseline_model(self.spec, self.names, sources=self.obs.sources)
            config = rq.create_endpoint_config(
                self.names.baseline_config,
                [plan.variant(self.spec, self.names.baseline_variant, model.name)],
                self.owner_tag,
            )
            self.act(ActionKind.CREATE_MODEL, model.name, rq.create_model(model, self.owner_tag))
            self.act(ActionKind.CREATE_ENDPOINT_CONFIG, self.names.baseline_config, config)
            self.act(
                ActionKind.CREATE_ENDPOINT,
                self.endpoint_name,
                rq.create_endpoint(self.endpoint_name, self.names.baseline_config, self.owner_tag),
            )
            sm.endpoint_name = self.endpoint_name
            sm.baseline_model = model.name
            sm.baseline_endpoint_config = self.names.baseline_config
            sm.models = _add(sm.models, model.name)
            sm.endpoint_configs = _add(sm.endpoint_configs, self.names.baseline_config)
            self.status.baseline = VariantMeasurements(variant_name=self.names.baseline_variant)
            self.wait(f"creating endpoint {self.endpoint_name}")
            return
        ours = endpoint.config_name in (
            self.names.baseline_config,
            self.names.rollout_config,
            self.names.promoted_config,
        )
        if ours and not sm.endpoint_name:
            # Made by this resource (deterministic names) before its status was written:
            # pick up where the crash or the stale read left off.
            sm.endpoint_name = self.endpoint_name
            sm.baseline_model = sm.baseline_model or self.names.baseline_model
            sm.baseline_endpoint_config = sm.baseline_endpoint_config or self.names.baseline_config
            sm.models = _add(sm.models, self.names.baseline_model)
            sm.endpoint_configs = _add(sm.endpoint_configs, self.names.baseline_config)
            if self.status.baseline is None:
                self.status.baseline = VariantMeasurements(variant_name=self.names.baseline_variant)
        if not sm.endpoint_name:
            if not self.spec.adopt_existing:
                self.fail(
                    "EndpointExists",
                    f"endpoint {self.endpoint_name} already exists and was not made by this "
                    "resource; set spec.adoptExisting: true to optimize it",
                )
                return
            sm.endpoint_name = self.endpoint_name
            sm.adopted = True
        if endpoint.status in IN_PROGRESS_ENDPOINT:
            self.wait(f"endpoint {self.endpoint_name} is {endpoint.status}")
            return
        if not endpoint.in_service:
            self.fail(
                "EndpointFailed",
                f"endpoint {self.endpoint_name} is {endpoint.status}: "
                f"{endpoint.failure_reason or 'no FailureReason'}",
            )
            return
        if not sm.baseline_endpoint_config:
            # Adopted, or inherited from the previous generation: the serving config is the
            # baseline; its heaviest production variant is the one measured and kept warm.
            sm.baseline_endpoint_config = endpoint.config_name
            heaviest = max(endpoint.variants, key=lambda v: v.current_weight or 0.0, default=None)
            sm.baseline_model = heaviest.model_name if heaviest else ""
            self.status.baseline = VariantMeasurements(
                variant_name=heaviest.name if heaviest else ""
            )
        sm.serving_endpoint_config = endpoint.config_name
        baseline = self.status.baseline or VariantMeasurements()
        if baseline.measured_at is None:
            self.actions.append(
                Action(
                    ActionKind.MEASURE_BASELINE,
                    self.endpoint_name,
                    baseline_variant=baseline.variant_name,
                )
            )
            self.wait(f"benchmarking the baseline variant {baseline.variant_name}")
            return
        if not plan.has_candidate(self.spec):
            self.goto(
                Phase.SUCCEEDED,
                "NothingToOptimize",
                "baseline measured; the spec asks for no setting or technique",
            )
            return
        self.goto(Phase.OPTIMIZING, "BaselineMeasured", "baseline measured; building the candidate")
        self.optimizing()

    def optimizing(self) -> None:
        assert self.spec is not None
        sm = self.status.sagemaker
        trained = plan.training_job(self.spec, self.names, sources=self.obs.sources)
        if trained is not None:

            def start_training() -> None:
                assert trained is not None
                self.act(
                    ActionKind.PUT_OBJECT,
                    trained.source_s3_uri,
                    training.upload_source_request(trained.source_s3_uri),
                )
                self.act(
                    ActionKind.CREATE_TRAINING_JOB,
                    trained.name,
                    training.create_training_job(trained, self.owner_tag),
                )
                sm.training_jobs = _add(sm.training_jobs, trained.name)

            if not self.job_completed(
                "llm-compressor training job", trained.name, start_training, "TrainingJobFailed"
            ):
                return
        job = plan.optimization_job(self.spec, self.names, sources=self.obs.sources)
        if job is not None:

            def start_optimization() -> None:
                assert job is not None
                self.act(
                    ActionKind.CREATE_OPTIMIZATION_JOB,
                    job.name,
                    rq.create_optimization_job(job, self.owner_tag),
                )
                sm.optimization_jobs = _add(sm.optimization_jobs, job.name)

            if not self.job_completed(
                "optimization job", job.name, start_optimization, "OptimizationJobFailed"
            ):
                return
        self.goto(Phase.DEPLOYING, "CandidateBuilt", "deploying the candidate")
        self.deploying()

    def job_completed(
        self, what: str, name: str, start: Callable[[], None], failed_reason: str
    ) -> bool:
        """Start the job when SageMaker does not have it, wait while it runs; True once done.

        Any end but COMPLETED fails the resource (Terminal): a failed job is never started
        again under the same name, since the name is derived from the generation.
        """
        observed = self.obs.jobs.get(name)
        if observed is None:
            start()
            self.wait(f"starting {what} {name}")
            return False
        if observed.status in IN_PROGRESS_JOB:
            self.wait(f"{what} {name} is {observed.status}")
            return False
        if observed.status != "COMPLETED":
            self.fail(
                failed_reason,
                f"{what} {name} {observed.status}: "
                f"{observed.failure_reason or 'no FailureReason'}; the baseline keeps "
                "serving. A failed job is not started again unchanged: fix what "
                "FailureReason names, then change the spec to start a new generation",
            )
            return False
        return True

    def pinned_first(self) -> bool:
        """Shadow with checks that need the candidate's own answers (eval set, acceptance).

        A shadow variant cannot be invoked with TargetVariant and its answers are only in
        its logs, so the candidate first serves as a weight-0 production variant (users
        see only the baseline, as in blueGreen) for the pinned comparison, then shadows.
        """
        assert self.spec is not None
        return self.spec.rollout.strategy is RolloutStrategy.SHADOW and (
            self.spec.evaluation is not None
            or self.spec.optimizations.speculative_decoding is not None
        )

    def pinned_stage(self) -> bool:
        return (
            self.pinned_first()
            and self.status.rollout.live_judge_state.get(_SHADOW_STAGE_KEY) is None
        )

    def shadow_config(self) -> tuple[str, dict[str, object]]:
        """One production variant (the baseline) and the candidate as its shadow."""
        assert self.spec is not None
        baseline_variant = (self.status.baseline or VariantMeasurements()).variant_name
        base = plan.variant(self.spec, baseline_variant, self.status.sagemaker.baseline_model)
        shadow = plan.variant(self.spec, self.names.candidate_variant, self.names.candidate_model)
        name = self.names.rollout_config
        return name, rq.create_endpoint_config(name, [base], self.owner_tag, shadow)

    def candidate_config(self) -> tuple[str, dict[str, object]]:
        """The endpoint config the strategy deploys the candidate with."""
        assert self.spec is not None
        baseline_variant = (self.status.baseline or VariantMeasurements()).variant_name
        baseline_model = self.status.sagemaker.baseline_model
        name = self.names.rollout_config
        strategy = self.spec.rollout.strategy
        if strategy is RolloutStrategy.SHADOW and not self.pinned_stage():
            return self.shadow_config()
        if strategy is RolloutStrategy.SHADOW:
            name = self.names.pinned_config
        # blueGreen (and shadow's pinned stage): the candidate is judged on pinned requests
        # at weight 0 (users see only the baseline), then switched or shadowed.
        first = 0 if strategy is not RolloutStrategy.CANARY else self.step_weight(0)
        weights = rq.canary_weights(baseline_variant, self.names.candidate_variant, first)
        variants = [
            plan.variant(self.spec, baseline_variant, baseline_model, weights[baseline_variant]),
            plan.variant(
                self.spec,
                self.names.candidate_variant,
                self.names.candidate_model,
                weights[self.names.candidate_variant],
            ),
        ]
        return name, rq.create_endpoint_config(name, variants, self.owner_tag)

    def deploying(self) -> None:
        assert self.spec is not None
        endpoint = self.obs.endpoint
        sm = self.status.sagemaker
        job = self.obs.jobs.get(self.names.job)
        try:
            model = plan.candidate_model(self.spec, self.names, job, sources=self.obs.sources)
        except plan.PlanError as exc:
            self.fail("UnsupportedSpec", str(exc))
            return
        config_name, config = self.candidate_config()
        if endpoint is None:
            self.fail("EndpointDisappeared", f"endpoint {self.endpoint_name} no longer exists")
            return
        if endpoint.status in IN_PROGRESS_ENDPOINT:
            self.wait(f"endpoint {self.endpoint_name} is {endpoint.status}")
            return
        sm.serving_endpoint_config = endpoint.config_name
        if endpoint.in_service and endpoint.config_name == config_name:
            # Recorded again: after a crash between the update and the status write, the
            # config (deterministic name) is found serving but status never named it.
            sm.candidate_model = model.name
            sm.candidate_endpoint_config = config_name
            sm.models = _add(sm.models, model.name)
            sm.endpoint_configs = _add(sm.endpoint_configs, config_name)
            self.status.candidate = VariantMeasurements(variant_name=self.names.candidate_variant)
            self.status.rollout.step_index = 0
            self.status.rollout.step_started_at = self.now
            self.status.rollout.canary_weight = (
                self.step_weight(0) if self.spec.rollout.strategy is RolloutStrategy.CANARY else 0
            )
            self.goto(Phase.ANALYZING, "CandidateDeployed", f"candidate live on {config_name}")
            return
        if sm.candidate_endpoint_config == config_name and endpoint.failure_reason:
            # We asked for this config and SageMaker went back: never report it as success.
            self.status.last_error = endpoint.failure_reason[:4096]
            self.goto(
                Phase.ROLLED_BACK,
                "UpdateFailed",
                f"UpdateEndpoint to {config_name} failed and SageMaker kept "
                f"{endpoint.config_name}: {endpoint.failure_reason}",
                warning=True,
            )
            return
        if not endpoint.in_service:
            self.fail("EndpointFailed", f"endpoint {self.endpoint_name} is {endpoint.status}")
            return
        self.act(ActionKind.CREATE_MODEL, model.name, rq.create_model(model, self.owner_tag))
        self.act(ActionKind.CREATE_ENDPOINT_CONFIG, config_name, config)
        self.act(
            ActionKind.UPDATE_ENDPOINT,
            self.endpoint_name,
            rq.update_endpoint(self.endpoint_name, config_name),
        )
        sm.candidate_model = model.name
        sm.candidate_endpoint_config = config_name
        sm.models = _add(sm.models, model.name)
        sm.endpoint_configs = _add(sm.endpoint_configs, config_name)
        self.wait(f"updating endpoint {self.endpoint_name} to {config_name}")

    def analyzing(self) -> None:
        assert self.spec is not None
        endpoint = self.obs.endpoint
        rollout = self.status.rollout
        if endpoint is None or endpoint.status in IN_PROGRESS_ENDPOINT:
            self.wait(f"endpoint {self.endpoint_name} is {endpoint.status if endpoint else 'gone'}")
            return
        if endpoint.config_name == self.names.promoted_config:
            # Only promoting() makes this config: the promotion was asked for (checks passed
            # or approved) and the process died before status said so. Finish it; rolling
            # back a promotion SageMaker completed would undo a decision already taken.
            self.goto(Phase.PROMOTING, "PromotionResumed", "resuming the promotion in flight")
            self.promoting()
            return
        if self.shadow_switching(endpoint):
            return
        if endpoint.config_name != self.status.sagemaker.candidate_endpoint_config:
            self.begin_rollback(
                "CandidateGone",
                f"endpoint serves {endpoint.config_name}, not the candidate config",
            )
            return
        canary = self.spec.rollout.strategy is RolloutStrategy.CANARY
        baseline_variant = (self.status.baseline or VariantMeasurements()).variant_name
        candidate_variant = self.names.candidate_variant
        if canary:
            wanted = self.step_weight(rollout.step_index)
            observed = endpoint.variant(candidate_variant)
            total = sum((v.current_weight or 0.0) for v in endpoint.variants) or 1.0
            share = 100.0 * (observed.current_weight or 0.0) / total if observed else 0.0
            if abs(share - wanted) > 0.5:
                weights = rq.canary_weights(baseline_variant, candidate_variant, wanted)
                self.act(
                    ActionKind.UPDATE_WEIGHTS,
                    self.endpoint_name,
                    rq.update_weights(self.endpoint_name, weights),
                )
                rollout.canary_weight = wanted
                self.wait(f"shifting {wanted} % of traffic to the candidate")
                return
        if rollout.live_judge_state.get(_COMPARED_KEY) != rollout.step_index:
            self.actions.append(
                Action(
                    ActionKind.COMPARE,
                    self.endpoint_name,
                    baseline_variant=baseline_variant,
                    # A shadow variant cannot be invoked directly; its copy of the baseline's
                    # traffic is what the comparison reads.
                    candidate_variant=candidate_variant,
                    step=rollout.step_index,
                    # Shadow's pinned stage: both are production variants, invoke each.
                    request={"pinned": True} if self.pinned_stage() else {},
                )
            )
            self.wait(f"comparing candidate with baseline at step {rollout.step_index + 1}")
            return
        if self.judge():
            return
        if self.pinned_stage():
            self.begin_shadow()
            return
        if self.live_interval_due(baseline_variant, candidate_variant):
            return
        step = self.spec.rollout.steps[rollout.step_index]
        started = rollout.step_started_at or self.now
        elapsed = (self.now - started).total_seconds()
        pause = duration_seconds(step.pause) * self.timing.time_scale
        if elapsed < pause:
            self.wait(
                f"step {rollout.step_index + 1}/{len(self.spec.rollout.steps)}: observing, "
                f"{pause - elapsed:.0f}s left"
            )
            return
        if rollout.step_index + 1 < len(self.spec.rollout.steps):
            rollout.step_index += 1
            rollout.step_started_at = self.now
            self.status.record(self.now, "StepAdvanced", f"step {rollout.step_index + 1}")
            self.analyzing()
            return
        if self.spec.rollout.strategy is RolloutStrategy.SHADOW and self.shadow_objective():
            return
        if self.spec.rollout.approval is Approval.BEFORE_PROMOTION:
            self.goto(
                Phase.AWAITING_APPROVAL,
                "AwaitingApproval",
                "all checks passed; annotate optimizer.dev/approve=true to promote",
            )
            self.awaiting_approval()
            return
        self.goto(Phase.PROMOTING, "ChecksPassed", "all checks passed; promoting the candidate")
        self.promoting()

    def begin_shadow(self) -> None:
        """The pinned checks passed: move the candidate to a shadow variant of the baseline."""
        sm = self.status.sagemaker
        name, config = self.shadow_config()
        self.act(ActionKind.CREATE_ENDPOINT_CONFIG, name, config)
        self.act(
            ActionKind.UPDATE_ENDPOINT,
            self.endpoint_name,
            rq.update_endpoint(self.endpoint_name, name),
        )
        sm.candidate_endpoint_config = name
        sm.endpoint_configs = _add(sm.endpoint_configs, name)
        self.status.rollout.live_judge_state[_SHADOW_STAGE_KEY] = "deploying"
        self.status.record(
            self.now,
            "PinnedChecksPassed",
            f"checks on pinned requests passed; the candidate shadows production on {name}",
        )
        self.wait(f"updating endpoint {self.endpoint_name} to the shadow config {name}")

    def shadow_switching(self, endpoint: EndpointView) -> bool:
        """Shadow after its pinned stage; True while the shadow config is not serving yet."""
        if not self.pinned_first():
            return False
        state = self.status.rollout.live_judge_state
        sm = self.status.sagemaker
        shadow = self.names.rollout_config
        if endpoint.config_name == shadow and state.get(_SHADOW_STAGE_KEY) != "live":
            # Serving (also after a crash that lost the status write of begin_shadow): the
            # shadow window starts now, with its own comparison and live intervals.
            if state.get(_SHADOW_STAGE_KEY) is None:
                # Only begin_shadow moves the endpoint here, after the pinned checks passed;
                # its history entry went with the lost write.
                self.status.record(
                    self.now,
                    "PinnedChecksPassed",
                    f"checks on pinned requests passed; the candidate shadows production on "
                    f"{shadow} (recorded after a restart)",
                )
            state[_SHADOW_STAGE_KEY] = "live"
            state.pop(_COMPARED_KEY, None)
            sm.candidate_endpoint_config = shadow
            sm.endpoint_configs = _add(sm.endpoint_configs, shadow)
            self.status.rollout.step_index = 0
            self.status.rollout.step_started_at = self.now
            self.status.record(self.now, "ShadowStarted", f"candidate shadows on {shadow}")
            return False
        if state.get(_SHADOW_STAGE_KEY) == "deploying":
            if endpoint.config_name == self.names.pinned_config and endpoint.failure_reason:
                self.begin_rollback(
                    "UpdateFailed",
                    f"UpdateEndpoint to the shadow config {shadow} failed: "
                    f"{endpoint.failure_reason}",
                )
                return True
            if endpoint.config_name == self.names.pinned_config:
                self.wait(f"waiting for endpoint {endpoint.name} to serve {shadow}")
                return True
        return False

    def shadow_objective(self) -> bool:
        """The objective on the shadow's CloudWatch aggregates; True when it decided."""
        assert self.spec is not None
        check = assess.shadow_objective_check(self.spec, live_state(self.status))
        previous = next((c for c in self.status.checks if c.name == check.name), None)
        self.status.checks = [c for c in self.status.checks if c.name != check.name] + [check]
        if check.candidate is not None:
            latency = self.spec.objective.metric.value == "latency"
            gain = 1.0 - check.candidate if latency else check.candidate - 1.0
            self.status.objective_gain = round(gain, 4)
        if previous != check:
            self.status.record(self.now, "ShadowObjectiveJudged", check.reason)
        return self.judge()

    def live_interval_due(self, baseline_variant: str, candidate_variant: str) -> bool:
        """Ask for the live judge's next CloudWatch interval; True when one was asked for.

        Intervals are whole CloudWatch periods from the first one that starts after the
        analysis began, each read once. CloudWatch publishes a period a while after it
        closes, so the newest closed period is left for the next wake-up.
        """
        assert self.spec is not None
        if self.spec.rollout.strategy is RolloutStrategy.BLUE_GREEN:
            return False  # the candidate has no live traffic before the switch
        state = self.status.rollout.live_judge_state
        period = live_period(
            duration_seconds(self.spec.rollout.analysis.interval) * self.timing.time_scale
        )
        now = self.now.timestamp()
        read_until = state.get(LIVE_READ_KEY)
        if not isinstance(read_until, int | float):
            # Canary: from the first whole period after the pinned comparison, which
            # already judged the step's start on per-request samples (its requests are not
            # judged twice). Shadow: from the candidate's deployment, since the shadow's
            # copy of the comparison's traffic is what there is to judge.
            began = self.now
            if self.spec.rollout.strategy is RolloutStrategy.SHADOW:
                began = self.status.rollout.step_started_at or self.now
            read_until = math.ceil(began.timestamp() / period) * period
            state[LIVE_READ_KEY] = read_until
            state[LIVE_PERIOD_KEY] = period
        published = (math.floor(now / period) - 1) * period
        if read_until + period > published:
            return False
        # Every period since the last read, in one batched call; after an outage, the
        # newest few only (the judge's tests are per interval, a backlog adds nothing new).
        start = max(float(read_until), published - _MAX_LIVE_PERIODS * period)
        end = published
        state[LIVE_READ_KEY] = end
        state[LIVE_PERIOD_KEY] = period
        self.actions.append(
            Action(
                ActionKind.JUDGE_LIVE,
                self.endpoint_name,
                {
                    "start": datetime.fromtimestamp(start, UTC).isoformat(),
                    "end": datetime.fromtimestamp(end, UTC).isoformat(),
                    "periodSeconds": period,
                },
                baseline_variant=baseline_variant,
                candidate_variant=candidate_variant,
                step=self.status.rollout.step_index,
            )
        )
        self.wait(f"judging live metrics up to {datetime.fromtimestamp(end, UTC):%H:%M:%S}")
        return True

    def judge(self) -> bool:
        """Apply the latest checks; True when they decided (rollback or pause).

        Live checks are the live judge's to act on (it applies onNoData and failureLimit
        itself): only its Rollback decision counts here.
        """
        assert self.spec is not None
        live = live_state(self.status)
        if live.decision is LiveDecision.ROLLBACK:
            reasons = [
                c.reason or c.name
                for c in self.status.checks
                if c.kind is CheckKind.LIVE and c.verdict is Verdict.FAIL
            ]
            for reason in reasons:
                self.events.append(Event("Warning", "CheckFailed", reason))
            self.begin_rollback(
                "LiveCheckFailed",
                f"live judge: {'; '.join(reasons) or 'the candidate is worse on live traffic'}",
            )
            return True
        judged = [c for c in self.status.checks if c.kind is not CheckKind.LIVE]
        failed = [c for c in judged if c.verdict is Verdict.FAIL]
        if failed:
            for check in failed:
                self.events.append(Event("Warning", "CheckFailed", check.reason or check.name))
            names = ", ".join(c.name for c in failed)
            self.begin_rollback("ChecksFailed", f"failed checks: {names}")
            return True
        no_gain = [c for c in judged if c.verdict is Verdict.NO_IMPROVEMENT]
        if no_gain:
            self.events.append(Event("Warning", "NoImprovement", no_gain[0].reason))
            self.begin_rollback(
                "NoImprovement",
                f"the candidate does not improve {self.spec.objective.metric.value}: "
                f"{no_gain[0].reason}",
            )
            return True
        inconclusive = [c for c in judged if c.verdict is Verdict.INCONCLUSIVE]
        policy = self.spec.rollout.analysis.on_no_data
        if inconclusive and policy is NoDataPolicy.FAIL:
            self.begin_rollback(
                "ChecksInconclusive",
                f"inconclusive checks with onNoData: fail: "
                f"{', '.join(c.name for c in inconclusive)}",
            )
            return True
        if inconclusive and policy is NoDataPolicy.PAUSE:
            self.status.paused = True
            self.wait(
                f"paused: inconclusive checks ({', '.join(c.name for c in inconclusive)}); "
                "annotate optimizer.dev/approve=true to go on or optimizer.dev/rollback=true"
            )
            if self.lever_pending(APPROVE):
                self.consume_lever(APPROVE)
                self.status.paused = False
                return False
            return True
        return False

    def awaiting_approval(self) -> None:
        if self.lever_pending(APPROVE):
            self.consume_lever(APPROVE)
            self.goto(Phase.PROMOTING, "Approved", "promotion approved by annotation")
            self.promoting()
            return
        self.wait("waiting for optimizer.dev/approve=true (or optimizer.dev/rollback=true)")

    def promoting(self) -> None:
        assert self.spec is not None
        endpoint = self.obs.endpoint
        sm = self.status.sagemaker
        name = self.names.promoted_config
        if endpoint is None:
            self.fail("EndpointDisappeared", f"endpoint {self.endpoint_name} no longer exists")
            return
        if endpoint.status in IN_PROGRESS_ENDPOINT:
            self.wait(f"endpoint {self.endpoint_name} is {endpoint.status}")
            return
        sm.serving_endpoint_config = endpoint.config_name
        if endpoint.in_service and endpoint.config_name == name:
            # Named again: a crash may have come before status recorded the promoted config,
            # and the finalizer removes only what status names.
            sm.endpoint_configs = _add(sm.endpoint_configs, name)
            self.goto(Phase.SUCCEEDED, "CandidatePromoted", self.retain_baseline(name))
            self.succeeded()
            return
        state = self.status.rollout.live_judge_state
        if state.get(_PROMOTION_KEY) == name and endpoint.in_service:
            # We asked for the promoted config, the update finished, and the endpoint
            # serves something else: SageMaker rolled it back (alarm or failure).
            self.begin_rollback(
                "PromotionRolledBack",
                f"SageMaker kept {endpoint.config_name} instead of {name}: "
                f"{endpoint.failure_reason or 'an auto-rollback alarm fired during the bake'}",
            )
            return
        config = rq.create_endpoint_config(
            name,
            [plan.variant(self.spec, self.names.candidate_variant, self.names.candidate_model)],
            self.owner_tag,
        )
        self.act(ActionKind.CREATE_ENDPOINT_CONFIG, name, config)
        deployment = None
        if self.spec.rollout.strategy is RolloutStrategy.BLUE_GREEN:
            deployment = self.blue_green()
        self.act(
            ActionKind.UPDATE_ENDPOINT,
            self.endpoint_name,
            rq.update_endpoint(self.endpoint_name, name, deployment),
        )
        state[_PROMOTION_KEY] = name
        sm.endpoint_configs = _add(sm.endpoint_configs, name)
        self.wait(f"updating endpoint {self.endpoint_name} to {name}")

    def retain_baseline(self, promoted: str) -> str:
        """Start the baseline's retention window; the promotion's message says until when."""
        assert self.spec is not None
        sm = self.status.sagemaker
        baseline = sm.baseline_endpoint_config
        said = f"candidate {self.names.candidate_model} serves all traffic on {promoted}"
        if not baseline:
            return said
        if baseline not in sm.endpoint_configs:
            # Adopted: the user's own config. Never ours to delete, so rollback stays open.
            sm.baseline_retained_until = None
            return (
                f"{said}; baseline config {baseline} is not the operator's (adopted): it is "
                "kept, and optimizer.dev/rollback returns to it while it exists"
            )
        window = duration_seconds(self.spec.rollout.baseline_retention) * self.timing.time_scale
        until = self.now + timedelta(seconds=window)
        sm.baseline_retained_until = until
        sm.baseline_deleted_at = None
        return (
            f"{said}; baseline config {baseline} kept for optimizer.dev/rollback until "
            f"{until:%Y-%m-%dT%H:%M:%SZ} (rollout.baselineRetention "
            f"{self.spec.rollout.baseline_retention})"
        )

    def rollback_promoted(self) -> bool:
        """The rollback lever after a promotion: back to the baseline config while it is
        retained; otherwise refused with the reason. True when a rollback began."""
        sm = self.status.sagemaker
        baseline = sm.baseline_endpoint_config
        promoted = self.names.promoted_config
        refusal = ""
        if promoted not in sm.endpoint_configs or not baseline:
            refusal = (
                "no candidate was promoted; the endpoint serves its baseline, nothing to roll back"
            )
        elif sm.baseline_deleted_at is not None or (
            sm.baseline_retained_until is not None and self.now >= sm.baseline_retained_until
        ):
            expired = sm.baseline_retained_until or sm.baseline_deleted_at or self.now
            refusal = (
                f"baseline expired at {expired:%Y-%m-%dT%H:%M:%SZ}: its config {baseline} is "
                "deleted after rollout.baselineRetention, nothing to roll back to. Update the "
                "endpoint by hand, or change the spec to optimize again from what serves now"
            )
        if refusal:
            message = f"rollback refused: {refusal}"
            self.events.append(Event("Warning", "RollbackRefused", message))
            self.status.message = message[:1024]
            self.status.record(self.now, "RollbackRefused", message)
            return False
        self.begin_rollback(
            "ManualRollback",
            f"rollback of the promoted candidate requested by annotation: returning to the "
            f"retained baseline config {baseline}",
        )
        return True

    def succeeded(self) -> None:
        """After the retention window: delete the baseline config and model the operator made.

        Level-triggered: an attempt asks for every delete and notes what it asked for; the
        next wake-up confirms it (baselineDeletedAt) only if no failed action was recorded,
        and otherwise says so; a later wake-up with a fresh view of the endpoint asks again.
        So a delete that keeps failing costs one attempt per endpoint recheck at most.
        """
        sm = self.status.sagemaker
        until = sm.baseline_retained_until
        if until is None or sm.baseline_deleted_at is not None or self.now < until:
            return
        why = f"baseline retention ended at {until:%Y-%m-%dT%H:%M:%SZ}"
        if self.baseline_delete_read(why):
            return
        deletes = self.baseline_deletes()
        if deletes is None:
            return
        configs, models = deletes
        state = self.status.rollout.live_judge_state
        previous = state.get(_BASELINE_DELETE_KEY)
        previous = previous if isinstance(previous, dict) else {}
        attempt = int(previous.get("attempt", 0)) + 1
        self.emit_baseline_deletes(configs, models)
        state[_BASELINE_DELETE_KEY] = {
            "at": self.now.isoformat(),
            "attempt": attempt,
            "configs": configs,
            "models": models,
            "reported": str(previous.get("reported", "")),
        }
        # The edge writes lastError for a failed action and nothing for one that succeeded
        # (a delete of something already gone succeeds): cleared, it is this attempt's verdict.
        self.status.last_error = ""
        again = f" (attempt {attempt})" if attempt > 1 else ""
        self.status.message = (
            f"{why}: deleting {', '.join([*configs, *models]) or 'nothing'}{again}"
        )[:1024]

    def baseline_delete_read(self, why: str) -> bool:
        """Read how the last attempt went, once; True when this wake-up read it.

        No failed action recorded: it deleted everything it asked for (confirmed). A
        failure is reported once per distinct error (Event, history, message), so a
        delete that keeps failing does not flood the resource's Events.
        """
        state = self.status.rollout.live_judge_state
        pending = state.get(_BASELINE_DELETE_KEY)
        if not isinstance(pending, dict) or pending.get("failed"):
            return False
        configs = [str(c) for c in pending.get("configs", [])]
        models = [str(m) for m in pending.get("models", [])]
        error = self.status.last_error
        if not error:
            state.pop(_BASELINE_DELETE_KEY)
            sm = self.status.sagemaker
            at = pending.get("at")
            sm.baseline_deleted_at = datetime.fromisoformat(at) if isinstance(at, str) else self.now
            message = (
                f"{why}: deleted {', '.join([*configs, *models]) or 'nothing'}; "
                "optimizer.dev/rollback has nothing to return to now"
            )
            self.events.append(Event("Normal", "BaselineDeleted", message))
            self.status.record(self.now, "BaselineDeleted", message)
            self.status.message = message[:1024]
            return True
        asked = {f"{ActionKind.DELETE_ENDPOINT_CONFIG.value} {c}" for c in configs} | {
            f"{ActionKind.DELETE_MODEL.value} {m}" for m in models
        }
        pending["failed"] = True
        # Something else failed in between (a Describe of a later wake-up): the deletes are
        # not confirmed, so they are asked for again, but nothing is said about them.
        if error.split(":", 1)[0] in asked and error != pending.get("reported"):
            pending["reported"] = error
            message = (
                f"{why}, but deleting the baseline failed: {error}. What was deleted stays "
                "deleted; the operator tries again on its next look at the endpoint "
                "(optimizer.dev/rollback stays refused)"
            )
            self.events.append(Event("Warning", "BaselineDeleteFailed", message))
            self.status.record(self.now, "BaselineDeleteFailed", message)
            self.status.message = message[:1024]
        return True

    def baseline_deletes(self) -> tuple[list[str], list[str]] | None:
        """The configs and model of the baseline that the operator may delete now.

        Only names in status.sagemaker (made by this resource, deterministic names) are
        deleted, never the config the endpoint serves or the models it uses. None while
        that cannot be told (no fresh view of the endpoint, or it is changing), and when
        the baseline serves again (then it is kept). The names stay listed, so the
        finalizer deletes again whatever is left.
        """
        sm = self.status.sagemaker
        endpoint = self.obs.endpoint
        if not self.obs.endpoint_described:
            return None  # a finished resource's last view may be old: delete only on a fresh one
        if endpoint is None or endpoint.status in IN_PROGRESS_ENDPOINT:
            return None  # decided on the next look, never while the endpoint moves
        baseline = sm.baseline_endpoint_config
        if endpoint.config_name == baseline:
            # Someone returned the endpoint to it by hand: it serves, so it stays.
            sm.baseline_retained_until = None
            self.status.rollout.live_judge_state.pop(_BASELINE_DELETE_KEY, None)
            self.status.record(self.now, "BaselineKept", f"{baseline} serves again; kept")
            return None
        in_use = {v.model_name for v in self.obs.config_variants.get(endpoint.config_name, ())}
        in_use |= {v.model_name for v in endpoint.variants}
        configs = [
            c
            for c in (baseline, sm.candidate_endpoint_config, self.names.pinned_config)
            # The rollout config holds the baseline model too: without it, it is unusable.
            if c
            and c in sm.endpoint_configs
            and c != endpoint.config_name
            and c != self.names.promoted_config
        ]
        models = [m for m in (sm.baseline_model,) if m and m in sm.models and m not in in_use]
        return configs, models

    def emit_baseline_deletes(self, configs: list[str], models: list[str]) -> None:
        for config in configs:
            self.act(ActionKind.DELETE_ENDPOINT_CONFIG, config, {"EndpointConfigName": config})
        for model in models:
            self.act(ActionKind.DELETE_MODEL, model, {"ModelName": model})

    def release_baseline(self, why: str) -> None:
        """A new generation: the retained baseline is no rollback target any more.

        Deleted in the same wake-up that starts the generation; a delete that fails is
        reported by the edge and left to the finalizer (the names stay in status).
        """
        deletes = self.baseline_deletes()
        if deletes is None:
            return
        configs, models = deletes
        self.emit_baseline_deletes(configs, models)
        message = (
            f"{why}: deleting {', '.join([*configs, *models]) or 'nothing'} (what a failed "
            "delete leaves stays in status.sagemaker; the finalizer deletes it)"
        )
        self.events.append(Event("Normal", "BaselineReleased", message))
        self.status.record(self.now, "BaselineReleased", message)

    def blue_green(self) -> dict[str, object]:
        """CloudWatch alarms on the candidate variant, and the blue/green policy that uses them."""
        assert self.spec is not None
        sm = self.status.sagemaker
        slo = self.spec.benchmark.slo
        max_error_rate = slo.max_error_rate if slo and slo.max_error_rate is not None else 0.05
        baseline = (self.status.baseline or VariantMeasurements()).level(
            self.spec.judged_concurrency()
        )
        # ModelLatency is per request: alarm well above the baseline's slowest requests.
        ceiling = (baseline.e2e_p99_ms or 0.0) * 2.0 if baseline else 0.0
        alarms = rq.rollback_alarms(
            self.endpoint_name,
            self.names.candidate_variant,
            self.names.alarm_prefix,
            max_error_rate,
            ceiling or 60_000.0,
        )
        for alarm in alarms:
            self.act(ActionKind.PUT_ALARM, str(alarm["AlarmName"]), alarm)
            sm.alarms = _add(sm.alarms, str(alarm["AlarmName"]))
        step = self.spec.rollout.steps[-1]
        bake = int(duration_seconds(step.pause) * self.timing.time_scale)
        return rq.blue_green_deployment(
            [str(a["AlarmName"]) for a in alarms], wait_s=bake, termination_wait_s=bake
        )

    def begin_rollback(self, reason: str, message: str) -> None:
        if self.status.phase in (Phase.PENDING, Phase.BASELINING, Phase.OPTIMIZING):
            for job in self.status.sagemaker.optimization_jobs:
                observed = self.obs.jobs.get(job)
                if observed is not None and observed.status in IN_PROGRESS_JOB - {"STOPPING"}:
                    self.act(ActionKind.STOP_OPTIMIZATION_JOB, job, {"OptimizationJobName": job})
            for job in self.status.sagemaker.training_jobs:
                observed = self.obs.jobs.get(job)
                if observed is not None and observed.status in IN_PROGRESS_JOB - {"STOPPING"}:
                    self.act(ActionKind.STOP_TRAINING_JOB, job, {"TrainingJobName": job})
            self.goto(Phase.ROLLED_BACK, reason, f"{message}; the baseline never stopped serving")
            return
        self.goto(Phase.ROLLING_BACK, reason, message, warning=True)
        self.rolling_back()

    def rolling_back(self) -> None:
        endpoint = self.obs.endpoint
        sm = self.status.sagemaker
        baseline = sm.baseline_endpoint_config
        if endpoint is None:
            self.fail("EndpointDisappeared", f"endpoint {sm.endpoint_name} no longer exists")
            return
        if endpoint.status in IN_PROGRESS_ENDPOINT:
            self.wait(f"endpoint {endpoint.name} is {endpoint.status}")
            return
        sm.serving_endpoint_config = endpoint.config_name
        if endpoint.config_name == baseline or not baseline:
            restart = self.status.rollout.live_judge_state.pop(_RESTART_KEY, None)
            if restart is not None and restart == self.res.generation:
                self.start_generation()
                return
            sm.baseline_retained_until = None
            self.goto(
                Phase.ROLLED_BACK,
                "RolledBack",
                f"endpoint {endpoint.name} serves the baseline config {baseline} again",
            )
            return
        if not endpoint.in_service:
            self.fail("EndpointFailed", f"endpoint {endpoint.name} is {endpoint.status}")
            return
        baseline_variant = (self.status.baseline or VariantMeasurements()).variant_name
        candidate = endpoint.variant(self.names.candidate_variant)
        if (
            candidate is not None
            and (candidate.current_weight or 0.0) > 0.0
            and endpoint.variant(baseline_variant) is not None
        ):
            # Weights move in seconds, a config update in minutes: users leave the
            # candidate first, then the candidate variant goes.
            self.act(
                ActionKind.UPDATE_WEIGHTS,
                endpoint.name,
                rq.update_weights(
                    endpoint.name,
                    rq.canary_weights(baseline_variant, self.names.candidate_variant, 0),
                ),
            )
            self.wait("moving all traffic back to the baseline variant")
            return
        self.act(
            ActionKind.UPDATE_ENDPOINT, endpoint.name, rq.update_endpoint(endpoint.name, baseline)
        )
        self.wait(f"updating endpoint {endpoint.name} back to {baseline}")

    # ----------------------------------------------------------------- conditions

    def conditions(self) -> None:
        s = self.status
        gen = s.observed_generation or self.res.generation
        endpoint = self.obs.endpoint
        ready = endpoint is not None and endpoint.in_service
        s.set_condition(
            ConditionType.READY,
            ConditionStatus.TRUE if ready else ConditionStatus.FALSE,
            "EndpointInService" if ready else "EndpointNotInService",
            f"endpoint {endpoint.name} is {endpoint.status}" if endpoint else "no endpoint yet",
            self.now,
            gen,
        )
        terminal = s.phase in TERMINAL_PHASES
        latest = s.history[-1].event if s.history else ""
        s.set_condition(
            ConditionType.PROGRESSING,
            ConditionStatus.FALSE if terminal or s.paused else ConditionStatus.TRUE,
            "Paused"
            if s.paused
            else latest
            if terminal and latest in _AFTER_PROMOTION_EVENTS
            else s.phase.value,
            s.message,
            self.now,
            gen,
        )
        last = s.history[-1].event if s.history else s.phase.value
        degraded = s.phase in (Phase.ROLLING_BACK, Phase.ROLLED_BACK, Phase.FAILED) or (
            s.phase is Phase.SUCCEEDED and last in _DEGRADING_AFTER_OUTCOME
        )
        s.set_condition(
            ConditionType.DEGRADED,
            ConditionStatus.TRUE if degraded else ConditionStatus.FALSE,
            last if degraded else "AsExpected",
            s.message if degraded else "",
            self.now,
            gen,
        )
        failed = s.phase is Phase.FAILED
        s.set_condition(
            ConditionType.TERMINAL,
            ConditionStatus.TRUE if failed else ConditionStatus.FALSE,
            last if failed else "NotTerminal",
            s.last_error if failed else "",
            self.now,
            gen,
        )


def live_period(interval_s: float) -> int:
    """The CloudWatch period for an analysis interval: the longest one GetMetricData takes
    (1, 5, 10, 20, 30 s or a multiple of 60) that is not longer than the interval."""
    if interval_s >= 60:
        return int(interval_s // 60) * 60
    return max(p for p in (1, 5, 10, 20, 30) if p <= max(interval_s, 1))


def _add(items: list[str], name: str) -> list[str]:
    return items if name in items else [*items, name]


def status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The status merge patch (null removes a key that the new status no longer has)."""
    patch: dict[str, Any] = merge_patch(old, new)
    return patch


def merge_patch(old: Any, new: Any) -> Any:
    """The RFC 7386 merge patch that turns `old` into `new` (null removes a key)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value)
    return patch


def decide(
    spec: object,
    status: OptimizedEndpointStatus,
    observations: Observations,
    resource: Resource,
    now: datetime,
    timing: Timing | None = None,
) -> Decision:
    """One wake-up's decision. `status` is not modified; the new status is returned as JSON."""
    wakeup = _Wakeup(status.model_copy(deep=True), observations, resource, now, timing or Timing())
    wakeup.run(spec)
    cadence.stamp(wakeup.status, observations, resource, now)
    wakeup.conditions()
    return Decision(actions=wakeup.actions, status=wakeup.status.dump(), events=wakeup.events)
