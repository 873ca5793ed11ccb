"""After a clean bake, while the baseline is retained: the acceptance watch.

The bake (phases/bake.py) judges latency, errors and acceptance until spec.rollout.bake
and then stops. A speculative candidate's acceptance can drift later, when the traffic
mix changes, so until the retained baseline is deleted (rollout.baselineRetention) the
Succeeded phase keeps reading the promoted variant's live intervals at the bake's
cadence, and judges only its acceptance against speculativeDecoding.minAcceptanceRate,
with the bake's confidence rule (the bake's alpha for each evidence block, record.py).
Once failureLimit intervals were confidently below the floor it applies
spec.rollout.onAcceptanceDrift, once:

- rollback: back to the retained baseline through the promoted-rollback path
  (AcceptanceDriftAfterBake, rollbackReason acceptance);
- disableSpeculation: the speculation-free twin serves alone (as in the bake: the
  `retention` stage, phases/speculation.py); the retained baseline stays the way back;
- alert: a Warning Event, the AcceptanceDrift condition True and a history line,
  once (`alertedAt`); traffic is left alone and the watch goes on reading, so the live
  acceptance metrics (and the Prometheus alert on them) follow the acceptance until the
  retention ends.

Only when the served candidate speculates and has a floor; no data is never a verdict;
when the retention ends (or the promoted config stops serving) the watch ends. Its
cursor, count and outcome live in status.rollout.acceptanceWatch, so a restart resumes
it where status says.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from endpoint_optimizer.analysis.live_acceptance import CHECK_NAME as ACCEPTANCE_CHECK
from endpoint_optimizer.api import (
    AcceptanceDriftPolicy,
    AcceptanceWatch,
    AcceptanceWatchOutcome,
    BakeOutcome,
    ConditionStatus,
    ConditionType,
    SpeculationStage,
    Verdict,
    duration_seconds,
)
from endpoint_optimizer.api.live import LiveState
from endpoint_optimizer.pipeline.model import IN_PROGRESS_ENDPOINT
from endpoint_optimizer.pipeline.phases import promote, speculation
from endpoint_optimizer.pipeline.phases.analyze import judge_live, live_period, live_window
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.wakeup import Outcome, Planned


def watching(w: Planned) -> Outcome | None:
    """Succeeded after a clean bake: read, act on a confident drift, or end the watch;
    None when there is nothing to watch (the retention goes on as before)."""
    rollout = w.status.rollout
    endpoint = w.obs.endpoint
    watch = rollout.acceptance_watch
    switch = rollout.speculation_disabled
    if (
        endpoint is not None
        and endpoint.status not in IN_PROGRESS_ENDPOINT
        and (
            (watch is not None and watch.active)
            or (switch is not None and switch.during is SpeculationStage.RETENTION)
        )
        and (out := speculation.switching(w, endpoint, SpeculationStage.RETENTION)) is not None
    ):
        return out
    if watch is None:
        watch = _start(w)
    if watch is None or not watch.active:
        return None
    sm = w.status.sagemaker
    until = sm.baseline_retained_until
    if until is None or sm.baseline_deleted_at is not None or w.now >= until:
        _end(watch, w, AcceptanceWatchOutcome.ENDED)
        return None
    if rollout.speculation_disabled is not None or not _speculates(w):
        _end(watch, w, AcceptanceWatchOutcome.STOPPED)
        return None
    if endpoint is None or endpoint.status in IN_PROGRESS_ENDPOINT:
        return None  # read on a settled endpoint only; the watch goes on after
    if endpoint.config_name != w.names.promoted_config:
        _end(watch, w, AcceptanceWatchOutcome.STOPPED)
        return None
    limit = max(1, w.spec.rollout.analysis.failure_limit)
    if watch.acceptance_below_floor >= limit and watch.alerted_at is None:
        return _drifted(w, watch, limit)
    return _interval_due(w, watch, until)


def _speculates(w: Planned) -> bool:
    speculative = w.spec.optimizations.speculative_decoding
    return speculative is not None and speculative.min_acceptance_rate is not None


def _start(w: Planned) -> AcceptanceWatch | None:
    """The watch, begun after a bake that passed (its cursor and count carry over)."""
    rollout = w.status.rollout
    bake = rollout.bake
    sm = w.status.sagemaker
    if (
        bake is None
        or bake.outcome is not BakeOutcome.PASSED
        or rollout.speculation_disabled is not None
        or not _speculates(w)
        or sm.baseline_retained_until is None
        or sm.baseline_deleted_at is not None
        or w.now >= sm.baseline_retained_until
    ):
        return None
    judge = bake.judge
    watch = AcceptanceWatch(
        read_until=bake.read_until,
        period_seconds=bake.period_seconds,
        last_interval_end=judge.last_interval_end,
        block_intervals=judge.intervals,
        acceptance_below_floor=judge.acceptance_below_floor,
        candidate_acceptance=judge.candidate_acceptance,
        stream_totals=judge.stream_totals,
        block=bake.block,
    )
    rollout.acceptance_watch = watch
    return watch


def _drifted(w: Planned, watch: AcceptanceWatch, limit: int) -> Outcome | None:
    count = watch.acceptance_below_floor
    check = next((c for c in w.status.checks if c.name == ACCEPTANCE_CHECK), None)
    said = check.reason if check is not None and check.verdict is Verdict.FAIL else ""
    reason = (
        f"after the bake, live acceptance of the promoted variant confidently below the "
        f"floor in {count} interval(s) (failureLimit {limit})"
        + (f"; the latest: {said}" if said else "")
    )
    policy = w.declared.rollout.on_acceptance_drift
    if policy is not AcceptanceDriftPolicy.ALERT:
        _end(watch, w, AcceptanceWatchOutcome.DRIFTED)
    if policy is AcceptanceDriftPolicy.ROLLBACK:
        w.event("Warning", Reason.ACCEPTANCE_DRIFT, reason)
        return promote.rollback_promoted(
            w,
            Reason.ACCEPTANCE_DRIFT_AFTER_BAKE,
            f"{reason}; returning to the retained baseline config "
            f"{w.status.sagemaker.baseline_endpoint_config} (onAcceptanceDrift: rollback)",
        )
    if policy is AcceptanceDriftPolicy.DISABLE_SPECULATION:
        counted = LiveState(acceptance_below_floor=count)
        return speculation.begin(w, SpeculationStage.RETENTION, counted)
    watch.alerted_at = w.now
    message = f"{reason} (onAcceptanceDrift: alert: traffic is left as it is)"
    w.event("Warning", Reason.ACCEPTANCE_DRIFT, message)
    w.record(Reason.ACCEPTANCE_DRIFT, message)
    status = w.status
    status.message = message[:1024]
    status.set_condition(
        ConditionType.ACCEPTANCE_DRIFT,
        ConditionStatus.TRUE,
        Reason.ACCEPTANCE_DRIFT.value,
        message,
        w.now,
        status.observed_generation,
    )
    return _interval_due(w, watch, w.status.sagemaker.baseline_retained_until or w.now)


def _interval_due(w: Planned, watch: AcceptanceWatch, until: datetime) -> Outcome | None:
    """Ask for the promoted variant's next live interval (up to the retention's end), at
    the bake's period; DONE when one was asked for."""
    period = live_period(w.scaled(duration_seconds(w.spec.rollout.analysis.interval)))
    if watch.read_until is None:
        # The bake never read: from the first whole period after the watch began.
        watch.read_until = math.ceil(w.now.timestamp() / period) * period
        watch.period_seconds = period
    window = live_window(watch.read_until, period, w.now.timestamp(), until)
    if window is None:
        return None
    start, end = window
    watch.read_until = end
    watch.period_seconds = period
    # Acceptance only, from the container's log lines: no probes, no baseline variant.
    judge_live(w, start, end, period, probes=False, baseline="")
    drifted = (
        f"live acceptance below the floor since {watch.alerted_at:%H:%M:%S} "
        "(onAcceptanceDrift: alert); "
        if watch.alerted_at is not None
        else ""
    )
    return w.wait(
        f"{drifted}baseline retained until {until:%Y-%m-%dT%H:%M:%SZ}: watching the promoted "
        f"variant's live acceptance up to {datetime.fromtimestamp(end, UTC):%H:%M:%S}"
    )


def _end(watch: AcceptanceWatch, w: Planned, outcome: AcceptanceWatchOutcome) -> None:
    watch.ended_at = w.now
    # An alert already applied onAcceptanceDrift: that stays the outcome.
    watch.outcome = AcceptanceWatchOutcome.DRIFTED if watch.alerted_at is not None else outcome
