"""Why the pipeline did what it did: one member per history event and Event reason.

A reason is written to status.history, to the conditions and to Kubernetes Events as
its value. It knows what follows from it: the rollback label it gives (`rollback`),
whether the resource stays Degraded after an outcome while it is the latest word
(`degrades`), and whether the Progressing condition names it after the outcome
(`after_outcome`). Consumers read these properties, never the strings.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from endpoint_optimizer.analysis.live_acceptance import CHECK_NAME as LIVE_ACCEPTANCE_CHECK
from endpoint_optimizer.api import Check, CheckKind, RollbackReason, Verdict


class Reason(StrEnum):
    # ------------------------------------------------------------- progress
    GENERATION_STARTED = "GenerationStarted"
    BASELINE_STARTED = "BaselineStarted"
    EVALUATION_WAIVED = "EvaluationWaived"
    BASELINE_BENCHMARKED = "BaselineBenchmarked"
    BASELINE_MEASURED = "BaselineMeasured"
    NOTHING_TO_OPTIMIZE = "NothingToOptimize"
    CANDIDATE_BUILT = "CandidateBuilt"
    # spec.search: the search began, a candidate was refused before AWS, the search ended.
    SEARCH_STARTED = "SearchStarted"
    SEARCH_CANDIDATE_REFUSED = "SearchCandidateRefused"
    SEARCH_CANDIDATE_FAILED = "SearchCandidateFailed"
    SEARCH_BUILDING_AHEAD = "SearchBuildingAhead"
    SEARCH_DONE = "SearchDone"
    CANDIDATE_DEPLOYED = "CandidateDeployed"
    CANDIDATE_COMPARED = "CandidateCompared"
    STEP_ADVANCED = "StepAdvanced"
    PINNED_CHECKS_PASSED = "PinnedChecksPassed"
    SHADOW_STARTED = "ShadowStarted"
    SHADOW_OBJECTIVE_JUDGED = "ShadowObjectiveJudged"
    CHECKS_PASSED = "ChecksPassed"
    AWAITING_APPROVAL = "AwaitingApproval"
    APPROVED = "Approved"
    PROMOTION_RESUMED = "PromotionResumed"
    CANDIDATE_PROMOTED = "CandidatePromoted"
    SCALE_TO_ZERO_COMPARED = "ScaleToZeroCompared"
    # Application Auto Scaling held off for an update, and put back (pipeline/autoscaling.py).
    AUTOSCALING_SAVED = "AutoscalingSaved"
    AUTOSCALING_RESTORED = "AutoscalingRestored"
    ROLLED_BACK = "RolledBack"
    SYNTHETIC_MEASUREMENT = "SyntheticMeasurement"
    LIVE_JUDGE_CONTINUE = "LiveJudgeContinue"
    LIVE_JUDGE_HOLD = "LiveJudgeHold"
    LIVE_JUDGE_ROLLBACK = "LiveJudgeRollback"
    CHECK_FAILED = "CheckFailed"
    # onAcceptanceDrift: alert or disableSpeculation; the Event's reason, and the
    # condition's while it holds.
    ACCEPTANCE_DRIFT = "AcceptanceDrift"
    ACCEPTANCE_AT_FLOOR = "AcceptanceAtFloor"
    # onAcceptanceDrift: disableSpeculation: the switch asked for, then the twin serving.
    SPECULATION_DISABLING = "SpeculationDisabling"
    SPECULATION_DISABLED = "SpeculationDisabled"
    # speculativeDecoding.concurrencyCutoff: apply: the candidate re-made with the cut-off.
    SPECULATION_CUTOFF_APPLYING = "SpeculationCutoffApplying"
    SPECULATION_CUTOFF_APPLIED = "SpeculationCutoffApplied"
    MEASUREMENT_VOID = "MeasurementVoid"
    # Every failed request of a void measurement was a body the container refused (400):
    # a setting (requestFormat), not a moment, so the pipeline ends naming the field.
    REQUEST_REFUSED = "RequestRefused"
    OUTSIDE_CHANGE = "OutsideChange"
    OUTSIDE_CHANGE_ADOPTED = "OutsideChangeAdopted"
    # ------------------------------------------------------------- after the outcome
    BAKE_SKIPPED = "BakeSkipped"
    BAKE_PASSED = "BakePassed"
    BAKE_STOPPED = "BakeStopped"
    BASELINE_KEPT = "BaselineKept"
    BASELINE_DELETED = "BaselineDeleted"
    BASELINE_DELETE_FAILED = "BaselineDeleteFailed"
    BASELINE_RELEASED = "BaselineReleased"
    ROLLBACK_REFUSED = "RollbackRefused"
    ERROR_AFTER_OUTCOME = "ErrorAfterOutcome"
    # ------------------------------------------------------------- rollbacks
    NEW_GENERATION = "NewGeneration"
    MANUAL_ROLLBACK = "ManualRollback"
    CANDIDATE_GONE = "CandidateGone"
    LIVE_CHECK_FAILED = "LiveCheckFailed"
    CHECKS_FAILED = "ChecksFailed"
    NO_IMPROVEMENT = "NoImprovement"
    CHECKS_INCONCLUSIVE = "ChecksInconclusive"
    UPDATE_FAILED = "UpdateFailed"
    PROMOTION_ROLLED_BACK = "PromotionRolledBack"
    BAKE_FAILED = "BakeFailed"
    # After a clean bake, while the baseline is retained: live acceptance confidently below
    # the floor with onAcceptanceDrift: rollback (phases/watch.py).
    ACCEPTANCE_DRIFT_AFTER_BAKE = "AcceptanceDriftAfterBake"
    # The update to the speculation-free twin failed; SageMaker kept the drifting candidate.
    SPECULATION_SWITCH_FAILED = "SpeculationSwitchFailed"
    SPECULATION_CUTOFF_FAILED = "SpeculationCutoffFailed"
    # ------------------------------------------------------------- failures (Terminal)
    INVALID_SPEC = "InvalidSpec"
    UNSUPPORTED_COMBINATION = "UnsupportedCombination"
    UNSUPPORTED_SPEC = "UnsupportedSpec"
    ENDPOINT_FAILED = "EndpointFailed"
    ENDPOINT_UPDATE_ROLLBACK_FAILED = "EndpointUpdateRollbackFailed"
    ENDPOINT_CONFLICT = "EndpointConflict"
    ENDPOINT_EXISTS = "EndpointExists"
    ADOPTION_NOT_PROVEN = "AdoptionNotProven"
    ENDPOINT_DISAPPEARED = "EndpointDisappeared"
    OPTIMIZATION_JOB_FAILED = "OptimizationJobFailed"
    TRAINING_JOB_FAILED = "TrainingJobFailed"

    @property
    def rollback(self) -> RollbackReason | None:
        """The rollback label when this reason begins a rollback; None otherwise."""
        return _ROLLBACK.get(self)

    @property
    def degrades(self) -> bool:
        """After an outcome, a step that failed and is retried: the resource is Degraded."""
        return self in (Reason.BASELINE_DELETE_FAILED, Reason.ERROR_AFTER_OUTCOME)

    @property
    def after_outcome(self) -> bool:
        """Said after Succeeded/RolledBack: the Progressing condition's reason names it."""
        return self in _AFTER_OUTCOME


_ROLLBACK: dict[Reason, RollbackReason] = {
    Reason.NEW_GENERATION: RollbackReason.NEW_GENERATION,
    Reason.MANUAL_ROLLBACK: RollbackReason.MANUAL,
    Reason.CANDIDATE_GONE: RollbackReason.OTHER,
    Reason.LIVE_CHECK_FAILED: RollbackReason.LIVE,
    # Refined by the kind of the first failed check (rollback_label).
    Reason.CHECKS_FAILED: RollbackReason.BENCHMARK,
    Reason.NO_IMPROVEMENT: RollbackReason.NO_IMPROVEMENT,
    Reason.CHECKS_INCONCLUSIVE: RollbackReason.INCONCLUSIVE,
    Reason.UPDATE_FAILED: RollbackReason.UPDATE_FAILED,
    Reason.PROMOTION_ROLLED_BACK: RollbackReason.UPDATE_FAILED,
    Reason.BAKE_FAILED: RollbackReason.BAKE,
    Reason.ACCEPTANCE_DRIFT_AFTER_BAKE: RollbackReason.ACCEPTANCE,
    Reason.SPECULATION_SWITCH_FAILED: RollbackReason.UPDATE_FAILED,
    Reason.SPECULATION_CUTOFF_FAILED: RollbackReason.UPDATE_FAILED,
}

_AFTER_OUTCOME = frozenset(
    {
        Reason.ROLLBACK_REFUSED,
        Reason.BAKE_SKIPPED,
        Reason.BAKE_PASSED,
        Reason.BAKE_STOPPED,
        Reason.SPECULATION_DISABLING,
        Reason.SPECULATION_DISABLED,
        Reason.BASELINE_DELETED,
        Reason.BASELINE_DELETE_FAILED,
        Reason.ERROR_AFTER_OUTCOME,
    }
)

_CHECK_KIND_ROLLBACK: dict[CheckKind, RollbackReason] = {
    CheckKind.BENCHMARK: RollbackReason.BENCHMARK,
    CheckKind.OBJECTIVE: RollbackReason.NO_IMPROVEMENT,
    CheckKind.LIVE: RollbackReason.LIVE,
    CheckKind.ACCEPTANCE: RollbackReason.ACCEPTANCE,
    CheckKind.EVAL: RollbackReason.EVAL,
    CheckKind.EVAL_SLICE: RollbackReason.EVAL,
    CheckKind.REFUSAL: RollbackReason.REFUSAL,
    CheckKind.SPOT_CHECK: RollbackReason.MANUAL,
    CheckKind.ERRORS: RollbackReason.ERRORS,
}


def rollback_label(reason: Reason, checks: Iterable[Check] = ()) -> RollbackReason:
    """The rollback label of a rollback that `reason` begins; failed checks refine
    ChecksFailed by the kind of the first one that failed, and LiveCheckFailed to
    `acceptance` when live acceptance alone failed."""
    if reason is Reason.CHECKS_FAILED:
        failed = next((c for c in checks if c.gating and c.verdict is Verdict.FAIL), None)
        if failed is not None:
            return _CHECK_KIND_ROLLBACK[failed.kind]
    if reason is Reason.LIVE_CHECK_FAILED:
        live = {
            c.name
            for c in checks
            if c.kind is CheckKind.LIVE and c.gating and c.verdict is Verdict.FAIL
        }
        if live == {LIVE_ACCEPTANCE_CHECK}:
            # Latency and errors held: the drafts stopped paying, the counter says so.
            return RollbackReason.ACCEPTANCE
    return reason.rollback or RollbackReason.OTHER


def of(event: str) -> Reason | None:
    """The reason a history event or condition reason names, if it is one of ours."""
    try:
        return Reason(event)
    except ValueError:
        return None
