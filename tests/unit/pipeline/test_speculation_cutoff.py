"""speculativeDecoding.concurrencyCutoff: the cut-off recorded from a comparison, and with
`apply` the candidate re-made with vLLM's batch schedule in the canary (decide())."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from endpoint_optimizer.api import (
    Check,
    CheckKind,
    OptimizedEndpointStatus,
    SpecError,
    Verdict,
    parse_spec,
)
from endpoint_optimizer.pipeline.model import ActionKind, Measurement
from endpoint_optimizer.pipeline.record import record
from tests.unit.pipeline.test_decide import NAMES, NOW, serving, spec
from tests.unit.pipeline.test_disable_speculation import (
    ROLLOUT,
    deployed,
    environment,
    kinds,
    wake,
)

CUTOFF = serving(
    NAMES.cutoff_rollout_config, (NAMES.baseline_variant, 90.0), (NAMES.candidate_variant, 10.0)
)


def cutoff_spec(policy: str = "apply") -> dict[str, Any]:
    data = spec(
        optimizations={
            "quantization": {"scheme": "fp8"},
            "speculativeDecoding": {
                "method": "ngram",
                "numSpeculativeTokens": 4,
                "minAcceptanceRate": 0.3,
                "concurrencyCutoff": policy,
            },
        }
    )
    data["benchmark"] = {**data.get("benchmark", {}), "concurrency": [4, 32]}
    return data


def tpot(concurrency: int, low: float, high: float, verdict: Verdict) -> Check:
    return Check(
        name=f"tpot_p50@c{concurrency}",
        kind=CheckKind.BENCHMARK,
        verdict=verdict,
        interval_low=low,
        interval_high=high,
    )


def wins_low_loses_high(data: dict[str, Any]) -> OptimizedEndpointStatus:
    """The canary's first comparison recorded: Wins at c4, Loses at c32 (tpot Fail)."""
    status = deployed(data)
    status.rollout.compared_step = None
    checks = (tpot(4, 0.6, 0.8, Verdict.PASS), tpot(32, 1.2, 1.4, Verdict.FAIL))
    measured = Measurement(
        ActionKind.COMPARE,
        0,
        baseline=status.baseline,
        candidate=status.baseline.model_copy(update={"variant_name": NAMES.candidate_variant})
        if status.baseline
        else None,
        checks=checks,
    )
    return OptimizedEndpointStatus.model_validate(
        record(status.dump(), measured, parse_spec(data), NOW)
    )


def test_the_cutoff_is_recorded_and_with_record_the_candidate_serves_as_it_is() -> None:
    data = cutoff_spec("record")
    status = wins_low_loses_high(data)
    found = status.rollout.speculation_cutoff
    assert found is not None and found.concurrency == 4 and found.batch_size == 4
    assert found.metric == "tpot_p50" and "concurrencyCutoff: record" in found.switch
    status, actions, _ = wake(status, ROLLOUT, data, NOW + timedelta(seconds=1))
    assert ActionKind.CREATE_MODEL not in kinds(actions)
    assert status.phase.value == "RollingBack"  # the loss at c32 is judged as it is


def test_apply_remakes_the_candidate_with_the_batch_schedule_before_the_verdicts() -> None:
    data = cutoff_spec()
    status = wins_low_loses_high(data)
    status, actions, events = wake(status, ROLLOUT, data, NOW + timedelta(seconds=1))
    assert status.phase.value == "Analyzing" and "SpeculationCutoffApplying" in events
    assert kinds(actions) == [
        ActionKind.CREATE_MODEL,
        ActionKind.CREATE_ENDPOINT_CONFIG,
        ActionKind.UPDATE_ENDPOINT,
    ]
    model, config, update = actions
    assert model.resource == NAMES.cutoff_model
    served = json.loads(environment(model)["OPTION_SPECULATIVE_CONFIG"])
    assert served["num_speculative_tokens_per_batch_size"] == [[1, 4, 4], [5, 5, 0]]
    variants = {v["VariantName"]: v for v in config.request["ProductionVariants"]}
    assert variants[NAMES.candidate_variant]["ModelName"] == NAMES.cutoff_model
    assert variants[NAMES.candidate_variant]["InitialVariantWeight"] == 10.0
    assert update.request["EndpointConfigName"] == NAMES.cutoff_rollout_config
    assert status.sagemaker.candidate_model == NAMES.cutoff_model
    # Not taken yet (the old config serves): asked again with the same names, never twice made.
    status, actions, _ = wake(status, ROLLOUT, data, NOW + timedelta(seconds=2))
    assert kinds(actions)[-1] is ActionKind.UPDATE_ENDPOINT
    assert actions[0].resource == NAMES.cutoff_model
    # Served: the step starts again, with a fresh comparison of the re-made candidate.
    status, actions, events = wake(status, CUTOFF, data, NOW + timedelta(seconds=3))
    assert "SpeculationCutoffApplied" in events and status.checks == []
    found = status.rollout.speculation_cutoff
    assert found is not None and found.serving_at is not None
    status, actions, _ = wake(status, CUTOFF, data, NOW + timedelta(seconds=4))
    assert kinds(actions) == [ActionKind.COMPARE]


def test_a_cutoff_config_found_serving_after_a_lost_status_write_is_recorded_not_made() -> None:
    data = cutoff_spec()
    status = wins_low_loses_high(data)
    status, actions, events = wake(status, CUTOFF, data, NOW + timedelta(seconds=1))
    assert ActionKind.CREATE_MODEL not in kinds(actions)
    assert "SpeculationCutoffApplied" in events
    assert status.sagemaker.candidate_model == NAMES.cutoff_model
    assert NAMES.cutoff_rollout_config in status.sagemaker.endpoint_configs


def test_apply_is_refused_for_a_draft_model() -> None:
    data = cutoff_spec()
    data["optimizations"]["speculativeDecoding"] = {
        "method": "draftModel",
        "draftModel": {"s3Uri": "s3://models/draft/"},
        "concurrencyCutoff": "apply",
    }
    with pytest.raises(SpecError) as refused:
        parse_spec(data)
    assert "concurrencyCutoff" in str(refused.value)
