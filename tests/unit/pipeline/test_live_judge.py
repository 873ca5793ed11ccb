"""The live judge per canary step: one CloudWatch interval at a time, folded into status."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from endpoint_optimizer.analysis.live import LiveObservation, VariantInterval
from endpoint_optimizer.api import OptimizedEndpointStatus, parse_spec, parse_status
from endpoint_optimizer.api.checks import CheckKind, Verdict
from endpoint_optimizer.api.live import LiveDecision
from endpoint_optimizer.pipeline.decide import decide
from endpoint_optimizer.pipeline.model import (
    Action,
    ActionKind,
    Measurement,
    Observations,
    Resource,
    Timing,
)
from endpoint_optimizer.pipeline.phases.analyze import live_period
from endpoint_optimizer.pipeline.record import live_state, record
from tests.unit.pipeline.test_decide import NAMES, NOW, OWNER, compared, deployed, spec


def live_spec(on_no_data: str = "pass", strategy: str = "canary") -> dict[str, Any]:
    return spec(
        rollout={
            "strategy": strategy,
            "steps": [{"weight": 10, "pause": "10m"}, {"weight": 50, "pause": "10m"}],
            "analysis": {"interval": "1m", "onNoData": on_no_data, "minInvocations": 20},
        }
    )


def step(
    status: OptimizedEndpointStatus, data: dict[str, Any], now: datetime
) -> tuple[OptimizedEndpointStatus, list[Action], list[str]]:
    decision = decide(
        data, status, Observations(endpoint=deployed()[1]), Resource(OWNER, 1), now, Timing(1.0)
    )
    return parse_status(decision.status), decision.actions, [e.reason for e in decision.events]


def analyzing(data: dict[str, Any]) -> OptimizedEndpointStatus:
    status, _ = deployed()
    status, actions, _ = step(status, data, NOW)
    assert [a.kind for a in actions] == [ActionKind.COMPARE]
    compared(status, Verdict.PASS)
    return status


def interval(
    end: datetime, base_s: float | None, cand_s: float, calls: int = 60
) -> LiveObservation:
    return LiveObservation(
        interval_end=end,
        baseline=VariantInterval(invocations=calls, latency_mean_s=base_s),
        candidate=VariantInterval(invocations=calls, latency_mean_s=cand_s),
    )


def judged(
    status: OptimizedEndpointStatus, observation: LiveObservation, data: dict[str, Any]
) -> OptimizedEndpointStatus:
    measured = Measurement(ActionKind.JUDGE_LIVE, 0, live=(observation,))
    now = observation.interval_end + timedelta(seconds=61)
    return parse_status(record(status.dump(), measured, parse_spec(data), now))


@pytest.mark.parametrize(
    ("interval_s", "period"), [(0.4, 1), (1, 1), (7, 5), (25, 20), (59, 30), (60, 60), (150, 120)]
)
def test_the_period_is_the_longest_one_cloudwatch_takes_within_the_interval(
    interval_s: float, period: int
) -> None:
    assert live_period(interval_s) == period


def test_each_published_interval_is_asked_for_once_with_its_window() -> None:
    data = live_spec()
    status = analyzing(data)
    seen: list[Action] = []
    for second in range(0, 400, 10):
        status, actions, _ = step(status, data, NOW + timedelta(seconds=second))
        seen.extend(actions)
    assert all(a.kind is ActionKind.JUDGE_LIVE for a in seen)
    windows = [(a.request["start"], a.request["end"]) for a in seen]
    # Analysis began at NOW; [NOW, NOW+60) is published (asked for) once NOW+120 has passed.
    assert windows[0] == (NOW.isoformat(), (NOW + timedelta(seconds=60)).isoformat())
    assert len(windows) == len(set(windows)) == 5  # up to the period ending at NOW+300
    assert {(a.baseline_variant, a.candidate_variant) for a in seen} == {
        (NAMES.baseline_variant, NAMES.candidate_variant)
    }
    assert {a.request["periodSeconds"] for a in seen} == {60}


def test_blue_green_has_no_live_traffic_to_judge_before_the_switch() -> None:
    data = live_spec(strategy="blueGreen")
    data["rollout"]["steps"] = [{"weight": 100, "pause": "10m"}]
    status, _ = deployed()
    status, _, _ = step(status, data, NOW)
    compared(status, Verdict.PASS)
    for second in range(0, 400, 30):
        status, actions, _ = step(status, data, NOW + timedelta(seconds=second))
        assert ActionKind.JUDGE_LIVE not in [a.kind for a in actions]


def test_a_slower_candidate_on_live_traffic_rolls_back_keeping_the_benchmark_checks() -> None:
    data = live_spec()
    status = analyzing(data)
    end = NOW + timedelta(seconds=60)
    ratios = []
    while live_state(status).decision is not LiveDecision.ROLLBACK:
        assert len(ratios) < 10, status.checks
        base = 0.200 * (1 + 0.02 * (-1) ** len(ratios))  # a little interval-to-interval noise
        status = judged(status, interval(end, base, 0.300), data)
        ratios.append(base)
        end += timedelta(seconds=60)
    live = [c for c in status.checks if c.kind is CheckKind.LIVE]
    latency = next(c for c in live if c.name == "live_latency")
    assert latency.verdict is Verdict.FAIL
    assert latency.candidate == pytest.approx(300.0)
    assert any(c.kind is CheckKind.BENCHMARK for c in status.checks)
    assert 2 <= len(ratios) <= 6  # a +50 % slowdown is caught within a few intervals
    status, actions, events = step(status, data, end + timedelta(seconds=61))
    assert status.phase.value == "RollingBack"
    assert [a.kind for a in actions] == [ActionKind.UPDATE_WEIGHTS]
    assert "LiveCheckFailed" in [h.event for h in status.history]
    assert "CheckFailed" in events


def test_an_equal_candidate_keeps_going_and_an_interval_counts_once() -> None:
    data = live_spec()
    status = analyzing(data)
    end = NOW + timedelta(seconds=60)
    for index in range(8):
        base = 0.200 * (1 + 0.02 * (-1) ** index)
        status = judged(status, interval(end, base, 0.200), data)
        end += timedelta(seconds=60)
    state = live_state(status)
    assert state.decision is LiveDecision.CONTINUE and state.intervals == 8
    again = judged(status, interval(end - timedelta(seconds=60), 0.1, 9.0), data)
    assert live_state(again) == state
    assert [c for c in again.checks if c.verdict is Verdict.FAIL] == []


def test_no_data_with_on_no_data_pause_holds_the_steps_clock_without_pausing() -> None:
    data = live_spec(on_no_data="pause")
    status = analyzing(data)
    # The first asked-for interval sets the period the clock is held by.
    for second in (0, 130):
        status, _, _ = step(status, data, NOW + timedelta(seconds=second))
    started = status.rollout.step_started_at
    assert started is not None
    quiet = interval(NOW + timedelta(seconds=60), 0.2, 0.2, calls=3)
    status = judged(status, quiet, data)
    assert live_state(status).decision is LiveDecision.HOLD
    assert status.rollout.step_started_at == started + timedelta(seconds=60)
    check = next(c for c in status.checks if c.kind is CheckKind.LIVE)
    assert check.verdict is Verdict.INCONCLUSIVE
    status, _, _ = step(status, data, NOW + timedelta(seconds=140))
    assert status.phase.value == "Analyzing" and not status.paused


def test_no_data_with_on_no_data_fail_rolls_back_at_the_failure_limit() -> None:
    data = live_spec(on_no_data="fail")
    status = analyzing(data)
    status = judged(status, interval(NOW + timedelta(seconds=60), 0.2, 0.2, calls=0), data)
    assert live_state(status).decision is LiveDecision.CONTINUE
    status, _, _ = step(status, data, NOW + timedelta(seconds=125))
    assert status.phase.value == "Analyzing"
    status = judged(status, interval(NOW + timedelta(seconds=120), None, 0.2), data)
    assert live_state(status).decision is LiveDecision.ROLLBACK
    status, _, _ = step(status, data, NOW + timedelta(seconds=185))
    assert status.phase.value == "RollingBack"
