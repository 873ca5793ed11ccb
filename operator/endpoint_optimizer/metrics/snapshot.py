"""What the exporter knows about one OptimizedEndpoint: a small typed snapshot.

The exporter never reads Kubernetes or SageMaker itself. The operator hands it a
snapshot after each reconcile (built from the resource's spec and status by
`snapshot_from_resource`), so every exported figure is one the status already
shows, and a restarted operator exports the same numbers after its first
reconcile, because they come from the persisted status, not from process memory.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from endpoint_optimizer.analysis.series import VariantRole
from endpoint_optimizer.api import Phase
from endpoint_optimizer.api.checks import Verdict

DEFAULT_MIN_ACCEPTANCE = 0.4
DEFAULT_MAX_EVAL_DROP = 0.01


class Quantiles(BaseModel):
    """Latency quantiles in seconds, exactly as the benchmark computed them from its samples."""

    model_config = ConfigDict(frozen=True)

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    def items(self) -> list[tuple[str, float]]:
        """(quantile label, seconds) for the quantiles that were measured."""
        pairs = (("0.5", self.p50), ("0.9", self.p90), ("0.99", self.p99))
        return [(label, value) for label, value in pairs if value is not None]


class LevelFigures(BaseModel):
    """One variant's benchmark at one concurrency level."""

    model_config = ConfigDict(frozen=True)

    concurrency: int = Field(ge=1)
    requests: int = Field(default=0, ge=0, description="Successful requests measured.")
    ttft: Quantiles = Quantiles()
    itl: Quantiles = Quantiles()
    e2e: Quantiles = Quantiles()
    output_tokens_per_second: float | None = None


class VariantFigures(BaseModel):
    """Everything measured about one variant (baseline or candidate)."""

    model_config = ConfigDict(frozen=True)

    levels: tuple[LevelFigures, ...] = ()
    acceptance_rate: float | None = Field(default=None, description="Accepted/drafted, 0..1.")
    eval_score: float | None = None
    refusal_rate: float | None = Field(default=None, description="Refused items / items, 0..1.")


class LiveAcceptance(BaseModel):
    """One variant's live speculative acceptance in the newest interval with log lines
    (status.rollout.liveJudge.candidateAcceptance / baselineAcceptance)."""

    model_config = ConfigDict(frozen=True)

    drafted: float
    accepted: float
    rate: float | None = None
    low: float | None = None
    high: float | None = None


class SearchCandidate(BaseModel):
    """One row of status.search: a candidate of spec.search and what its comparison found."""

    model_config = ConfigDict(frozen=True)

    name: str
    rung: str
    verdict: str = ""  # empty while it is measured
    gain: float | None = Field(default=None, description="Over the current best, fraction.")
    output_tokens_per_second: float | None = None
    latency_seconds: float | None = None
    in_service_seconds: float | None = None
    instance_hours: float | None = None
    peak_gpu_memory_percent: float | None = None
    cost_per_million_tokens: float | None = Field(default=None, description="USD.")


class CheckState(BaseModel):
    """A check's latest verdict: the three fields of `status.checks[]` the exporter shows."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: str
    verdict: Verdict


class EndpointSnapshot(BaseModel):
    """The state of one resource, as of its last reconcile."""

    model_config = ConfigDict(frozen=True)

    endpoint_name: str = ""
    phase: str = "Pending"
    phase_entered_at: float | None = Field(
        default=None, description="Unix seconds when the current phase began."
    )
    phase_deadline_seconds: float | None = Field(
        default=None,
        description="How long the current phase may last before the rollout counts as stuck.",
    )
    objective: str = ""
    strategy: str = ""
    rollout_step: int | None = None
    canary_weight: float | None = Field(default=None, description="Candidate share, 0..1.")
    variants: dict[VariantRole, VariantFigures] = Field(default_factory=dict)
    acceptance_floor: float | None = Field(default=None, description="0..1, from the spec.")
    live_acceptance: dict[VariantRole, LiveAcceptance] = Field(default_factory=dict)
    acceptance_below_floor: float | None = Field(
        default=None, description="Live intervals confidently below the floor so far."
    )
    speculation_disabled_at: float | None = Field(
        default=None, description="Unix time speculation was switched off on drift."
    )
    eval_metric: str = ""
    eval_max_drop: float | None = None
    checks: tuple[CheckState, ...] = ()
    search: tuple[SearchCandidate, ...] = ()
    search_instance_hours: float | None = None


def _get(tree: Mapping[str, Any] | None, *path: str) -> Any:
    node: Any = tree
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _number_or(value: Any, default: float) -> float:
    number = _number(value)
    return default if number is None else number


def _timestamp(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration_seconds(value: Any) -> float | None:
    """`90`, `"90s"`, `"5m"`, `"1m30s"` -> seconds: the spec's Duration pattern."""
    number = _number(value)
    if number is not None:
        return number
    if not isinstance(value, str):
        return None
    parts = _DURATION_PART.findall(value)
    if not parts or "".join(amount + unit for amount, unit in parts) != value:
        return None
    return sum(float(amount) * _UNIT_SECONDS[unit] for amount, unit in parts)


def _quantiles(level: Mapping[str, Any], metric: str) -> Quantiles:
    """Reads the status' `<metric>_p50_ms`-style fields (unit: ms) into seconds.

    The key is spelled as the status models' alias generator spells it (pydantic's
    to_camel turns `e2e_p90_ms` into `e2EP90Ms`); the plain camelCase spelling a
    person would type (`e2eP90Ms`) is accepted too.
    """
    values: dict[str, float | None] = {}
    for key in ("p50", "p90", "p99"):
        generated = to_camel(f"{metric}_{key}_ms")
        typed = f"{metric}{key.upper()}Ms"
        millis = _number(level.get(generated, level.get(typed)))
        values[key] = millis / 1000 if millis is not None else None
    return Quantiles(**values)


def _variant(tree: Any) -> VariantFigures | None:
    if not isinstance(tree, Mapping):
        return None
    levels = []
    raw_levels = tree.get("levels")
    for level in raw_levels if isinstance(raw_levels, list) else ():
        if not isinstance(level, Mapping):
            continue
        concurrency = _number(level.get("concurrency"))
        if concurrency is None or concurrency < 1:
            continue
        levels.append(
            LevelFigures(
                concurrency=int(concurrency),
                requests=max(0, int(_number(level.get("requests")) or 0)),
                ttft=_quantiles(level, "ttft"),
                itl=_quantiles(level, "itl"),
                e2e=_quantiles(level, "e2e"),
                output_tokens_per_second=_number(level.get("outputTokensPerSecond")),
            )
        )
    return VariantFigures(
        levels=tuple(levels),
        acceptance_rate=_number(tree.get("acceptanceRate")),
        eval_score=_number(tree.get("evalScore")),
        refusal_rate=_number(tree.get("refusalRate")),
    )


# Phases during which traffic is moving; only these can be "stuck beyond the deadline".
ROLLOUT_PHASES = frozenset(
    {Phase.DEPLOYING, Phase.ANALYZING, Phase.AWAITING_APPROVAL, Phase.PROMOTING, Phase.ROLLING_BACK}
)
# Phases after which no rollout step runs: the rollout metrics read 0 (reset).
ENDED_PHASES = frozenset({Phase.SUCCEEDED, Phase.ROLLED_BACK, Phase.FAILED})


def _acceptance_judge(status: Mapping[str, Any], phase: str) -> Any:
    """Whose live acceptance is current: the acceptance watch after a clean bake (until
    the retention ends), the bake's judge while it runs, the canary's live judge while
    the rollout runs; nothing after that (a finished rollout's last interval is not live)."""
    rollout = _get(status, "rollout")
    watch = _get(rollout, "acceptanceWatch")
    if isinstance(watch, Mapping) and not watch.get("endedAt"):
        return watch
    bake = _get(rollout, "bake")
    if isinstance(bake, Mapping) and not bake.get("endedAt"):
        return bake.get("judge")
    return None if phase in ENDED_PHASES else _get(rollout, "liveJudge")


# Flagger's progressDeadlineSeconds default: how long a step may overrun its planned time.
PROGRESS_DEADLINE_SECONDS = 600.0


def _phase_entered_at(status: Mapping[str, Any], phase: str) -> float | None:
    """When the current phase (for Analyzing: the current step) began."""
    if phase == Phase.ANALYZING:
        step_started = _timestamp(_get(status, "rollout", "stepStartedAt"))
        if step_started is not None:
            return step_started
    # The oldest entry of the trailing run of history entries in the current phase.
    entered: float | None = None
    history = status.get("history")
    for entry in reversed(history) if isinstance(history, list) else ():
        if _get(entry, "phase") != phase:
            break
        entered = _timestamp(_get(entry, "time")) or entered
    if entered is not None:
        return entered
    conditions = status.get("conditions")
    for condition in conditions if isinstance(conditions, list) else ():
        if _get(condition, "type") == "Progressing":
            return _timestamp(_get(condition, "lastTransitionTime"))
    return None


def _phase_deadline(spec: Mapping[str, Any], phase: str, step_index: int | None) -> float | None:
    """How long the current rollout phase may last: its planned time plus the progress deadline.

    Analyzing plans the current step's pause; Deploying plans the model download and
    container health-check timeouts; the other rollout phases plan nothing extra.
    """
    if phase not in ROLLOUT_PHASES or not spec:
        return None
    planned = 0.0
    if phase == Phase.ANALYZING:
        steps = _get(spec, "rollout", "steps")
        if isinstance(steps, list) and step_index is not None and 0 <= step_index < len(steps):
            planned = _duration_seconds(_get(steps[step_index], "pause")) or 0.0
        else:
            planned = 300.0  # the spec's default step pause, 5m
    elif phase == Phase.DEPLOYING:
        timeouts = _get(spec, "timeouts")
        download = _number(_get(timeouts, "modelDataDownloadSeconds"))
        startup = _number(_get(timeouts, "containerStartupHealthCheckSeconds"))
        planned = (download or 0.0) + (startup or 0.0)
    return planned + PROGRESS_DEADLINE_SECONDS


def _search(status: Mapping[str, Any]) -> tuple[SearchCandidate, ...]:
    rows = _get(status, "search", "rows")
    found = []
    for row in rows if isinstance(rows, list) else ():
        name, rung = _get(row, "name"), _get(row, "rung")
        if not isinstance(name, str) or not name or not isinstance(rung, str):
            continue
        latency = _number(_get(row, "latencyMs"))
        found.append(
            SearchCandidate(
                name=name,
                rung=rung,
                verdict=str(_get(row, "verdict") or ""),
                gain=_number(_get(row, "gain")),
                output_tokens_per_second=_number(_get(row, "tokensPerSecond")),
                latency_seconds=latency / 1000 if latency is not None else None,
                in_service_seconds=_number(_get(row, "inServiceSeconds")),
                instance_hours=_number(_get(row, "instanceHours")),
                peak_gpu_memory_percent=_number(_get(row, "peakGpuMemoryPercent")),
                cost_per_million_tokens=_number(_get(row, "costPerMillionTokens")),
            )
        )
    return tuple(found)


def snapshot_from_resource(
    spec: Mapping[str, Any] | None, status: Mapping[str, Any] | None
) -> EndpointSnapshot:
    """Builds a snapshot from a resource's camelCase spec and status (kopf hands both as dicts).

    Missing or malformed fields become "not measured" rather than errors: the
    exporter must never make a reconcile fail.
    """
    spec = spec or {}
    status = status or {}
    step_index = _number(_get(status, "rollout", "stepIndex"))
    weight = _number(_get(status, "rollout", "canaryWeight"))
    variants: dict[VariantRole, VariantFigures] = {}
    for role in VariantRole:
        figures = _variant(status.get(role.value))
        if figures is not None:
            variants[role] = figures
    checks: list[CheckState] = []
    raw_checks = status.get("checks")
    for raw in raw_checks if isinstance(raw_checks, list) else ():
        name, kind, verdict = _get(raw, "name"), _get(raw, "kind"), _get(raw, "verdict")
        if isinstance(name, str) and name and verdict in set(Verdict):
            checks.append(CheckState(name=name, kind=str(kind or ""), verdict=Verdict(verdict)))
    raw_phase = status.get("phase")
    phase = raw_phase if isinstance(raw_phase, str) and raw_phase else "Pending"
    step = int(step_index) if step_index is not None else None
    if phase in ENDED_PHASES:
        # The rollout is over (promoted, rolled back or failed): no step runs and no canary
        # takes traffic, whatever step and weight status.rollout last recorded.
        step, weight = 0, 0.0
    speculative = _get(spec, "optimizations", "speculativeDecoding")
    evaluation = _get(spec, "evaluation")
    judge = _acceptance_judge(status, phase)
    live_acceptance: dict[VariantRole, LiveAcceptance] = {}
    for role in VariantRole:
        found = _get(judge, f"{role.value}Acceptance")
        drafted, accepted = _number(_get(found, "drafted")), _number(_get(found, "accepted"))
        if drafted is not None and accepted is not None:
            live_acceptance[role] = LiveAcceptance(
                drafted=drafted,
                accepted=accepted,
                rate=_number(_get(found, "rate")),
                low=_number(_get(found, "low")),
                high=_number(_get(found, "high")),
            )
    return EndpointSnapshot(
        endpoint_name=str(
            spec.get("endpointName") or _get(status, "sagemaker", "endpointName") or ""
        ),
        phase=phase,
        phase_entered_at=_phase_entered_at(status, phase),
        phase_deadline_seconds=_phase_deadline(spec, phase, step),
        # The CRD's defaults when a spec was given but not defaulted; nothing without one.
        objective=str(_get(spec, "objective", "metric") or ("latency" if spec else "")),
        strategy=str(_get(spec, "rollout", "strategy") or ("canary" if spec else "")),
        rollout_step=step,
        # The status writes weights in percent (0..100); Prometheus' convention is ratios.
        canary_weight=weight / 100 if weight is not None else None,
        variants=variants,
        # Defaults as in the CRD, for bodies the API server has not defaulted.
        acceptance_floor=(
            _number_or(_get(speculative, "minAcceptanceRate"), DEFAULT_MIN_ACCEPTANCE)
            if isinstance(speculative, Mapping)
            else None
        ),
        live_acceptance=live_acceptance,
        acceptance_below_floor=_number(_get(judge, "acceptanceBelowFloor")),
        speculation_disabled_at=_timestamp(_get(status, "rollout", "speculationDisabled", "at")),
        eval_metric=str(_get(evaluation, "metric") or "exact_match")
        if isinstance(evaluation, Mapping)
        else "",
        search=_search(status),
        search_instance_hours=_number(_get(status, "search", "instanceHours")),
        eval_max_drop=(
            _number_or(_get(evaluation, "maxAbsoluteDrop"), DEFAULT_MAX_EVAL_DROP)
            if isinstance(evaluation, Mapping)
            else None
        ),
        checks=tuple(checks),
    )
