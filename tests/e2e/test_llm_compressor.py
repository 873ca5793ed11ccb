"""GPTQ W4A16 through llm-compressor: training job -> candidate -> rollout -> verdict."""

from __future__ import annotations

from typing import Any

from endpoint_optimizer.sandbox.config import Faults
from tests.e2e.conftest import E2E, spec
from tests.e2e.harness import condition

TERMINAL = {"Succeeded", "Failed", "RolledBack"}


def _gptq() -> dict[str, Any]:
    quantization = {
        "via": "llmCompressor",
        "algorithm": "gptq",
        "weightActivation": "W4A16",
        "numCalibrationSamples": 64,
        "calibrationDataset": {"s3Uri": "s3://models/calibration/prompts.jsonl"},
    }
    return spec(optimizations={"quantization": quantization})


def test_gptq_w4a16_goes_training_job_to_candidate_to_verdict(e2e: E2E) -> None:
    names = e2e.create("chat", _gptq())
    obj = e2e.wait_phase("chat", TERMINAL)
    status = obj["status"]
    state = e2e.sandbox.admin.state()
    jobs = state["trainingJobs"]
    assert jobs, e2e.explain(obj)
    assert list(jobs) == status["sagemaker"]["trainingJobs"], e2e.explain(obj)
    (job,) = jobs.values()
    assert job["TrainingJobStatus"] == "Completed"
    # The entry point's source went up with PutObject before CreateTrainingJob.
    source = job["HyperParameters"]["sagemaker_submit_directory"].strip('"')
    assert source in state["objects"]
    output = job["ModelArtifacts"]["S3ModelArtifacts"]
    assert output == f"s3://models/optimized/{job['TrainingJobName']}/output/model/"
    # The candidate serves the job's uncompressed output as compressed-tensors.
    candidate = state["models"][names.candidate_model]
    container = candidate["PrimaryContainer"]
    assert container["ModelDataSource"]["S3DataSource"]["S3Uri"] == output
    assert container["Environment"]["OPTION_QUANTIZE"] == "compressed-tensors"
    assert (
        state["artifacts"][f"s3://models/optimized/{job['TrainingJobName']}/"]["quantization"]
        == "w4a16"
    )
    # Like any candidate: it was deployed, judged, and the phase is terminal with checks.
    events = [h["event"] for h in status["history"]]
    assert "CandidateBuilt" in events and "CandidateDeployed" in events, e2e.explain(obj)
    verdicts = {c["name"]: c["verdict"] for c in status["checks"]}
    assert "objective_latency" in verdicts, e2e.explain(obj)
    # A judged verdict either way; W4A16 on an 8B model is faster in the sandbox's profile.
    assert status["phase"] in {"Succeeded", "RolledBack"}, e2e.explain(obj)
    if status["phase"] == "Succeeded":
        assert verdicts["objective_latency"] == "Pass"
        served = e2e.serving("chat-e2e")["EndpointConfigName"]
        assert served == status["sagemaker"]["servingEndpointConfig"]


def test_failed_training_job_ends_terminal_with_the_baseline_serving(e2e: E2E) -> None:
    body = _gptq()
    created = e2e.cluster.create(e2e.namespace, "chat", body)
    names = e2e.names("chat", str(created["metadata"]["uid"]))
    e2e.sandbox.admin.set_faults(Faults(fail_training_jobs=[names.job]))
    obj = e2e.wait_phase("chat", TERMINAL)
    status = obj["status"]
    assert status["phase"] == "Failed", e2e.explain(obj)
    terminal = condition(obj, "Terminal")
    assert terminal["status"] == "True", e2e.explain(obj)
    assert "calibration produced NaN scales" in terminal["message"] + status.get("message", "")
    job = e2e.sandbox.admin.state()["trainingJobs"][names.job]
    assert job["TrainingJobStatus"] == "Failed"
    # The baseline still serves; no candidate was ever deployed.
    endpoint = e2e.serving("chat-e2e")
    assert endpoint["EndpointStatus"] == "InService"
    assert [v["VariantName"] for v in endpoint["ProductionVariants"]] == [
        status["baseline"]["variantName"]
    ]
