"""A measurement made of errors is no measurement: not judged, tried again after a backoff."""

from __future__ import annotations

from datetime import timedelta

from endpoint_optimizer.api import (
    OptimizedEndpointStatus,
    VariantMeasurements,
    parse_spec,
    parse_status,
)
from endpoint_optimizer.pipeline.cadence import retry_delay
from endpoint_optimizer.pipeline.model import ActionKind, Measurement, Timing
from endpoint_optimizer.pipeline.record import record
from tests.unit.pipeline.test_decide import NAMES, NOW, run, serving, spec

TIMING = Timing(time_scale=1.0, poll_interval=30.0)
BASELINE_ONLY = serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))
VOID = Measurement(
    ActionKind.MEASURE_BASELINE, 0, void="baseline at concurrency 8: 32 of 32 requests failed"
)


def baselining() -> OptimizedEndpointStatus:
    status, _, _ = run(None)
    status, actions, _ = run(status, BASELINE_ONLY)
    assert actions == [ActionKind.MEASURE_BASELINE]
    return status


def test_a_void_baseline_is_not_measured_and_waits_for_its_next_attempt() -> None:
    status = baselining()
    after = parse_status(record(status.dump(), VOID, parse_spec(spec()), NOW, TIMING))
    assert after.baseline is not None and after.baseline.measured_at is None
    retry = after.measurement_retry
    assert retry is not None and retry.attempts == 1 and retry.action == "MeasureBaseline"
    assert retry.next_at >= NOW + timedelta(seconds=30)
    assert after.history[-1].event == "MeasurementVoid"
    # Before the next attempt: no benchmark traffic against production, and status says why.
    waiting, actions, _ = run(after, BASELINE_ONLY, now=NOW + timedelta(seconds=5))
    assert actions == [] and "attempt 2" in waiting.message
    # Then it is measured again.
    _, actions, _ = run(after, BASELINE_ONLY, now=retry.next_at)
    assert actions == [ActionKind.MEASURE_BASELINE]


def test_each_void_attempt_waits_longer_and_a_valid_one_clears_the_retry() -> None:
    status = baselining()
    first = parse_status(record(status.dump(), VOID, parse_spec(spec()), NOW, TIMING))
    assert first.measurement_retry is not None
    later = first.measurement_retry.next_at
    second = parse_status(record(first.dump(), VOID, parse_spec(spec()), later, TIMING))
    assert second.measurement_retry is not None and second.measurement_retry.attempts == 2
    assert second.measurement_retry.next_at - later > first.measurement_retry.next_at - NOW
    measured = Measurement(
        ActionKind.MEASURE_BASELINE,
        0,
        VariantMeasurements(variant_name=NAMES.baseline_variant, measured_at=later),
    )
    cleared = parse_status(record(second.dump(), measured, parse_spec(spec()), later, TIMING))
    assert cleared.measurement_retry is None


def test_the_backoff_never_runs_faster_than_the_poll_and_is_bounded() -> None:
    delays = [retry_delay(n, TIMING, "k") for n in range(1, 20)]
    assert min(delays) >= TIMING.poll_interval
    assert max(delays) <= 1800 * 1.2
    assert delays[3] > delays[0]
    fast = Timing(time_scale=0.001, poll_interval=0.2)
    assert all(retry_delay(n, fast, "k") >= 0.2 for n in range(1, 10))


def test_a_baseline_whose_body_the_container_refused_ends_the_pipeline_naming_the_field() -> None:
    # A 400 for every request is a setting (requestFormat), not a moment: no retry loop.
    status = baselining()
    refused = Measurement(
        ActionKind.MEASURE_BASELINE,
        0,
        void="baseline at concurrency 4: 32 of 32 requests failed; the container answered "
        "400 (a body it does not take): set spec.benchmark.requestFormat",
        refused=True,
    )
    after = parse_status(record(status.dump(), refused, parse_spec(spec()), NOW, TIMING))
    assert after.phase.value == "Failed" and after.measurement_retry is None
    assert "spec.benchmark.requestFormat" in after.message
    assert after.history[-1].event == "RequestRefused"
    assert after.baseline is not None and after.baseline.measured_at is None
    # Failed: nothing more is asked of the endpoint.
    _, actions, _ = run(after, BASELINE_ONLY, now=NOW + timedelta(minutes=5))
    assert actions == []
