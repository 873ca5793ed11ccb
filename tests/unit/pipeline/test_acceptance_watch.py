"""After a clean bake, while the baseline is retained: the acceptance watch
(phases/watch.py) applies onAcceptanceDrift to live acceptance only (decide() and the
live fold, with observations)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from endpoint_optimizer.analysis.live import LiveObservation, VariantInterval
from endpoint_optimizer.analysis.live_acceptance import CHECK_NAME
from endpoint_optimizer.analysis.speclog import CounterForm, SpecLine
from endpoint_optimizer.api import (
    AcceptanceWatchOutcome,
    BakeOutcome,
    ConditionStatus,
    ConditionType,
    OptimizedEndpointStatus,
    RollbackReason,
    SpeculationStage,
    parse_spec,
    parse_status,
)
from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.metrics.exporter import OperatorMetrics
from endpoint_optimizer.pipeline.model import ActionKind, Measurement
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.record import record
from endpoint_optimizer.report import render_report
from tests.unit.metrics.scrape import scrape, value, values
from tests.unit.pipeline.test_bake import interval
from tests.unit.pipeline.test_decide import NAMES
from tests.unit.pipeline.test_disable_speculation import (
    TWIN_PROMOTED,
    baking,
    drift_spec,
    kinds,
    serves_the_twin_alone,
    twin_made,
    wake,
)
from tests.unit.pipeline.test_retention import BASELINE, PROMOTED, PROMOTED_AT

BAKE_END = PROMOTED_AT + timedelta(minutes=30)  # half of baselineRetention 1h
RETENTION_END = PROMOTED_AT + timedelta(hours=1)


def watch_spec(policy: str) -> dict[str, Any]:
    return drift_spec(onAcceptanceDrift=policy, baselineRetention="1h")


def acceptance(ends: datetime, accepted: int) -> VariantInterval:
    """The promoted variant's interval: 4 log lines, `accepted` of 100 drafted tokens each."""
    stamp = int(ends.timestamp() * 1000) - 500
    lines = [
        SpecLine(f"v/i-{i}", stamp - 100 * i, accepted, 100, CounterForm.INTERVAL) for i in range(4)
    ]
    return interval().model_copy(update={"spec_lines": lines})


def fold(
    status: OptimizedEndpointStatus,
    data: dict[str, Any],
    ends: datetime,
    candidate: VariantInterval,
) -> OptimizedEndpointStatus:
    """What the edge does with a JudgeLive action's answer: the baseline has no side."""
    observation = LiveObservation(
        interval_end=ends, baseline=VariantInterval(invocations=0), candidate=candidate
    )
    measured = Measurement(ActionKind.JUDGE_LIVE, 0, live=(observation,))
    return parse_status(record(status.dump(), measured, parse_spec(data), ends))


def baked(data: dict[str, Any]) -> OptimizedEndpointStatus:
    """A clean bake of the speculative candidate, ended; the acceptance watch begun."""
    status = baking(data)
    status = fold(status, data, PROMOTED_AT + timedelta(minutes=2), acceptance(PROMOTED_AT, 90))
    bake = status.rollout.bake
    assert bake is not None and bake.intervals == 1
    status, actions, events = wake(status, PROMOTED, data, BAKE_END)
    assert "BakePassed" in events and status.phase.value == "Succeeded"
    bake = status.rollout.bake
    assert bake is not None and bake.outcome is BakeOutcome.PASSED
    watch = status.rollout.acceptance_watch
    assert watch is not None and watch.active and watch.block == bake.block
    # The bake's latency judge stopped; the watch asks for acceptance only (no probes).
    judge = [a for a in actions if a.kind is ActionKind.JUDGE_LIVE]
    assert [a.request["probes"] for a in judge] == [False]
    assert judge[0].baseline_variant == "" and judge[0].candidate_variant == (
        NAMES.candidate_variant
    )
    return status


def drifted(
    status: OptimizedEndpointStatus, data: dict[str, Any], times: int = 2
) -> OptimizedEndpointStatus:
    """`times` intervals after the bake, the promoted variant's acceptance far below 0.3."""
    for i in range(times):
        ends = BAKE_END + timedelta(minutes=1 + i)
        status = fold(status, data, ends, acceptance(ends, 10))
    return status


def test_after_a_clean_bake_latency_judging_stops_and_acceptance_is_watched() -> None:
    data = watch_spec("rollback")
    status = baked(data)
    bake_judged = status.rollout.bake.intervals if status.rollout.bake else -1
    status = fold(status, data, BAKE_END + timedelta(minutes=1), interval(scale=3.0))
    # A 3x slower interval is no concern of the watch: the bake owned latency.
    assert status.rollout.bake is not None and status.rollout.bake.intervals == bake_judged
    watch = status.rollout.acceptance_watch
    assert watch is not None and watch.intervals == 1
    assert not [c for c in status.checks if c.name == "live_latency" and c.verdict is Verdict.FAIL]
    status, actions, events = wake(status, PROMOTED, data, BAKE_END + timedelta(minutes=5))
    assert status.phase.value == "Succeeded" and kinds(actions) == [ActionKind.JUDGE_LIVE]
    assert "BakeFailed" not in events and "watching the promoted variant's live acceptance" in (
        status.message
    )


def test_drift_after_the_bake_with_rollback_returns_to_the_retained_baseline() -> None:
    data = watch_spec("rollback")
    status = drifted(baked(data), data)
    watch = status.rollout.acceptance_watch
    assert watch is not None and watch.acceptance_below_floor == 2
    check = next(c for c in status.checks if c.name == CHECK_NAME)
    assert check.verdict is Verdict.FAIL and check.gating  # onAcceptanceDrift: rollback
    status, actions, events = wake(status, PROMOTED, data, BAKE_END + timedelta(minutes=4))
    assert status.phase.value == "RollingBack"
    assert "AcceptanceDriftAfterBake" in events and "AcceptanceDrift" in events
    assert status.rollout.rollback_reason is RollbackReason.ACCEPTANCE
    assert Reason.ACCEPTANCE_DRIFT_AFTER_BAKE.rollback is RollbackReason.ACCEPTANCE
    assert kinds(actions) == [ActionKind.UPDATE_ENDPOINT]
    assert actions[0].request["EndpointConfigName"] == NAMES.baseline_config
    watch = status.rollout.acceptance_watch
    assert watch is not None and watch.outcome is AcceptanceWatchOutcome.DRIFTED
    status, actions, _ = wake(status, BASELINE, data, BAKE_END + timedelta(minutes=6))
    assert status.phase.value == "RolledBack" and actions == []
    assert status.rollout.rollback_reason is RollbackReason.ACCEPTANCE


def test_one_drifting_interval_after_the_bake_is_not_enough() -> None:
    data = watch_spec("rollback")
    status = drifted(baked(data), data, times=1)
    status, actions, events = wake(status, PROMOTED, data, BAKE_END + timedelta(minutes=4))
    assert status.phase.value == "Succeeded" and "AcceptanceDriftAfterBake" not in events
    assert ActionKind.UPDATE_ENDPOINT not in kinds(actions)
    watch = status.rollout.acceptance_watch
    assert watch is not None and watch.active


def test_drift_after_the_bake_with_disable_speculation_serves_the_twin_alone() -> None:
    data = watch_spec("disableSpeculation")
    status = drifted(baked(data), data)
    status, actions, events = wake(status, PROMOTED, data, BAKE_END + timedelta(minutes=4))
    _, config, _ = twin_made(actions, NAMES.twin_promoted_config)
    assert serves_the_twin_alone(config)
    assert status.phase.value == "Succeeded" and "SpeculationDisabling" in events
    switch = status.rollout.speculation_disabled
    assert switch is not None and switch.during is SpeculationStage.RETENTION
    assert "after the bake" in switch.reason
    # Not taken yet (the update call failed): asked again under the same names.
    _, actions, _ = wake(status, PROMOTED, data, BAKE_END + timedelta(minutes=5))
    assert [a.resource for a in actions] == [
        NAMES.twin_model,
        NAMES.twin_promoted_config,
        "chat",
    ]
    # Serving: recorded once, and nothing is watched any more (the twin does not speculate).
    status, actions, events = wake(status, TWIN_PROMOTED, data, BAKE_END + timedelta(minutes=6))
    assert "SpeculationDisabled" in events and actions == []
    switch = status.rollout.speculation_disabled
    assert switch is not None and switch.serving_at == BAKE_END + timedelta(minutes=6)
    watch = status.rollout.acceptance_watch
    assert watch is not None and watch.outcome is AcceptanceWatchOutcome.DRIFTED
    status, actions, events = wake(status, TWIN_PROMOTED, data, BAKE_END + timedelta(minutes=9))
    assert actions == [] and events == []
    # The retained baseline is still the way back, until the retention ends.
    back, actions, events = wake(
        status,
        TWIN_PROMOTED,
        data,
        BAKE_END + timedelta(minutes=10),
        annotations={"optimizer.dev/rollback": "true"},
    )
    assert back.phase.value == "RollingBack" and "ManualRollback" in events
    assert actions[0].request["EndpointConfigName"] == NAMES.baseline_config
    status, actions, _ = wake(status, TWIN_PROMOTED, data, RETENTION_END)
    deleted = {a.resource for a in actions if a.kind is ActionKind.DELETE_ENDPOINT_CONFIG}
    assert NAMES.baseline_config in deleted and NAMES.twin_promoted_config not in deleted


def test_a_twin_found_serving_after_a_lost_status_write_is_recorded_not_made_again() -> None:
    data = watch_spec("disableSpeculation")
    before = drifted(baked(data), data)
    status, actions, events = wake(before, TWIN_PROMOTED, data, BAKE_END + timedelta(minutes=6))
    assert ActionKind.CREATE_MODEL not in kinds(actions) and "SpeculationDisabled" in events
    switch = status.rollout.speculation_disabled
    assert switch is not None and switch.during is SpeculationStage.RETENTION
    assert switch.serving_at is not None and status.phase.value == "Succeeded"


def test_drift_after_the_bake_with_alert_says_so_once_and_keeps_watching() -> None:
    data = watch_spec("alert")
    status = drifted(baked(data), data)
    at = BAKE_END + timedelta(minutes=4)
    status, actions, events = wake(status, PROMOTED, data, at)
    assert status.phase.value == "Succeeded" and events.count("AcceptanceDrift") == 1
    # Traffic untouched; the watch goes on reading (the live metrics stay current).
    assert kinds(actions) == [ActionKind.JUDGE_LIVE]
    drift = status.condition(ConditionType.ACCEPTANCE_DRIFT)
    assert drift is not None and drift.status is ConditionStatus.TRUE
    assert "onAcceptanceDrift: alert" in drift.message and "after the bake" in drift.message
    assert "below the floor since" in status.message and "alert" in status.message
    assert status.history[-1].event == "AcceptanceDrift"
    assert status.rollout.speculation_disabled is None and status.rollout.rollback_reason is None
    watch = status.rollout.acceptance_watch
    assert watch is not None and watch.active and watch.alerted_at == at
    # Said once: more intervals below the floor fold in without a history line or an
    # Event each, and the watch keeps asking for the next interval.
    history = len(status.history)
    for minute in (4, 5, 6):
        ends = BAKE_END + timedelta(minutes=minute)
        status = fold(status, data, ends, acceptance(ends, 10))
        status, actions, events = wake(status, PROMOTED, data, ends + timedelta(seconds=30))
        assert events == [] and kinds(actions) == [ActionKind.JUDGE_LIVE], events
    watch = status.rollout.acceptance_watch
    assert watch is not None and watch.intervals >= 5 and len(status.history) == history
    assert watch.candidate_acceptance is not None and watch.candidate_acceptance.rate < 0.3
    # The retention ends as before; the outcome stays the one applied.
    status, actions, _ = wake(status, PROMOTED, data, RETENTION_END)
    assert ActionKind.DELETE_ENDPOINT_CONFIG in kinds(actions)
    watch = status.rollout.acceptance_watch
    assert watch is not None and not watch.active
    assert watch.outcome is AcceptanceWatchOutcome.DRIFTED


def test_acceptance_at_the_floor_after_the_bake_is_no_action() -> None:
    data = watch_spec("rollback")
    status = baked(data)
    for minute in range(1, 25):
        ends = BAKE_END + timedelta(minutes=minute)
        status = fold(status, data, ends, acceptance(ends, 90))
        status, actions, events = wake(status, PROMOTED, data, ends + timedelta(seconds=30))
        assert status.phase.value == "Succeeded"
        assert not {"AcceptanceDrift", "AcceptanceDriftAfterBake"} & set(events)
        assert ActionKind.UPDATE_ENDPOINT not in kinds(actions)
    watch = status.rollout.acceptance_watch
    assert watch is not None and watch.active and watch.acceptance_below_floor == 0
    assert watch.intervals == 24 and watch.block > 1  # evidence blocks, as in the bake
    check = next(c for c in status.checks if c.name == CHECK_NAME)
    assert check.verdict is Verdict.PASS


def test_no_data_after_the_bake_is_never_a_verdict() -> None:
    data = watch_spec("rollback")
    data["rollout"]["analysis"] = {"failureLimit": 1, "onNoData": "fail"}
    status = baked(data)
    for minute in range(1, 6):
        ends = BAKE_END + timedelta(minutes=minute)
        status = fold(status, data, ends, interval(invocations=0, probes=0))
    status, actions, events = wake(status, PROMOTED, data, BAKE_END + timedelta(minutes=7))
    assert status.phase.value == "Succeeded" and ActionKind.UPDATE_ENDPOINT not in kinds(actions)
    assert "AcceptanceDrift" not in events
    watch = status.rollout.acceptance_watch
    assert watch is not None and watch.active and watch.acceptance_below_floor == 0
    assert all(c.verdict is not Verdict.FAIL for c in status.checks if c.name == CHECK_NAME)


def test_the_watch_ends_with_the_retention_and_reads_nothing_past_it() -> None:
    data = watch_spec("rollback")
    status = baked(data)
    status, actions, _ = wake(status, PROMOTED, data, RETENTION_END - timedelta(seconds=1))
    watch = status.rollout.acceptance_watch
    assert watch is not None and watch.read_until is not None
    assert watch.read_until <= RETENTION_END.timestamp()
    status, actions, _ = wake(status, PROMOTED, data, RETENTION_END)
    assert ActionKind.JUDGE_LIVE not in kinds(actions)
    assert ActionKind.DELETE_ENDPOINT_CONFIG in kinds(actions)
    watch = status.rollout.acceptance_watch
    assert watch is not None and watch.outcome is AcceptanceWatchOutcome.ENDED
    # Drift counted after that changes nothing: nothing is watched any more.
    watch.acceptance_below_floor = 5
    status, actions, events = wake(status, PROMOTED, data, RETENTION_END + timedelta(minutes=1))
    assert status.phase.value == "Succeeded" and "AcceptanceDriftAfterBake" not in events
    assert ActionKind.JUDGE_LIVE not in kinds(actions)


def test_a_restart_mid_watch_resumes_from_status_alone() -> None:
    data = watch_spec("rollback")
    status = baked(data)
    status, _, _ = wake(status, PROMOTED, data, BAKE_END + timedelta(minutes=3))
    status = drifted(status, data, times=1)
    watch = status.rollout.acceptance_watch
    assert watch is not None and watch.read_until is not None
    cursor = watch.read_until
    # A new process: only the stored status, dumped and read back.
    reread = parse_status(status.dump())
    again, actions, _ = wake(reread, PROMOTED, data, BAKE_END + timedelta(minutes=3, seconds=1))
    assert ActionKind.JUDGE_LIVE not in kinds(actions)  # that period was asked for already
    watch = again.rollout.acceptance_watch
    assert watch is not None and watch.read_until == cursor
    assert watch.acceptance_below_floor == 1
    # The same interval folded again is judged once; a new one completes the evidence.
    repeated = drifted(again, data, times=1)
    assert repeated.rollout.acceptance_watch == again.rollout.acceptance_watch
    ends = BAKE_END + timedelta(minutes=2)
    again = parse_status(fold(again, data, ends, acceptance(ends, 10)).dump())
    again, actions, events = wake(again, PROMOTED, data, BAKE_END + timedelta(minutes=4))
    assert again.phase.value == "RollingBack" and "AcceptanceDriftAfterBake" in events


def test_no_watch_without_speculation_or_after_a_failed_bake() -> None:
    # Without speculativeDecoding there is no acceptance to watch.
    data = drift_spec(onAcceptanceDrift="rollback", baselineRetention="1h")
    data["optimizations"] = {"quantization": {"scheme": "fp8"}}
    status = baking(data)
    status, actions, events = wake(status, PROMOTED, data, BAKE_END)
    assert "BakePassed" in events and status.rollout.acceptance_watch is None
    assert ActionKind.JUDGE_LIVE not in kinds(actions)
    # The bake stopped (the promoted config no longer serves): no watch either.
    data = watch_spec("rollback")
    status = baking(data)
    status, _, events = wake(status, BASELINE, data, PROMOTED_AT + timedelta(minutes=5))
    status, actions, _ = wake(status, BASELINE, data, BAKE_END + timedelta(minutes=1))
    assert status.rollout.acceptance_watch is None and ActionKind.JUDGE_LIVE not in kinds(actions)


def test_the_watch_stops_when_the_promoted_config_no_longer_serves() -> None:
    data = watch_spec("rollback")
    status = drifted(baked(data), data, times=1)
    status, actions, events = wake(status, BASELINE, data, BAKE_END + timedelta(minutes=4))
    assert ActionKind.JUDGE_LIVE not in kinds(actions) and "AcceptanceDriftAfterBake" not in events
    watch = status.rollout.acceptance_watch
    assert watch is not None and watch.outcome is AcceptanceWatchOutcome.STOPPED


def test_the_rollback_lever_during_the_watch_ends_it() -> None:
    data = watch_spec("rollback")
    status = baked(data)
    status, actions, events = wake(
        status,
        PROMOTED,
        data,
        BAKE_END + timedelta(minutes=2),
        annotations={"optimizer.dev/rollback": "true"},
    )
    assert status.phase.value == "RollingBack" and "ManualRollback" in events
    assert kinds(actions) == [ActionKind.UPDATE_ENDPOINT]
    assert status.rollout.rollback_reason is RollbackReason.MANUAL
    watch = status.rollout.acceptance_watch
    assert watch is not None and watch.outcome is AcceptanceWatchOutcome.STOPPED


def test_the_watch_is_in_the_metrics_and_the_report_until_the_retention_ends() -> None:
    data = watch_spec("alert")
    metrics = OperatorMetrics()
    status = drifted(baked(data), data)
    status, _, _ = wake(status, PROMOTED, data, BAKE_END + timedelta(minutes=4))
    metrics.reconciled("ml", "chat", status.dump())
    samples = scrape(metrics.registry)
    rate = value(samples, "endpoint_optimizer_live_acceptance_rate_ratio", variant="candidate")
    assert rate == 0.1  # 10 of 100 drafted tokens per line, from the watch's newest interval
    assert value(samples, "endpoint_optimizer_live_acceptance_below_floor_intervals") == 2
    page = render_report(
        {"metadata": {"name": "chat", "namespace": "ml"}, "spec": data, "status": status.dump()}
    )
    assert "Acceptance watch after the bake" in page and "drift announced at" in page
    assert "rollout.onAcceptanceDrift: alert" in page and "10 % of 400 drafted tokens" in page
    # The retention over, nothing is live any more: the series are gone, the report stays.
    status, _, _ = wake(status, PROMOTED, data, RETENTION_END)
    metrics.reconciled("ml", "chat", status.dump())
    samples = scrape(metrics.registry)
    assert values(samples, "endpoint_optimizer_live_acceptance_rate_ratio") == []
    page = render_report(
        {"metadata": {"name": "chat", "namespace": "ml"}, "spec": data, "status": status.dump()}
    )
    assert "Drifted at" in page
