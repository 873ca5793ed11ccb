"""What a measurement reaches, and every judgement of what it brought back (pure).

`measurement_plan` says which variants a measurement action benchmarks and
evaluates; `judge` turns the RawMeasurement that `aws.perform` returns into status
measurements and checks. The judges compare raw samples from the same run; status
keeps only summaries (milliseconds) and the checks, because raw samples would not
fit in an object. Quantiles are judged only where the sample count can support them
(the judge would call a p99 from 60 requests Inconclusive, and onNoData would then
pause).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from endpoint_optimizer.analysis import shadow
from endpoint_optimizer.analysis.acceptance import AcceptanceSource, acceptance_check
from endpoint_optimizer.analysis.benchmark import (
    BenchmarkPolicy,
    LevelSamples,
    judge_benchmark,
    objective_check,
)
from endpoint_optimizer.analysis.errors import error_rate_check, unmeasured
from endpoint_optimizer.analysis.live import (
    LiveObservation,
    LivePolicy,
    ProbeSamples,
    between_variance,
)
from endpoint_optimizer.analysis.sequential import (
    LevelRound,
    SequentialDecision,
    SequentialJudgement,
    judge_sequential,
    requests_left,
)
from endpoint_optimizer.analysis.series import (
    LiveMetric,
    VariantRole,
    VariantSeries,
    live_observation,
)
from endpoint_optimizer.analysis.slo import requests_for, slo_checks
from endpoint_optimizer.analysis.speclog import SpecLine
from endpoint_optimizer.api import (
    AcceptanceDriftPolicy,
    BenchmarkJudge,
    LevelMeasurement,
    NoDataPolicy,
    Objective,
    OptimizedEndpointSpec,
    VariantMeasurements,
)
from endpoint_optimizer.api.checks import Check, Verdict
from endpoint_optimizer.api.live import LiveFigures, LiveState
from endpoint_optimizer.api.status import EvalNoise
from endpoint_optimizer.api.types import duration_seconds
from endpoint_optimizer.bench.models import BenchReport, Distribution, LevelReport, RequestSample
from endpoint_optimizer.bench.served_by import EngineSummary, combine
from endpoint_optimizer.evaluation import noise
from endpoint_optimizer.evaluation.dataset import EvalItem, score_items
from endpoint_optimizer.evaluation.gate import eval_check, refusal_check
from endpoint_optimizer.evaluation.refusal import is_refusal
from endpoint_optimizer.evaluation.slices import SlicePolicy, must_pass, slice_checks
from endpoint_optimizer.evaluation.spot_check import (
    SpotCheck,
    hardest_classes,
    pick_spot_check,
    spot_samples,
)
from endpoint_optimizer.pipeline.model import (
    Action,
    ActionKind,
    EvalAnswers,
    Measurement,
    MeasurementPlan,
    RawMeasurement,
    VariantRun,
)


def measurement_plan(spec: OptimizedEndpointSpec, action: Action) -> MeasurementPlan:
    """Which variants a MEASURE_BASELINE or COMPARE action benchmarks and evaluates.

    The strategy decides (its compare request): a shadow variant cannot be invoked with
    TargetVariant, so a shadow's comparison says `invokeCandidate: false`, benchmarks the
    production variant, the shadow gets its copy, and the live judge compares the two on
    CloudWatch.
    """
    evaluate = spec.evaluation is not None and spec.evaluation.has_eval_set
    if action.kind is ActionKind.MEASURE_BASELINE:
        return MeasurementPlan(evaluate=evaluate)
    if action.request.get("invokeCandidate") is False:
        # The strategy says the candidate cannot be invoked (a shadow variant).
        return MeasurementPlan()
    return MeasurementPlan(candidate=True, evaluate=evaluate)


def judge(
    spec: OptimizedEndpointSpec, raw: RawMeasurement, eval_noise: EvalNoise | None = None
) -> Measurement:
    """Every judgement of a measurement: summaries, checks, eval scores, live intervals.

    `eval_noise`: the generation's A/A noise (status.evalNoise), shown in the eval check.
    """
    action = raw.action
    if action.kind is ActionKind.JUDGE_LIVE:
        live = live_observations(raw.series, action, raw.probes, raw.spec_lines)
        return Measurement(action.kind, action.step, live=live, series=raw.series)
    assert raw.baseline is not None and raw.benchmarked_at is not None
    void = measurement_void(
        raw.baseline.report, raw.candidate.report if raw.candidate is not None else None
    )
    if void:
        refused = body_refused(raw.baseline.report) or (
            raw.candidate is not None and body_refused(raw.candidate.report)
        )
        return Measurement(action.kind, action.step, void=void, refused=refused)
    if raw.candidate is None:
        # The baseline alone: before any candidate exists, or a shadow's production side.
        baseline = variant_measurements(
            raw.baseline.report, raw.baseline.variant, raw.benchmarked_at
        )
        if raw.baseline.answers is not None:
            # Scored before the candidate exists: the quality the candidate must keep.
            baseline = score_baseline(spec, raw.eval_items, raw.baseline.answers.texts, baseline)
            baseline = with_eval_engine(baseline, raw.baseline.answers.engine_summary())
            measured = aa_noise(spec, raw, raw.baseline.answers, raw.benchmarked_at)
            return Measurement(action.kind, action.step, baseline, eval_noise=measured)
        return Measurement(action.kind, action.step, baseline)
    return _judge_comparison(spec, raw, raw.baseline, raw.candidate, raw.benchmarked_at, eval_noise)


def _judge_comparison(
    spec: OptimizedEndpointSpec,
    raw: RawMeasurement,
    base: VariantRun,
    cand: VariantRun,
    benchmarked_at: datetime,
    eval_noise: EvalNoise | None = None,
) -> Measurement:
    baseline, candidate, checks = compare(
        spec,
        base.report,
        cand.report,
        base.variant,
        cand.variant,
        benchmarked_at,
        rounds=(base.all_rounds, cand.all_rounds),
        cost_ratio=raw.action.cost_ratio,
    )
    if base.answers is not None and cand.answers is not None:
        baseline, candidate, eval_checks = evaluate(
            spec, raw.eval_items, base.answers.texts, cand.answers.texts, baseline, candidate
        )
        eval_checks = with_noise(spec, eval_checks, eval_noise)
        baseline = with_eval_engine(baseline, base.answers.engine_summary())
        candidate = with_eval_engine(candidate, cand.answers.engine_summary())
        checks = [*checks, *eval_checks]
        spot = spot_check(
            spec, raw.eval_items, base.answers.texts, cand.answers.texts, benchmarked_at
        )
        return Measurement(
            raw.action.kind, raw.action.step, baseline, candidate, tuple(checks), spot_check=spot
        )
    return Measurement(raw.action.kind, raw.action.step, baseline, candidate, tuple(checks))


def aa_noise(
    spec: OptimizedEndpointSpec, raw: RawMeasurement, first: EvalAnswers, now: datetime
) -> EvalNoise | None:
    """The eval set's A/A noise: the items the baseline was asked twice, both answers scored."""
    evaluation = spec.evaluation
    if evaluation is None or raw.repeat_answers is None or not raw.repeated:
        return None
    items = [raw.eval_items[i] for i in raw.repeated]
    firsts = [first.texts[i] for i in raw.repeated]
    seconds = list(raw.repeat_answers.texts)
    metric = evaluation.metric.value
    return noise.measure(
        items,
        firsts,
        seconds,
        score_items(items, firsts, metric),
        score_items(items, seconds, metric),
        metric,
        eval_items=len(raw.eval_items),
        confidence=evaluation.confidence,
        now=now,
        seed=spec.benchmark.seed,
    )


def with_noise(
    spec: OptimizedEndpointSpec, checks: Sequence[Check], eval_noise: EvalNoise | None
) -> list[Check]:
    """The overall eval check's reason with the A/A noise beside its margin."""
    evaluation = spec.evaluation
    if evaluation is None or eval_noise is None:
        return list(checks)
    name = f"eval_{evaluation.metric.value}"
    clause = noise.note(eval_noise, evaluation.max_absolute_drop)
    return [
        c.model_copy(update={"reason": f"{c.reason}; {clause}"}) if c.name == name else c
        for c in checks
    ]


def spot_check(
    spec: OptimizedEndpointSpec,
    items: Sequence[EvalItem],
    baseline_answers: Sequence[str],
    candidate_answers: Sequence[str],
    now: datetime,
) -> SpotCheck | None:
    """The paired samples a person reads before promotion (spec.evaluation.spotCheck).

    From the named prompt classes, or else the two hardest by the baseline's score on
    these very items; the pick is seeded by spec.benchmark.seed, so every comparison of
    one generation shows the same items.
    """
    evaluation = spec.evaluation
    if evaluation is None or evaluation.spot_check is None or not items:
        return None
    classes = list(evaluation.spot_check.prompt_classes) or hardest_classes(
        items, score_items(list(items), list(baseline_answers), evaluation.metric.value)
    )
    return pick_spot_check(
        spot_samples(items, baseline_answers, candidate_answers),
        classes,
        evaluation.spot_check.samples,
        spec.benchmark.seed,
        now,
    )


def measurement_void(baseline: BenchReport, candidate: BenchReport | None) -> str:
    """Why a measurement's benchmark voids it (none of it is judged); empty if it does not."""
    void = void_reason(baseline, "baseline")
    if candidate is not None:
        # A candidate that fails its requests is judged on its errors; one the client
        # could not measure (it fell behind) is not judged at all.
        void = void or guard_reason(candidate, "candidate")
    return void


def void_reason(report: BenchReport, side: str) -> str:
    """Why a variant's benchmark measured nothing that can be judged; empty if it did."""
    for level in report.levels:
        failed = [sample for sample in level.samples if not sample.ok]
        if why := unmeasured(len(failed), len(level.samples)):
            return f"{side} at concurrency {level.concurrency}: {why}{_body_refused(failed)}"
    return guard_reason(report, side)


def body_refused(report: BenchReport) -> bool:
    """A level measured nothing because the container refused every failed request's body."""
    for level in report.levels:
        failed = [sample for sample in level.samples if not sample.ok]
        if unmeasured(len(failed), len(level.samples)) and _body_refused(failed):
            return True
    return False


def _body_refused(failed: Sequence[RequestSample]) -> str:
    """The hint when the container refused every failed request's body (HTTP 400)."""
    if failed and all(
        s.error_kind == "ModelError" and "client error (400)" in (s.error_message or "")
        for s in failed
    ):
        return (
            "; the container answered 400 (a body it does not take): set "
            "spec.benchmark.requestFormat to what the endpoint serves (lmi, chat or completions)"
        )
    return ""


def guard_reason(report: BenchReport, side: str) -> str:
    """The benchmark's own saturation guard refused a level (bench/guard.py)."""
    for level in report.levels:
        if not level.validity.valid:
            reasons = "; ".join(level.validity.reasons) or "the client fell behind"
            return f"{side} at concurrency {level.concurrency}: not a valid measurement ({reasons})"
    return ""


def error_checks(
    spec: OptimizedEndpointSpec, baseline: BenchReport, candidate: BenchReport
) -> list[Check]:
    """Each level's failed requests, candidate against baseline and the SLO."""
    slo = spec.benchmark.slo
    limit = slo.max_error_rate if slo is not None else None
    checks = []
    for base, cand in zip(baseline.levels, candidate.levels, strict=False):
        checks.append(
            error_rate_check(
                f"errors@c{cand.concurrency}",
                sum(1 for s in base.samples if not s.ok),
                len(base.samples),
                sum(1 for s in cand.samples if not s.ok),
                len(cand.samples),
                limit,
            )
        )
    return checks


def live_observations(
    series: Mapping[VariantRole, VariantSeries],
    action: Action,
    probes: Mapping[VariantRole, ProbeSamples] | None = None,
    spec_lines: Mapping[VariantRole, Sequence[SpecLine]] | None = None,
) -> tuple[LiveObservation, ...]:
    """One observation per period of the action's window, quiet ones included (the judge's
    no-data rule), from the series CloudWatch returned for it; the probes sent while the
    window was read join its newest period; each container log line joins the period its
    timestamp falls in (a line reports the stretch before it)."""
    start = datetime.fromisoformat(str(action.request["start"]))
    end = datetime.fromisoformat(str(action.request["end"]))
    period = timedelta(seconds=int(action.request["periodSeconds"]))
    observations = []
    moment = start
    while moment < end:
        one = {
            role: s.model_copy(
                update={
                    "points": tuple(
                        p for p in s.points if round(p.start) == round(moment.timestamp())
                    )
                }
            )
            for role, s in series.items()
        }
        observation = live_observation(one, moment + period)
        # live_observation carries the p99; the Average is far less noisy over a few
        # dozen requests, and the judge prefers it when both variants have one.
        for role, interval in (
            (VariantRole.BASELINE, observation.baseline),
            (VariantRole.CANDIDATE, observation.candidate),
        ):
            point = one[role].latest() if role in one else None
            if point is not None and point.invocations:
                interval.latency_mean_s = point.value(LiveMetric.MODEL_LATENCY)
            low, high = moment.timestamp() * 1000, (moment + period).timestamp() * 1000
            interval.spec_lines = [
                line for line in (spec_lines or {}).get(role, ()) if low <= line.timestamp_ms < high
            ]
        observations.append(observation)
        moment += period
    if probes and observations:
        newest = observations[-1]
        newest.baseline.probes = probes.get(VariantRole.BASELINE)
        newest.candidate.probes = probes.get(VariantRole.CANDIDATE)
    return tuple(observations)


def probe_samples(report: BenchReport) -> ProbeSamples:
    """One variant's probes as the live judge reads them: successful TTFT and TPOT."""
    samples = [s for level in report.levels for s in level.samples]
    ok = [s for s in samples if s.ok]
    config = report.config
    return ProbeSamples(
        requests=len(samples),
        errors=len(samples) - len(ok),
        ttft_s=[s.ttft_s for s in ok if s.ttft_s is not None],
        tpot_s=[s.tpot_s for s in ok if s.tpot_s is not None],
        input_tokens=config.input_tokens,
        output_tokens=config.output_tokens,
    )


def live_policy(spec: OptimizedEndpointSpec) -> LivePolicy:
    analysis = spec.rollout.analysis
    speculative = spec.optimizations.speculative_decoding
    return LivePolicy(
        on_no_data=analysis.on_no_data,
        min_invocations=max(1, analysis.min_invocations),
        failure_limit=max(1, analysis.failure_limit),
        latency_margin=analysis.latency_margin,
        acceptance_floor=speculative.min_acceptance_rate if speculative is not None else None,
        speculative_tokens=speculative.num_speculative_tokens if speculative is not None else 5,
        acceptance_gates=spec.rollout.on_acceptance_drift is AcceptanceDriftPolicy.ROLLBACK,
    )


# The confidence of the bake's upper bound on the baseline's interval spread. A reference
# of five intervals a load step gives the spread 8 degrees of freedom: at the point
# estimate 1.17 % of identical promoted variants were rolled back in a 30-interval bake
# (probes 1/s, 10 % then 50 % canary); at 0.6 still 1.17 %, at 0.75 0.5 %, at 0.9 0.33 %,
# with +20 % caught in 68.5, 59, 46 and 34.5 % of bakes (benchmarks/bench_judges.py
# --sections bakeLoad; docs/analysis.md §2).
BAKE_SPREAD_CONFIDENCE = 0.75


def bake_policy(
    spec: OptimizedEndpointSpec, block: int = 1, reference: LiveFigures | None = None
) -> LivePolicy:
    """The live judge's policy for the bake after a promotion.

    An interval without data is never a verdict (onNoData: pass, whatever the canary's):
    the promoted variant is already serving everyone, and only evidence rolls it back.
    The baseline's side is one frozen interval whose own noise repeats in every
    comparison, so a lucky reference would add up to a false rollback over a long bake:
    a slowdown counts only beyond the margin and twice the per-interval noise (about
    10 % with the defaults), which a real regression clears at once.

    The evidence restarts every BAKE_BLOCK_INTERVALS intervals (record.py): a candidate
    faster than the baseline piles up evidence against "slower" that a regression late in
    a long bake would first have to undo. Block j spends alpha * 6 / (pi^2 j^2): the blocks
    sum to alpha, so the bake as a whole keeps the canary's false-rollback bound.

    Latency rises with load, and the promoted variant serves all the traffic on the
    instances that served the baseline's share: an interval whose per-instance load is
    above (1 + loadTolerance)x the reference's is not compared on latency (Inconclusive,
    said why; errors and acceptance are), so the promotion's own load is never read as a
    regression.

    The probes' per-interval variance likewise: in the canary both variants share each
    minute and only instance noise is allowed for; a bake interval shares nothing with the
    frozen reference, so it varies as much as the baseline's intervals did
    (`LiveFigures.probe_ttft_spread`, within each load step): the canary's variance alone
    rolled back 1.2-2.3 % of identical candidates (bench_judges.py --sections bakeLoad).

    Errors likewise: reusing one frozen count as if it were a fresh baseline sample each
    interval rolled back identical candidates whose reference happened to have no 5XX
    (11-33 % of bakes, benchmarks/results/bench_judges_bake_before.json). The bake tests
    the promoted variant's rate against the upper confidence bound of the baseline's rate
    over the whole canary (`reference`'s totals; analysis/live.py `_errors_check`).
    """
    policy = live_policy(spec)
    margin = (1.0 + policy.latency_margin) * math.exp(2.0 * policy.interval_noise) - 1.0
    update: dict[str, object] = {
        "on_no_data": NoDataPolicy.PASS,
        "latency_margin": round(margin, 4),
        "alpha": policy.alpha * 6.0 / (math.pi**2 * block**2),
    }
    if reference is not None:
        # Latency is compared only at about the load the reference was measured at
        # (analysis/live.py unmatched_load; record.py keeps the reference's load).
        update["reference_load_s"] = reference.load_per_instance_s
        # Status written before the totals existed: the one interval it kept.
        total = reference.invocations_total or reference.invocations
        errors = reference.errors_5xx_total if reference.invocations_total else reference.errors_5xx
        update["error_reference"] = (errors, total) if total else None
        # Probe latency: each bake interval varies as much as the reference's intervals
        # did (nothing shared with a frozen reference), not only by instance noise; at the
        # spread's upper confidence bound, as a few canary intervals measure it.
        spreads = {"ttft": reference.probe_ttft_spread, "tpot": reference.probe_tpot_spread}
        measured = {m: between_variance(v, BAKE_SPREAD_CONFIDENCE) for m, v in spreads.items()}
        update["interval_variance"] = {m: v for m, v in measured.items() if v is not None}
    return policy.model_copy(update=update)


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000.0, 3)


def level_measurement(level: LevelReport) -> LevelMeasurement:
    s = level.summary
    errors = sum(1 for sample in level.samples if not sample.ok)

    def q(d: Distribution, name: str) -> float | None:
        value: float | None = getattr(d, name)
        return _ms(value)

    return LevelMeasurement(
        concurrency=level.concurrency,
        requests=len(level.samples),
        errors=errors,
        ttft_p50_ms=q(s.ttft_s, "p50"),
        ttft_p90_ms=q(s.ttft_s, "p90"),
        ttft_p99_ms=q(s.ttft_s, "p99"),
        itl_p50_ms=q(s.itl_s, "p50"),
        itl_p90_ms=q(s.itl_s, "p90"),
        itl_p99_ms=q(s.itl_s, "p99"),
        tpot_p50_ms=q(s.tpot_s, "p50"),
        tpot_p99_ms=q(s.tpot_s, "p99"),
        e2e_p50_ms=q(s.e2e_s, "p50"),
        e2e_p90_ms=q(s.e2e_s, "p90"),
        e2e_p99_ms=q(s.e2e_s, "p99"),
        output_tokens_per_second=round(s.output_tokens_per_s, 3),
        requests_per_second=round(s.requests_per_s, 3),
    )


def acceptance_rate(report: BenchReport) -> tuple[float | None, str, int]:
    """The acceptance rate the report supports: server counters first, then the estimate."""
    for level in report.levels:
        server = level.acceptance.server
        if server is not None and server.acceptance_rate is not None:
            return (
                server.acceptance_rate,
                AcceptanceSource.SERVER_COUNTERS.value,
                (server.num_draft_tokens),
            )
    for level in report.levels:
        black_box = level.acceptance.black_box
        if black_box.acceptance_rate is not None:
            return black_box.acceptance_rate, AcceptanceSource.BLACK_BOX_ESTIMATE.value, 0
    return None, AcceptanceSource.BLACK_BOX_ESTIMATE.value, 0


def variant_measurements(
    report: BenchReport, variant: str, now: datetime, speculative: bool = False
) -> VariantMeasurements:
    rate, source, _ = acceptance_rate(report) if speculative else (None, "", 0)
    engine = report.engine_summary()
    return VariantMeasurements(
        variant_name=variant,
        levels=[level_measurement(level) for level in report.levels],
        acceptance_rate=rate,
        acceptance_source=source if rate is not None else "",
        served_by=engine.engine,
        engine_note=engine.note,
        measured_at=now,
    )


def with_eval_engine(
    measurements: VariantMeasurements, eval_engine: EngineSummary
) -> VariantMeasurements:
    """The variant's engine label over its benchmark and its eval answers together."""
    engine = combine(EngineSummary(measurements.served_by, measurements.engine_note), eval_engine)
    return measurements.model_copy(update={"served_by": engine.engine, "engine_note": engine.note})


def level_samples(level: LevelReport) -> LevelSamples:
    """Raw samples for the judges; throughput as steady-state windows (throughput_windows)."""
    windows = throughput_windows(level.samples, level.concurrency)
    return LevelSamples(
        concurrency=level.concurrency,
        ttft_s=level.ttft_samples(),
        itl_s=level.itl_samples(),
        itl_request_sizes=[len(s.itl_s) for s in level.samples if s.ok],
        tpot_s=level.tpot_samples(),
        e2e_s=level.e2e_samples(),
        throughput_tok_s=windows,
        valid=level.validity.valid,
        invalid_reasons=list(level.validity.reasons),
        elapsed_s=max(0.0, level.window.end_at - level.window.start_at),
        blurred_s=dict(level.validity.blurred_s),
    )


def throughput_windows(samples: Sequence[RequestSample], concurrency: int) -> list[float]:
    """Output tokens per second, one value per wave of `concurrency` completions.

    Completions in end order: the first wave (every stream starting at once, prefills
    queued behind each other) is the start line, not a window; each later wave of
    `concurrency` completions is one window, its span from the previous wave's last end
    to its own. A closed loop at concurrency c completes c requests per request time in
    steady state, the start-up wave included or not, so every window estimates the same
    throughput whatever the round's size (a round of fewer than 2c requests gives none).

    Windows cut as a sixth of each round and timed from their earliest send read a share
    of a wave in small rounds: at the walk-through's shape on the e2e sandbox (c16, 512
    tokens in, 16 out, one variant), rounds of 32, 160 and 600 requests gave windows of
    about 340, 1,000 and 1,240 tok/s, log sd 0.58 together, and the README walk-through
    paused with throughput undecided after 2,000 requests per variant (ratio CI
    0.68-2.75). Cut by waves: 1,414-1,433 tok/s in every round, log sd 0.01.
    """
    ok = sorted((s for s in samples if s.ok), key=lambda s: s.end_at)
    wave = max(1, concurrency)
    windows: list[float] = []
    for start in range(wave, len(ok) - wave + 1, wave):
        chunk = ok[start : start + wave]
        span = chunk[-1].end_at - ok[start - 1].end_at
        tokens = sum(s.output_tokens or 0 for s in chunk)
        if span > 0 and tokens > 0:
            windows.append(tokens / span)
    return windows


def rounds_samples(rounds: Sequence[BenchReport]) -> list[LevelSamples]:
    """One variant's samples per level over every round of one measurement, in order.

    Throughput windows are cut within each round (the pause between rounds is no
    window); the budget's clock is the rounds' measured wall time added up.
    """
    by_level: dict[int, list[LevelSamples]] = {}
    for report in rounds:
        for level in report.levels:
            by_level.setdefault(level.concurrency, []).append(level_samples(level))
    return [_joined(parts) for _, parts in sorted(by_level.items())]


def _joined(parts: Sequence[LevelSamples]) -> LevelSamples:
    if len(parts) == 1:
        return parts[0]
    return LevelSamples(
        concurrency=parts[0].concurrency,
        ttft_s=[x for p in parts for x in p.ttft_s],
        itl_s=[x for p in parts for x in p.itl_s],
        itl_request_sizes=[x for p in parts for x in p.itl_request_sizes],
        tpot_s=[x for p in parts for x in p.tpot_s],
        e2e_s=[x for p in parts for x in p.e2e_s],
        throughput_tok_s=[x for p in parts for x in p.throughput_tok_s],
        valid=all(p.valid for p in parts),
        invalid_reasons=[r for p in parts for r in p.invalid_reasons],
        elapsed_s=sum(p.elapsed_s or 0.0 for p in parts),
        # The widest round's bracket: near the joined quantile's own, which would need each
        # request's slacks (bench/guard.stamp_errors), not the rounds' figures.
        blurred_s={
            name: max(p.blurred_s.get(name, 0.0) for p in parts)
            for name in {name for p in parts for name in p.blurred_s}
        },
    )


def supported_quantiles(samples: Sequence[LevelSamples], min_tail: int = 5) -> list[float]:
    """p50 always; p90 and p99 only where every level has enough requests for the tail."""
    fewest = min((len(s.e2e_s) for s in samples), default=0)
    return [q for q in (0.5, 0.9, 0.99) if q == 0.5 or fewest * (1 - q) >= min_tail]


def _relative(spec: OptimizedEndpointSpec) -> dict[str, Any]:
    """A cost objective judges cost per token instead of relative speed (a cheaper instance
    is slower per instance and may still pay): no relative thresholds; benchmark.slo's
    limits, which such a spec must set, gate the speed instead."""
    return {"thresholds": {}} if spec.objective.metric is Objective.COST else {}


def slo_gates(spec: OptimizedEndpointSpec, candidate: BenchReport) -> list[Check]:
    """benchmark.slo's latency limits on the candidate at the judged concurrency, with
    bounds valid at every sample size under the sequential judge. They gate once decided;
    undecided (too few requests for a p99 bound) they only inform, except under a cost
    objective, where they are the only guard on speed."""
    slo = spec.benchmark.slo
    if slo is None:
        return []
    found = slo_checks(
        [level_samples(level) for level in candidate.levels],
        slo.latency_limits_ms(),
        spec.judged_concurrency(),
        anytime=spec.benchmark.judge is BenchmarkJudge.SEQUENTIAL,
    )
    if spec.objective.metric is Objective.COST:
        return found
    return [
        c if c.verdict is not Verdict.INCONCLUSIVE else c.model_copy(update={"gating": False})
        for c in found
    ]


def sequential_policy(spec: OptimizedEndpointSpec) -> BenchmarkPolicy:
    """The sequential judge's policy: the spec's budget; `requests` is the round size."""
    b = spec.benchmark
    return BenchmarkPolicy(
        **_relative(spec),
        seed=b.seed,
        max_requests=b.max_requests,
        max_duration_s=duration_seconds(b.max_duration),
        round_requests=b.requests,
        tail_gating=b.tail_gating,
    )


def judge_rounds(
    spec: OptimizedEndpointSpec,
    baseline: Sequence[BenchReport],
    candidate: Sequence[BenchReport],
    cost_ratio: float | None = 1.0,
) -> SequentialJudgement:
    """The sequential judge over every round measured so far (both variants, same run)."""
    return judge_sequential(
        rounds_samples(baseline),
        rounds_samples(candidate),
        sequential_policy(spec),
        objective=spec.objective.metric.value,
        min_improvement=spec.objective.min_improvement,
        objective_concurrency=spec.objective.concurrency,
        cost_ratio=cost_ratio,
    )


def next_rounds(
    spec: OptimizedEndpointSpec,
    baseline: Sequence[BenchReport],
    candidate: Sequence[BenchReport],
    cost_ratio: float | None = 1.0,
) -> tuple[LevelRound, ...]:
    """What a comparison measures next, per level; () when the judge has decided.

    The fixed judge never asks for more; neither does a round a variant could not
    measure (errors or the saturation guard): that is judged as it is.
    """
    if spec.benchmark.judge is not BenchmarkJudge.SEQUENTIAL:
        return ()
    if void_reason(candidate[-1], "candidate") or void_reason(baseline[-1], "baseline"):
        return ()
    judgement = judge_rounds(spec, baseline, candidate, cost_ratio)
    if judgement.decision is SequentialDecision.DECIDED:
        return _slo_rounds(spec, baseline, candidate, judgement)
    if judgement.decision is not SequentialDecision.MEASURE_MORE:
        return ()
    return judgement.rounds


def _slo_rounds(
    spec: OptimizedEndpointSpec,
    baseline: Sequence[BenchReport],
    candidate: Sequence[BenchReport],
    judgement: SequentialJudgement,
) -> tuple[LevelRound, ...]:
    """A cost objective's SLO limits are its only guard on speed and gate even undecided:
    when the sequential judge is through and passed, rounds go on at the judged level
    until the limits are decided or the budget is spent (else a person would be asked
    about a p99 that more requests would have settled)."""
    slo = spec.benchmark.slo
    if spec.objective.metric is not Objective.COST or slo is None:
        return ()
    if any(c.gating and c.verdict is not Verdict.PASS for c in judgement.checks):
        return ()  # failed, or no improvement: the limits would not change that
    at = spec.judged_concurrency()
    cand = {s.concurrency: s for s in rounds_samples(candidate)}.get(at)
    base = {s.concurrency: s for s in rounds_samples(baseline)}.get(at)
    if cand is None or base is None:
        return ()
    limits = slo.latency_limits_ms()
    undecided = [
        c for c in slo_checks([cand], limits, at, anytime=True) if c.verdict is Verdict.INCONCLUSIVE
    ]
    policy = sequential_policy(spec)
    left = requests_left(base, cand, policy)
    if not undecided or left <= 0:
        return ()
    # A round at least, doubling at most, as the judge's own rounds; up to the bound's
    # need where no upper bound exists yet.
    wanted = max(policy.round_requests, requests_for(limits) - cand.requests)
    size = min(wanted, max(cand.requests, policy.round_requests), left)
    names = ", ".join(c.name for c in undecided)
    return (
        LevelRound(at, size, f"{names} undecided; the cost objective's limits must be decided"),
    )


def compare(
    spec: OptimizedEndpointSpec,
    baseline: BenchReport,
    candidate: BenchReport,
    baseline_variant: str,
    candidate_variant: str,
    now: datetime,
    rounds: tuple[Sequence[BenchReport], Sequence[BenchReport]] | None = None,
    cost_ratio: float | None = 1.0,
) -> tuple[VariantMeasurements, VariantMeasurements, list[Check]]:
    """Benchmark judge + objective check + acceptance gate, on one run of both variants.

    `rounds`: every round of the run per variant (the sequential judge's input);
    `baseline` and `candidate` are the rounds merged, for the errors and summaries.
    """
    checks = [*error_checks(spec, baseline, candidate)]
    if spec.benchmark.judge is BenchmarkJudge.SEQUENTIAL:
        base_rounds, cand_rounds = rounds or ([baseline], [candidate])
        judgement = judge_rounds(spec, base_rounds, cand_rounds, cost_ratio)
        checks += [*judgement.checks, *judgement.advisory]
    else:
        base_samples = [level_samples(level) for level in baseline.levels]
        cand_samples = [level_samples(level) for level in candidate.levels]
        policy = BenchmarkPolicy(
            **_relative(spec),
            quantiles=supported_quantiles([*base_samples, *cand_samples]),
            seed=spec.benchmark.seed,
        )
        checks += judge_benchmark(base_samples, cand_samples, policy)
        # objective.concurrency names the one level the objective is judged at, as the
        # sequential judge reads it; unset, every level must show it.
        at = spec.objective.concurrency
        checks.append(
            objective_check(
                spec.objective.metric.value,
                spec.objective.min_improvement,
                [s for s in base_samples if at is None or s.concurrency == at],
                [s for s in cand_samples if at is None or s.concurrency == at],
                policy,
                cost_ratio=cost_ratio,
            )
        )
    checks += slo_gates(spec, candidate)
    speculative = spec.optimizations.speculative_decoding
    if speculative is not None:
        rate, source, drafts = acceptance_rate(candidate)
        checks.append(acceptance_check(rate, source, speculative.min_acceptance_rate, drafts))
    return (
        variant_measurements(baseline, baseline_variant, now),
        variant_measurements(candidate, candidate_variant, now, speculative is not None),
        checks,
    )


def score_baseline(
    spec: OptimizedEndpointSpec,
    items: Sequence[EvalItem],
    answers: Sequence[str],
    baseline: VariantMeasurements,
) -> VariantMeasurements:
    """The baseline's eval score and refusal rate, before any candidate exists."""
    evaluation = spec.evaluation
    assert evaluation is not None
    n = len(items)
    scores = score_items(list(items), list(answers), evaluation.metric.value)
    refusals = [is_refusal(a) for a in answers]
    return baseline.model_copy(
        update={
            "eval_score": round(sum(scores) / n, 4) if n else None,
            "refusal_rate": round(sum(refusals) / n, 4) if n else None,
            "eval_items": n,
        }
    )


def evaluate(
    spec: OptimizedEndpointSpec,
    items: Sequence[EvalItem],
    baseline_answers: Sequence[str],
    candidate_answers: Sequence[str],
    baseline: VariantMeasurements,
    candidate: VariantMeasurements,
) -> tuple[VariantMeasurements, VariantMeasurements, list[Check]]:
    """The paired eval gate and refusal rule on the same items answered by both variants."""
    evaluation = spec.evaluation
    assert evaluation is not None
    metric = evaluation.metric.value
    base_scores = score_items(list(items), list(baseline_answers), metric)
    cand_scores = score_items(list(items), list(candidate_answers), metric)
    base_refusals = [is_refusal(a) for a in baseline_answers]
    cand_refusals = [is_refusal(a) for a in candidate_answers]
    checks = [
        eval_check(
            base_scores,
            cand_scores,
            metric,
            evaluation.max_absolute_drop,
            evaluation.confidence,
            seed=spec.benchmark.seed,
        ),
        refusal_check(
            base_refusals,
            cand_refusals,
            evaluation.max_refusal_rate_increase,
            evaluation.confidence,
        ),
    ]
    policy = SlicePolicy(
        metric=metric,
        margin=evaluation.max_absolute_drop,
        confidence=evaluation.confidence,
        min_items=evaluation.slices.min_items,
        must_pass=tuple(must_pass(spec)),
        seed=spec.benchmark.seed,
    )
    checks += slice_checks(items, base_scores, cand_scores, policy)
    n = len(items)

    def scored(
        m: VariantMeasurements, scores: list[float], refusals: list[bool]
    ) -> VariantMeasurements:
        return m.model_copy(
            update={
                "eval_score": round(sum(scores) / n, 4) if n else None,
                "refusal_rate": round(sum(refusals) / n, 4) if n else None,
                "eval_items": n,
            }
        )

    return (
        scored(baseline, base_scores, base_refusals),
        scored(candidate, cand_scores, cand_refusals),
        checks,
    )


def shadow_objective_check(spec: OptimizedEndpointSpec, live: LiveState) -> Check:
    """The spec's objective judged on a shadow's live intervals (analysis/shadow.py)."""
    return shadow.shadow_objective_check(
        live,
        spec.objective.metric.value,
        # Cost per token on one instance type is the reciprocal of the token rate, so its
        # ratio is the latency ratio the shadow measures; the other objectives stand in for
        # ModelLatency as the only latency CloudWatch has.
        spec.objective.metric.lower_is_better,
        spec.objective.min_improvement,
        live_policy(spec).latency_margin,
    )
