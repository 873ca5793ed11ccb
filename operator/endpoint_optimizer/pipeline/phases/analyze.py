"""The candidate under analysis: traffic, comparisons, live intervals, verdicts, steps."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from endpoint_optimizer.api import Approval, Phase, SpeculationStage, duration_seconds
from endpoint_optimizer.pipeline import verdicts
from endpoint_optimizer.pipeline.model import APPROVE, IN_PROGRESS_ENDPOINT, ActionKind
from endpoint_optimizer.pipeline.phases import cutoff, outside, rollback, speculation
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.wakeup import DONE, Outcome, Planned

# Periods one live read asks for at most (GetMetricData returns them in one call).
MAX_LIVE_PERIODS = 10


def analyzing(w: Planned) -> Outcome:
    endpoint = w.obs.endpoint
    if endpoint is None or endpoint.status in IN_PROGRESS_ENDPOINT:
        return w.wait(f"endpoint {w.endpoint_name} is {endpoint.status if endpoint else 'gone'}")
    if endpoint.config_name == w.names.promoted_config:
        # Only promoting() makes this config: the promotion was asked for (checks passed
        # or approved) and the process died before status said so. Finish it; rolling
        # back a promotion SageMaker completed would undo a decision already taken.
        return w.goto(Phase.PROMOTING, Reason.PROMOTION_RESUMED, "resuming the promotion in flight")
    if (out := w.strategy.switching(w, endpoint)) is not None:
        return out
    sm = w.status.sagemaker
    if not w.made_here(endpoint.config_name):
        return outside.config_changed(w, endpoint)
    if (out := speculation.switching(w, endpoint, SpeculationStage.CANARY)) is not None:
        return out
    if (out := cutoff.switching(w, endpoint)) is not None:
        return out
    if endpoint.config_name != sm.candidate_endpoint_config:
        return rollback.begin(
            w,
            Reason.CANDIDATE_GONE,
            f"endpoint serves {endpoint.config_name}, not the candidate config",
        )
    if (out := outside.weights_changed(w, endpoint)) is not None:
        return out
    if (out := w.strategy.traffic(w, endpoint)) is not None:
        return out
    if (out := compare_due(w)) is not None:
        return out
    # Before the verdicts: a loss above the cut-off is the engine the cut-off re-makes.
    if (out := cutoff.begin(w)) is not None:
        return out
    if (out := verdicts.apply(w)) is not None:
        return out
    rollout = w.status.rollout
    if (out := speculation.begin(w, SpeculationStage.CANARY, rollout.live_judge)) is not None:
        return out
    if verdicts.hold(w):
        # Held: nothing moves forward, but the live judge keeps watching the candidate.
        held = w.status.message
        live_interval_due(w)
        return w.wait(held)
    if (out := w.strategy.after_checks(w)) is not None:
        return out
    # After the step's pause, the periods up to its end are read, and no newer ones: a
    # live read that takes longer than a period (probes) always finds a newer period and
    # would otherwise hold the step open.
    if (out := live_interval_due(w, until=step_end(w))) is not None:
        return out
    return advance_step_or_promote(w)


def watch_while_paused(w: Planned) -> Outcome | None:
    """Paused by the annotation with a candidate taking traffic: nothing moves forward,
    but the live judge keeps reading intervals, and its failure still rolls back."""
    endpoint = w.obs.endpoint
    if (
        endpoint is None
        or endpoint.status in IN_PROGRESS_ENDPOINT
        or endpoint.config_name != w.status.sagemaker.candidate_endpoint_config
    ):
        return None
    if (out := verdicts.live_rollback(w)) is not None:
        return out
    return live_interval_due(w)


def compare_due(w: Planned) -> Outcome | None:
    """The paired comparison of this step, once per step."""
    rollout = w.status.rollout
    if rollout.compared_step == rollout.step_index:
        return None
    if (out := w.retry_pending(ActionKind.COMPARE)) is not None:
        return out
    w.measure(
        ActionKind.COMPARE,
        w.endpoint_name,
        request=w.strategy.compare_request(w),
        baseline_variant=w.baseline_variant,
        # A shadow variant cannot be invoked directly; its copy of the baseline's
        # traffic is what the comparison reads.
        candidate_variant=w.names.candidate_variant,
        step=rollout.step_index,
    )
    return w.wait(f"comparing candidate with baseline at step {rollout.step_index + 1}")


def live_period(interval_s: float) -> int:
    """The CloudWatch period for an analysis interval: the longest one GetMetricData takes
    (1, 5, 10, 20, 30 s or a multiple of 60) that is not longer than the interval."""
    if interval_s >= 60:
        return int(interval_s // 60) * 60
    return max(p for p in (1, 5, 10, 20, 30) if p <= max(interval_s, 1))


def live_interval_due(w: Planned, until: datetime | None = None) -> Outcome | None:
    """Ask for the live judge's next CloudWatch interval; DONE when one was asked for.

    Intervals are whole CloudWatch periods from the first one that starts after the
    analysis began, each read once. CloudWatch publishes a period a while after it
    closes, so the newest closed period is left for the next wake-up.
    """
    if not w.strategy.judges_live:
        return None
    rollout = w.status.rollout
    period = live_period(w.scaled(duration_seconds(w.spec.rollout.analysis.interval)))
    now = w.now.timestamp()
    read_until = rollout.live_read_until
    if read_until is None:
        # Canary: from the first whole period after the pinned comparison, which
        # already judged the step's start on per-request samples (its requests are not
        # judged twice). Shadow: from the candidate's deployment.
        began = w.strategy.live_from(w)
        read_until = math.ceil(began.timestamp() / period) * period
        rollout.live_read_until = read_until
        rollout.live_period_seconds = period
    window = live_window(read_until, period, now, until)
    if window is None:
        return None
    start, end = window
    rollout.live_read_until = end
    rollout.live_period_seconds = period
    judge_live(w, start, end, period, probes=w.strategy.probes_live(w), baseline=w.baseline_variant)
    return w.wait(f"judging live metrics up to {datetime.fromtimestamp(end, UTC):%H:%M:%S}")


def judge_live(
    w: Planned, start: float, end: float, period: int, *, probes: bool, baseline: str
) -> None:
    """Ask for one live window of the candidate's variant to be read and judged against
    `baseline` (a variant; "" where the baseline no longer serves and a reference stands
    in for it)."""
    w.measure(
        ActionKind.JUDGE_LIVE,
        w.endpoint_name,
        request={
            "start": datetime.fromtimestamp(start, UTC).isoformat(),
            "end": datetime.fromtimestamp(end, UTC).isoformat(),
            "periodSeconds": period,
            "probes": probes,
        },
        baseline_variant=baseline,
        candidate_variant=w.names.candidate_variant,
        step=w.status.rollout.step_index,
    )


def live_window(
    read_until: float, period: int, now: float, until: datetime | None = None
) -> tuple[float, float] | None:
    """The next window of whole periods to read after `read_until`, or None when no new
    period is published yet.

    CloudWatch publishes a period a while after it closes, so the newest closed period is
    left for the next wake-up; nothing after `until` (a step's or a bake's end) is read.
    After an outage only the newest few periods are read: the judge's tests are per
    interval, a backlog adds nothing new.
    """
    published = (math.floor(now / period) - 1) * period
    if until is not None:
        published = min(published, math.floor(until.timestamp() / period) * period)
    if read_until + period > published:
        return None
    return max(float(read_until), published - MAX_LIVE_PERIODS * period), float(published)


def step_end(w: Planned) -> datetime:
    """When the current step's pause ends (or ended)."""
    rollout = w.status.rollout
    started = rollout.step_started_at or w.now
    pause = w.scaled(duration_seconds(w.spec.rollout.steps[rollout.step_index].pause))
    return started + timedelta(seconds=pause)


def advance_step_or_promote(w: Planned) -> Outcome:
    """The step's pause observed: the next step, approval, or the promotion."""
    rollout = w.status.rollout
    steps = w.spec.rollout.steps
    started = rollout.step_started_at or w.now
    elapsed = (w.now - started).total_seconds()
    pause = w.scaled(duration_seconds(steps[rollout.step_index].pause))
    if elapsed < pause:
        return w.wait(
            f"step {rollout.step_index + 1}/{len(steps)}: observing, {pause - elapsed:.0f}s left"
        )
    if rollout.step_index + 1 < len(steps):
        rollout.step_index += 1
        rollout.step_started_at = w.now
        w.record(Reason.STEP_ADVANCED, f"step {rollout.step_index + 1}")
        return Phase.ANALYZING
    if (out := w.strategy.before_promotion(w)) is not None:
        return out
    if w.spec.rollout.approval is Approval.BEFORE_PROMOTION:
        return w.goto(
            Phase.AWAITING_APPROVAL,
            Reason.AWAITING_APPROVAL,
            f"{verdicts.through(w)}; {_read_samples(w)}annotate optimizer.dev/approve=true to "
            "promote (or optimizer.dev/rollback=true to reject)",
        )
    return w.goto(
        Phase.PROMOTING, Reason.CHECKS_PASSED, f"{verdicts.through(w)}; promoting the candidate"
    )


def awaiting_approval(w: Planned) -> Outcome:
    if w.lever_pending(APPROVE):
        w.consume_lever(APPROVE)
        if (spot := w.status.spot_check) is not None:
            spot.approved = True
        return w.goto(Phase.PROMOTING, Reason.APPROVED, "promotion approved by annotation")
    w.wait(
        f"{_read_samples(w)}waiting for optimizer.dev/approve=true (or optimizer.dev/rollback=true)"
    )
    return DONE


def _read_samples(w: Planned) -> str:
    """What the reviewer reads first: the spot check's ConfigMap, when the spec has one."""
    spot = w.status.spot_check
    if spot is None:
        return ""
    return f"read the {spot.samples} paired samples in ConfigMap {spot.config_map}, then "
