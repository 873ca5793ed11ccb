"""The safety invariant, decision by decision: traffic is on the baseline unless a
candidate is actively progressing; errors route back first; people are never reverted."""

from __future__ import annotations

from datetime import timedelta

from endpoint_optimizer.api import (
    ConditionType,
    LiveDecision,
    LiveState,
    Phase,
    RollbackReason,
    parse_status,
)
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.pipeline.model import ActionKind, JobView
from endpoint_optimizer.pipeline.record import record_error
from tests.unit.pipeline.test_decide import (
    NAMES,
    NOW,
    baselined,
    compared,
    deployed,
    run,
    serving,
    spec,
)

BASELINE_ONLY = serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))
DRAINED = serving(
    NAMES.rollout_config, (NAMES.baseline_variant, 100.0), (NAMES.candidate_variant, 0.0)
)
DONE_JOB = {NAMES.job: JobView(NAMES.job, "COMPLETED", output_s3_uri="s3://models/out/x/")}


def test_a_spec_that_stops_parsing_at_a_canary_returns_traffic_then_fails() -> None:
    status, rollout = deployed()
    broken = spec(instanceCount="two")  # the CRD would refuse it; an old CRD may not
    status, actions, _ = run(status, rollout, spec_data=broken, generation=2)
    assert status.phase is Phase.ROLLING_BACK
    assert actions == [ActionKind.UPDATE_WEIGHTS]  # users leave the candidate first
    assert status.rollout.rollback_reason is RollbackReason.ERROR
    status, actions, _ = run(status, DRAINED, spec_data=broken, generation=2)
    assert actions == [ActionKind.UPDATE_ENDPOINT]
    status, actions, _ = run(status, BASELINE_ONLY, spec_data=broken, generation=2)
    assert status.phase is Phase.FAILED and actions == []
    assert "instanceCount" in status.last_error
    events = [h.event for h in status.history]
    assert events.index("InvalidSpec") < len(events) - 1  # began the way back, then ended it
    assert status.history[-1].phase is Phase.FAILED
    terminal = status.condition(ConditionType.TERMINAL)
    assert terminal is not None and terminal.status.value == "True"
    # Failed for good: later wake-ups with the same bad spec do nothing more.
    again, actions, _ = run(status, BASELINE_ONLY, spec_data=broken, generation=2)
    assert again.phase is Phase.FAILED and actions == []


def test_a_permanent_error_on_the_promotion_returns_traffic_before_failing() -> None:
    status, _ = deployed()
    status.phase = Phase.PROMOTING
    fifty = serving(
        NAMES.rollout_config, (NAMES.baseline_variant, 50.0), (NAMES.candidate_variant, 50.0)
    )
    going_back = parse_status(
        record_error(
            status.dump(),
            "UpdateEndpoint endpoint chat: ResourceLimitExceeded: quota",
            True,
            NOW,
            "ResourceLimitExceeded",
        )
    )
    assert going_back.phase is Phase.ROLLING_BACK
    status, actions, _ = run(going_back, fifty)
    assert actions == [ActionKind.UPDATE_WEIGHTS]
    status, actions, _ = run(status, DRAINED)
    status, actions, _ = run(status, BASELINE_ONLY)
    assert status.phase is Phase.FAILED
    assert status.history[-1].event == "ResourceLimitExceeded"


def test_a_new_generation_never_measures_a_rollout_config_as_its_baseline() -> None:
    status, _ = deployed()
    # Failed while the rollout config still serves (e.g. written by an older release).
    status.phase = Phase.FAILED
    fifty = serving(
        NAMES.rollout_config, (NAMES.baseline_variant, 50.0), (NAMES.candidate_variant, 50.0)
    )
    status, actions, _ = run(status, fifty, generation=2)
    assert status.phase is Phase.ROLLING_BACK and actions == [ActionKind.UPDATE_WEIGHTS]
    assert status.rollout.rollback_reason is RollbackReason.NEW_GENERATION
    status, _, _ = run(status, DRAINED, generation=2)
    status, actions, _ = run(status, BASELINE_ONLY, generation=2)
    assert status.phase is Phase.BASELINING
    assert status.sagemaker.baseline_endpoint_config == NAMES.baseline_config


def test_a_live_failure_rolls_back_even_while_paused_by_the_annotation() -> None:
    status, rollout = deployed()
    compared(status, Verdict.PASS)
    status.rollout.live_judge = LiveState(decision=LiveDecision.ROLLBACK, intervals=2)
    status.checks.append(
        Check(name="live_latency", kind=CheckKind.LIVE, verdict=Verdict.FAIL, reason="slower")
    )
    status, actions, events = run(status, rollout, annotations={"optimizer.dev/pause": "true"})
    assert status.phase is Phase.ROLLING_BACK
    assert actions == [ActionKind.UPDATE_WEIGHTS]
    assert "LiveCheckFailed" in events


def test_paused_by_the_annotation_the_live_judge_keeps_reading_intervals() -> None:
    status, rollout = deployed()
    compared(status, Verdict.PASS)
    status.rollout.live_read_until = NOW.timestamp()
    later = NOW + timedelta(minutes=5)
    status, actions, _ = run(
        status, rollout, annotations={"optimizer.dev/pause": "true"}, now=later
    )
    assert status.phase is Phase.ANALYZING and status.paused
    assert actions == [ActionKind.JUDGE_LIVE]


def test_held_on_inconclusive_checks_the_live_judge_keeps_reading_intervals() -> None:
    data = spec(rollout={"strategy": "canary", "steps": [{"weight": 10, "pause": "1m"}]})
    status, rollout = deployed()
    compared(status, Verdict.INCONCLUSIVE)
    status.rollout.live_read_until = NOW.timestamp()
    status, actions, _ = run(status, rollout, spec_data=data, now=NOW + timedelta(minutes=5))
    assert status.paused and status.phase is Phase.ANALYZING
    assert actions == [ActionKind.JUDGE_LIVE]
    assert status.message.startswith("paused: inconclusive checks")


def test_a_canary_drained_by_a_person_is_paused_not_reverted() -> None:
    status, _ = deployed()
    compared(status, Verdict.PASS)
    status, actions, events = run(status, DRAINED)
    assert actions == []  # the person's weights stay
    assert "OutsideChange" in events and status.paused
    assert status.rollout.outside_change is not None
    assert status.rollout.outside_change.kind == "weights"
    # Nothing changes while nobody pulls a lever.
    status, actions, _ = run(status, DRAINED, now=NOW + timedelta(minutes=10))
    assert actions == [] and status.paused
    # Approved: the rollout resumes from the weights found, its own weight applied again.
    status, actions, _ = run(status, DRAINED, annotations={"optimizer.dev/approve": "1"})
    assert not status.paused and status.rollout.outside_change is None
    assert actions == [ActionKind.UPDATE_WEIGHTS]


def test_a_person_s_rollback_lever_after_an_outside_change_rolls_back() -> None:
    status, _ = deployed()
    compared(status, Verdict.PASS)
    heavier = serving(
        NAMES.rollout_config, (NAMES.baseline_variant, 30.0), (NAMES.candidate_variant, 70.0)
    )
    status, _, _ = run(status, heavier)
    status, actions, _ = run(status, heavier, annotations={"optimizer.dev/rollback": "1"})
    assert status.phase is Phase.ROLLING_BACK
    assert status.rollout.rollback_reason is RollbackReason.MANUAL
    assert actions == [ActionKind.UPDATE_WEIGHTS]


def test_a_lost_status_write_after_a_step_shift_is_not_an_outside_change() -> None:
    status, _ = deployed()
    compared(status, Verdict.PASS)
    # The weights of step 2 serve, but status still says step 1 (its write was lost).
    fifty = serving(
        NAMES.rollout_config, (NAMES.baseline_variant, 50.0), (NAMES.candidate_variant, 50.0)
    )
    status, _, events = run(status, fifty)
    assert "OutsideChange" not in events and not status.paused


def test_a_hot_fix_config_during_the_optimization_job_is_kept_and_can_be_adopted() -> None:
    status = baselined()
    status, _, _ = run(status, BASELINE_ONLY, {NAMES.job: JobView(NAMES.job, "INPROGRESS")})
    assert status.phase is Phase.OPTIMIZING
    hot_fix = serving("hot-fix-config", ("hotfix", 1.0))
    running = {NAMES.job: JobView(NAMES.job, "INPROGRESS")}
    status, actions, events = run(status, hot_fix, running)
    assert actions == [] and "OutsideChange" in events and status.paused
    status, actions, _ = run(status, hot_fix, DONE_JOB, annotations={"optimizer.dev/approve": "1"})
    assert status.sagemaker.baseline_endpoint_config == "hot-fix-config"
    assert status.phase is Phase.BASELINING
    assert status.baseline is not None and status.baseline.variant_name == "hotfix"
    # The new baseline is measured before anything is deployed next to it.
    status, actions, _ = run(status, hot_fix, DONE_JOB)
    assert actions == [ActionKind.MEASURE_BASELINE]


def test_a_config_replaced_during_the_canary_is_kept_not_reverted() -> None:
    status, _ = deployed()
    compared(status, Verdict.PASS)
    hot_fix = serving("hot-fix-config", ("hotfix", 1.0))
    status, actions, events = run(status, hot_fix)
    assert actions == [] and "OutsideChange" in events and status.paused
    status, actions, _ = run(status, hot_fix, annotations={"optimizer.dev/approve": "1"})
    assert status.phase is Phase.ROLLED_BACK and actions == []
    assert status.history[-1].event == "OutsideChangeAdopted"


def test_a_new_generation_stops_the_last_generation_s_job() -> None:
    status = baselined()
    status, actions, _ = run(status, BASELINE_ONLY)
    assert ActionKind.CREATE_OPTIMIZATION_JOB in actions
    running = {NAMES.job: JobView(NAMES.job, "INPROGRESS")}
    assert status.phase is Phase.OPTIMIZING and NAMES.job in status.sagemaker.optimization_jobs
    status, actions, _ = run(status, BASELINE_ONLY, running, generation=2)
    assert ActionKind.STOP_OPTIMIZATION_JOB in actions
    assert NAMES.job in status.sagemaker.optimization_jobs  # still named, for the finalizer


def test_a_lost_status_write_after_the_candidate_update_is_not_an_outside_change() -> None:
    status = baselined()
    status, actions, _ = run(status, BASELINE_ONLY, DONE_JOB)
    assert status.phase is Phase.DEPLOYING and ActionKind.UPDATE_ENDPOINT in actions
    # The process died before writing Deploying: the next wake-up decides from Optimizing,
    # while the endpoint already serves the operator's own rollout config.
    lost = baselined()
    lost, _, _ = run(lost, BASELINE_ONLY, {NAMES.job: JobView(NAMES.job, "INPROGRESS")})
    assert lost.phase is Phase.OPTIMIZING
    rollout = serving(
        NAMES.rollout_config, (NAMES.baseline_variant, 90.0), (NAMES.candidate_variant, 10.0)
    )
    after, actions, events = run(lost, rollout, DONE_JOB)
    assert "OutsideChange" not in events and not after.paused
    assert after.phase is Phase.ANALYZING


def test_under_on_no_data_pass_an_undecided_must_pass_slice_still_holds_for_a_person() -> None:
    """Issue 20: an NVFP4 KV cache lost 25 points on long context, undecided at 48 items, and
    onNoData: pass promoted it. A must-pass class cannot be waved through by default."""
    data = spec(
        rollout={
            "strategy": "canary",
            "steps": [{"weight": 10, "pause": "1m"}],
            "analysis": {"onNoData": "pass"},
        }
    )
    status, rollout = deployed()
    later = NOW + timedelta(minutes=5)
    undecided_latency = Check(
        name="ttft_p99@c8", kind=CheckKind.BENCHMARK, verdict=Verdict.INCONCLUSIVE, reason="r"
    )
    undecided_slice = Check(
        name="eval@long-context",
        kind=CheckKind.EVAL,
        verdict=Verdict.INCONCLUSIVE,
        reason="class long-context undecided (must pass: holds the rollout)",
    )
    shown_slice = Check(
        name="eval@capital", kind=CheckKind.EVAL_SLICE, verdict=Verdict.INCONCLUSIVE, reason="r"
    )
    # An undecided latency check and a non-must-pass slice: onNoData: pass lets them through.
    status.checks = [undecided_latency, shown_slice]
    status.rollout.compared_step = 0
    passed, actions, _ = run(status.model_copy(deep=True), rollout, spec_data=data, now=later)
    # (one step: its end is the promotion)
    assert not passed.paused and passed.phase is Phase.PROMOTING, passed.message
    # With the must-pass slice undecided it holds, naming only that slice.
    status.checks = [undecided_latency, undecided_slice, shown_slice]
    held, actions, _ = run(status.model_copy(deep=True), rollout, spec_data=data, now=later)
    assert held.paused and held.phase is Phase.ANALYZING
    assert actions == []  # held: nothing promoted, no weight moved
    assert held.message.startswith(
        "paused: must-pass eval slices undecided (eval@long-context); onNoData: pass does "
        "not wave a must-pass class through"
    ), held.message
    # A person's approve lets it go on, once.
    approved, actions, _ = run(
        held, rollout, spec_data=data, now=later, annotations={"optimizer.dev/approve": "1"}
    )
    assert not approved.paused and approved.phase is Phase.PROMOTING, approved.message
    # Under onNoData: fail the same slice rolls back.
    failing = spec(
        rollout={
            "strategy": "canary",
            "steps": [{"weight": 10, "pause": "1m"}],
            "analysis": {"onNoData": "fail"},
        }
    )
    gone, _, _ = run(status.model_copy(deep=True), rollout, spec_data=failing, now=later)
    assert gone.phase is Phase.ROLLING_BACK, gone.message
