"""The conditions, set at the end of every wake-up from the phase, history and endpoint."""

from __future__ import annotations

from endpoint_optimizer.api import TERMINAL_PHASES, ConditionStatus, ConditionType, Phase
from endpoint_optimizer.pipeline import reasons
from endpoint_optimizer.pipeline.wakeup import Wakeup


def set_conditions(w: Wakeup) -> None:
    s = w.status
    gen = s.observed_generation or w.res.generation
    endpoint = w.obs.endpoint
    ready = endpoint is not None and endpoint.in_service
    s.set_condition(
        ConditionType.READY,
        ConditionStatus.TRUE if ready else ConditionStatus.FALSE,
        "EndpointInService" if ready else "EndpointNotInService",
        f"endpoint {endpoint.name} is {endpoint.status}" if endpoint else "no endpoint yet",
        w.now,
        gen,
    )
    terminal = s.phase in TERMINAL_PHASES
    latest = s.history[-1].event if s.history else ""
    latest_reason = reasons.of(latest)
    after_outcome = latest_reason is not None and latest_reason.after_outcome
    bake = s.rollout.bake
    baking = s.phase is Phase.SUCCEEDED and bake is not None and bake.active
    progressing_reason = (
        "Paused"
        if s.paused
        else "Baking"
        if baking
        else latest
        if terminal and after_outcome
        else s.phase.value
    )
    s.set_condition(
        ConditionType.PROGRESSING,
        ConditionStatus.FALSE if terminal or s.paused else ConditionStatus.TRUE,
        progressing_reason,
        s.message,
        w.now,
        gen,
    )
    last = latest or s.phase.value
    last_reason = reasons.of(last)
    degraded = s.phase in (Phase.ROLLING_BACK, Phase.ROLLED_BACK, Phase.FAILED) or (
        s.phase is Phase.SUCCEEDED and last_reason is not None and last_reason.degrades
    )
    s.set_condition(
        ConditionType.DEGRADED,
        ConditionStatus.TRUE if degraded else ConditionStatus.FALSE,
        last if degraded else "AsExpected",
        s.message if degraded else "",
        w.now,
        gen,
    )
    failed = s.phase is Phase.FAILED
    s.set_condition(
        ConditionType.TERMINAL,
        ConditionStatus.TRUE if failed else ConditionStatus.FALSE,
        last if failed else "NotTerminal",
        s.last_error if failed else "",
        w.now,
        gen,
    )
