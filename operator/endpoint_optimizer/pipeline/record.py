"""Write what a measurement found into status (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from endpoint_optimizer.analysis import cutoff
from endpoint_optimizer.analysis.admissible import positive_finite
from endpoint_optimizer.analysis.benchmark import BenchmarkPolicy, objective_measure
from endpoint_optimizer.analysis.live import (
    LiveJudgement,
    LiveObservation,
    LivePolicy,
    ProbeSamples,
    VariantInterval,
    add_to_spread,
    geometric_running,
    judge_acceptance,
    judge_interval,
    load_step,
)
from endpoint_optimizer.analysis.live_acceptance import CHECK_NAME as ACCEPTANCE_CHECK
from endpoint_optimizer.api import (
    TERMINAL_PHASES,
    AcceptanceWatch,
    BakeStatus,
    Condition,
    ConditionStatus,
    ConditionType,
    Failure,
    LevelGain,
    MeasurementRetry,
    NoDataPolicy,
    Objective,
    OptimizedEndpointSpec,
    OptimizedEndpointStatus,
    Phase,
    RollbackReason,
    SpeculationCutoff,
    VariantMeasurements,
    parse_status,
)
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.api.live import (
    MAX_REFERENCE_SAMPLES,
    LiveDecision,
    LiveFigures,
    LiveState,
)
from endpoint_optimizer.bench.served_by import MIXED, SYNTHETIC
from endpoint_optimizer.evaluation.slices import SLICE_PREFIX, is_must_pass
from endpoint_optimizer.evaluation.spot_check import SpotCheck
from endpoint_optimizer.pipeline import pricing, search_status
from endpoint_optimizer.pipeline.assess import bake_policy, judge, live_policy
from endpoint_optimizer.pipeline.cadence import retry_delay
from endpoint_optimizer.pipeline.model import ActionKind, Event, Measurement, RawMeasurement, Timing
from endpoint_optimizer.pipeline.plan import without_speculation
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.search import compounded, cost_per_million_tokens
from endpoint_optimizer.pipeline.search_status import in_flight
from endpoint_optimizer.pipeline.wakeup import CANDIDATE_LIVE

# History entry and Event reason when a measurement rests on a synthetic stand-in.
SYNTHETIC_EVENT = Reason.SYNTHETIC_MEASUREMENT.value
# The fallback note in a condition message: the reason is cut here (the whole of it is in
# status.baseline|candidate.engineNote), so the message stays readable in `kubectl describe`.
MAX_FALLBACK_NOTE = 200


def live_state(status: OptimizedEndpointStatus) -> LiveState:
    return status.rollout.live_judge or LiveState()


def served_spec(
    spec: OptimizedEndpointSpec, status: OptimizedEndpointStatus
) -> OptimizedEndpointSpec:
    """The spec the serving candidate is judged by: spec.search's candidate in flight (or
    its winner), without speculativeDecoding once onAcceptanceDrift: disableSpeculation
    switched it off (phases/speculation.py)."""
    spec = search_status.served_spec(spec, status)
    if status.rollout.speculation_disabled is None:
        return spec
    return without_speculation(spec)


@dataclass(frozen=True)
class Folded:
    """A measurement folded into status, and the Events that say what it rests on."""

    status: dict[str, Any]
    events: list[Event]
    # The paired samples to write to the spot-check ConfigMap before `status` is kept.
    spot_check: SpotCheck | None = None


def fold(
    status_data: dict[str, Any],
    raw: RawMeasurement,
    spec: OptimizedEndpointSpec,
    now: datetime,
    timing: Timing | None = None,
) -> Folded:
    """Judge what a measurement action brought back, and record it.

    A Warning per variant whose numbers rest on a synthetic fallback (`engine_notes`).
    Once speculation was switched off (phases/speculation.py), the twin is judged as what
    it serves: the spec without speculativeDecoding.
    """
    status = parse_status(status_data)
    measurement = judge(served_spec(spec, status), raw, status.eval_noise)
    events = [Event("Warning", SYNTHETIC_EVENT, note) for note in engine_notes(measurement)]
    return Folded(
        # The declared spec: record() serves it the same way, and reads what it declares.
        record(status_data, measurement, spec, now, timing),
        events,
        measurement.spot_check,
    )


def record(
    status_data: dict[str, Any],
    measurement: Measurement,
    spec: OptimizedEndpointSpec,
    now: datetime,
    timing: Timing | None = None,
) -> dict[str, Any]:
    """The status with the measurement in it."""
    status: OptimizedEndpointStatus = parse_status(status_data)
    target = spec.objective.min_improvement  # the whole stack's bar, not a search step's
    declared, spec = spec, served_spec(spec, status)
    if measurement.void and measurement.refused:
        # The container refused the requests' body: the same requests would be refused
        # again, so this ends the pipeline (traffic back on the baseline first where a
        # candidate may hold some), naming the field to set.
        message = f"the {_measured(measurement)} was refused by the container: {measurement.void}"
        return record_error(status.dump(), message, True, now, Reason.REQUEST_REFUSED)
    if measurement.void:
        return _record_void(status, measurement, now, timing or Timing()).dump()
    if measurement.kind in (ActionKind.MEASURE_BASELINE, ActionKind.COMPARE):
        status.measurement_retry = None
    if measurement.live:
        bake = status.rollout.bake
        if status.phase is Phase.SUCCEEDED and bake is not None and bake.active:
            return _record_bake(status, bake, measurement.live, spec, now).dump()
        watch = status.rollout.acceptance_watch
        if status.phase is Phase.SUCCEEDED and watch is not None and watch.active:
            return _record_watch(status, watch, measurement.live, spec, now).dump()
        return _record_live(status, measurement.live, spec, now).dump()
    if measurement.kind is ActionKind.COMPARE and measurement.candidate is None:
        return _record_shadow_compare(status, measurement, now).dump()
    if measurement.kind is ActionKind.COMPARE and status.phase is Phase.SEARCHING:
        return _record_search(
            status, measurement, spec, target, now, timing or Timing(), declared
        ).dump()
    status.baseline = measurement.baseline
    notes = engine_notes(measurement)
    if measurement.kind is ActionKind.MEASURE_BASELINE:
        status.eval_noise = measurement.eval_noise
        status.record(now, Reason.BASELINE_BENCHMARKED, _summary(measurement, spec))
        if notes:
            status.record(now, SYNTHETIC_EVENT, "; ".join(notes))
        return status.dump()
    status.candidate = measurement.candidate
    status.checks = list(measurement.checks)
    status.rollout.compared_step = measurement.step
    _record_cutoff(status, measurement, spec, now)
    objective = next((c for c in measurement.checks if c.kind.value == "objective"), None)
    if objective is not None and objective.candidate is not None and objective.baseline:
        status.objective_gain = round(1.0 - objective.candidate / objective.baseline, 4)
    concurrency = spec.judged_concurrency()
    base = measurement.baseline.level(concurrency)
    cand = measurement.candidate.level(concurrency) if measurement.candidate else None
    if base and cand and base.ttft_p99_ms is not None and cand.ttft_p99_ms is not None:
        status.ttft_p99_summary = (
            f"{base.ttft_p99_ms:.0f} ms -> {cand.ttft_p99_ms:.0f} ms at c{concurrency}"
        )
    failed = [c for c in measurement.checks if c.gating and c.verdict is Verdict.FAIL]
    status.record(
        now,
        Reason.CANDIDATE_COMPARED,
        f"step {measurement.step + 1}: {len(measurement.checks)} checks, {len(failed)} failed",
    )
    if notes:
        status.record(now, SYNTHETIC_EVENT, "the verdicts rest on " + "; ".join(notes))
    return status.dump()


def _record_search(
    status: OptimizedEndpointStatus,
    measurement: Measurement,
    spec: OptimizedEndpointSpec,
    target: float,
    now: datetime,
    timing: Timing,
    declared: OptimizedEndpointSpec,
) -> OptimizedEndpointStatus:
    """A search candidate's comparison with the current best, into its row of
    status.search. status.baseline, candidate and checks stay the rollout's. `spec` is
    the candidate's (served) spec, `declared` the resource's: prices are the declared
    instance type's and the alternatives'."""
    search = status.search
    row = in_flight(search) if search is not None and search.done is None else None
    if search is None or row is None or row.measured:
        return status  # no candidate in flight (a stale comparison): nothing to record
    if measurement.candidate is None or measurement.candidate.variant_name != row.variant:
        return status  # not this candidate's comparison
    judged = spec.judged_concurrency()
    gating = [c for c in measurement.checks if c.gating and c.kind is not CheckKind.LIVE]
    objective = next((c for c in gating if c.kind is CheckKind.OBJECTIVE), None)
    others = [c for c in gating if c.kind is not CheckKind.OBJECTIVE]
    # As the rollout's verdicts would: a Fail disqualifies; an Inconclusive does too unless
    # onNoData: pass waves it through (never a must-pass eval slice); a class that is not
    # must-pass only informs.
    waved = spec.rollout.analysis.on_no_data is NoDataPolicy.PASS
    not_passed = [
        c
        for c in others
        if c.verdict is Verdict.FAIL
        or (
            c.verdict is not Verdict.PASS
            and c.kind is not CheckKind.EVAL_SLICE
            and not (waved and not is_must_pass(c))
        )
    ]
    gain, gain_low = _gains(objective, spec)
    row.measured = True
    row.gain = gain
    row.gain_low = gain_low
    row.improves = objective is not None and objective.verdict is Verdict.PASS
    row.gates = not not_passed
    row.failed_checks = [c.name[:96] for c in not_passed][:32]
    steps = [k.gain for k in search.rows if k.name in row.base and k.gain is not None]
    # Met against the baseline: the kept gains compound (each was measured against the
    # stack before it), and every gate (the SLOs among them) passed.
    lower = spec.objective.metric.lower_is_better
    row.objective_met = (
        gain is not None and compounded([*steps, gain], lower) >= target and row.gates
    )
    row.binding = _binding(measurement, spec)
    row.levels = _level_gains(measurement.checks, spec)
    base, cand = measurement.baseline, measurement.candidate
    if base.eval_score is not None and cand.eval_score is not None:
        row.eval_delta = round(cand.eval_score - base.eval_score, 4)
    slices = [
        c
        for c in measurement.checks
        if c.name.startswith(SLICE_PREFIX) and c.baseline is not None and c.candidate is not None
    ]
    row.slice_deltas = {
        c.name.removeprefix(SLICE_PREFIX)[:64]: round((c.candidate or 0.0) - (c.baseline or 0.0), 4)
        for c in slices[:16]
    }
    row.acceptance_rate = cand.acceptance_rate
    level = cand.level(judged)
    if level is not None:
        row.tokens_per_second = level.output_tokens_per_second
        row.latency_ms = level.e2e_p50_ms
    served = declared.searched([*row.base, row.name])
    usd = pricing.hourly(declared, search, served)
    if usd is not None and row.tokens_per_second is not None:
        cost = cost_per_million_tokens(row.tokens_per_second, usd)
        row.cost_per_million_tokens = round(cost, 4) if cost is not None else None
    started = row.started_at or now
    # In the spec's time (tests run durations scaled down), times the variant's instances.
    elapsed = max(0.0, (now - started).total_seconds()) / timing.time_scale
    hours = elapsed / 3600.0 * served.instance_count
    row.instance_hours = round(hours, 4)
    search.instance_hours = round(search.instance_hours + hours, 4)
    if not row.gates:
        row.why = ("not passed: " + ", ".join(row.failed_checks))[:512]
    elif not row.improves:
        row.why = (objective.reason if objective is not None else "no objective check")[:512]
    status.record(
        now,
        Reason.CANDIDATE_COMPARED,
        f"search candidate {row.name} on [{', '.join(row.base) or 'baseline'}]: "
        f"gain {_percent(gain)}, {len(not_passed)} gating checks not passed",
    )
    return status


def _percent(gain: float | None) -> str:
    return "unmeasured" if gain is None else f"{100 * gain:+.1f} %"


def _gains(
    objective: Check | None, spec: OptimizedEndpointSpec
) -> tuple[float | None, float | None]:
    """The objective's gain over the current best and its confidence bound."""
    if objective is None or not objective.baseline or objective.candidate is None:
        return None, None
    ratio = objective.candidate / objective.baseline
    latency = spec.objective.metric.lower_is_better
    gain = (1.0 - ratio) if latency else (ratio - 1.0)
    bound = objective.interval_high if latency else objective.interval_low
    low = None if bound is None else ((1.0 - bound) if latency else (bound - 1.0))
    return round(gain, 4), (round(low, 4) if low is not None else None)


def _level_gains(checks: Sequence[Check], spec: OptimizedEndpointSpec) -> list[LevelGain]:
    """Each level's gain and interval, from its benchmark check of the objective's statistic
    (e2e p50 for latency, tpot p50 for itlP50, mean throughput for throughput and cost):
    candidate/baseline ratios."""
    measure = objective_measure(spec.objective.metric, BenchmarkPolicy())
    prefix = measure.label

    def gain(ratio: float | None) -> float | None:
        if ratio is None or not math.isfinite(ratio) or ratio <= 0:
            return None
        return round(measure.gain(ratio), 4)

    levels = []
    for c in checks:
        if c.kind is not CheckKind.BENCHMARK or not c.name.startswith(prefix):
            continue
        level = c.name.removeprefix(prefix)
        if not level.isdigit() or not c.baseline or c.candidate is None:
            continue
        ends = [g for g in (gain(c.interval_low), gain(c.interval_high)) if g is not None]
        levels.append(
            LevelGain(
                concurrency=int(level),
                gain=gain(c.candidate / c.baseline),
                gain_low=min(ends) if len(ends) == 2 else None,
                gain_high=max(ends) if len(ends) == 2 else None,
            )
        )
    return sorted(levels, key=lambda lg: lg.concurrency)[:16]


def _binding(measurement: Measurement, spec: OptimizedEndpointSpec) -> str:
    """The metric furthest from its target with the candidate: the SLO the candidate is
    nearest to breaking (measured / limit), else the objective's own metric."""
    slo = spec.benchmark.slo
    cand = measurement.candidate
    level = cand.level(spec.judged_concurrency()) if cand is not None else None
    worst, binding = 0.0, ""
    if slo is not None and level is not None:
        for metric, limit, value in (
            ("ttft", slo.ttft_p99_ms, level.ttft_p99_ms),
            ("itl", slo.itl_p99_ms, level.itl_p99_ms),
            ("e2e", slo.e2e_p99_ms, level.e2e_p99_ms),
        ):
            if limit and value is not None and value / limit > worst:
                worst, binding = value / limit, metric
    if binding:
        return binding
    return spec.objective.metric.binding


def _record_cutoff(
    status: OptimizedEndpointStatus,
    measurement: Measurement,
    spec: OptimizedEndpointSpec,
    now: datetime,
) -> None:
    """The concurrency above which speculation stops winning, from this comparison's
    per-level checks. Kept as it is once a candidate was re-made with it: the re-made
    candidate's comparison judges a different engine (no drafts above the cut-off)."""
    speculative = spec.optimizations.speculative_decoding
    found = status.rollout.speculation_cutoff
    if speculative is None or (found is not None and found.model):
        return
    # Cost per token is judged through throughput (its reciprocal on the same instance).
    latency = spec.objective.metric not in (Objective.THROUGHPUT, Objective.COST)
    statistic = cutoff.objective_statistic(latency)
    result = cutoff.find_cutoff(cutoff.level_outcomes(measurement.checks, statistic, latency))
    batch = (
        cutoff.per_instance(result.concurrency, spec.instance_count)
        if result.concurrency is not None
        else None
    )
    status.rollout.speculation_cutoff = SpeculationCutoff(
        at=now,
        metric=statistic,
        concurrency=result.concurrency,
        batch_size=batch,
        levels=list(result.levels),
        reason=result.reason[:1024],
        switch=cutoff.switch_note(speculative.method, speculative.concurrency_cutoff, batch)[:1024],
    )


def _measured(measurement: Measurement) -> str:
    """What a void measurement was, in a status message."""
    return "baseline benchmark" if measurement.kind is ActionKind.MEASURE_BASELINE else "comparison"


def _record_void(
    status: OptimizedEndpointStatus, measurement: Measurement, now: datetime, timing: Timing
) -> OptimizedEndpointStatus:
    """No measurement: nothing is judged or marked measured; it is tried again later."""
    previous = status.measurement_retry
    attempts = (previous.attempts if previous and previous.action == measurement.kind else 0) + 1
    delay = retry_delay(attempts, timing, f"{status.observed_generation}/{measurement.kind}")
    retry = MeasurementRetry(
        action=measurement.kind.value,
        attempts=attempts,
        last_at=now,
        next_at=now + timedelta(seconds=delay),
        reason=measurement.void[:1024],
    )
    status.measurement_retry = retry
    message = (
        f"the {_measured(measurement)} was no measurement ({measurement.void}); "
        "nothing of it is judged. "
        f"Attempt {attempts}; the next one at {retry.next_at:%H:%M:%S}"
    )
    status.message = message[:1024]
    status.record(now, Reason.MEASUREMENT_VOID, message)
    return status


def engine_notes(measurement: Measurement) -> list[str]:
    """A line per measured variant whose numbers came from a synthetic stand-in.

    Only a labelled fallback counts (the container said the real model could not run
    a technique and its effect was modelled); a sandbox that is synthetic throughout
    says so in servedBy and needs no warning.
    """
    notes = []
    for m in (measurement.baseline, measurement.candidate):
        if m is not None and m.served_by in (SYNTHETIC, MIXED) and m.engine_note:
            notes.append(
                f"{m.served_by} numbers for {m.variant_name or 'a variant'}: {m.engine_note}"
            )
    return notes


def fallback_note(status: OptimizedEndpointStatus) -> str:
    """Which measured variants rest on a fallback, and why, in one bounded phrase.

    E.g. `baseline and candidate measured on the synthetic engine: fp8 needs FP8 tensor
    cores (GPU), a CPU has none`. Empty unless a container labelled a fallback (as
    `engine_notes`): a sandbox synthetic throughout, a real engine or an unlabelled
    container say nothing here. The candidate's reason is the one given: under a
    fallback the baseline is synthetic only because it is paired with the candidate.
    """
    fallen: list[tuple[str, VariantMeasurements]] = [
        (role, measured)
        for role, measured in (("baseline", status.baseline), ("candidate", status.candidate))
        if measured is not None
        and measured.served_by in (SYNTHETIC, MIXED)
        and measured.engine_note
    ]
    if not fallen:
        return ""
    roles = " and ".join(role for role, _ in fallen)
    where = (
        "partly on the synthetic engine"
        if any(m.served_by == MIXED for _, m in fallen)
        else "on the synthetic engine"
    )
    note = f"{roles} measured {where}: {fallen[-1][1].engine_note}"
    return note if len(note) <= MAX_FALLBACK_NOTE else note[: MAX_FALLBACK_NOTE - 3] + "..."


def with_fallback_in_conditions(status_data: dict[str, Any]) -> dict[str, Any]:
    """The status with `fallback_note` at the end of the condition messages people read.

    Where users look first (`kubectl describe`, `kubectl get -o yaml`, `kubectl wait`
    output): the Progressing message throughout (while analysing, and its final message),
    and at the end the Ready message and a true Degraded or Terminal message. Idempotent:
    the decision rewrites the messages every wake-up and this runs after it, so a message
    that already ends with the note is left alone. Nothing changes without a fallback.
    """
    status = parse_status(status_data)
    note = fallback_note(status)
    if not note:
        return status_data
    ended = status.phase in TERMINAL_PHASES
    suffix = f"({note})"
    changed = False
    conditions = []
    for condition in status.conditions:
        if _carries_note(condition, ended) and not condition.message.endswith(suffix):
            message = f"{condition.message} {suffix}" if condition.message else suffix
            condition = condition.model_copy(update={"message": message})
            changed = True
        conditions.append(condition)
    if not changed:
        return status_data
    status.conditions = conditions
    return status.dump()


def _carries_note(condition: Condition, ended: bool) -> bool:
    if condition.type is ConditionType.PROGRESSING:
        return True
    if not ended:
        return False
    # At the end: Ready always; Degraded and Terminal only when they hold (else empty).
    return condition.type is ConditionType.READY or condition.status is ConditionStatus.TRUE


def _record_shadow_compare(
    status: OptimizedEndpointStatus, measurement: Measurement, now: datetime
) -> OptimizedEndpointStatus:
    """A shadow's comparison: the benchmark went to production, the shadow got copies.

    It measures the baseline only; the candidate, checks and eval scores that a pinned
    stage recorded stay (the live judge and the shadow objective judge the rest).
    """
    previous = status.baseline
    kept = ("eval_score", "refusal_rate", "eval_items")
    status.baseline = measurement.baseline.model_copy(
        update={k: getattr(previous, k) for k in kept} if previous is not None else {}
    )
    status.checks = [c for c in status.checks if c.kind is not CheckKind.LIVE]
    status.rollout.compared_step = measurement.step
    status.record(
        now,
        Reason.CANDIDATE_COMPARED,
        f"step {measurement.step + 1}: production benchmarked, the shadow answered copies",
    )
    return status


def _record_live(
    status: OptimizedEndpointStatus,
    observations: tuple[LiveObservation, ...],
    spec: OptimizedEndpointSpec,
    now: datetime,
) -> OptimizedEndpointStatus:
    """Fold intervals, oldest first, into the live judge; the newest checks replace the
    previous live ones.

    The benchmark comparison's checks stay: the live judge guards the pause between them.
    A Hold (no data, onNoData: pause) moves the step's start on by the interval, so the
    step's clock does not advance while nobody is watching.
    """
    rollout = status.rollout
    period = timedelta(seconds=float(rollout.live_period_seconds or 0))
    policy = live_policy(spec)
    current = live_state(status)
    for observation in observations:
        judgement = judge_interval(current, observation, policy, now)
        if judgement.state == current:
            continue  # an interval seen before, or a rollback already decided
        if judgement.decision is LiveDecision.HOLD and rollout.step_started_at is not None:
            rollout.step_started_at = min(rollout.step_started_at + period, now)
        failed = [c.name for c in judgement.checks if c.verdict is Verdict.FAIL]
        if failed or judgement.decision is not current.decision:
            status.record(
                now,
                Reason(f"LiveJudge{judgement.decision.value}"),
                f"interval ending {observation.interval_end:%H:%M:%S}: "
                + "; ".join(c.reason for c in judgement.checks if c.reason),
            )
        current = judgement.state
        kept = [c for c in status.checks if c.kind is not CheckKind.LIVE]
        status.checks = [*kept, *judgement.checks]
        rollout.failed_checks = current.failures
        rollout.baseline_live = remembered(
            rollout.baseline_live, observation.baseline, observation.interval_end, policy
        )
    rollout.live_judge = current
    return status


def remembered(
    previous: LiveFigures | None,
    interval: VariantInterval,
    interval_end: datetime,
    policy: LivePolicy,
) -> LiveFigures | None:
    """The baseline's last measured live figures, per source: CloudWatch's statistics from
    the intervals with enough invocations, the probes from those with enough probe samples
    (what the judge itself would use), and the 5XX over every usable interval.

    Latency rises with load, and the bake compares the promoted variant, which serves all
    the traffic, with these figures: the latency pools keep the intervals at about the
    highest per-instance load the baseline carried (`_load_match`), so a canary whose
    first step is small leaves a reference at nearly the load the promotion brings."""
    figures = previous.model_copy(deep=True) if previous is not None else LiveFigures()
    changed = False
    if policy.min_invocations <= interval.invocations and interval.errors_5xx <= (
        interval.invocations
    ):
        figures.invocations_total += interval.invocations
        figures.errors_5xx_total += interval.errors_5xx
        changed = True
    statistics = interval.invocations >= policy.min_invocations and (
        positive_finite(interval.latency_mean_s) or positive_finite(interval.latency_s)
    )
    probes = interval.probes
    probed = (
        probes is not None and _usable(probes.ttft_s, policy) and _usable(probes.tpot_s, policy)
    )
    # Sources (CloudWatch statistics, probes): on 1-second periods of a quiet endpoint an
    # interval may bring one without the other. The reference is the intervals with the
    # most sources, at the highest load among those (`_load_match`).
    held = bool(figures.mean_intervals or figures.p99_intervals) + bool(figures.probe_ttft_s)
    brings = statistics + probed
    if probes is not None and probed:
        # How much each interval's mean moved, at whatever load: the bake's per-interval
        # variance (grouped by load).
        load, tolerance = interval.load_per_instance_s, policy.load_tolerance
        add_to_spread(
            figures.probe_ttft_spread, [math.log(v) for v in probes.ttft_s], load, tolerance
        )
        add_to_spread(
            figures.probe_tpot_spread, [math.log(v) for v in probes.tpot_s], load, tolerance
        )
        changed = True
    if brings and _load_match(figures, interval.load_per_instance_s, policy, brings - held):
        if statistics:
            _pool_statistics(figures, interval)
        if probes is not None and probed:
            figures.probe_requests = probes.requests
            figures.probe_errors = probes.errors
            # Pooled over intervals (newest kept): one interval's load would otherwise be
            # the reference for the whole bake.
            figures.probe_ttft_s = [*figures.probe_ttft_s, *probes.ttft_s][-MAX_REFERENCE_SAMPLES:]
            figures.probe_tpot_s = [*figures.probe_tpot_s, *probes.tpot_s][-MAX_REFERENCE_SAMPLES:]
            figures.probe_input_tokens = probes.input_tokens
            figures.probe_output_tokens = probes.output_tokens
        changed = True
    if not changed:
        return previous
    figures.interval_end = interval_end
    return figures


def _pool_statistics(figures: LiveFigures, interval: VariantInterval) -> None:
    figures.invocations = interval.invocations
    figures.errors_5xx = interval.errors_5xx
    figures.latency_mean_s = (
        interval.latency_mean_s if positive_finite(interval.latency_mean_s) else None
    )
    figures.latency_p99_s = interval.latency_s if positive_finite(interval.latency_s) else None
    if figures.latency_mean_s is not None:
        figures.mean_log_sum += math.log(figures.latency_mean_s)
        figures.mean_intervals += 1
    if figures.latency_p99_s is not None:
        figures.p99_log_sum += math.log(figures.latency_p99_s)
        figures.p99_intervals += 1


def _load_match(
    figures: LiveFigures, load: float | None, policy: LivePolicy, more_sources: int = 0
) -> bool:
    """Whether an interval at per-instance `load` joins the latency pools (updates the
    pools' load; a load outside the tolerance empties them first when it joins).

    Within (1 + load_tolerance)x of the pools' load it joins. Above, the pools start
    afresh from it (the reference moves to the higher load) unless it brings fewer sources
    than they hold (`more_sources` < 0: it would leave the reference without one), and it
    is left out then. Below, it is left out (its latency was measured at a lighter load
    than the reference's) unless it brings more sources than they hold: a reference with
    both beats one at a higher load with one, and the pools start afresh from it. An
    unknown load joins, as before CloudWatch's InvocationsPerInstance was read."""
    if load is None or not positive_finite(load):
        return True
    current = figures.load_per_instance_s if figures.load_intervals else None
    step = 0 if current is None else load_step(load, current, policy.load_tolerance)
    lighter, heavier = step < 0, step > 0
    if (lighter and more_sources <= 0) or (heavier and more_sources < 0):
        return False
    if lighter or heavier:
        figures.latency_mean_s = figures.latency_p99_s = None
        figures.mean_log_sum = figures.p99_log_sum = 0.0
        figures.mean_intervals = figures.p99_intervals = 0
        figures.probe_ttft_s, figures.probe_tpot_s = [], []
        figures.load_intervals = 0
    n = figures.load_intervals
    if n == 0 or current is None:
        figures.load_per_instance_s, figures.load_intervals = load, 1
    else:
        figures.load_per_instance_s = geometric_running(current, n, load)
        figures.load_intervals = n + 1
    return True


def _usable(samples: list[float], policy: LivePolicy) -> bool:
    return len(samples) >= policy.min_probes and all(positive_finite(v) for v in samples)


def reference_interval(figures: LiveFigures) -> VariantInterval:
    """The baseline's side of a bake interval: its last measured live figures."""
    probes = None
    if figures.probe_ttft_s or figures.probe_tpot_s:
        probes = ProbeSamples(
            requests=figures.probe_requests,
            errors=figures.probe_errors,
            ttft_s=list(figures.probe_ttft_s),
            tpot_s=list(figures.probe_tpot_s),
            input_tokens=figures.probe_input_tokens,
            output_tokens=figures.probe_output_tokens,
        )
    # The geometric mean over the canary's intervals where status has it (older status:
    # the newest interval alone).
    mean = (
        math.exp(figures.mean_log_sum / figures.mean_intervals)
        if figures.mean_intervals
        else figures.latency_mean_s
    )
    p99 = (
        math.exp(figures.p99_log_sum / figures.p99_intervals)
        if figures.p99_intervals
        else figures.latency_p99_s
    )
    return VariantInterval(
        invocations=figures.invocations,
        errors_5xx=figures.errors_5xx,
        latency_mean_s=mean if figures.latency_mean_s is not None else None,
        latency_s=p99 if figures.latency_p99_s is not None else None,
        probes=probes,
    )


# Intervals per evidence block of the bake's judge (bake_policy): a regression after a
# long clean stretch is caught within about a block and its own detection time.
BAKE_BLOCK_INTERVALS = 10


def bake_step(
    bake: BakeStatus,
    observation: LiveObservation,
    spec: OptimizedEndpointSpec,
    now: datetime,
) -> LiveJudgement | None:
    """One promoted-variant interval into the bake's judge, against the baseline's last
    live figures (updates `bake`: its block, count and judge); None when it was not
    judged (seen before, or a rollback already decided).

    Only a gating check's failure decides a rollback (a check that only informs never
    does), and an interval without data is never a verdict (bake_policy).
    """
    current = bake.judge
    seen = current.last_interval_end
    if (seen is None or observation.interval_end > seen) and (
        current.intervals >= BAKE_BLOCK_INTERVALS and current.decision is not LiveDecision.ROLLBACK
    ):
        # A new evidence block (bake_policy): the interval cursor carries over, so an
        # interval seen before is never judged twice.
        bake.block += 1
        current = bake.judge = LiveState(noise=current.noise, last_interval_end=seen)
    against = observation.model_copy(update={"baseline": reference_interval(bake.reference)})
    judgement = judge_interval(current, against, bake_policy(spec, bake.block, bake.reference), now)
    if judgement.state == current:
        return None
    bake.intervals += 1
    if not judgement.latency_compared:
        bake.latency_unmatched += 1
    state = judgement.state
    gating_failed = [c for c in judgement.checks if c.gating and c.verdict is Verdict.FAIL]
    if state.decision is LiveDecision.ROLLBACK and not gating_failed:
        state = state.model_copy(
            update={"decision": LiveDecision.CONTINUE, "failures": current.failures}
        )
    bake.judge = state
    return judgement


def _record_bake(
    status: OptimizedEndpointStatus,
    bake: BakeStatus,
    observations: tuple[LiveObservation, ...],
    spec: OptimizedEndpointSpec,
    now: datetime,
) -> OptimizedEndpointStatus:
    """Fold the promoted variant's intervals into the bake's judge (bake_step); the newest
    checks replace the previous live ones."""
    for observation in observations:
        before = bake.judge.decision
        judgement = bake_step(bake, observation, spec, now)
        if judgement is None:
            continue
        failed = [c.name for c in judgement.checks if c.verdict is Verdict.FAIL]
        if failed or bake.judge.decision is not before:
            status.record(
                now,
                Reason(f"LiveJudge{bake.judge.decision.value}"),
                f"bake interval ending {observation.interval_end:%H:%M:%S}: "
                + "; ".join(c.reason for c in judgement.checks if c.reason),
            )
        kept = [c for c in status.checks if c.kind is not CheckKind.LIVE]
        status.checks = [*kept, *judgement.checks]
    return status


def _record_watch(
    status: OptimizedEndpointStatus,
    watch: AcceptanceWatch,
    observations: tuple[LiveObservation, ...],
    spec: OptimizedEndpointSpec,
    now: datetime,
) -> OptimizedEndpointStatus:
    """Fold the promoted variant's intervals into the acceptance watch (phases/watch.py):
    acceptance only, each interval against the floor at the bake's alpha for its evidence
    block; the newest acceptance check replaces the previous one (gating as in the
    canary: under onAcceptanceDrift: rollback only). It only counts: the watch applies
    onAcceptanceDrift when the count reaches failureLimit, and an interval without
    drafted tokens is never a verdict."""
    for observation in sorted(observations, key=lambda o: o.interval_end):
        seen = watch.last_interval_end
        if seen is not None and observation.interval_end <= seen:
            continue  # an interval seen before is never judged twice
        if watch.block_intervals >= BAKE_BLOCK_INTERVALS:
            # A new evidence block, as in the bake; the streams' totals carry over.
            watch.block += 1
            watch.block_intervals = 0
            watch.acceptance_below_floor = 0
        # The live judge's acceptance fold, on the watch's own (acceptance-only) state.
        state = LiveState(
            stream_totals=watch.stream_totals,
            candidate_acceptance=watch.candidate_acceptance,
            acceptance_below_floor=watch.acceptance_below_floor,
        )
        check = judge_acceptance(state, observation, bake_policy(spec, watch.block))
        watch.stream_totals = state.stream_totals
        watch.candidate_acceptance = state.candidate_acceptance
        watch.acceptance_below_floor = state.acceptance_below_floor
        watch.last_interval_end = observation.interval_end
        watch.block_intervals += 1
        watch.intervals += 1
        if check is None:
            continue
        if check.verdict is Verdict.FAIL and watch.alerted_at is None:
            # Once alerted, the condition says it: history keeps its decisions.
            status.record(
                now,
                Reason.LIVE_JUDGE_CONTINUE,
                f"acceptance watch, interval ending {observation.interval_end:%H:%M:%S}: "
                f"{check.reason} ({watch.acceptance_below_floor} below the floor)",
            )
        kept = [c for c in status.checks if c.name != ACCEPTANCE_CHECK]
        status.checks = [*kept, check]
    return status


def _summary(measurement: Measurement, spec: OptimizedEndpointSpec) -> str:
    level = measurement.baseline.level(spec.judged_concurrency())
    if level is None or level.ttft_p50_ms is None:
        text = "baseline benchmarked"
    else:
        text = f"baseline ttft p50 {level.ttft_p50_ms:.0f} ms at c{level.concurrency}"
    noise = measurement.eval_noise
    if noise is not None and noise.items:
        text += (
            f"; A/A: {noise.discordant} of {noise.items} eval items asked twice scored differently"
        )
    return text


# Phases whose outcome a later error does not change (see record_error).
OUTCOME_PHASES = frozenset({Phase.SUCCEEDED, Phase.ROLLED_BACK})
# The history event of such an error; decide keeps the resource Degraded while it is the last.
ERROR_AFTER_OUTCOME = Reason.ERROR_AFTER_OUTCOME.value


def record_error(
    status_data: dict[str, Any], message: str, permanent: bool, now: datetime, reason: str
) -> dict[str, Any]:
    """A failed action: a permanent one ends the pipeline (Terminal); a transient one waits.

    After the outcome (Succeeded, RolledBack) the endpoint serves what the pipeline left, so
    a permanent error of a later step (a retention delete that IAM refuses, a Describe of a
    finished resource) degrades the resource and says so; it never turns the outcome into
    Failed, and the step is tried again on a later look at the endpoint.
    """
    status = parse_status(status_data)
    status.last_error = message[:4096]
    if permanent and status.phase in OUTCOME_PHASES:
        status.message = (
            f"{message} (phase stays {status.phase.value}; the operator tries again on its "
            "next look at the endpoint)"
        )[:1024]
        status.record(now, ERROR_AFTER_OUTCOME, f"{reason}: {message}")
        status.set_condition(
            ConditionType.DEGRADED,
            ConditionStatus.TRUE,
            ERROR_AFTER_OUTCOME,
            status.message,
            now,
            status.observed_generation,
        )
    elif permanent and status.phase in CANDIDATE_LIVE:
        # A candidate may hold traffic: back to the baseline first; Failed once it is.
        status.rollout.failing = Failure(reason=reason[:128], message=message[:4096])
        status.rollout.rollback_reason = RollbackReason.ERROR
        status.phase = Phase.ROLLING_BACK
        status.message = (f"{message}; returning traffic to the baseline first, then stopping")[
            :1024
        ]
        status.record(now, reason, status.message)
        status.set_condition(
            ConditionType.DEGRADED,
            ConditionStatus.TRUE,
            reason,
            status.message,
            now,
            status.observed_generation,
        )
    elif permanent:
        status.phase = Phase.FAILED
        status.message = message[:1024]
        status.record(now, reason, message)
        status.set_condition(
            ConditionType.TERMINAL,
            ConditionStatus.TRUE,
            reason,
            message,
            now,
            status.observed_generation,
        )
        status.set_condition(
            ConditionType.PROGRESSING,
            ConditionStatus.FALSE,
            reason,
            message,
            now,
            status.observed_generation,
        )
        status.set_condition(
            ConditionType.DEGRADED,
            ConditionStatus.TRUE,
            reason,
            message,
            now,
            status.observed_generation,
        )
    else:
        status.message = f"retrying: {message}"[:1024]
    return with_fallback_in_conditions(status.dump())
