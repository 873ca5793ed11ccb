"""The spec and status models: defaults, cross-field rules, camelCase error paths."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from endpoint_optimizer.api import (
    MAX_HISTORY,
    ConditionStatus,
    ConditionType,
    OptimizedEndpoint,
    OptimizedEndpointStatus,
    Phase,
    QuantizationVia,
    SpecError,
    WeightActivation,
    duration_seconds,
    parse_spec,
    parse_status,
)

WAIVED = {"waiver": "unit test: quality not judged"}


def minimal_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "endpointName": "llama-8b-chat",
        "region": "us-east-1",
        "executionRoleArn": "arn:aws:iam::123456789012:role/sagemaker-exec",
        "model": {"s3Uri": "s3://bucket/llama-3.1-8b/"},
        "instanceType": "ml.g6.12xlarge",
    }
    spec.update(overrides)
    return spec


def test_minimal_spec_gets_newcomer_defaults() -> None:
    spec = parse_spec(minimal_spec())
    assert spec.instance_count == 1
    assert spec.optimizations.techniques() == []
    assert spec.objective.metric.value == "latency"
    assert spec.objective.min_improvement == 0.05
    assert spec.benchmark.concurrency == [1, 8]
    assert spec.judged_concurrency() == 8
    assert [(s.weight, s.pause) for s in spec.rollout.steps] == [(10, "5m"), (50, "10m")]
    assert spec.rollout.analysis.on_no_data.value == "pause"
    assert spec.deletion_policy.value == "Retain"
    assert spec.timeouts.container_startup_health_check_seconds == 1800


def test_dump_round_trips_in_camel_case() -> None:
    spec = parse_spec(
        minimal_spec(
            outputS3Uri="s3://bucket/out/",
            optimizations={"quantization": {"scheme": "fp8"}},
            evaluation=WAIVED,
        )
    )
    dumped = spec.dump()
    assert dumped["optimizations"]["quantization"] == {"via": "optimizationJob", "scheme": "fp8"}
    assert "executionRoleArn" in dumped
    assert parse_spec(dumped) == spec


def test_errors_name_each_field_by_camel_case_path() -> None:
    bad = minimal_spec(
        instanceCount=0,
        rollout={"steps": [{"weight": 10}, {"weight": 10}]},
        surprise=True,
    )
    with pytest.raises(SpecError) as caught:
        parse_spec(bad)
    paths = {p.path for p in caught.value.problems}
    assert paths == {"spec.instanceCount", "spec.rollout.steps[1].weight", "spec.surprise"}
    assert "greater than or equal to 1" in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_llm_compressor_defaults_depend_on_algorithm() -> None:
    calibration = {"hfDatasetId": "HuggingFaceH4/ultrachat_200k"}
    sq = parse_spec(
        minimal_spec(
            outputS3Uri="s3://bucket/out/",
            evaluation=WAIVED,
            optimizations={
                "quantization": {
                    "via": "llmCompressor",
                    "algorithm": "smoothquant",
                    "calibrationDataset": calibration,
                }
            },
        )
    ).optimizations.quantization
    assert sq is not None and sq.via is QuantizationVia.LLM_COMPRESSOR
    assert sq.weight_activation is WeightActivation.W8A8
    assert sq.group_size is None and sq.smoothing_strength == 0.8
    assert sq.num_calibration_samples == 512 and sq.ignore == ["lm_head"]
    awq = parse_spec(
        minimal_spec(
            outputS3Uri="s3://bucket/out/",
            evaluation=WAIVED,
            optimizations={
                "quantization": {
                    "via": "llmCompressor",
                    "algorithm": "awq",
                    "calibrationDataset": calibration,
                }
            },
        )
    ).optimizations.quantization
    assert awq is not None and awq.symmetric is False and awq.group_size == 128


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30.0), ("5m", 300.0), ("1h30m", 5400.0), ("250ms", 0.25), ("1.5m", 90.0)],
)
def test_duration_seconds(text: str, seconds: float) -> None:
    assert duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5", "5 m", "m", "-1s", "1d", ""])
def test_duration_seconds_refuses_bad_units(text: str) -> None:
    with pytest.raises(ValueError, match="ms\\|s\\|m\\|h"):
        duration_seconds(text)


def test_empty_status_is_pending_with_defaults() -> None:
    status = parse_status(None)
    assert status.phase is Phase.PENDING and not status.paused
    assert status.sagemaker.models == [] and status.history == []
    assert OptimizedEndpointStatus.model_validate(status.dump()) == status


def test_history_keeps_only_the_latest_entries() -> None:
    status = OptimizedEndpointStatus()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(MAX_HISTORY + 7):
        status.record(start + timedelta(seconds=i), f"Event{i}")
    assert len(status.history) == MAX_HISTORY
    assert status.history[0].event == "Event7"
    assert status.history[-1].event == f"Event{MAX_HISTORY + 6}"
    # A status written by an older operator with a longer history still loads.
    too_long = status.dump()
    too_long["history"] = too_long["history"] * 2
    assert len(parse_status(too_long).history) == MAX_HISTORY


def test_condition_transition_time_moves_only_on_status_change() -> None:
    status = OptimizedEndpointStatus()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    t1 = t0 + timedelta(minutes=1)
    status.set_condition(ConditionType.READY, ConditionStatus.FALSE, "Baselining", "", t0, 1)
    status.set_condition(ConditionType.READY, ConditionStatus.FALSE, "Optimizing", "x", t1, 1)
    ready = status.condition(ConditionType.READY)
    assert ready is not None and ready.last_transition_time == t0 and ready.reason == "Optimizing"
    status.set_condition(ConditionType.READY, ConditionStatus.TRUE, "Promoted", "", t1, 2)
    ready = status.condition(ConditionType.READY)
    assert ready is not None and ready.last_transition_time == t1
    assert len(status.conditions) == 1


def test_whole_resource_loads() -> None:
    resource = OptimizedEndpoint.model_validate(
        {
            "apiVersion": "optimizer.dev/v1alpha1",
            "kind": "OptimizedEndpoint",
            "metadata": {"name": "x", "namespace": "ml"},
            "spec": minimal_spec(),
            "status": {"phase": "Analyzing", "observedGeneration": 3},
        }
    )
    assert resource.status is not None and resource.status.phase is Phase.ANALYZING


def test_candidate_hash_follows_what_defines_the_candidate() -> None:
    base = parse_spec(minimal_spec())
    assert base.candidate_hash() == parse_spec(minimal_spec(instanceCount=1)).candidate_hash()
    judged_differently = parse_spec(
        minimal_spec(rollout={"strategy": "shadow"}, benchmark={"requests": 10})
    )
    assert judged_differently.candidate_hash() == base.candidate_hash()
    quantized = parse_spec(
        minimal_spec(
            outputS3Uri="s3://bucket/out/",
            optimizations={"quantization": {"scheme": "fp8"}},
            evaluation=WAIVED,
        )
    )
    assert quantized.candidate_hash() != base.candidate_hash()
    assert len(base.candidate_hash()) == 12 and int(base.candidate_hash(), 16) >= 0


def test_pattern_errors_say_what_is_allowed_in_words() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(
            minimal_spec(
                endpointName="llama_8b", rollout={"steps": [{"weight": 5, "pause": "5 min"}]}
            )
        )
    messages = {p.path: p.message for p in caught.value.problems}
    assert "letters, digits and hyphens" in messages["spec.endpointName"]
    assert "like 30s, 5m or 1h30m" in messages["spec.rollout.steps[0].pause"]
