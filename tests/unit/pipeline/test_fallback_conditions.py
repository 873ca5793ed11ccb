"""A measurement on the synthetic fallback is named in the condition messages people read.

The operator's order on each wake-up (handlers._reconcile): decide, record any
measurement, then `with_fallback_in_conditions`. These tests run that order over the
pure functions: Progressing while analysing, Ready/Degraded/Terminal at the end, only
when a container labelled a fallback.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from endpoint_optimizer.api import (
    Condition,
    ConditionType,
    OptimizedEndpointStatus,
    VariantMeasurements,
    parse_spec,
    parse_status,
)
from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.pipeline.model import ActionKind, Measurement
from endpoint_optimizer.pipeline.record import (
    MAX_FALLBACK_NOTE,
    fallback_note,
    record,
    record_error,
    with_fallback_in_conditions,
)
from tests.unit.pipeline.test_decide import NAMES, NOW, compared, deployed, run, serving, spec

FP8 = "fp8 needs FP8 tensor cores (GPU), a CPU has none"
NOTE = f"baseline and candidate measured on the synthetic engine: {FP8}"


def measured(variant: str, served_by: str = "", note: str = "") -> VariantMeasurements:
    return VariantMeasurements(variant_name=variant, served_by=served_by, engine_note=note)


FALLBACK = Measurement(
    ActionKind.COMPARE,
    0,
    measured(NAMES.baseline_variant, "synthetic", f"paired with {NAMES.candidate_variant}: {FP8}"),
    measured(NAMES.candidate_variant, "synthetic", FP8),
)


def condition(status: OptimizedEndpointStatus, type_: ConditionType) -> Condition:
    found = status.condition(type_)
    assert found is not None, f"no {type_.value} condition"
    return found


def wake(
    status: OptimizedEndpointStatus, measurement: Measurement | None = None, **run_args: Any
) -> OptimizedEndpointStatus:
    """One wake-up as the handler composes it: decide, record, name the fallback."""
    decided, _, _ = run(status, **run_args)
    after = decided.dump()
    if measurement is not None:
        after = record(after, measurement, parse_spec(spec()), NOW)
    return parse_status(with_fallback_in_conditions(after))


def test_progressing_names_the_fallback_while_analysing_and_ready_does_not_yet() -> None:
    status, rollout = deployed()
    status = wake(status, FALLBACK, endpoint=rollout)
    assert status.phase.value == "Analyzing"
    progressing = condition(status, ConditionType.PROGRESSING)
    assert progressing.message.endswith(f"({NOTE})")
    assert progressing.message.startswith(status.message)
    assert "synthetic" not in condition(status, ConditionType.READY).message
    # The next wake-up rewrites the messages; the note comes back, once.
    later = wake(status, endpoint=rollout, now=NOW + timedelta(seconds=10))
    assert condition(later, ConditionType.PROGRESSING).message.count(NOTE) == 1
    dumped = later.dump()
    assert with_fallback_in_conditions(dumped) is dumped  # idempotent: nothing to add


def test_at_the_end_ready_and_degraded_name_the_fallback() -> None:
    status, rollout = deployed()
    status = wake(status, FALLBACK, endpoint=rollout)
    compared(status, Verdict.FAIL)
    status = wake(status, endpoint=rollout)
    assert status.phase.value == "RollingBack"
    drained = serving(
        NAMES.rollout_config, (NAMES.baseline_variant, 100.0), (NAMES.candidate_variant, 0.0)
    )
    status = wake(status, endpoint=drained)
    status = wake(status, endpoint=serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0)))
    assert status.phase.value == "RolledBack"
    for type_ in (ConditionType.READY, ConditionType.PROGRESSING, ConditionType.DEGRADED):
        assert condition(status, type_).message.endswith(f"({NOTE})"), type_
    terminal = condition(status, ConditionType.TERMINAL)
    assert terminal.status.value == "False" and terminal.message == ""


def test_a_terminal_error_after_a_fallback_comparison_names_it() -> None:
    status, rollout = deployed()
    status = wake(status, FALLBACK, endpoint=rollout)
    going_back = parse_status(
        record_error(status.dump(), "AccessDenied on UpdateEndpoint", True, NOW, "AccessDenied")
    )
    # The candidate may hold traffic: back to the baseline first, then Failed.
    assert going_back.phase.value == "RollingBack"
    failed = wake(
        going_back, endpoint=serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))
    )
    assert failed.phase.value == "Failed"
    terminal = condition(failed, ConditionType.TERMINAL)
    assert terminal.status.value == "True"
    assert terminal.message == f"AccessDenied on UpdateEndpoint ({NOTE})"


@pytest.mark.parametrize(
    ("baseline", "candidate"),
    [
        (measured("b"), measured("c")),  # a real container sets no label
        (measured("b", "real"), measured("c", "real")),
        (measured("b", "synthetic"), measured("c", "synthetic")),  # synthetic by choice
    ],
    ids=["unlabelled", "real", "synthetic-sandbox"],
)
def test_without_a_fallback_the_conditions_are_left_as_decided(
    baseline: VariantMeasurements, candidate: VariantMeasurements
) -> None:
    status, rollout = deployed()
    decided, _, _ = run(status, endpoint=rollout)
    after = record(
        decided.dump(),
        Measurement(ActionKind.COMPARE, 0, baseline, candidate),
        parse_spec(spec()),
        NOW,
    )
    assert with_fallback_in_conditions(after) is after
    assert fallback_note(parse_status(after)) == ""


def test_the_note_names_the_variants_and_is_bounded() -> None:
    only_candidate = OptimizedEndpointStatus(
        baseline=measured("b", "real"), candidate=measured("c", "synthetic", FP8)
    )
    assert fallback_note(only_candidate) == f"candidate measured on the synthetic engine: {FP8}"
    mixed = OptimizedEndpointStatus(
        candidate=measured("c", "mixed", "3 of 10 responses synthetic: " + FP8)
    )
    assert fallback_note(mixed).startswith("candidate measured partly on the synthetic engine: 3")
    long = OptimizedEndpointStatus(candidate=measured("c", "synthetic", "x" * 480))
    note = fallback_note(long)
    assert len(note) == MAX_FALLBACK_NOTE and note.endswith("...")
