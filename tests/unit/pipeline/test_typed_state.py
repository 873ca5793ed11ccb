"""Typed rollout state: what release 0.1 kept in a free-form map reads into typed fields,
and every rollback names its reason in status.rollout.rollbackReason."""

from __future__ import annotations

import pytest

from endpoint_optimizer.api import (
    BaselineDelete,
    LiveDecision,
    Phase,
    RollbackReason,
    ShadowStage,
    parse_status,
)
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.pipeline.model import ActionKind
from endpoint_optimizer.pipeline.reasons import Reason, rollback_label
from tests.unit.pipeline.test_decide import (
    NAMES,
    NOW,
    compared,
    deployed,
    run,
)

# A status as release 0.1 wrote it: the loop's memory in rollout.liveJudgeState.
LEGACY = {
    "phase": "Analyzing",
    "observedGeneration": 1,
    "rollout": {
        "stepIndex": 1,
        "canaryWeight": 50,
        "failedChecks": 0,
        "liveJudgeState": {
            "comparedStep": 1,
            "live": {"intervals": 3, "failures": 1, "decision": "Continue"},
            "liveReadUntil": 1764417600.0,
            "livePeriodSeconds": 60,
            "leversHandled": {"optimizer.dev/approve": "1"},
            "restartGeneration": 2,
            "promotionRequested": "cfg-promoted",
            "shadowStage": "deploying",
            "baselineDelete": {
                "at": "2026-11-29T12:00:00+00:00",
                "attempt": 2,
                "configs": ["cfg-a"],
                "models": ["model-a"],
                "reported": "DeleteModel model-a: AccessDenied",
                "failed": True,
            },
        },
    },
}


def test_a_status_written_by_release_0_1_reads_into_the_typed_fields() -> None:
    rollout = parse_status(LEGACY).rollout
    assert rollout.compared_step == 1
    assert rollout.live_judge is not None
    assert (rollout.live_judge.intervals, rollout.live_judge.failures) == (3, 1)
    assert rollout.live_judge.decision is LiveDecision.CONTINUE
    assert rollout.live_read_until == 1764417600.0
    assert rollout.live_period_seconds == 60
    assert rollout.levers_handled == {"optimizer.dev/approve": "1"}
    assert rollout.restart_generation == 2
    assert rollout.promotion_requested == "cfg-promoted"
    assert rollout.shadow_stage is ShadowStage.DEPLOYING
    assert rollout.baseline_delete == BaselineDelete(
        at=NOW,
        attempt=2,
        configs=["cfg-a"],
        models=["model-a"],
        reported="DeleteModel model-a: AccessDenied",
        failed=True,
    )


def test_the_legacy_map_is_not_written_back() -> None:
    dumped = parse_status(LEGACY).dump()
    rollout = dumped["rollout"]
    assert isinstance(rollout, dict)
    assert "liveJudgeState" not in rollout
    assert rollout["comparedStep"] == 1
    # Read again, the typed fields are the only source: nothing is lost on the way.
    assert parse_status(dumped).rollout == parse_status(LEGACY).rollout


def test_a_legacy_note_without_its_time_still_reads() -> None:
    legacy = {"rollout": {"liveJudgeState": {"baselineDelete": {"attempt": 1}}}}
    note = parse_status(legacy).rollout.baseline_delete
    assert note is not None and note.at is None


def test_the_decision_goes_on_from_a_legacy_status_without_comparing_again() -> None:
    status, rollout = deployed()
    legacy = status.dump()
    legacy_rollout = legacy["rollout"]
    assert isinstance(legacy_rollout, dict)
    legacy_rollout["liveJudgeState"] = {"comparedStep": 0}
    legacy_rollout.pop("comparedStep", None)
    legacy["checks"] = [
        Check(name="e2e_p50@c8", kind=CheckKind.BENCHMARK, verdict=Verdict.PASS).dump()
    ]
    after, actions, _ = run(legacy, rollout)
    assert ActionKind.COMPARE not in actions
    assert after.rollout.compared_step == 0


@pytest.mark.parametrize(
    ("kind", "label"),
    [
        (CheckKind.BENCHMARK, RollbackReason.BENCHMARK),
        (CheckKind.EVAL, RollbackReason.EVAL),
        (CheckKind.REFUSAL, RollbackReason.REFUSAL),
        (CheckKind.ACCEPTANCE, RollbackReason.ACCEPTANCE),
    ],
)
def test_a_failed_check_rollback_is_labelled_by_the_kind_of_check(
    kind: CheckKind, label: RollbackReason
) -> None:
    status, rollout = deployed()
    compared(status, Verdict.PASS)
    status.checks = [Check(name="x", kind=kind, verdict=Verdict.FAIL, reason="r")]
    after, _, events = run(status, rollout)
    assert after.phase.value == "RollingBack"
    assert "ChecksFailed" in events
    assert after.rollout.rollback_reason is label


def test_manual_and_no_improvement_and_new_generation_rollbacks_name_their_reason() -> None:
    status, rollout = deployed()
    manual, _, _ = run(status, rollout, annotations={"optimizer.dev/rollback": "now"})
    assert manual.rollout.rollback_reason is RollbackReason.MANUAL
    compared(status, Verdict.NO_IMPROVEMENT)
    no_gain, _, _ = run(status, rollout)
    assert no_gain.rollout.rollback_reason is RollbackReason.NO_IMPROVEMENT
    status, rollout = deployed()
    restarted, _, _ = run(status, rollout, generation=2)
    assert restarted.phase.value == "RollingBack"
    assert restarted.rollout.rollback_reason is RollbackReason.NEW_GENERATION


def test_a_promotion_sagemaker_rolled_back_is_an_update_failure() -> None:
    status, rollout = deployed()
    status.phase = Phase.PROMOTING
    status.rollout.promotion_requested = NAMES.promoted_config
    # The update finished and the endpoint still serves the rollout config.
    after, _, events = run(status, rollout)
    assert "PromotionRolledBack" in events
    assert after.rollout.rollback_reason is RollbackReason.UPDATE_FAILED


def test_every_rollback_reason_has_a_label_and_others_have_none() -> None:
    rollbacks = {
        Reason.NEW_GENERATION,
        Reason.MANUAL_ROLLBACK,
        Reason.CANDIDATE_GONE,
        Reason.LIVE_CHECK_FAILED,
        Reason.CHECKS_FAILED,
        Reason.NO_IMPROVEMENT,
        Reason.CHECKS_INCONCLUSIVE,
        Reason.UPDATE_FAILED,
        Reason.PROMOTION_ROLLED_BACK,
        Reason.BAKE_FAILED,
        Reason.SPECULATION_SWITCH_FAILED,
        Reason.SPECULATION_CUTOFF_FAILED,
        Reason.ACCEPTANCE_DRIFT_AFTER_BAKE,
    }
    for reason in Reason:
        assert (reason.rollback is not None) == (reason in rollbacks), reason
    assert rollback_label(Reason.CHECKS_FAILED, []) is RollbackReason.BENCHMARK
    assert Reason.BASELINE_DELETE_FAILED.degrades and Reason.ERROR_AFTER_OUTCOME.degrades
    assert not Reason.BASELINE_DELETED.degrades and Reason.BASELINE_DELETED.after_outcome
