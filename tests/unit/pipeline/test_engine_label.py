"""Status says which engine measured a variant; a warning when verdicts rest on synthetic ones."""

from __future__ import annotations

from datetime import UTC, datetime

from endpoint_optimizer.api import (
    OptimizedEndpointStatus,
    VariantMeasurements,
    parse_spec,
    parse_status,
)
from endpoint_optimizer.bench.served_by import EngineSummary
from endpoint_optimizer.pipeline import assess
from endpoint_optimizer.pipeline.model import ActionKind, Measurement
from endpoint_optimizer.pipeline.record import SYNTHETIC_EVENT, engine_notes, record
from endpoint_optimizer.report import render_report
from tests.unit.pipeline.test_decide import spec

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
FP8 = "fp8 needs FP8 tensor cores (GPU), a CPU has none"


def measured(variant: str, served_by: str = "", note: str = "") -> VariantMeasurements:
    return VariantMeasurements(variant_name=variant, served_by=served_by, engine_note=note)


def test_eval_answers_join_the_benchmark_label() -> None:
    bench = measured("candidate", "synthetic", FP8)
    assert assess.with_eval_engine(bench, EngineSummary("synthetic", FP8)) == bench
    unlabelled = assess.with_eval_engine(measured("candidate"), EngineSummary())
    assert (unlabelled.served_by, unlabelled.engine_note) == ("", "")
    mixed = assess.with_eval_engine(measured("candidate", "real"), EngineSummary("synthetic", FP8))
    assert (mixed.served_by, mixed.engine_note) == ("mixed", FP8)


def test_only_a_labelled_fallback_is_worth_a_warning() -> None:
    synthetic_sandbox = Measurement(
        ActionKind.COMPARE, 0, measured("baseline", "synthetic"), measured("cand", "synthetic")
    )
    assert engine_notes(synthetic_sandbox) == []
    real = Measurement(ActionKind.COMPARE, 0, measured("baseline", "real"), measured("cand"))
    assert engine_notes(real) == []
    fallback = Measurement(
        ActionKind.COMPARE,
        0,
        measured("baseline", "synthetic", f"paired with cand: {FP8}"),
        measured("cand", "synthetic", FP8),
    )
    assert engine_notes(fallback) == [
        f"synthetic numbers for baseline: paired with cand: {FP8}",
        f"synthetic numbers for cand: {FP8}",
    ]


def test_a_comparison_on_synthetic_numbers_is_recorded_in_status_and_the_report() -> None:
    measurement = Measurement(
        ActionKind.COMPARE,
        0,
        measured("baseline", "synthetic", f"paired with cand: {FP8}"),
        measured("cand", "synthetic", FP8),
    )
    after = parse_status(record({}, measurement, parse_spec(spec()), NOW))
    assert after.candidate is not None and after.candidate.served_by == "synthetic"
    assert after.candidate.engine_note == FP8
    (entry,) = [e for e in after.history if e.event == SYNTHETIC_EVENT]
    assert entry.message.startswith("the verdicts rest on synthetic numbers for baseline")
    # What `kubectl get -o yaml` shows: camelCase fields next to the measurements.
    dumped = after.dump()
    assert dumped["candidate"]["servedBy"] == "synthetic"
    assert dumped["candidate"]["engineNote"] == FP8
    html = render_report({"metadata": {"name": "chat"}, "spec": spec(), "status": dumped})
    assert "candidate: synthetic engine (fp8 needs FP8 tensor cores" in html


def test_unlabelled_measurements_leave_status_as_it_was() -> None:
    measurement = Measurement(ActionKind.COMPARE, 0, measured("baseline"), measured("cand"))
    after: OptimizedEndpointStatus = parse_status(record({}, measurement, parse_spec(spec()), NOW))
    assert all(e.event != SYNTHETIC_EVENT for e in after.history)
    assert after.candidate is not None and after.candidate.served_by == ""
    html = render_report({"metadata": {"name": "chat"}, "spec": spec(), "status": after.dump()})
    assert "not labelled by the container" in html
