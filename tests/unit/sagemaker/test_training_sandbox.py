"""The builder's CreateTrainingJob request through real boto3 against the sandbox, and the
job's end states read back with `training_job_state`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from endpoint_optimizer.api import Quantization
from endpoint_optimizer.sagemaker import training as tr
from endpoint_optimizer.sandbox.config import Faults, SandboxConfig
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox, wait_for

ROLE = "arn:aws:iam::123456789012:role/sagemaker-exec"
OUTPUT = "s3://out/quantized"


@pytest.fixture
def sandbox() -> Iterator[SandboxHandle]:
    config = SandboxConfig(
        time_scale=0.0002, faults=Faults(fail_training_jobs=["ml-chat-quant-g2-failing"])
    )
    with running_sandbox(config) as handle:
        yield handle


def _request(name: str) -> dict[str, Any]:
    spec = Quantization.model_validate(
        {
            "via": "llmCompressor",
            "algorithm": "gptq",
            "weightActivation": "W4A16",
            "calibrationDataset": {"s3Uri": "s3://data/calibration/"},
        }
    )
    job = tr.job_from_spec(
        spec,
        name=name,
        region="us-east-1",
        role_arn=ROLE,
        model_s3_uri="s3://models/llama-3.1-8b/",
        output_s3_uri=OUTPUT,
        instance_type="ml.g6e.2xlarge",
    )
    return tr.create_training_job(job, "ml/chat/uid")


def _finished(sm: Any, name: str) -> tr.TrainingJobState | None:
    state = tr.training_job_state(sm.describe_training_job(TrainingJobName=name))
    return state if state.done else None


def test_training_job_runs_to_completion_with_model_artifacts(sandbox: SandboxHandle) -> None:
    # The job is stretched to ~5 s (slow_transitions 10) so the first describe lands while it
    # runs even on a loaded machine: at 0.48 s, CI once saw it Completed already.
    sandbox.admin.set_faults(
        Faults(fail_training_jobs=["ml-chat-quant-g2-failing"], slow_transitions=10)
    )
    sm = sandbox.client("sagemaker")
    name = "ml-chat-quant-g2-1a2b3c4d"
    arn = sm.create_training_job(**_request(name))["TrainingJobArn"]
    assert arn.endswith(f":training-job/{name}")
    first = tr.training_job_state(sm.describe_training_job(TrainingJobName=name))
    assert first.status == "InProgress"
    assert not first.done

    state = wait_for(lambda: _finished(sm, name), timeout=60)
    assert state.status == "Completed"
    assert state.failure_reason == ""
    assert state.model_s3_uri.startswith(f"{OUTPUT}/{name}/output/model")
    described = sm.describe_training_job(TrainingJobName=name)
    assert described["HyperParameters"]["algorithm"] == '"gptq"'


def test_failed_training_job_reports_the_reason_and_yields_no_candidate(
    sandbox: SandboxHandle,
) -> None:
    sm = sandbox.client("sagemaker")
    name = "ml-chat-quant-g2-failing"
    sm.create_training_job(**_request(name))
    state = wait_for(lambda: _finished(sm, name))
    assert (state.status, state.succeeded) == ("Failed", False)
    assert state.failure_reason.startswith("AlgorithmError")
    with pytest.raises(ValueError, match="no checkpoint to serve"):
        tr.candidate_serving(state, region="us-east-1", instance_type="ml.g6e.2xlarge")


def test_a_second_create_with_the_same_name_is_refused(sandbox: SandboxHandle) -> None:
    # Deterministic names make a create after a crash find its own job, not a twin.
    sm = sandbox.client("sagemaker")
    request = _request("ml-chat-quant-g2-twice")
    sm.create_training_job(**request)
    with pytest.raises(sm.exceptions.ResourceInUse):
        sm.create_training_job(**request)


async def test_the_loop_observes_a_training_job_in_the_optimization_job_spelling(
    sandbox: SandboxHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    from endpoint_optimizer.aws import observe
    from endpoint_optimizer.aws.clients import AwsClients

    for key, value in sandbox.environment.items():
        monkeypatch.setenv(key, value)
    sm = sandbox.client("sagemaker")
    sm.create_training_job(**_request("ml-chat-quant-g2-observed"))
    sm.create_training_job(**_request("ml-chat-quant-g2-failing"))
    aws = AwsClients()
    try:
        assert await observe.describe_training_job(aws, "us-east-1", "ghost") is None
        wait_for(lambda: _finished(sm, "ml-chat-quant-g2-observed"))
        wait_for(lambda: _finished(sm, "ml-chat-quant-g2-failing"))
        done = await observe.describe_training_job(aws, "us-east-1", "ml-chat-quant-g2-observed")
        failed = await observe.describe_training_job(aws, "us-east-1", "ml-chat-quant-g2-failing")
    finally:
        aws.close()
    assert done is not None and done.status == "COMPLETED"
    assert done.output_s3_uri.startswith(f"{OUTPUT}/ml-chat-quant-g2-observed/output/model")
    assert failed is not None and failed.status == "FAILED"
    assert failed.failure_reason.startswith("AlgorithmError")
