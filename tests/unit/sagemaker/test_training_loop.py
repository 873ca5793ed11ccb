"""The llm-compressor path through the loop's decide(): training job -> candidate, or Failed."""

from __future__ import annotations

from typing import Any

import botocore.session
from botocore.validate import validate_parameters

from endpoint_optimizer.api import DeletionPolicy, parse_status
from endpoint_optimizer.pipeline.cleanup import cleanup
from endpoint_optimizer.pipeline.decide import decide
from endpoint_optimizer.pipeline.model import ActionKind, JobView, Observations, Resource, Timing
from tests.unit.pipeline.test_decide import NAMES, NOW, OWNER, baselined, serving, spec

LLMC = {
    "quantization": {
        "via": "llmCompressor",
        "algorithm": "gptq",
        "weightActivation": "W4A16",
        "calibrationDataset": {"s3Uri": "s3://data/calibration/"},
    }
}
_SM = botocore.session.get_session()


def _decide(status: Any, jobs: dict[str, JobView]) -> Any:
    endpoint = serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))
    return decide(
        spec(optimizations=LLMC),
        status,
        Observations(endpoint=endpoint, jobs=jobs),
        Resource(OWNER, 1, {}),
        NOW,
        Timing(time_scale=1.0),
    )


def test_gptq_w4a16_starts_a_training_job_after_uploading_its_source() -> None:
    decision = _decide(baselined(), {})
    kinds = [a.kind for a in decision.actions]
    assert kinds == [ActionKind.PUT_OBJECT, ActionKind.CREATE_TRAINING_JOB]
    upload, create = decision.actions
    validate_parameters(
        upload.request, _SM.get_service_model("s3").operation_model("PutObject").input_shape
    )
    validate_parameters(
        create.request,
        _SM.get_service_model("sagemaker").operation_model("CreateTrainingJob").input_shape,
    )
    hps = create.request["HyperParameters"]
    assert (
        hps["sagemaker_submit_directory"]
        == f'"s3://{upload.request["Bucket"]}/{upload.request["Key"]}"'
    )
    status = parse_status(decision.status)
    assert status.phase.value == "Optimizing"
    assert status.sagemaker.training_jobs == [NAMES.job]


def test_running_then_failed_training_job_ends_in_the_terminal_handling() -> None:
    status = parse_status(_decide(baselined(), {}).status)
    waiting = _decide(status, {NAMES.job: JobView(NAMES.job, "INPROGRESS")})
    assert waiting.actions == [] and parse_status(waiting.status).phase.value == "Optimizing"
    failed = _decide(
        status, {NAMES.job: JobView(NAMES.job, "FAILED", "AlgorithmError: bad hyperparameters")}
    )
    ended = parse_status(failed.status)
    assert ended.phase.value == "Failed"
    assert "AlgorithmError" in ended.last_error
    assert "TrainingJobFailed" in [e.reason for e in failed.events]


def test_a_completed_training_job_becomes_a_candidate_served_with_compressed_tensors() -> None:
    status = parse_status(_decide(baselined(), {}).status)
    output = f"s3://models/out/{NAMES.job}/output/model/"
    done = {NAMES.job: JobView(NAMES.job, "COMPLETED", output_s3_uri=output)}
    status = parse_status(_decide(status, done).status)
    decision = _decide(status, done)
    creates = [a for a in decision.actions if a.kind is ActionKind.CREATE_MODEL]
    assert parse_status(decision.status).phase.value == "Deploying"
    assert creates, [a.kind for a in decision.actions]
    container = creates[0].request["PrimaryContainer"]
    assert container["ModelDataSource"]["S3DataSource"]["S3Uri"] == output
    assert container["Environment"]["OPTION_QUANTIZE"] == "compressed-tensors"
    assert container["Environment"]["OPTION_DTYPE"] == "bf16"


def test_deletion_stops_a_running_training_job() -> None:
    status = parse_status(_decide(baselined(), {}).status)
    running = Observations(endpoint=None, jobs={NAMES.job: JobView(NAMES.job, "INPROGRESS")})
    result = cleanup(status, running, DeletionPolicy.RETAIN)
    stops = [a for a in result.actions if a.kind is ActionKind.STOP_TRAINING_JOB]
    assert [a.request for a in stops] == [{"TrainingJobName": NAMES.job}]
    validate_parameters(
        stops[0].request,
        _SM.get_service_model("sagemaker").operation_model("StopTrainingJob").input_shape,
    )


def test_llm_compressor_with_ngram_speculation_is_planned_and_with_eagle_refused() -> None:
    ngram = {
        **LLMC,
        "speculativeDecoding": {"method": "ngram", "numSpeculativeTokens": 4},
    }
    decision = decide(
        spec(optimizations=ngram),
        baselined(),
        Observations(endpoint=serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))),
        Resource(OWNER, 1, {}),
        NOW,
        Timing(time_scale=1.0),
    )
    assert ActionKind.CREATE_TRAINING_JOB in [a.kind for a in decision.actions]
    eagle = {**LLMC, "speculativeDecoding": {"method": "eagle"}}
    refused = decide(
        spec(optimizations=eagle),
        parse_status(None),
        Observations(endpoint=None),
        Resource(OWNER, 1, {}),
        NOW,
        Timing(time_scale=1.0),
    )
    ended = parse_status(refused.status)
    assert ended.phase.value == "Failed"
    assert (
        "llmCompressor cannot be combined with compilation, sharding or EAGLE" in ended.last_error
    )
    assert not [a for a in refused.actions if a.kind is ActionKind.CREATE_TRAINING_JOB]
