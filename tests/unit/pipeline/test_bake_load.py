"""The bake compares latency only at the load its reference was measured at.

During a 50 % canary step the baseline's instances serve half the traffic; after the
promotion the promoted variant serves all of it on the same number of instances. On an LLM
endpoint latency rises with that load (queueing, larger decode batches: an 8B model's step
is 7.85 ms at batch 64 and 10.3 ms at 128 on an H200, reference/h200-calibration.md), so
a bake against the half-load reference read the promotion's own load as a regression.

The reference now keeps the intervals at about the highest per-instance load the baseline
carried (CloudWatch InvocationsPerInstance), and the bake judges latency only while the
promoted variant's per-instance load is within the tolerance of it; errors and acceptance
are judged whatever the load.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.analysis.live import (
    LiveObservation,
    LivePolicy,
    ProbeSamples,
    VariantInterval,
    judge_interval,
    unmatched_load,
)
from endpoint_optimizer.analysis.series import (
    IntervalPoint,
    VariantRole,
    VariantSeries,
    variant_interval,
)
from endpoint_optimizer.api import (
    BakeStatus,
    CheckKind,
    LiveDecision,
    LiveState,
    OptimizedEndpointSpec,
    Verdict,
    parse_spec,
)
from endpoint_optimizer.api.live import LiveFigures
from endpoint_optimizer.pipeline.record import bake_step, reference_interval, remembered
from tests.unit.pipeline.test_decide import spec

START = datetime(2026, 1, 1, tzinfo=UTC)


def make_spec() -> OptimizedEndpointSpec:
    return parse_spec(spec(rollout={"strategy": "canary", "baselineRetention": "2h", "bake": "1h"}))


def interval(load: float, mean: float, invocations: int = 240, errors: int = 0) -> VariantInterval:
    """One variant's interval at a per-instance load: CloudWatch figures and 20 probes."""
    probes = [mean * (1.0 + 0.01 * ((i * 7) % 5 - 2)) for i in range(20)]
    return VariantInterval(
        invocations=invocations,
        errors_5xx=errors,
        latency_mean_s=mean,
        latency_s=mean * 3,
        load_per_instance_s=load,
        probes=ProbeSamples(requests=20, ttft_s=probes, tpot_s=probes),
    )


def reference_of(*intervals: VariantInterval) -> LiveFigures:
    policy = LivePolicy()
    figures = None
    for k, one in enumerate(intervals):
        figures = remembered(figures, one, START + timedelta(minutes=k), policy)
    assert figures is not None
    return figures


def test_the_series_reads_the_per_instance_load_per_second() -> None:
    series = VariantSeries(
        role=VariantRole.BASELINE,
        variant_name="AllTraffic",
        period_seconds=60,
        points=(IntervalPoint(start=0.0, invocations=240.0, invocations_per_instance=120.0),),
    )
    assert variant_interval(series).load_per_instance_s == pytest.approx(2.0)
    unpublished = series.model_copy(
        update={"points": (IntervalPoint(start=0.0, invocations=240.0),)}
    )
    assert variant_interval(unpublished).load_per_instance_s is None


def test_the_reference_keeps_the_highest_load_the_baseline_carried() -> None:
    # A 10 % step (the baseline at 0.9 of the load), then a 50 % step (0.5): the second
    # step's lighter, faster intervals stay out of the latency reference.
    figures = reference_of(*(interval(0.9, 1.2) for _ in range(3)), *(interval(0.5, 1.0),) * 3)
    assert figures.load_per_instance_s == pytest.approx(0.9)
    assert figures.load_intervals == 3
    reference = reference_interval(figures)
    assert reference.latency_mean_s == pytest.approx(1.2)
    assert figures.probe_ttft_s == interval(0.9, 1.2).probes.ttft_s * 3  # type: ignore[union-attr]
    # The 5XX reference is load-free: every interval counts.
    assert figures.invocations_total == 6 * 240


def test_a_higher_load_starts_the_latency_reference_afresh() -> None:
    figures = reference_of(interval(0.5, 1.0), interval(0.55, 1.0), interval(1.0, 1.5))
    assert figures.load_per_instance_s == pytest.approx(1.0)
    assert (figures.mean_intervals, figures.load_intervals) == (1, 1)
    assert reference_interval(figures).latency_mean_s == pytest.approx(1.5)
    assert figures.probe_ttft_s == interval(1.0, 1.5).probes.ttft_s  # type: ignore[union-attr]
    # Comparable loads pool, at their geometric mean.
    pooled = reference_of(interval(1.0, 1.0), interval(1.1, 1.0))
    assert pooled.load_per_instance_s == pytest.approx(1.1**0.5)
    assert pooled.mean_intervals == 2


def test_a_higher_load_without_probes_keeps_the_probe_reference() -> None:
    # Seen in a loaded e2e run: one-second periods on a probe-only endpoint, a period
    # whose CloudWatch statistics came at a higher load with no probes in it emptied the
    # probe pool, and the bake had no probe reference left.
    no_probes = interval(2.0, 1.5).model_copy(update={"probes": None})
    figures = reference_of(interval(1.0, 1.0), no_probes)
    assert figures.probe_ttft_s == interval(1.0, 1.0).probes.ttft_s  # type: ignore[union-attr]
    assert figures.load_per_instance_s == pytest.approx(1.0)
    assert figures.mean_intervals == 1
    # An interval that refills every pool still moves the reference to its load.
    moved = reference_of(interval(1.0, 1.0), no_probes, interval(2.0, 1.5))
    assert moved.load_per_instance_s == pytest.approx(2.0)
    assert reference_interval(moved).latency_mean_s == pytest.approx(1.5)


def test_an_interval_that_brings_the_missing_probes_restarts_the_reference_at_its_load() -> None:
    # The other order: the first pooled interval had CloudWatch statistics only, at a
    # higher load than the probed ones after it; they would all be left out as lighter,
    # and the bake would have no probe reference at all.
    no_probes = interval(2.0, 1.5).model_copy(update={"probes": None})
    figures = reference_of(no_probes, interval(1.0, 1.0), interval(1.05, 1.0))
    assert figures.probe_ttft_s, "the probed intervals must make a probe reference"
    assert figures.load_per_instance_s == pytest.approx((1.0 * 1.05) ** 0.5)
    assert figures.mean_intervals == 2  # the statistics-only interval at 2.0 is dropped
    # Once both sources are held, a lighter interval is left out again.
    lighter = reference_of(no_probes, interval(1.0, 1.0), interval(0.5, 0.8))
    assert lighter.load_per_instance_s == pytest.approx(1.0)
    assert reference_interval(lighter).latency_mean_s == pytest.approx(1.0)


def test_an_unpublished_load_pools_as_before() -> None:
    unknown = interval(1.0, 2.0).model_copy(update={"load_per_instance_s": None})
    figures = reference_of(interval(1.0, 1.0), unknown)
    assert figures.mean_intervals == 2 and figures.load_intervals == 1
    assert unmatched_load(unknown, LivePolicy(reference_load_s=1.0)) == ""


def bake_judge(reference: LiveFigures, promoted: VariantInterval, intervals: int) -> BakeStatus:
    spec = make_spec()
    bake = BakeStatus(until=START + timedelta(hours=1), reference=reference)
    for k in range(1, intervals + 1):
        end = START + timedelta(minutes=k)
        observation = LiveObservation(
            interval_end=end, baseline=VariantInterval(invocations=0), candidate=promoted
        )
        bake_step(bake, observation, spec, end)
    return bake


def test_a_promotion_that_doubles_the_load_is_not_read_as_a_regression() -> None:
    # A 50/50 canary: the baseline at half the load; the promoted variant at all of it,
    # 30 % slower from the load alone.
    reference = reference_of(*(interval(0.5, 1.0) for _ in range(5)))
    bake = bake_judge(reference, interval(1.0, 1.3, invocations=480), intervals=6)
    assert bake.judge.decision is LiveDecision.CONTINUE
    assert bake.latency_unmatched == bake.intervals == 6
    # Before: the same figures with the load unknown roll back.
    blind = reference.model_copy(update={"load_per_instance_s": None, "load_intervals": 0})
    blind_bake = bake_judge(
        blind,
        interval(1.0, 1.3, invocations=480).model_copy(update={"load_per_instance_s": None}),
        6,
    )
    assert blind_bake.judge.decision is LiveDecision.ROLLBACK


def test_at_a_matched_load_a_slowdown_still_rolls_back() -> None:
    # A 10 % first step: the baseline at 0.9 of the load, within the 1.125x tolerance.
    reference = reference_of(*(interval(0.9, 1.0) for _ in range(5)))
    bake = bake_judge(reference, interval(1.0, 1.3, invocations=480), intervals=6)
    assert bake.judge.decision is LiveDecision.ROLLBACK
    assert bake.latency_unmatched == 0


def test_an_unmatched_interval_is_undecided_on_latency_and_still_judges_errors() -> None:
    policy = LivePolicy(reference_load_s=0.5, error_reference=(1, 2400))
    state = LiveState()
    base = VariantInterval(invocations=240, latency_mean_s=1.0, latency_s=3.0)
    failing = interval(1.0, 5.0, invocations=480, errors=60)
    judgement = judge_interval(
        state, LiveObservation(interval_end=START, baseline=base, candidate=failing), policy, START
    )
    assert not judgement.latency_compared
    by_name = {c.name: c for c in judgement.checks}
    latency = by_name["live_latency"]
    assert latency.kind is CheckKind.LIVE and latency.verdict is Verdict.INCONCLUSIVE
    assert "2.00x" in latency.reason and "not compared" in latency.reason
    assert by_name["live_errors_5xx"].verdict is Verdict.FAIL
    assert judgement.decision is LiveDecision.ROLLBACK
    # A lighter load than the reference's is compared: a slowdown there is real.
    light = interval(0.3, 5.0, invocations=480)
    judged = judge_interval(
        LiveState(),
        LiveObservation(interval_end=START, baseline=base, candidate=light),
        policy,
        START,
    )
    assert judged.latency_compared
    assert {c.name: c for c in judged.checks}["live_latency"].verdict is not Verdict.INCONCLUSIVE


def test_the_canary_compares_whatever_the_load() -> None:
    # Side by side, both variants see the same moment: no reference, no load gate.
    assert unmatched_load(interval(5.0, 1.0), LivePolicy()) == ""


@settings(max_examples=40, deadline=None)
@given(
    reference_load=st.floats(0.05, 50.0),
    steps=st.lists(
        st.tuples(
            st.floats(0.0, 3.0),  # the promoted variant's load over the reference's
            st.floats(0.2, 20.0),  # its latency over the reference's
            st.integers(0, 60),  # its 5XX among 480 invocations
        ),
        min_size=1,
        max_size=25,
    ),
)
def test_a_bake_never_rolls_back_on_latency_measured_above_the_reference_load(
    reference_load: float, steps: list[tuple[float, float, int]]
) -> None:
    # Whatever the sequence: an interval above the tolerance never adds latency evidence,
    # so a rollback that only such intervals saw rests on errors, never on latency.
    reference = reference_of(*(interval(reference_load, 1.0) for _ in range(5)))
    spec = make_spec()
    bake = BakeStatus(until=START + timedelta(hours=1), reference=reference)
    tolerance = LivePolicy().load_tolerance
    for k, (over, slower, errors) in enumerate(steps, start=1):
        load = reference_load * over
        promoted = interval(load, slower, invocations=480, errors=errors)
        end = START + timedelta(minutes=k)
        observation = LiveObservation(
            interval_end=end, baseline=VariantInterval(invocations=0), candidate=promoted
        )
        judgement = bake_step(bake, observation, spec, end)
        assert judgement is not None
        latency = {c.name: c for c in judgement.checks}.get("live_latency")
        if over > 1.0 + tolerance + 1e-9:
            assert not judgement.latency_compared
            assert latency is not None and latency.verdict is Verdict.INCONCLUSIVE
            assert not any(
                c.verdict is Verdict.FAIL and c.name.startswith("live_latency")
                for c in judgement.checks
            )
        if bake.judge.decision is LiveDecision.ROLLBACK:
            break
    unmatched = sum(over > 1.0 + tolerance + 1e-9 for over, _, _ in steps[: bake.intervals])
    assert bake.latency_unmatched == unmatched
    if all(over > 1.0 + tolerance + 1e-9 for over, _, _ in steps):
        assert bake.judge.latency_p_value == 1.0 and bake.judge.tail_p_value == 1.0


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.1, 20.0),  # the baseline's per-instance load
            st.booleans(),  # CloudWatch statistics in the interval
            st.booleans(),  # usable probes in the interval
        ),
        min_size=1,
        max_size=20,
    )
)
def test_the_reference_holds_as_many_sources_as_the_best_interval(
    steps: list[tuple[float, bool, bool]],
) -> None:
    # Random orders of loads and of intervals with one source, both or none (1-second
    # periods on a quiet endpoint): the reference never holds fewer sources than the most
    # complete interval brought, whatever the loads; and where every interval brought both,
    # it is at the highest load (the pools restart there and nothing lighter joins).
    policy = LivePolicy()
    figures: LiveFigures | None = None
    for k, (load, statistics, probed) in enumerate(steps):
        one = interval(load, 1.0 + 0.1 * load)
        if not statistics:
            one = one.model_copy(update={"invocations": 0})
        if not probed:
            one = one.model_copy(update={"probes": None})
        figures = remembered(figures, one, START + timedelta(minutes=k), policy)
    most = max(s + p for _, s, p in steps)
    if most == 0:
        assert figures is None or not figures.load_intervals
        return
    assert figures is not None
    held = bool(figures.mean_intervals) + bool(figures.probe_ttft_s)
    assert held >= most
    if all(s and p for _, s, p in steps):
        assert figures.load_per_instance_s is not None
        top = max(load for load, _, _ in steps)
        lowest = top / (1.0 + policy.load_tolerance)
        assert lowest <= figures.load_per_instance_s <= top * (1.0 + 1e-9)
