"""The bake after a promotion: the live judge keeps watching the promoted variant.

For spec.rollout.bake (half of baselineRetention unless set; 0s: none), the Succeeded
phase keeps asking for live intervals at the canary's cadence. The baseline no longer
serves, so each interval of the promoted variant is compared with the baseline's last
measured live figures, frozen at the promotion (status.rollout.bake.reference). A
confident regression of a gating check rolls back to the retained baseline through the
promoted-rollback path (rollbackReason bake); no data is never a verdict. When the bake
ends clean it says so once and stops judging; the retention goes on as before, and a
speculative candidate's live acceptance alone stays watched until it ends (phases/watch.py).

Level-triggered like the canary: the bake's end, its read cursor and its judge's state
live in status, so a restart mid-bake resumes it where status says.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from endpoint_optimizer.api import (
    BakeOutcome,
    BakeStatus,
    CheckKind,
    LiveDecision,
    SpeculationStage,
    Verdict,
    duration_seconds,
)
from endpoint_optimizer.pipeline.model import IN_PROGRESS_ENDPOINT
from endpoint_optimizer.pipeline.phases import promote, speculation
from endpoint_optimizer.pipeline.phases.analyze import judge_live, live_period, live_window
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.wakeup import Outcome, Planned


def baking(w: Planned) -> Outcome | None:
    """Succeeded with a bake under way: judge, roll back, or end it; None when none runs."""
    bake = w.status.rollout.bake
    if bake is None or not bake.active:
        return None
    if (out := _failed(w, bake)) is not None:
        return out
    if not bake.active:
        return None  # judged failed, the rollback refused (said so): nothing left to judge
    endpoint = w.obs.endpoint
    if endpoint is not None and endpoint.status in IN_PROGRESS_ENDPOINT:
        return w.wait(f"{_until(bake)}; endpoint {w.endpoint_name} is {endpoint.status}")
    if (
        endpoint is not None
        and (out := speculation.switching(w, endpoint, SpeculationStage.BAKE)) is not None
    ):
        return out
    promoted = speculation.promoted_config(w)
    if endpoint is None or endpoint.config_name != promoted:
        serving = endpoint.config_name if endpoint is not None else "nothing (gone)"
        _end(
            w,
            bake,
            BakeOutcome.STOPPED,
            Reason.BAKE_STOPPED,
            f"bake stopped: endpoint {w.endpoint_name} serves {serving}, not the promoted "
            f"config {promoted}; the live judge stops",
        )
        return None
    if (out := speculation.begin(w, SpeculationStage.BAKE, bake.judge)) is not None:
        return out
    if w.now >= bake.until:
        judged = bake.intervals
        unmatched = (
            f", {bake.latency_unmatched} of them without a latency comparison: more load per "
            "instance than the reference's"
            if bake.latency_unmatched
            else ""
        )
        _end(
            w,
            bake,
            BakeOutcome.PASSED,
            Reason.BAKE_PASSED,
            f"bake passed: the promoted variant held against the baseline's last live figures "
            f"until {bake.until:%Y-%m-%dT%H:%M:%SZ} ({judged} intervals judged{unmatched}); "
            "the live judge stops",
        )
        return None
    if (out := interval_due(w, bake)) is not None:
        return out
    return w.wait(f"{_until(bake)}: the promoted variant holds so far")


def watch_while_paused(w: Planned) -> Outcome | None:
    """Paused during the bake: the judge keeps reading and its failure still rolls back;
    the bake does not end while paused (it ends on the first wake-up after)."""
    bake = w.status.rollout.bake
    endpoint = w.obs.endpoint
    if (
        bake is None
        or not bake.active
        or endpoint is None
        or endpoint.status in IN_PROGRESS_ENDPOINT
        or endpoint.config_name != speculation.promoted_config(w)
    ):
        return None
    if (out := _failed(w, bake)) is not None:
        return out
    if bake.active:
        interval_due(w, bake)
    return None


def interval_due(w: Planned, bake: BakeStatus) -> Outcome | None:
    """Ask for the promoted variant's next live interval (up to the bake's end); DONE when
    one was asked for. The same period as the canary's live judge."""
    period = live_period(w.scaled(duration_seconds(w.spec.rollout.analysis.interval)))
    read_until = bake.read_until
    if read_until is None:
        # From the first whole period after the promotion was seen complete.
        read_until = math.ceil(w.now.timestamp() / period) * period
        bake.read_until = read_until
        bake.period_seconds = period
    window = live_window(read_until, period, w.now.timestamp(), bake.until)
    if window is None:
        return None
    start, end = window
    bake.read_until = end
    bake.period_seconds = period
    reference = bake.reference
    # Probes only where the reference has probe samples to compare with; the baseline no
    # longer serves: its side is the reference, not a variant.
    probes = bool(reference.probe_ttft_s or reference.probe_tpot_s)
    judge_live(w, start, end, period, probes=probes, baseline="")
    return w.wait(
        f"{_until(bake)}: judging the promoted variant's live metrics up to "
        f"{datetime.fromtimestamp(end, UTC):%H:%M:%S}"
    )


def _failed(w: Planned, bake: BakeStatus) -> Outcome | None:
    """A confident regression of a gating check: back to the retained baseline."""
    if bake.judge.decision is not LiveDecision.ROLLBACK:
        return None
    failed = [
        c
        for c in w.status.checks
        if c.kind is CheckKind.LIVE and c.gating and c.verdict is Verdict.FAIL
    ]
    reasons = [c.reason or c.name for c in failed]
    for reason in reasons:
        w.event("Warning", Reason.CHECK_FAILED, reason)
    said = "; ".join(reasons) or "the promoted variant is worse on live traffic"
    out = promote.rollback_promoted(
        w,
        Reason.BAKE_FAILED,
        f"bake: {said}; returning to the retained baseline config "
        f"{w.status.sagemaker.baseline_endpoint_config}",
    )
    if bake.active:
        # Refused (nothing to return to): said so; the judge has nothing left to do.
        bake.ended_at = w.now
        bake.outcome = BakeOutcome.FAILED
    return out


def _end(w: Planned, bake: BakeStatus, outcome: BakeOutcome, reason: Reason, message: str) -> None:
    bake.ended_at = w.now
    bake.outcome = outcome
    w.event("Normal", reason, message)
    w.record(reason, message)
    w.status.message = message[:1024]


def _until(bake: BakeStatus) -> str:
    return f"baking until {bake.until:%Y-%m-%dT%H:%M:%SZ}"
