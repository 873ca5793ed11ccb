"""The bake after a promotion (rollout.bake): decide() and the live fold, with observations."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from endpoint_optimizer.analysis.live import LiveObservation, ProbeSamples, VariantInterval
from endpoint_optimizer.api import (
    BakeOutcome,
    ConditionType,
    LiveDecision,
    OptimizedEndpointStatus,
    RollbackReason,
    SpecError,
    parse_spec,
    parse_status,
)
from endpoint_optimizer.metrics.exporter import OperatorMetrics
from endpoint_optimizer.pipeline.decide import decide
from endpoint_optimizer.pipeline.model import ActionKind, Measurement, Observations, Resource
from endpoint_optimizer.pipeline.phases.analyze import live_period
from endpoint_optimizer.pipeline.record import record
from endpoint_optimizer.report import render_report
from tests.unit.api.admission import admit
from tests.unit.metrics.scrape import scrape, value, values
from tests.unit.pipeline.test_decide import NAMES, OWNER
from tests.unit.pipeline.test_retention import (
    BASELINE,
    PROMOTED,
    PROMOTED_AT,
    later,
    promoting,
    retention,
)

PAUSE = {"optimizer.dev/pause": "true"}
ROLLBACK = {"optimizer.dev/rollback": "true"}


def interval(scale: float = 1.0, invocations: int = 120, probes: int = 10) -> VariantInterval:
    """One variant's interval: CloudWatch figures and probes, `scale` times the baseline's."""
    spread = [1.0 + 0.01 * ((i * 7) % 5 - 2) for i in range(probes)]
    return VariantInterval(
        invocations=invocations,
        errors_5xx=0,
        latency_mean_s=0.40 * scale,
        latency_s=0.80 * scale,
        probes=ProbeSamples(
            requests=probes,
            ttft_s=[0.050 * scale * s for s in spread],
            tpot_s=[0.020 * scale * s for s in spread],
            input_tokens=128,
            output_tokens=32,
        )
        if probes
        else None,
    )


def fold(
    status: OptimizedEndpointStatus,
    data: dict[str, Any],
    ends: datetime,
    candidate: VariantInterval,
    baseline: VariantInterval | None = None,
) -> OptimizedEndpointStatus:
    """What the edge does with a JudgeLive action's answer: record it into status."""
    observation = LiveObservation(
        interval_end=ends,
        baseline=baseline or VariantInterval(invocations=0),
        candidate=candidate,
    )
    measured = Measurement(ActionKind.JUDGE_LIVE, 0, live=(observation,))
    return parse_status(record(status.dump(), measured, parse_spec(data), ends))


def baked(data: dict[str, Any]) -> OptimizedEndpointStatus:
    """Promoted after the live judge measured the baseline during the canary."""
    status = promoting()
    status = fold(
        status,
        data,
        PROMOTED_AT - timedelta(seconds=30),
        candidate=interval(),
        baseline=interval(),
    )
    assert status.rollout.baseline_live is not None
    status, _, events = later(status, 0, data)
    assert status.phase.value == "Succeeded" and "CandidatePromoted" in events
    return status


def test_the_promotion_freezes_the_baselines_live_figures_and_bakes_half_the_retention() -> None:
    data = retention("1h")
    status = baked(data)
    bake = status.rollout.bake
    assert bake is not None and bake.active
    assert bake.until == PROMOTED_AT + timedelta(minutes=30)
    assert bake.reference == status.rollout.baseline_live
    assert bake.reference.latency_mean_s == pytest.approx(0.40)
    assert len(bake.reference.probe_ttft_s) == 10
    assert "baking until" in status.message
    progressing = status.condition(ConditionType.PROGRESSING)
    assert progressing is not None and progressing.reason == "Baking"


def test_the_bake_reads_the_promoted_variant_at_the_canarys_cadence() -> None:
    data = retention("1h")
    status = baked(data)
    period = live_period(60.0)
    decision = decide(
        data,
        status,
        Observations(endpoint=PROMOTED),
        Resource(OWNER, 1),
        PROMOTED_AT + timedelta(seconds=3 * period),
    )
    judge = [a for a in decision.actions if a.kind is ActionKind.JUDGE_LIVE]
    assert len(judge) == 1
    action = judge[0]
    assert action.baseline_variant == "" and action.candidate_variant == NAMES.candidate_variant
    assert action.request["periodSeconds"] == period and action.request["probes"] is True
    after = parse_status(decision.status)
    assert after.phase.value == "Succeeded" and "judging" in after.message
    assert after.rollout.bake is not None and after.rollout.bake.read_until is not None


def test_a_confident_regression_rolls_back_to_the_retained_baseline() -> None:
    data = retention("1h")
    status = baked(data)
    status = fold(status, data, PROMOTED_AT + timedelta(seconds=120), interval(scale=3.0))
    bake = status.rollout.bake
    assert bake is not None and bake.judge.decision is LiveDecision.ROLLBACK
    status, actions, events = later(status, 150, data)
    assert status.phase.value == "RollingBack"
    assert "BakeFailed" in events and "CheckFailed" in events
    assert status.rollout.rollback_reason is RollbackReason.BAKE
    assert actions == [ActionKind.UPDATE_ENDPOINT]
    assert status.rollout.bake is not None
    assert status.rollout.bake.outcome is BakeOutcome.FAILED
    assert "BakeFailed" in [h.event for h in status.history]
    status, actions, _ = later(status, 200, data, BASELINE)
    assert status.phase.value == "RolledBack" and actions == []
    assert status.rollout.rollback_reason is RollbackReason.BAKE


def test_a_slowdown_within_the_reference_noise_is_no_rollback() -> None:
    # The reference is one frozen interval: 5 % slower for the whole bake stays a Pass.
    data = retention("1h")
    status = baked(data)
    for i in range(1, 20):
        ends = PROMOTED_AT + timedelta(seconds=60 * i)
        status = fold(status, data, ends, interval(scale=1.05))
    assert status.rollout.bake is not None
    assert status.rollout.bake.judge.decision is LiveDecision.CONTINUE
    assert status.rollout.bake.intervals == 19 and status.rollout.bake.block == 2


def test_an_interval_without_data_is_never_a_verdict_even_with_on_no_data_fail() -> None:
    data = retention("1h")
    data["rollout"]["analysis"] = {"onNoData": "fail", "failureLimit": 1}
    status = baked(data)
    for i in range(1, 4):
        ends = PROMOTED_AT + timedelta(seconds=60 * i)
        status = fold(status, data, ends, interval(invocations=0, probes=0))
    bake = status.rollout.bake
    assert bake is not None and bake.judge.decision is LiveDecision.CONTINUE
    assert bake.judge.no_data_intervals == 3 and bake.judge.failures == 0
    status, _, events = later(status, 200, data)
    assert status.phase.value == "Succeeded" and "BakeFailed" not in events


def test_a_clean_bake_ends_once_and_stops_judging_then_the_retention_goes_on() -> None:
    data = retention("1h")
    status = baked(data)
    status = fold(status, data, PROMOTED_AT + timedelta(seconds=120), interval(scale=0.98))
    status, actions, events = later(status, 30 * 60, data)
    assert "BakePassed" in events and status.phase.value == "Succeeded"
    bake = status.rollout.bake
    assert bake is not None and bake.outcome is BakeOutcome.PASSED and not bake.active
    assert ActionKind.JUDGE_LIVE not in actions
    assert "bake passed" in status.message and "1 intervals judged" in status.message
    # Not speculative: no acceptance to watch after it either (test_acceptance_watch.py).
    assert status.rollout.acceptance_watch is None
    status, actions, events = later(status, 40 * 60, data)
    assert actions == [] and events == []
    progressing = status.condition(ConditionType.PROGRESSING)
    assert progressing is not None and progressing.reason != "Baking"
    # The baseline is deleted when the retention ends, as before.
    status, actions, _ = later(status, 3600, data)
    assert ActionKind.DELETE_ENDPOINT_CONFIG in actions


def test_a_restart_mid_bake_resumes_from_status_alone() -> None:
    data = retention("1h")
    status = baked(data)
    status, _, _ = later(status, 180, data)
    cursor = status.rollout.bake.read_until if status.rollout.bake else None
    assert cursor is not None
    # A new process: only the stored status, dumped and read back.
    reread = parse_status(status.dump())
    again, actions, _ = later(reread, 181, data)
    assert ActionKind.JUDGE_LIVE not in actions  # that period was asked for already
    assert again.rollout.bake is not None and again.rollout.bake.read_until == cursor
    again, actions, _ = later(again, 300, data)
    assert actions == [ActionKind.JUDGE_LIVE]


def test_paused_the_bake_keeps_judging_and_a_regression_still_rolls_back() -> None:
    data = retention("1h")
    status = baked(data)
    status, actions, _ = later(status, 180, data, annotations=PAUSE)
    assert status.paused and actions == [ActionKind.JUDGE_LIVE]
    status = fold(status, data, PROMOTED_AT + timedelta(seconds=180), interval(scale=3.0))
    status, actions, events = later(status, 200, data, annotations=PAUSE)
    assert status.phase.value == "RollingBack" and "BakeFailed" in events
    assert actions == [ActionKind.UPDATE_ENDPOINT]
    # Paused past the bake's end, it does not pass until the pause is lifted.
    status = baked(data)
    status, _, events = later(status, 31 * 60, data, annotations=PAUSE)
    assert "BakePassed" not in events and status.rollout.bake is not None
    assert status.rollout.bake.active
    status, _, events = later(status, 32 * 60, data)
    assert "BakePassed" in events


def test_the_rollback_lever_works_during_the_bake_and_ends_it() -> None:
    data = retention("1h")
    status = baked(data)
    status, actions, events = later(status, 90, data, annotations=ROLLBACK)
    assert status.phase.value == "RollingBack" and "ManualRollback" in events
    assert status.rollout.rollback_reason is RollbackReason.MANUAL
    assert status.rollout.bake is not None
    assert status.rollout.bake.outcome is BakeOutcome.STOPPED
    assert actions == [ActionKind.UPDATE_ENDPOINT]


def test_the_bake_stops_when_the_promoted_config_no_longer_serves() -> None:
    data = retention("1h")
    status = baked(data)
    status, actions, events = later(status, 90, data, BASELINE)
    assert "BakeStopped" in events and ActionKind.JUDGE_LIVE not in actions
    assert status.rollout.bake is not None
    assert status.rollout.bake.outcome is BakeOutcome.STOPPED


def test_bake_0s_is_off_and_without_baseline_figures_there_is_none() -> None:
    data = retention("1h")
    data["rollout"]["bake"] = "0s"
    status = baked(data)
    assert status.rollout.bake is None
    status, actions, _ = later(status, 180, data)
    assert actions == []
    # The live judge never measured the baseline: no bake, and the history says why.
    data = retention("1h")
    status, _, _ = later(promoting(), 0, data)
    assert status.phase.value == "Succeeded" and status.rollout.bake is None
    assert "BakeSkipped" in [h.event for h in status.history]


def test_an_explicit_bake_is_capped_by_nothing_but_itself() -> None:
    data = retention("2h")
    data["rollout"]["bake"] = "10m"
    status = baked(data)
    assert status.rollout.bake is not None
    assert status.rollout.bake.until == PROMOTED_AT + timedelta(minutes=10)


def test_a_bake_longer_than_the_retention_is_refused_naming_the_field() -> None:
    data = retention("1h")
    data["rollout"]["bake"] = "2h"
    with pytest.raises(SpecError) as refused:
        parse_spec(data)
    assert "bake" in str(refused.value) and "baselineRetention" in str(refused.value)
    resource = {
        "apiVersion": "optimizer.dev/v1alpha1",
        "kind": "OptimizedEndpoint",
        "metadata": {"name": "chat", "namespace": "ml"},
        "spec": data,
    }
    _, problems = admit(resource)
    assert any("rollout.bake must not exceed rollout.baselineRetention" in p for p in problems)
    data["rollout"]["bake"] = "1h"
    assert admit(resource)[1] == []
    del data["rollout"]["baselineRetention"]
    data["rollout"]["bake"] = "90m"
    # Unset, the retention is its default (1h): still refused.
    assert any("rollout.bake" in p for p in admit(resource)[1])


def test_a_bake_rollback_is_counted_with_reason_bake_and_shown_in_the_report() -> None:
    data = retention("1h")
    metrics = OperatorMetrics()
    status = baked(data)
    metrics.reconciled("ml", "chat", status.dump())
    status = fold(status, data, PROMOTED_AT + timedelta(seconds=120), interval(scale=3.0))
    for seconds, endpoint in ((150, PROMOTED), (151, PROMOTED), (200, BASELINE)):
        status, _, _ = later(status, seconds, data, endpoint)
        metrics.reconciled("ml", "chat", status.dump())
    assert status.phase.value == "RolledBack"
    samples = scrape(metrics.registry)
    assert value(samples, "endpoint_optimizer_rollbacks_total", name="chat", reason="bake") == 1
    assert sum(values(samples, "endpoint_optimizer_rollbacks_total", name="chat")) == 1
    page = render_report(
        {"metadata": {"name": "chat", "namespace": "ml"}, "spec": data, "status": status.dump()}
    )
    assert "Bake after the promotion" in page and "Failed at" in page
    assert "<th>Rollback reason</th><td>bake</td>" in page
    assert "BakeFailed" in page  # the timeline


def test_a_failed_check_that_does_not_gate_never_rolls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every check the live judge makes today gates; one that only informs (a later live
    # check reported but not gating) is reached only by marking the judge's own checks so.
    from endpoint_optimizer.analysis import live
    from endpoint_optimizer.pipeline import record as recording

    def informing(*args: Any, **kwargs: Any) -> live.LiveJudgement:
        judged = live.judge_interval(*args, **kwargs)
        checks = [c.model_copy(update={"gating": False}) for c in judged.checks]
        return live.LiveJudgement(judged.state, checks, judged.decision)

    monkeypatch.setattr(recording, "judge_interval", informing)
    data = retention("1h")
    status = baked(data)
    status = fold(status, data, PROMOTED_AT + timedelta(seconds=120), interval(scale=3.0))
    bake = status.rollout.bake
    assert bake is not None and bake.judge.decision is LiveDecision.CONTINUE
    assert any(c.verdict.value == "Fail" and not c.gating for c in status.checks)
    status, _, events = later(status, 150, data)
    assert status.phase.value == "Succeeded" and "BakeFailed" not in events


def test_a_regression_after_a_long_clean_stretch_is_caught_within_about_a_block() -> None:
    # A candidate 40 % faster than the baseline for 45 intervals piles up evidence against
    # "slower"; the judge's blocks restart it, so a later 1.5x regression still shows.
    data = retention("3h")
    data["rollout"]["bake"] = "3h"
    status = baked(data)
    minute = 0
    for minute in range(1, 46):
        status = fold(status, data, PROMOTED_AT + timedelta(minutes=minute), interval(0.6))
    bake = status.rollout.bake
    assert bake is not None and bake.judge.decision is LiveDecision.CONTINUE
    assert bake.block == 5 and bake.intervals == 45 and bake.judge.intervals == 5
    regressed = 0
    while bake.judge.decision is not LiveDecision.ROLLBACK and regressed < 40:
        regressed += 1
        ends = PROMOTED_AT + timedelta(minutes=minute + regressed)
        status = fold(status, data, ends, interval(1.5))
        bake = status.rollout.bake
        assert bake is not None
    assert regressed <= 10, regressed
    # An interval folded twice is judged once, across a block's start too.
    again = fold(status, data, PROMOTED_AT + timedelta(minutes=minute), interval(1.5))
    assert again.rollout.bake == status.rollout.bake
