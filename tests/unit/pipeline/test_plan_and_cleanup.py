"""Candidate blueprints from the spec, and what the finalizer removes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from endpoint_optimizer.api import DeletionPolicy, parse_spec, parse_status
from endpoint_optimizer.pipeline import plan
from endpoint_optimizer.pipeline.cleanup import cleanup
from endpoint_optimizer.pipeline.model import (
    ActionKind,
    EndpointView,
    JobView,
    Observations,
    VariantView,
)
from endpoint_optimizer.sagemaker.naming import Owner
from tests.unit.pipeline.test_decide import spec

NAMES = plan.Names.of(Owner("ml", "chat", "uid-1"), 1)


def candidate(**overrides: Any) -> plan.rq.ServingModel:
    parsed = parse_spec(spec(**overrides))
    job_plan = plan.optimization_job(parsed, NAMES)
    job = (
        JobView(NAMES.job, "COMPLETED", output_s3_uri="s3://out/j/", recommended_image="img:opt")
        if job_plan
        else None
    )
    return plan.candidate_model(parsed, NAMES, job)


def test_quantized_candidate_serves_the_job_output_with_its_override_environment() -> None:
    model = candidate(container={"maxModelLen": 4096})
    assert model.image == "img:opt"
    assert model.model_s3_uri == "s3://out/j/"
    assert model.environment["OPTION_QUANTIZE"] == "fp8"
    assert model.environment["OPTION_MAX_MODEL_LEN"] == "4096"


def test_ngram_needs_no_job_and_sets_the_speculative_config() -> None:
    model = candidate(
        optimizations={"speculativeDecoding": {"method": "ngram", "numSpeculativeTokens": 3}},
        outputS3Uri=None,
    )
    assert json.loads(model.environment["OPTION_SPECULATIVE_CONFIG"])["method"] == "ngram"
    assert model.model_s3_uri == "s3://models/llama/"


def test_a_draft_model_from_s3_is_attached_to_the_candidate() -> None:
    model = candidate(
        optimizations={
            "speculativeDecoding": {
                "method": "draftModel",
                "draftModel": {"s3Uri": "s3://models/draft/"},
            }
        },
    )
    assert model.draft is not None and model.draft.s3_uri == "s3://models/draft/"


def test_eagle_is_an_optimization_job_technique() -> None:
    parsed = parse_spec(
        spec(
            optimizations={
                "speculativeDecoding": {
                    "method": "eagle",
                    "eagleTrainingData": {"s3Uri": "s3://data/chats/"},
                }
            }
        )
    )
    job = plan.optimization_job(parsed, NAMES)
    assert job is not None
    assert [c.member for c in job.configs] == ["ModelSpeculativeDecodingConfig"]


def test_a_jumpstart_model_is_planned_only_from_its_resolved_metadata() -> None:
    # tests/unit/sagemaker/test_jumpstart.py plans it from the metadata.
    parsed = parse_spec(spec(model={"jumpStartModelId": "meta-textgeneration-llama-3-1-8b"}))
    with pytest.raises(plan.PlanError, match=r"^spec\.model\.jumpStartModelId: .* not been read"):
        plan.baseline_model(parsed, NAMES)


def made() -> dict[str, Any]:
    return {
        "phase": "Succeeded",
        "sagemaker": {
            "endpointName": "chat",
            "baselineEndpointConfig": NAMES.baseline_config,
            "baselineModel": NAMES.baseline_model,
            "models": [NAMES.baseline_model, NAMES.candidate_model],
            "endpointConfigs": [NAMES.baseline_config, NAMES.rollout_config, NAMES.promoted_config],
            "optimizationJobs": [NAMES.job],
            "alarms": ["a-errors"],
        },
    }


def test_retain_keeps_what_serves_and_removes_the_rest() -> None:
    endpoint = EndpointView("chat", "InService", NAMES.promoted_config)
    observations = Observations(
        endpoint=endpoint,
        jobs={NAMES.job: JobView(NAMES.job, "COMPLETED")},
        config_variants={
            NAMES.promoted_config: (VariantView("c", NAMES.candidate_model),),
        },
    )
    result = cleanup(parse_status(made()), observations, DeletionPolicy.RETAIN)
    assert result.done
    removed = {(a.kind, a.resource) for a in result.actions}
    assert (ActionKind.DELETE_MODEL, NAMES.baseline_model) in removed
    assert (ActionKind.DELETE_MODEL, NAMES.candidate_model) not in removed
    assert (ActionKind.DELETE_ENDPOINT_CONFIG, NAMES.promoted_config) not in removed
    assert (ActionKind.DELETE_ENDPOINT_CONFIG, NAMES.rollout_config) in removed
    assert (ActionKind.DELETE_ALARMS, "alarms") in removed


def test_delete_policy_deletes_the_endpoint_first_and_stops_running_jobs() -> None:
    status = parse_status(made())
    running = Observations(
        endpoint=EndpointView("chat", "InService", NAMES.rollout_config),
        jobs={NAMES.job: JobView(NAMES.job, "INPROGRESS")},
    )
    result = cleanup(status, running, DeletionPolicy.DELETE)
    assert not result.done
    kinds = [a.kind for a in result.actions]
    assert kinds == [ActionKind.STOP_OPTIMIZATION_JOB, ActionKind.DELETE_ENDPOINT]
    gone = cleanup(status, Observations(endpoint=None), DeletionPolicy.DELETE)
    assert gone.done
    assert sum(a.kind is ActionKind.DELETE_MODEL for a in gone.actions) == 2


def test_retain_during_a_rollout_returns_the_endpoint_to_the_baseline_first() -> None:
    status = parse_status({**made(), "phase": "Analyzing"})
    live = Observations(endpoint=EndpointView("chat", "InService", NAMES.rollout_config))
    result = cleanup(status, live, DeletionPolicy.RETAIN)
    assert not result.done
    assert [a.kind for a in result.actions] == [ActionKind.UPDATE_ENDPOINT]
    assert result.actions[0].request["EndpointConfigName"] == NAMES.baseline_config
