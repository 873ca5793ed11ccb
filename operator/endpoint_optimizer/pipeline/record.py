"""Write what a measurement found into status (pure)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from endpoint_optimizer.analysis.verdict import Verdict
from endpoint_optimizer.api import (
    ConditionStatus,
    ConditionType,
    OptimizedEndpointSpec,
    OptimizedEndpointStatus,
    Phase,
    parse_status,
)
from endpoint_optimizer.pipeline.model import ActionKind, Measurement

COMPARED_KEY = "comparedStep"


def record(
    status_data: dict[str, Any],
    measurement: Measurement,
    spec: OptimizedEndpointSpec,
    now: datetime,
) -> dict[str, Any]:
    """The status with the measurement in it."""
    status: OptimizedEndpointStatus = parse_status(status_data)
    status.baseline = measurement.baseline
    if measurement.kind is ActionKind.MEASURE_BASELINE:
        status.record(now, "BaselineBenchmarked", _summary(measurement, spec))
        return status.dump()
    status.candidate = measurement.candidate
    status.checks = list(measurement.checks)
    status.rollout.live_judge_state[COMPARED_KEY] = measurement.step
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
    failed = [c for c in measurement.checks if c.verdict is Verdict.FAIL]
    status.record(
        now,
        "CandidateCompared",
        f"step {measurement.step + 1}: {len(measurement.checks)} checks, {len(failed)} failed",
    )
    return status.dump()


def _summary(measurement: Measurement, spec: OptimizedEndpointSpec) -> str:
    level = measurement.baseline.level(spec.judged_concurrency())
    if level is None or level.ttft_p50_ms is None:
        return "baseline benchmarked"
    return f"baseline ttft p50 {level.ttft_p50_ms:.0f} ms at c{level.concurrency}"


def record_error(
    status_data: dict[str, Any], message: str, permanent: bool, now: datetime, reason: str
) -> dict[str, Any]:
    """A failed action: a permanent one ends the pipeline (Terminal); a transient one waits."""
    status = parse_status(status_data)
    status.last_error = message[:4096]
    if permanent:
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
    return status.dump()
