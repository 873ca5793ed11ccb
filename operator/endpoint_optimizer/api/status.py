"""The OptimizedEndpoint's status: written by the control loop only, read by everyone."""

from __future__ import annotations

import math
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    ValidationError,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from endpoint_optimizer.api.camel import CamelModel
from endpoint_optimizer.api.checks import Check
from endpoint_optimizer.api.errors import SpecError, problems_from
from endpoint_optimizer.api.live import AcceptanceEstimate, LiveFigures, LiveState, StreamTotal
from endpoint_optimizer.api.spec import OptimizedEndpointSpec
from endpoint_optimizer.api.types import CONDITION_REASON_PATTERN

# --------------------------------------------------------------------------- status


class Phase(StrEnum):
    PENDING = "Pending"
    BASELINING = "Baselining"
    SEARCHING = "Searching"
    OPTIMIZING = "Optimizing"
    DEPLOYING = "Deploying"
    ANALYZING = "Analyzing"
    AWAITING_APPROVAL = "AwaitingApproval"
    PROMOTING = "Promoting"
    ROLLING_BACK = "RollingBack"
    SUCCEEDED = "Succeeded"
    ROLLED_BACK = "RolledBack"
    FAILED = "Failed"


TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.ROLLED_BACK, Phase.FAILED})


class ConditionType(StrEnum):
    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    TERMINAL = "Terminal"
    # Live speculative acceptance confidently below its floor (onAcceptanceDrift: alert or
    # disableSpeculation).
    ACCEPTANCE_DRIFT = "AcceptanceDrift"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(CamelModel):
    """A Kubernetes-convention condition."""

    type: ConditionType = Field(
        description="Ready, Progressing, Degraded, Terminal or AcceptanceDrift."
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: Annotated[
        str, StringConstraints(min_length=1, max_length=1024, pattern=CONDITION_REASON_PATTERN)
    ] = Field(description="CamelCase reason, e.g. BaselineMeasured.")
    message: Annotated[str, StringConstraints(max_length=32768)] = Field(
        default="", description="Human-readable detail."
    )
    last_transition_time: datetime = Field(description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the condition was set for."
    )

    @field_serializer("message")
    def _fit_message(self, value: str) -> str:
        return value[:32768]


class LevelMeasurement(CamelModel):
    """Benchmark results of one variant at one concurrency level."""

    concurrency: int = Field(ge=1, description="Simultaneous requests.")
    requests: int = Field(default=0, ge=0, description="Measured requests.")
    errors: int = Field(default=0, ge=0, description="Failed requests.")
    ttft_p50_ms: float | None = Field(default=None, description="Time to first token p50, ms.")
    ttft_p90_ms: float | None = Field(default=None, description="Time to first token p90, ms.")
    ttft_p99_ms: float | None = Field(default=None, description="Time to first token p99, ms.")
    itl_p50_ms: float | None = Field(default=None, description="Inter-token latency p50, ms.")
    itl_p90_ms: float | None = Field(default=None, description="Inter-token latency p90, ms.")
    itl_p99_ms: float | None = Field(default=None, description="Inter-token latency p99, ms.")
    tpot_p50_ms: float | None = Field(default=None, description="Time per output token p50, ms.")
    tpot_p99_ms: float | None = Field(default=None, description="Time per output token p99, ms.")
    e2e_p50_ms: float | None = Field(
        default=None, alias="e2eP50Ms", description="End-to-end latency p50, ms."
    )
    e2e_p90_ms: float | None = Field(
        default=None, alias="e2eP90Ms", description="End-to-end latency p90, ms."
    )
    e2e_p99_ms: float | None = Field(
        default=None, alias="e2eP99Ms", description="End-to-end latency p99, ms."
    )
    output_tokens_per_second: float | None = Field(
        default=None, description="Output tokens per second, all requests together."
    )
    requests_per_second: float | None = Field(default=None, description="Completed requests/s.")


class VariantMeasurements(CamelModel):
    """Everything measured about one variant (baseline or candidate)."""

    variant_name: str = Field(default="", max_length=63, description="SageMaker variant name.")
    levels: list[LevelMeasurement] = Field(
        default_factory=list, description="One entry per benchmark concurrency level."
    )
    acceptance_rate: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Speculative decoding: accepted draft fraction."
    )
    acceptance_source: str = Field(
        default="", description="Where acceptanceRate came from (server metrics, logs, client)."
    )
    eval_score: float | None = Field(default=None, description="Task metric on the eval set.")
    refusal_rate: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Fraction of eval items refused."
    )
    eval_items: int = Field(default=0, ge=0, description="Eval items scored.")
    served_by: str = Field(
        default="",
        description=(
            "The engine that produced these numbers, as the serving container labelled its "
            "responses (CustomAttributes `engine=`): `real`, `synthetic` (a stand-in model, "
            "e.g. the local sandbox), or `mixed`; empty when the container sets no label, as "
            "a real SageMaker container does not."
        ),
    )
    engine_note: str = Field(
        default="",
        description=(
            "Why the numbers are synthetic (the container's `fallback=` reason: a technique "
            "the serving engine cannot run, such as FP8 on a CPU, was modelled instead) or "
            "what the engine served without (`not modelled: ...`)."
        ),
    )
    measured_at: datetime | None = Field(default=None, description="When measured (RFC 3339).")

    def level(self, concurrency: int) -> LevelMeasurement | None:
        """The measurement at `concurrency`, if there is one."""
        return next((m for m in self.levels if m.concurrency == concurrency), None)


class SageMakerResources(CamelModel):
    """The SageMaker resources the operator made or adopted (names)."""

    region: str = Field(
        default="",
        max_length=32,
        description="The region of everything named here: the finalizer and the way back work "
        "from status, never from a spec that may have changed.",
    )
    endpoint_name: str = Field(default="", description="The endpoint.")
    baseline_endpoint_config: str = Field(default="", description="Baseline endpoint config.")
    candidate_endpoint_config: str = Field(default="", description="Candidate endpoint config.")
    serving_endpoint_config: str = Field(
        default="", description="Config the endpoint serves now, as last observed."
    )
    baseline_model: str = Field(default="", description="Baseline SageMaker Model.")
    candidate_model: str = Field(default="", description="Candidate SageMaker Model.")
    models: list[str] = Field(default_factory=list, description="Models the operator made.")
    endpoint_configs: list[str] = Field(
        default_factory=list, description="Endpoint configs the operator made."
    )
    optimization_jobs: list[str] = Field(
        default_factory=list, description="Optimization jobs the operator started."
    )
    training_jobs: list[str] = Field(
        default_factory=list, description="Training jobs (llm-compressor) the operator started."
    )
    alarms: list[str] = Field(default_factory=list, description="CloudWatch alarms made.")
    adopted: bool = Field(
        default=False, description="True when the endpoint existed before (adoptExisting)."
    )
    baseline_component: str = Field(
        default="",
        description="spec.inferenceComponent: the adopted inference component measured as "
        "the baseline and, at the promotion, updated to the candidate's model.",
    )
    baseline_component_model: str = Field(
        default="",
        description="The Model the baseline component served when adopted: what a rollback "
        "updates it back to.",
    )
    candidate_component: str = Field(
        default="", description="The candidate inference component (made by the operator)."
    )
    inference_components: list[str] = Field(
        default_factory=list, description="Inference components the operator made."
    )
    component_promoted: str = Field(
        default="",
        description="The Model the baseline component was updated to at the promotion (the "
        "candidate's); empty while it serves its adopted model.",
    )
    baseline_retained_until: datetime | None = Field(
        default=None,
        description="After a promotion: until when optimizer.dev/rollback can return to the "
        "baseline config; then the operator deletes it (spec.rollout.baselineRetention). Unset "
        "when the baseline is not the operator's to delete (adopted) or serves again.",
    )
    baseline_deleted_at: datetime | None = Field(
        default=None,
        description="When the operator deleted the baseline config and model after the "
        "retention window; a later rollback annotation is refused.",
    )


class ShadowStage(StrEnum):
    """Shadow with an eval set or acceptance floor: where the candidate is after its pinned
    stage (absent while it is judged on pinned requests as a weight-0 production variant)."""

    DEPLOYING = "deploying"  # the shadow config is asked for; the pinned config still serves
    LIVE = "live"  # the candidate shadows production


class BaselineDelete(CamelModel):
    """The retention delete in flight: asked for by one wake-up, confirmed by the next."""

    at: datetime | None = Field(default=None, description="When the deletes were asked for.")
    attempt: int = Field(default=1, ge=1, description="Attempts so far.")
    configs: list[str] = Field(default_factory=list, description="Endpoint configs asked for.")
    models: list[str] = Field(default_factory=list, description="Models asked for.")
    reported: str = Field(default="", description="The last failure reported (once each).")
    failed: bool = Field(default=False, description="The last attempt was seen to fail.")


class BakeOutcome(StrEnum):
    PASSED = "Passed"  # the bake ended without a confident regression
    FAILED = "Failed"  # a confident regression: rolled back to the retained baseline
    STOPPED = "Stopped"  # the promoted config stopped serving (a lever, a person, SageMaker)


class BakeStatus(CamelModel):
    """The bake after a promotion (spec.rollout.bake): the live judge keeps comparing the
    promoted variant with the baseline's last measured live figures until `until`."""

    until: datetime = Field(description="When the bake ends; the judge stops then.")
    reference: LiveFigures = Field(
        description="The baseline's last measured live figures, frozen at the promotion."
    )
    read_until: float | None = Field(
        default=None,
        description="Unix time up to which the promoted variant's live periods were asked for.",
    )
    period_seconds: int | None = Field(
        default=None, ge=1, description="The CloudWatch period the bake reads."
    )
    judge: LiveState = Field(
        default_factory=LiveState,
        description="The bake's own live judge state, for the current evidence block.",
    )
    block: int = Field(
        default=1,
        ge=1,
        description="The evidence block: the judge starts afresh every few intervals (a "
        "regression after a long clean stretch is not outweighed by it), block j at "
        "alpha * 6 / (pi^2 j^2), so the blocks together keep the false-rollback bound.",
    )
    intervals: int = Field(default=0, ge=0, description="Intervals judged in all blocks.")
    latency_unmatched: int = Field(
        default=0,
        ge=0,
        description="Of those, intervals whose latency was not compared: the promoted variant "
        "carried more load per instance than the reference was measured at.",
    )
    ended_at: datetime | None = Field(default=None, description="When the bake ended.")
    outcome: BakeOutcome | None = Field(
        default=None, description="Passed, Failed (rolled back) or Stopped."
    )

    @property
    def active(self) -> bool:
        return self.ended_at is None


class AcceptanceWatchOutcome(StrEnum):
    DRIFTED = "Drifted"  # confident drift below the floor: onAcceptanceDrift was applied
    ENDED = "Ended"  # the retention ended (or the baseline was released): nothing to watch for
    STOPPED = "Stopped"  # the promoted config stopped serving (a lever, a person, SageMaker)


class AcceptanceWatch(CamelModel):
    """After a clean bake, while the baseline is retained: only the promoted variant's
    live acceptance is watched against speculativeDecoding.minAcceptanceRate (latency was
    the bake's), with the bake's confidence rule; a confident drift applies
    onAcceptanceDrift once."""

    read_until: float | None = Field(
        default=None,
        description="Unix time up to which the promoted variant's live periods were asked for.",
    )
    period_seconds: int | None = Field(
        default=None, ge=1, description="The CloudWatch period the watch reads."
    )
    last_interval_end: datetime | None = Field(
        default=None, description="End of the newest interval judged (none is judged twice)."
    )
    block_intervals: int = Field(
        default=0, ge=0, description="Intervals judged in the current evidence block."
    )
    acceptance_below_floor: int = Field(
        default=0,
        ge=0,
        description="Intervals of the current evidence block whose acceptance was "
        "confidently below the floor; failureLimit of them apply onAcceptanceDrift.",
    )
    candidate_acceptance: AcceptanceEstimate | None = Field(
        default=None, description="The promoted variant's acceptance in the newest interval."
    )
    stream_totals: list[StreamTotal] = Field(
        default_factory=list, description="Cumulative-counter streams' last totals (vLLM V0)."
    )
    block: int = Field(
        default=1,
        ge=1,
        description="The evidence block, continuing the bake's: block j judges at "
        "alpha * 6 / (pi^2 j^2), as the bake does.",
    )
    intervals: int = Field(default=0, ge=0, description="Intervals judged in all blocks.")
    alerted_at: datetime | None = Field(
        default=None,
        description="onAcceptanceDrift: alert: when the drift was announced (once). The "
        "watch goes on reading, so the live acceptance metrics stay current until the "
        "retention ends.",
    )
    ended_at: datetime | None = Field(default=None, description="When the watch ended.")
    outcome: AcceptanceWatchOutcome | None = Field(
        default=None, description="Drifted (the policy applied), Ended or Stopped."
    )

    @property
    def active(self) -> bool:
        return self.ended_at is None


class SpeculationStage(StrEnum):
    CANARY = "canary"  # the twin took the candidate variant's place and weight
    BAKE = "bake"  # the twin serves alone; the retained baseline is still the way back
    # After a clean bake, while the baseline is retained (the acceptance watch): as in
    # the bake, the twin serves alone and the retained baseline is still the way back.
    RETENTION = "retention"


class SpeculationDisabled(CamelModel):
    """onAcceptanceDrift: disableSpeculation. The candidate's traffic moved to its
    speculation-free twin: the same weights and settings, speculation off."""

    at: datetime = Field(description="When the drift decided it.")
    during: SpeculationStage = Field(description="canary, bake or retention.")
    reason: str = Field(max_length=1024, description="The acceptance check that decided it.")
    model: str = Field(max_length=63, description="The twin's SageMaker Model.")
    endpoint_config: str = Field(max_length=63, description="The twin's endpoint config.")
    serving_at: datetime | None = Field(
        default=None, description="When SageMaker was first seen serving the twin's config."
    )


class CutoffOutcome(StrEnum):
    """What the judge's interval says speculation does at one concurrency level."""

    WINS = "Wins"  # the candidate is faster than the baseline with the judge's confidence
    LOSES = "Loses"  # slower, with the same confidence
    UNDECIDED = "Undecided"  # the interval straddles 1, or the level was not judged


class CutoffLevel(CamelModel):
    """One concurrency level of the candidate's comparison, as the cut-off reads it."""

    concurrency: int = Field(ge=1, description="Simultaneous requests.")
    outcome: CutoffOutcome = Field(description="Wins, Loses or Undecided.")
    ratio_low: float | None = Field(
        default=None, description="Lower end of the judge's candidate/baseline interval."
    )
    ratio_high: float | None = Field(
        default=None, description="Upper end of the judge's candidate/baseline interval."
    )


class SpeculationCutoff(CamelModel):
    """The concurrency above which speculation stops winning, from the candidate's
    per-level comparison (analysis/cutoff.py), and whether the serving engine was told."""

    at: datetime = Field(description="When the comparison that found it was recorded.")
    metric: str = Field(
        default="", max_length=64, description="The judged statistic, e.g. `e2e_p50`."
    )
    concurrency: int | None = Field(
        default=None,
        ge=1,
        description="The highest level where speculation wins, every level above it where "
        "it is judged losing; none when it wins or loses everywhere, or the levels disagree.",
    )
    batch_size: int | None = Field(
        default=None,
        ge=1,
        description="The same cut-off per instance (concurrency / instanceCount, rounded up): "
        "the running batch above which the engine drafts nothing.",
    )
    levels: list[CutoffLevel] = Field(default_factory=list, description="Per-level outcomes.")
    reason: str = Field(default="", max_length=1024, description="Why this cut-off, or none.")
    switch: str = Field(
        default="",
        max_length=1024,
        description="What the serving container was told: the engine key set, or why none.",
    )
    model: str = Field(
        default="", max_length=63, description="The candidate re-made with the cut-off."
    )
    endpoint_config: str = Field(
        default="", max_length=63, description="The config serving it in the canary."
    )
    serving_at: datetime | None = Field(
        default=None, description="When SageMaker was first seen serving it."
    )


class MeasurementRetry(CamelModel):
    """A measurement that was no measurement (most requests failed, or the client could not
    keep up): not judged, tried again after a backoff that grows with each attempt."""

    action: Literal["MeasureBaseline", "Compare"] = Field(description="What is retried.")
    attempts: int = Field(ge=1, description="Attempts that were no measurement.")
    last_at: datetime = Field(description="When the last attempt ended.")
    next_at: datetime = Field(description="Not before this time.")
    reason: str = Field(max_length=1024, description="Why the last attempt was void.")


class Failure(CamelModel):
    """A terminal error met while a candidate may hold traffic: the resource turns Failed
    once traffic is back on the baseline, never before."""

    reason: str = Field(max_length=128, description="CamelCase reason, e.g. QuotaExceeded.")
    message: str = Field(max_length=4096, description="What failed and what to do.")


class Retry(CamelModel):
    """A retryable error the operator waits out: what failed, how often in a row, and when it
    tries again (a jittered backoff, never sooner than one poll interval, at most the
    operator's --retry-max-delay)."""

    reason: str = Field(
        max_length=128,
        description="What failed, CamelCase: Throttled, Transient, ConfigMapMissing, "
        "DatasetInvalid, ... (lastError has the whole message).",
    )
    attempt: int = Field(ge=1, description="Failed attempts in a row.")
    next_attempt_at: datetime = Field(
        description="The resource makes no AWS call before this time (RFC 3339), unless a lever "
        "annotation, a new generation or a deletion wakes it."
    )


class OutsideChange(CamelModel):
    """A change to the endpoint the operator did not make, found during a rollout: the
    rollout is paused and the change kept until a person pulls a lever."""

    kind: Literal["weights", "config"] = Field(
        description="weights: variant weights moved; config: the endpoint serves another config."
    )
    seen: str = Field(max_length=1024, description="What was found, in words.")
    config: str = Field(default="", max_length=63, description="The config found serving.")
    at: datetime = Field(description="When it was found.")


class RollbackReason(StrEnum):
    """The bounded reason of a rollback (the `reason` label of the rollback counter)."""

    BENCHMARK = "benchmark"  # candidate slower than baseline in the paired benchmark
    LIVE = "live"  # live CloudWatch checks failed `failureLimit` times during a step
    ACCEPTANCE = "acceptance"  # speculative acceptance rate below its floor
    EVAL = "eval"  # eval score dropped more than allowed
    REFUSAL = "refusal"  # refusal rate rose more than allowed
    NO_IMPROVEMENT = "noImprovement"  # not worse, but does not buy the objective
    DEADLINE = "deadline"  # a step did not finish within its progress deadline
    UPDATE_FAILED = "updateFailed"  # SageMaker UpdateEndpoint failed or was rolled back
    MANUAL = "manual"  # a person asked for it (rollback annotation)
    INCONCLUSIVE = "inconclusive"  # checks without enough data, with onNoData: fail
    NEW_GENERATION = "newGeneration"  # the spec changed: back to the baseline, then again
    ERROR = "error"  # an error the operator cannot retry met while the candidate held traffic
    ERRORS = "errors"  # the candidate failed requests more often than allowed
    BAKE = "bake"  # the promoted variant regressed on live traffic during the bake
    OTHER = "other"  # the candidate vanished or an unknown cause


# The keys of the free-form map the previous release kept (status.rollout.liveJudgeState),
# and the typed field each is read into now.
_LEGACY_KEYS = {
    "comparedStep": "comparedStep",
    "live": "liveJudge",
    "liveReadUntil": "liveReadUntil",
    "livePeriodSeconds": "livePeriodSeconds",
    "leversHandled": "leversHandled",
    "restartGeneration": "restartGeneration",
    "promotionRequested": "promotionRequested",
    "shadowStage": "shadowStage",
    "baselineDelete": "baselineDelete",
}


class RolloutStatus(CamelModel):
    """Where the rollout stands, and what the control loop remembers between wake-ups."""

    step_index: int = Field(default=0, ge=0, description="Current step, 0-based.")
    canary_weight: int = Field(default=0, ge=0, le=100, description="Candidate traffic, percent.")
    step_started_at: datetime | None = Field(default=None, description="When this step began.")
    failed_checks: int = Field(default=0, ge=0, description="Failed intervals so far.")
    compared_step: int | None = Field(
        default=None, ge=0, description="The step whose paired comparison is recorded."
    )
    live_read_until: float | None = Field(
        default=None,
        description="Unix time up to which live CloudWatch periods were asked for (each once).",
    )
    live_period_seconds: int | None = Field(
        default=None, ge=1, description="The CloudWatch period the live judge reads."
    )
    live_judge: LiveState | None = Field(
        default=None, description="The live judge's state (a pure fold, kept between wake-ups)."
    )
    levers_handled: dict[str, Annotated[str, StringConstraints(max_length=253)]] = Field(
        default_factory=dict,
        max_length=8,
        description="Lever annotation values already acted on (each value acts once).",
    )
    restart_generation: int | None = Field(
        default=None,
        ge=1,
        description="A new spec generation waiting for traffic to return to the baseline.",
    )
    promotion_requested: str = Field(
        default="", description="The promoted config the operator asked SageMaker to serve."
    )
    shadow_stage: ShadowStage | None = Field(
        default=None, description="Shadow after its pinned stage: deploying, then live."
    )
    baseline_delete: BaselineDelete | None = Field(
        default=None, description="The retention delete in flight."
    )
    baseline_live: LiveFigures | None = Field(
        default=None,
        description="The baseline's last measured live figures (the live judge's newest "
        "usable interval of it): the bake's reference once the candidate is promoted.",
    )
    bake: BakeStatus | None = Field(
        default=None, description="The bake after the promotion (spec.rollout.bake)."
    )
    acceptance_watch: AcceptanceWatch | None = Field(
        default=None,
        description="After a clean bake, while the baseline is retained: the watch of the "
        "promoted variant's live acceptance (onAcceptanceDrift).",
    )
    speculation_cutoff: SpeculationCutoff | None = Field(
        default=None,
        description="speculativeDecoding: the concurrency above which speculation stops "
        "winning, from the candidate's comparison; with concurrencyCutoff: apply, the "
        "candidate re-made with the engine's switch for it.",
    )
    speculation_disabled: SpeculationDisabled | None = Field(
        default=None,
        description="Speculation switched off on acceptance drift (onAcceptanceDrift: "
        "disableSpeculation): the twin, when and why.",
    )
    rollback_reason: RollbackReason | None = Field(
        default=None, description="Why the rollout is being (or was) rolled back."
    )
    failing: Failure | None = Field(
        default=None,
        description="A terminal error met while a candidate held traffic: the rollback under "
        "way ends in Failed with it, once traffic is back on the baseline.",
    )
    outside_change: OutsideChange | None = Field(
        default=None,
        description="A change someone else made to the endpoint during the rollout: paused "
        "until optimizer.dev/approve (adopt it, or resume) or optimizer.dev/rollback.",
    )
    live_judge_state: dict[str, Any] | None = Field(
        default=None,
        description="Deprecated: the free-form state of release 0.1, read once into the typed "
        "fields above and never written. Kept in the schema for one release, so that the "
        "apiserver does not prune it before the operator has read it.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )

    @model_validator(mode="before")
    @classmethod
    def _read_legacy_state(cls, data: Any) -> Any:
        """A status written by release 0.1 kept this state in a free-form map
        (`liveJudgeState`); it is read into the typed fields once and then dropped."""
        if not isinstance(data, dict):
            return data
        legacy = data.get("liveJudgeState", data.get("live_judge_state"))
        if not isinstance(legacy, dict):
            return data
        data = {k: v for k, v in data.items() if k not in ("liveJudgeState", "live_judge_state")}
        data["liveJudgeState"] = None
        for old, new in _LEGACY_KEYS.items():
            if old in legacy and new not in data:
                data[new] = legacy[old]
        return data


class SpotCheckStatus(CamelModel):
    """The human spot check's samples and decision."""

    config_map: str = Field(default="", description="ConfigMap holding the paired samples.")
    samples: int = Field(default=0, ge=0, description="Paired samples written.")
    approved: bool | None = Field(default=None, description="The reviewer's decision, if any.")


class EvalNoise(CamelModel):
    """The eval set's A/A noise: items the baseline answered twice, same request and sampling.

    Measured once per generation, when the baseline is measured (evaluation.noiseItems
    items asked a second time). Greedy decoding is not bit-exact on a batching server (the
    batch an answer shares changes its kernels' arithmetic), so an identical model can
    score an item differently; the eval gate's margin means little inside that noise.
    """

    items: int = Field(default=0, ge=0, description="Items asked twice.")
    eval_items: int = Field(default=0, ge=0, description="Items in the eval set.")
    changed_answers: int = Field(
        default=0, ge=0, description="Items whose two answers differ in text."
    )
    discordant: int = Field(
        default=0, ge=0, description="Items whose two answers score differently."
    )
    discordance_high: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="One-sided upper confidence bound (exact binomial) of the share of items "
        "that score differently when asked twice.",
    )
    difference: float | None = Field(
        default=None, description="Mean score of the second answers less the first (A/A)."
    )
    interval_low: float | None = Field(
        default=None, description="Lower bound of the A/A difference, as the eval gate bounds."
    )
    interval_high: float | None = Field(
        default=None, description="Upper bound of the A/A difference, as the eval gate bounds."
    )
    unchanged_bound: float | None = Field(
        default=None,
        description="The lower bound the eval gate would find, over every item of the eval "
        "set, for a candidate that differs from the baseline by this noise alone; below "
        "-maxAbsoluteDrop, the margin is inside the noise and more items are needed.",
    )
    confidence: float = Field(default=0.95, description="Confidence of each one-sided bound.")
    measured_at: datetime | None = Field(default=None, description="When it was measured.")


class MeasurementProgress(CamelModel):
    """A measurement while it runs: written mid-wake-up at a bounded rate, never decided on.

    Cleared by the wake-up that finishes the measurement. The operator writes it from the
    benchmark's and the eval's own counters; it is for people (`kubectl describe`, `-w`)
    and is never read back into a decision.
    """

    action: Annotated[str, StringConstraints(max_length=64)] = Field(
        description="What is measured: MeasureBaseline (the baseline alone) or Compare "
        "(baseline and candidate side by side)."
    )
    stage: Literal["benchmark", "evaluation"] = Field(description="Which part runs now.")
    concurrency: int = Field(
        default=0, ge=0, description="The benchmark's concurrency level now (0 in the eval)."
    )
    level: int = Field(default=0, ge=0, description="Which level of `levels` (1-based).")
    levels: int = Field(default=0, ge=0, description="Levels in this round.")
    round: int = Field(default=1, ge=1, description="Benchmark round (the sequential judge's).")
    requests_done: int = Field(
        default=0,
        ge=0,
        description="Requests answered at this level (or eval items), all "
        "variants together, warm-up not counted.",
    )
    requests_planned: int = Field(
        default=0,
        ge=0,
        description="Requests planned at this level (or eval items), all variants together.",
    )
    started_at: datetime = Field(description="When the measurement began (RFC 3339).")
    elapsed: Annotated[str, StringConstraints(max_length=32)] = Field(
        default="", description="Time since startedAt when this was written, e.g. 1m20s."
    )


# ----------------------------------------------------------------- autoscaling (issue 23)


class MetricDimension(CamelModel):
    """One CloudWatch dimension of a customized scaling metric."""

    name: Annotated[str, StringConstraints(max_length=255)] = Field(description="Dimension name.")
    value: Annotated[str, StringConstraints(max_length=1024)] = Field(
        description="Dimension value (EndpointName and VariantName are rewritten on restore)."
    )


class PredefinedScalingMetric(CamelModel):
    """PredefinedMetricSpecification of a target-tracking policy."""

    predefined_metric_type: Annotated[str, StringConstraints(max_length=128)] = Field(
        description="e.g. SageMakerVariantInvocationsPerInstance."
    )
    resource_label: Annotated[str, StringConstraints(max_length=1023)] = Field(
        default="", description="ResourceLabel, when the metric type takes one."
    )


class CustomizedScalingMetric(CamelModel):
    """CustomizedMetricSpecification of a target-tracking policy (a single metric)."""

    metric_name: Annotated[str, StringConstraints(max_length=255)] = Field(description="Metric.")
    namespace: Annotated[str, StringConstraints(max_length=255)] = Field(description="Namespace.")
    dimensions: list[MetricDimension] = Field(default_factory=list, description="Dimensions.")
    statistic: Annotated[str, StringConstraints(max_length=32)] = Field(description="Statistic.")
    unit: Annotated[str, StringConstraints(max_length=64)] = Field(default="", description="Unit.")


class TargetTrackingPolicy(CamelModel):
    """TargetTrackingScalingPolicyConfiguration, as read before the operator deregistered it."""

    target_value: float = Field(description="TargetValue.")
    predefined_metric: PredefinedScalingMetric | None = Field(
        default=None, description="PredefinedMetricSpecification."
    )
    customized_metric: CustomizedScalingMetric | None = Field(
        default=None, description="CustomizedMetricSpecification."
    )
    scale_out_cooldown: int | None = Field(default=None, ge=0, description="ScaleOutCooldown, s.")
    scale_in_cooldown: int | None = Field(default=None, ge=0, description="ScaleInCooldown, s.")
    disable_scale_in: bool | None = Field(default=None, description="DisableScaleIn.")


class StepAdjustment(CamelModel):
    """One StepAdjustment of a step scaling policy."""

    lower_bound: float | None = Field(default=None, description="MetricIntervalLowerBound.")
    upper_bound: float | None = Field(default=None, description="MetricIntervalUpperBound.")
    scaling_adjustment: int = Field(description="ScalingAdjustment.")


class StepScalingPolicy(CamelModel):
    """StepScalingPolicyConfiguration, as read before the operator deregistered it."""

    adjustment_type: Annotated[str, StringConstraints(max_length=64)] = Field(
        default="", description="AdjustmentType."
    )
    step_adjustments: list[StepAdjustment] = Field(
        default_factory=list, description="StepAdjustments."
    )
    min_adjustment_magnitude: int | None = Field(
        default=None, description="MinAdjustmentMagnitude."
    )
    cooldown: int | None = Field(default=None, ge=0, description="Cooldown, s.")
    metric_aggregation_type: Annotated[str, StringConstraints(max_length=32)] = Field(
        default="", description="MetricAggregationType."
    )


class ScalingPolicyRecord(CamelModel):
    """One scaling policy of a variant: enough to put it again on another variant."""

    name: Annotated[str, StringConstraints(max_length=256)] = Field(description="PolicyName.")
    policy_type: Literal["TargetTrackingScaling", "StepScaling"] = Field(description="PolicyType.")
    target_tracking: TargetTrackingPolicy | None = Field(
        default=None, description="For TargetTrackingScaling."
    )
    step_scaling: StepScalingPolicy | None = Field(default=None, description="For StepScaling.")


class ScalableTargetRecord(CamelModel):
    """A variant's Application Auto Scaling target and its policies."""

    variant: Annotated[str, StringConstraints(max_length=63)] = Field(
        description="The variant it was registered on."
    )
    min_capacity: int = Field(ge=0, description="MinCapacity.")
    max_capacity: int = Field(ge=0, description="MaxCapacity.")
    policies: list[ScalingPolicyRecord] = Field(default_factory=list, description="Its policies.")


class AutoscalingStatus(CamelModel):
    """The endpoint's autoscaling while the operator holds it off (status is the only memory:
    saved before DeregisterScalableTarget, cleared once it serves again on the live variant)."""

    saved: list[ScalableTargetRecord] = Field(
        default_factory=list,
        description="Targets and policies deregistered for an update, to register again.",
    )
    suspended_at: datetime | None = Field(
        default=None,
        description="Since when the instance counts are fixed (no policy acts on the endpoint).",
    )
    restored_on: Annotated[str, StringConstraints(max_length=63)] = Field(
        default="", description="The variant the saved scaling was last restored on."
    )
    restored_at: datetime | None = Field(default=None, description="When it was restored.")


MAX_HISTORY = 50


class HistoryEntry(CamelModel):
    """One decision the operator took."""

    time: datetime = Field(description="When (RFC 3339).")
    phase: Phase = Field(description="Phase at the time.")
    event: Annotated[str, StringConstraints(max_length=128)] = Field(
        description="What happened, CamelCase, e.g. CandidatePromoted."
    )
    message: Annotated[str, StringConstraints(max_length=1024)] = Field(
        default="", description="One line."
    )

    @field_serializer("event")
    def _fit_event(self, value: str) -> str:
        return value[:128]

    @field_serializer("message")
    def _fit_message(self, value: str) -> str:
        return value[:1024]


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


class ColdStartPart(StrEnum):
    """A part of a cold start the operator timed on SageMaker's API."""

    # CreateInferenceComponent -> InService of the candidate component (its copies load).
    COMPONENT_START = "componentStart"
    # The variant's CurrentInstanceCount rose while the candidate started: the component
    # start above includes the instance provisioning it waited for.
    INSTANCE_PROVISION = "instanceProvision"


class ScaleToZero(CamelModel):
    """spec.inferenceComponent: the promoted configuration always-on versus scaled to zero.

    The cold start is the candidate component's own start, timed from
    DescribeInferenceComponent (CreationTime to the LastModifiedTime of the first look that
    saw it InService; resolution: the operator's poll). The traffic is the adopted
    component's CloudWatch Invocations per minute (AWS/SageMaker, InferenceComponentName)
    from the candidate's start to the promotion. docs/inference-components.md says how each
    number is made and what is not measured.
    """

    cold_start_seconds: float | None = Field(
        default=None,
        ge=0,
        description="Measured: CreateInferenceComponent to InService of the candidate component.",
    )
    cold_start_measured: list[ColdStartPart] = Field(
        default_factory=list,
        max_length=2,
        description="Which parts coldStartSeconds includes: componentStart always; "
        "instanceProvision only when the variant's instance count rose for the candidate. "
        "Without it the instance provisioning a scale from zero needs was not observed "
        "and coldStartSeconds is a lower bound.",
    )
    instances_at_candidate_create: int | None = Field(
        default=None,
        ge=0,
        description="The variant's CurrentInstanceCount when the candidate was created.",
    )
    window_start: datetime | None = Field(
        default=None, description="Start of the traffic window: the candidate InService."
    )
    window_minutes: int | None = Field(
        default=None, ge=0, description="Minutes of per-minute Invocations read."
    )
    requests_in_window: float | None = Field(
        default=None, ge=0, description="Invocations of the adopted component in the window."
    )
    instances: int | None = Field(
        default=None, ge=0, description="Instances the promoted configuration's copies hold."
    )
    idle_release_minutes: int | None = Field(
        default=None,
        ge=1,
        description="Idle minutes after which the instances are released "
        "(spec.inferenceComponent.idleRelease, in whole minutes).",
    )
    always_on_instance_hours_per_day: float | None = Field(
        default=None, ge=0, description="instances x 24."
    )
    scale_to_zero_instance_hours_per_day: float | None = Field(
        default=None,
        ge=0,
        description="Instance-hours a day with managed instance scaling to zero at the "
        "measured traffic (the window repeated over the day).",
    )
    cold_starts_per_day: float | None = Field(
        default=None, ge=0, description="Idle gaps longer than idleReleaseMinutes, per day."
    )
    requests_meeting_cold_start_per_day: float | None = Field(
        default=None,
        ge=0,
        description="Requests a day in the minutes a cold start spans after such a gap.",
    )
    measured_at: datetime | None = Field(
        default=None, description="When the traffic was read and compared."
    )


class LevelGain(CamelModel):
    """A search candidate's gain over its base at one benchmark concurrency."""

    concurrency: int = Field(ge=1, description="Concurrent requests.")
    gain: float | None = Field(
        default=None, description="e2e p50 (latency) or mean throughput, fraction better."
    )
    gain_low: float | None = Field(default=None, description="Low end of its interval.")
    gain_high: float | None = Field(default=None, description="High end of its interval.")


class SearchRow(CamelModel):
    """One candidate of spec.search: what it was built on and how it ended."""

    name: Annotated[str, StringConstraints(max_length=32)] = Field(description="Alternative.")
    rung: Annotated[str, StringConstraints(max_length=32)] = Field(
        description="settings, quantization, instanceTypes, speculativeDecoding or compilation."
    )
    base: list[Annotated[str, StringConstraints(max_length=32)]] = Field(
        default_factory=list,
        max_length=5,
        description="The current best it was measured against (alternatives; [] = baseline).",
    )
    verdict: Annotated[str, StringConstraints(max_length=32)] = Field(
        default="",
        description="Kept, Beaten, NoGain, GateFailed, Skipped, NotRun; empty while measured.",
    )
    why: Annotated[str, StringConstraints(max_length=512)] = Field(default="", description="Why.")
    variant: Annotated[str, StringConstraints(max_length=63)] = Field(
        default="", description="Its weight-0 production variant while measured."
    )
    measured: bool = Field(default=False, description="Its comparison is recorded.")
    gain: float | None = Field(
        default=None,
        description="Objective gain over the current best at the judged concurrency (0.12 = "
        "12 % better).",
    )
    gain_low: float | None = Field(
        default=None, description="The gain's confidence bound (what minImprovement is held to)."
    )
    improves: bool = Field(default=False, description="The objective check passed.")
    gates: bool = Field(default=False, description="Every other gating check passed.")
    objective_met: bool = Field(
        default=False, description="The stack with it meets the objective against the baseline."
    )
    binding: Annotated[str, StringConstraints(max_length=32)] = Field(
        default="", description="The metric furthest from its target with it (ttft, itl, ...)."
    )
    eval_delta: float | None = Field(
        default=None, description="Eval score minus the current best's (same items)."
    )
    slice_deltas: dict[str, float] = Field(
        default_factory=dict,
        description="Each judged eval class's score change (candidate - current best), "
        "by class: where low-bit schemes break first.",
    )
    acceptance_rate: float | None = Field(
        default=None, description="Speculative acceptance rate measured, where it speculates."
    )
    levels: list[LevelGain] = Field(
        default_factory=list,
        max_length=16,
        description="The gain at every benchmark concurrency, with its interval (the other "
        "levels are guards: their checks gate).",
    )
    tokens_per_second: float | None = Field(
        default=None, description="Output tokens/s at the judged concurrency."
    )
    latency_ms: float | None = Field(
        default=None, description="e2e latency p50 at the judged concurrency, ms."
    )
    cost_per_million_tokens: float | None = Field(
        default=None,
        description="USD per 1M output tokens at its measured throughput "
        "(status.search.price x instanceCount); unset without a price.",
    )
    failed_checks: list[Annotated[str, StringConstraints(max_length=96)]] = Field(
        default_factory=list, max_length=32, description="Gating checks not passed."
    )
    started_at: datetime | None = Field(
        default=None, description="When the update that deployed it was asked for."
    )
    in_service_seconds: float | None = Field(
        default=None,
        ge=0,
        description="Seconds from that update to the endpoint InService with it, as first seen.",
    )
    instance_hours: float = Field(
        default=0.0, ge=0, description="Instance-hours its weight-0 variant ran while measured."
    )
    peak_gpu_memory_percent: float | None = Field(
        default=None,
        ge=0,
        description="Highest CloudWatch GPUMemoryUtilization (Maximum, one-minute periods) of "
        "its variant while it was measured: 0-100 x GPUs per instance. Engines that reserve "
        "memory up front (vLLM, LMI) show their reservation, not their use.",
    )
    gpu_memory_read: bool = Field(
        default=False, description="GPUMemoryUtilization was read (with or without data)."
    )


class InstancePrice(CamelModel):
    """The hourly price the search's costs are computed from, and where it came from."""

    usd_per_hour: float = Field(ge=0, description="On-demand USD per instance-hour.")
    instance_type: Annotated[str, StringConstraints(max_length=64)] = Field(
        default="", description="The instance type priced."
    )
    region: Annotated[str, StringConstraints(max_length=32)] = Field(
        default="", description="The region priced."
    )
    source: Annotated[str, StringConstraints(max_length=64)] = Field(
        description="spec (search.usdPerInstanceHour), operator (the chart's "
        "pricing.usdPerInstanceHour) or AWS Price List (GetProducts, AmazonSageMaker Hosting)."
    )
    effective: Annotated[str, StringConstraints(max_length=64)] = Field(
        default="", description="The Price List term's effectiveDate, when it came from there."
    )


class SearchStatus(CamelModel):
    """spec.search as it stands: status is its only memory (pipeline/search.py)."""

    price: InstancePrice | None = Field(
        default=None,
        description="The instance price behind each row's costPerMillionTokens; unset where "
        "none is known (priceProblem says why).",
    )
    price_problem: Annotated[str, StringConstraints(max_length=512)] = Field(
        default="", description="Why no price is known, and how to give one."
    )
    prices: list[InstancePrice] = Field(
        default_factory=list,
        max_length=8,
        description="The looked-up prices of search.instanceTypes that give none.",
    )

    rung: int = Field(default=0, ge=0, le=5, description="Index of the rung being walked.")
    rung_name: Annotated[str, StringConstraints(max_length=32)] = Field(
        default="",
        description="The rung being walked, by name (done: past the last): what a resumed "
        "search reads, so a release that adds a rung does not shift it.",
    )
    best: list[Annotated[str, StringConstraints(max_length=32)]] = Field(
        default_factory=list, max_length=5, description="The kept stack so far."
    )
    met: bool = Field(default=False, description="The best meets the objective.")
    binding: Annotated[str, StringConstraints(max_length=32)] = Field(
        default="", description="What binds with the best."
    )
    rows: list[SearchRow] = Field(
        default_factory=list, max_length=32, description="Every candidate, in search order."
    )
    candidates: int = Field(default=0, ge=0, description="Candidates started.")
    instance_hours: float = Field(default=0.0, ge=0, description="Instance-hours spent.")
    done: Annotated[str, StringConstraints(max_length=512)] | None = Field(
        default=None, description="Why the search ended; unset while it runs."
    )
    shares: dict[str, float] = Field(
        default_factory=dict, description="Each kept technique's share of the winner's gain."
    )


class OptimizedEndpointStatus(CamelModel):
    """What the operator observed and decided; written by the control loop only."""

    phase: Phase = Field(default=Phase.PENDING, description="Pipeline phase.")
    paused: bool = Field(default=False, description="True while paused (annotation or onNoData).")
    observed_generation: int = Field(
        default=0, ge=0, description="metadata.generation the status describes."
    )
    observed_levers: dict[str, Annotated[str, StringConstraints(max_length=253)]] | None = Field(
        default=None,
        max_length=8,
        description=(
            "The optimizer.dev/ lever annotations (approve, rollback, pause, refresh) as of the "
            "last wake-up that acted on them: a change wakes the operator at once, and a new "
            "refresh value is honoured once, with a full observe of the endpoint and jobs."
        ),
    )
    endpoint_observed_at: datetime | None = Field(
        default=None,
        description=(
            "When DescribeEndpoint last ran, kept while the endpoint is described sparsely "
            "(waiting on a job, or finished): the observe cadence reads it."
        ),
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        description="Conditions, one per type.",
        # The Kubernetes convention: a map keyed by type, so server-side apply merges them.
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    baseline: VariantMeasurements | None = Field(default=None, description="Baseline measured.")
    candidate: VariantMeasurements | None = Field(default=None, description="Candidate measured.")
    checks: list[Check] = Field(default_factory=list, description="Latest verdict of each check.")
    objective_gain: float | None = Field(
        default=None,
        description="Candidate's relative gain on the objective, fraction (0.18 = 18 % better).",
    )
    ttft_p99_summary: str = Field(
        default="", description="Baseline → candidate TTFT p99 at the judged concurrency."
    )
    sagemaker: SageMakerResources = Field(
        default_factory=SageMakerResources, description="SageMaker resources."
    )
    rollout: RolloutStatus = Field(default_factory=RolloutStatus, description="Rollout progress.")
    autoscaling: AutoscalingStatus | None = Field(
        default=None,
        description="Application Auto Scaling held off during a rollout, and where it went back.",
    )
    scale_to_zero: ScaleToZero | None = Field(
        default=None,
        description="spec.inferenceComponent only: the promoted configuration's instance-hours "
        "always-on versus scaled to zero at the measured traffic, with the measured cold start.",
    )
    candidate_hash: str = Field(
        default="", description="Hash of the spec parts that define the candidate."
    )
    candidate_techniques: list[str] = Field(
        default_factory=list, description="Techniques the current candidate applies."
    )
    search: SearchStatus | None = Field(
        default=None, description="spec.search: every candidate and the winning path."
    )
    spot_check: SpotCheckStatus | None = Field(default=None, description="Human spot check.")
    eval_noise: EvalNoise | None = Field(
        default=None,
        description="The eval set's A/A noise, measured with the baseline: items answered "
        "twice by the baseline, how many scored differently, and the bound an unchanged "
        "candidate would get; the eval check's reason shows it next to the margin.",
    )
    evaluation_waiver: Annotated[str, StringConstraints(max_length=512)] = Field(
        default="",
        description="spec.evaluation.waiver of this generation, when its numerical change was "
        "let through without a quality gate; empty otherwise.",
    )
    measurement: MeasurementProgress | None = Field(
        default=None,
        description="The measurement running now: level, requests done of planned, elapsed; "
        "written at a bounded rate while it runs, removed when it ends.",
    )
    measurement_retry: MeasurementRetry | None = Field(
        default=None,
        description="A benchmark that was no measurement, waiting to be tried again (status "
        "says why and when); cleared by the next valid one.",
    )
    history: list[HistoryEntry] = Field(
        default_factory=list,
        max_length=MAX_HISTORY,
        description=f"Latest decisions, oldest first, at most {MAX_HISTORY}.",
    )
    message: Annotated[str, StringConstraints(max_length=1024)] = Field(
        default="", description="One line: what is happening now."
    )
    last_error: Annotated[str, StringConstraints(max_length=4096)] = Field(
        default="", description="The last error seen, with the resource it came from."
    )
    retry: Retry | None = Field(
        default=None,
        description="Set while a retryable error is waited out (throttling, a 5xx, a connection "
        "reset, a missing or malformed ConfigMap): cleared by the next wake-up that gets through.",
    )

    @field_validator("history", mode="before")
    @classmethod
    def _keep_latest(cls, value: Any) -> Any:
        if isinstance(value, list) and len(value) > MAX_HISTORY:
            return value[-MAX_HISTORY:]
        return value

    # The control loop assigns fields directly (no validation on assignment); what it
    # writes must still fit the CRD's bounds, or the apiserver refuses the whole patch.
    @field_serializer("history", mode="wrap")
    def _fit_history(
        self, value: list[HistoryEntry], handler: SerializerFunctionWrapHandler
    ) -> Any:
        return handler(value[-MAX_HISTORY:])

    @field_serializer("message")
    def _fit_message(self, value: str) -> str:
        return value[:1024]

    @field_serializer("last_error")
    def _fit_last_error(self, value: str) -> str:
        return value[:4096]

    @model_serializer(mode="wrap")
    def _finite_numbers(self, handler: SerializerFunctionWrapHandler) -> Any:
        # JSON has no NaN or Infinity and the apiserver refuses a patch carrying them:
        # a value that could not be measured is written as null.
        return _finite(handler(self))

    def record(self, time: datetime, event: str, message: str = "") -> None:
        """Append a history entry at the current phase, keeping the latest MAX_HISTORY."""
        entry = HistoryEntry(time=time, phase=self.phase, event=event, message=message[:1024])
        self.history = [*self.history, entry][-MAX_HISTORY:]

    def condition(self, type_: ConditionType) -> Condition | None:
        """The condition of that type, if set."""
        return next((c for c in self.conditions if c.type is type_), None)

    def set_condition(
        self,
        type_: ConditionType,
        status: ConditionStatus,
        reason: str,
        message: str,
        now: datetime,
        generation: int | None = None,
    ) -> None:
        """Set a condition; lastTransitionTime moves only when its status changes."""
        previous = self.condition(type_)
        changed = previous is None or previous.status is not status
        updated = Condition(
            type=type_,
            status=status,
            reason=reason,
            message=message,
            last_transition_time=now
            if changed or previous is None
            else previous.last_transition_time,
            observed_generation=generation,
        )
        self.conditions = [c for c in self.conditions if c.type is not type_] + [updated]


class OptimizedEndpoint(CamelModel):
    """The whole resource as the Kubernetes API returns it."""

    api_version: Literal["optimizer.dev/v1alpha1"] = Field(
        default="optimizer.dev/v1alpha1", description="optimizer.dev/v1alpha1"
    )
    kind: Literal["OptimizedEndpoint"] = Field(default="OptimizedEndpoint")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Object metadata.")
    spec: OptimizedEndpointSpec
    status: OptimizedEndpointStatus | None = None


def parse_status(data: Any) -> OptimizedEndpointStatus:
    """Read a status dict written by the operator (an empty or missing one is the default)."""
    if not data:
        return OptimizedEndpointStatus()
    try:
        return OptimizedEndpointStatus.model_validate(data)
    except ValidationError as exc:
        raise SpecError(
            problems_from(exc, prefix="status", model=OptimizedEndpointStatus)
        ) from None
