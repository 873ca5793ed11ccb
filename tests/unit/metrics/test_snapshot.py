"""snapshot_from_resource reads the camelCase spec and status the operator writes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.analysis.series import VariantRole
from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.metrics.snapshot import (
    PROGRESS_DEADLINE_SECONDS,
    Quantiles,
    snapshot_from_resource,
)

REPO = Path(__file__).resolve().parents[3]

SPEC: dict[str, Any] = {
    "endpointName": "llama-8b-chat",
    "objective": {"metric": "latency", "minImprovement": 0.05},
    "optimizations": {"speculativeDecoding": {"method": "ngram", "minAcceptanceRate": 0.5}},
    "evaluation": {"dataset": {"configMapRef": {"name": "evals", "key": "items.jsonl"}},
                   "metric": "exact_match", "maxAbsoluteDrop": 0.02},
    "rollout": {"strategy": "canary", "steps": [{"weight": 10, "pause": "5m"},
                                                {"weight": 50, "pause": "1m30s"}]},
}  # fmt: skip

STATUS: dict[str, Any] = {
    "phase": "Analyzing",
    "conditions": [{"type": "Progressing", "status": "True", "reason": "CanaryStep",
                    "lastTransitionTime": "2026-11-29T12:00:00Z"}],
    "baseline": {
        "variantName": "AllTraffic",
        "levels": [{"concurrency": 16, "requests": 160, "ttftP50Ms": 120.0, "ttftP99Ms": 480.0,
                    "itlP50Ms": 11.0, "itlP90Ms": 14.0, "itlP99Ms": 20.0, "e2eP99Ms": 3100.0,
                    "outputTokensPerSecond": 2100.5}],
        "evalScore": 0.81, "refusalRate": 0.0,
    },
    "candidate": {"variantName": "candidate", "levels": [], "acceptanceRate": 0.63,
                  "evalScore": 0.80},
    "checks": [{"name": "ttft_p99@c16", "kind": "benchmark", "verdict": "Pass", "samples": 160},
               {"name": "broken", "kind": "eval", "verdict": "Maybe"}],
    "rollout": {"stepIndex": 1, "canaryWeight": 50, "stepStartedAt": "2026-11-29T12:05:00Z"},
}  # fmt: skip


def test_the_operator_status_becomes_a_snapshot_in_base_units() -> None:
    snap = snapshot_from_resource(SPEC, STATUS)

    assert snap.endpoint_name == "llama-8b-chat"
    assert (snap.phase, snap.objective, snap.strategy) == ("Analyzing", "latency", "canary")
    assert snap.canary_weight == 0.5 and snap.rollout_step == 1
    level = snap.variants[VariantRole.BASELINE].levels[0]
    assert level.ttft == Quantiles(p50=0.12, p90=None, p99=0.48)
    assert level.itl.items() == [("0.5", 0.011), ("0.9", 0.014), ("0.99", 0.02)]
    assert level.e2e.p99 == 3.1 and level.requests == 160
    assert level.output_tokens_per_second == 2100.5
    assert snap.variants[VariantRole.CANDIDATE].acceptance_rate == 0.63
    assert (snap.acceptance_floor, snap.eval_metric, snap.eval_max_drop) == (
        0.5,
        "exact_match",
        0.02,
    )
    # A check with an unknown verdict is skipped, not an error.
    assert [(c.name, c.verdict) for c in snap.checks] == [("ttft_p99@c16", Verdict.PASS)]


def test_an_analyzing_step_is_timed_from_its_start_and_its_own_pause() -> None:
    snap = snapshot_from_resource(SPEC, STATUS)

    assert snap.phase_entered_at == datetime(2026, 11, 29, 12, 5, tzinfo=UTC).timestamp()
    assert snap.phase_deadline_seconds == 90 + PROGRESS_DEADLINE_SECONDS


def test_other_phases_are_timed_from_history_and_only_rollout_phases_have_deadlines() -> None:
    history = [
        {"time": "2026-11-29T11:00:00Z", "phase": "Baselining", "event": "Started"},
        {"time": "2026-11-29T11:10:00Z", "phase": "Deploying", "event": "CandidateDeploying"},
        {"time": "2026-11-29T11:12:00Z", "phase": "Deploying", "event": "StillCreating"},
    ]
    spec = {**SPEC, "timeouts": {"modelDataDownloadSeconds": 1200,
                                 "containerStartupHealthCheckSeconds": 600}}  # fmt: skip
    deploying = snapshot_from_resource(spec, {"phase": "Deploying", "history": history})
    optimizing = snapshot_from_resource(spec, {"phase": "Optimizing", "history": history})

    assert deploying.phase_entered_at == datetime(2026, 11, 29, 11, 10, tzinfo=UTC).timestamp()
    assert deploying.phase_deadline_seconds == 1800 + PROGRESS_DEADLINE_SECONDS
    assert optimizing.phase_deadline_seconds is None


def test_crd_defaults_apply_when_the_body_was_not_defaulted() -> None:
    spec = {"optimizations": {"speculativeDecoding": {"method": "ngram"}},
            "evaluation": {"dataset": {}}}  # fmt: skip
    snap = snapshot_from_resource(spec, None)

    assert (snap.acceptance_floor, snap.eval_max_drop, snap.eval_metric) == (
        0.4,
        0.01,
        "exact_match",
    )
    assert snap.phase == "Pending" and snap.variants == {}
    assert snapshot_from_resource({}, {}).acceptance_floor is None
    # Without a spec, nothing is made up: the spec-derived labels stay empty.
    bare = snapshot_from_resource(None, {"phase": "Analyzing"})
    assert (bare.objective, bare.strategy, bare.phase_deadline_seconds) == ("", "", None)
    assert (snap.objective, snap.strategy) == ("latency", "canary")


json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(
    spec=st.dictionaries(st.sampled_from(list(SPEC)), json_values, max_size=5),
    status=st.dictionaries(st.sampled_from([*STATUS, "history"]), json_values, max_size=7),
)
def test_malformed_bodies_never_raise(spec: dict[str, Any], status: dict[str, Any]) -> None:
    snapshot_from_resource(spec, status)


numbers = st.none() | st.integers() | st.floats() | st.text(max_size=3)


@settings(max_examples=60, deadline=None)
@given(
    level=st.dictionaries(
        st.sampled_from(["concurrency", "requests", "ttftP99Ms", "outputTokensPerSecond"]), numbers
    ),
    rollout=st.dictionaries(
        st.sampled_from(["stepIndex", "canaryWeight", "stepStartedAt"]), numbers
    ),
)
def test_odd_numbers_in_levels_and_rollout_never_raise(
    level: dict[str, Any], rollout: dict[str, Any]
) -> None:
    status = {"phase": "Analyzing", "baseline": {"levels": [level]}, "rollout": rollout}
    snapshot_from_resource(SPEC, status)


def test_a_status_written_by_the_api_models_is_read_field_for_field() -> None:
    """The contract with api.py: the fields the exporter reads are the ones the models write."""
    import yaml

    from endpoint_optimizer.api import (
        LevelMeasurement,
        OptimizedEndpointStatus,
        Phase,
        RolloutStatus,
        VariantMeasurements,
        parse_spec,
    )
    from endpoint_optimizer.api.checks import Check, CheckKind

    example = yaml.safe_load((REPO / "examples" / "ngram-summarization.yaml").read_text())
    spec = parse_spec(example["spec"])
    status = OptimizedEndpointStatus(
        phase=Phase.ANALYZING,
        baseline=VariantMeasurements(
            variant_name="AllTraffic",
            levels=[LevelMeasurement(concurrency=4, requests=64, ttft_p99_ms=410.0, itl_p50_ms=9.5,
                                     e2e_p90_ms=2800.0, output_tokens_per_second=700.0)],
            eval_score=0.7,
        ),
        candidate=VariantMeasurements(variant_name="candidate", acceptance_rate=0.55,
                                      refusal_rate=0.01),
        checks=[Check(name="ttft_p99@c4", kind=CheckKind.BENCHMARK, verdict=Verdict.FAIL)],
        rollout=RolloutStatus(step_index=0, canary_weight=10,
                              step_started_at=datetime(2026, 11, 29, 12, tzinfo=UTC)),
    )  # fmt: skip
    snap = snapshot_from_resource(spec.dump(), status.dump())

    assert snap.endpoint_name == spec.endpoint_name
    assert snap.objective == spec.objective.metric.value
    assert snap.strategy == spec.rollout.strategy.value
    level = snap.variants[VariantRole.BASELINE].levels[0]
    assert (level.concurrency, level.requests) == (4, 64)
    assert (level.ttft.p99, level.itl.p50, level.e2e.p90) == (0.41, 0.0095, 2.8)
    assert level.output_tokens_per_second == 700.0
    assert snap.variants[VariantRole.BASELINE].eval_score == 0.7
    assert snap.variants[VariantRole.CANDIDATE].acceptance_rate == 0.55
    assert snap.variants[VariantRole.CANDIDATE].refusal_rate == 0.01
    assert snap.canary_weight == 0.1 and snap.rollout_step == 0
    assert snap.phase_entered_at == datetime(2026, 11, 29, 12, tzinfo=UTC).timestamp()
    assert spec.optimizations.speculative_decoding is not None
    assert snap.acceptance_floor == spec.optimizations.speculative_decoding.min_acceptance_rate
    assert [(c.name, c.kind, c.verdict) for c in snap.checks] == [
        ("ttft_p99@c4", "benchmark", Verdict.FAIL)
    ]


def test_the_exporter_lists_every_api_phase() -> None:
    from endpoint_optimizer.api import Phase
    from endpoint_optimizer.metrics.exporter import KNOWN_PHASES

    assert set(KNOWN_PHASES) == {phase.value for phase in Phase}


@pytest.mark.parametrize("phase", ["Succeeded", "RolledBack", "Failed"])
def test_rollout_metrics_reset_when_the_rollout_ends(phase: str) -> None:
    # status.rollout keeps the last step's figures; after promotion or rollback no canary runs.
    snap = snapshot_from_resource(SPEC, {**STATUS, "phase": phase})
    assert snap.canary_weight == 0.0 and snap.rollout_step == 0
    running = snapshot_from_resource(SPEC, {**STATUS, "phase": "RollingBack"})
    assert running.canary_weight == 0.5 and running.rollout_step == 1


def _acceptance(rate: float) -> dict[str, Any]:
    return {"drafted": 400, "accepted": int(400 * rate), "rate": rate, "low": rate - 0.05,
            "high": rate + 0.05}  # fmt: skip


def test_live_acceptance_comes_from_the_judge_that_is_current() -> None:
    canary = {"liveJudge": {"candidateAcceptance": _acceptance(0.6), "acceptanceBelowFloor": 0}}
    # The canary's live judge while the rollout runs.
    snap = snapshot_from_resource(SPEC, {**STATUS, "rollout": canary})
    assert snap.live_acceptance[VariantRole.CANDIDATE].rate == 0.6
    # Promoted, nothing watching: the canary's last interval is not live any more.
    snap = snapshot_from_resource(SPEC, {**STATUS, "phase": "Succeeded", "rollout": canary})
    assert snap.live_acceptance == {} and snap.acceptance_below_floor is None
    # The bake's judge while it runs; then the acceptance watch until the retention ends.
    bake = {"judge": {"candidateAcceptance": _acceptance(0.55), "acceptanceBelowFloor": 1}}
    baking = {**canary, "bake": bake}
    snap = snapshot_from_resource(SPEC, {**STATUS, "phase": "Succeeded", "rollout": baking})
    assert snap.live_acceptance[VariantRole.CANDIDATE].rate == 0.55
    assert snap.acceptance_below_floor == 1
    ended = {**bake, "endedAt": "2026-11-29T12:35:00Z", "outcome": "Passed"}
    watch = {"candidateAcceptance": _acceptance(0.2), "acceptanceBelowFloor": 3,
             "alertedAt": "2026-11-29T12:40:00Z"}  # fmt: skip
    watching = {**canary, "bake": ended, "acceptanceWatch": watch}
    snap = snapshot_from_resource(SPEC, {**STATUS, "phase": "Succeeded", "rollout": watching})
    assert snap.live_acceptance[VariantRole.CANDIDATE].rate == 0.2
    assert snap.acceptance_below_floor == 3
    over = {**watching, "acceptanceWatch": {**watch, "endedAt": "2026-11-29T13:00:00Z"}}
    snap = snapshot_from_resource(SPEC, {**STATUS, "phase": "Succeeded", "rollout": over})
    assert snap.live_acceptance == {}


def test_the_search_rows_become_candidates_in_base_units() -> None:
    status = {
        "phase": "Searching",
        "search": {
            "instanceHours": 0.5,
            "rows": [
                {"name": "fp8", "rung": "quantization", "verdict": "Kept", "gain": 0.4,
                 "latencyMs": 250.0, "tokensPerSecond": 300.0, "inServiceSeconds": 410.0,
                 "peakGpuMemoryPercent": 360.0},
                {"name": "ngram", "rung": "speculativeDecoding"},
                {"rung": "compilation"},  # no name: not a candidate
            ],
        },
    }  # fmt: skip
    snap = snapshot_from_resource({}, status)
    assert [c.name for c in snap.search] == ["fp8", "ngram"]
    fp8 = snap.search[0]
    assert (fp8.latency_seconds, fp8.output_tokens_per_second) == (0.25, 300.0)
    assert fp8.peak_gpu_memory_percent == 360.0
    assert snap.search[1].verdict == "" and snap.search[1].gain is None
    assert snap.search_instance_hours == 0.5
