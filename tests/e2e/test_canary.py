"""A good candidate goes through a canary and is promoted, by the real operator process."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import E2E
from tests.e2e.harness import condition

IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"


def spec(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "endpointName": "chat-e2e",
        "region": "us-east-1",
        "executionRoleArn": "arn:aws:iam::123456789012:role/sagemaker-exec",
        "model": {"s3Uri": "s3://models/llama-3-1-8b/", "image": IMAGE},
        "instanceType": "ml.g6e.2xlarge",
        "optimizations": {"quantization": {"scheme": "fp8"}},
        "outputS3Uri": "s3://models/optimized/",
        "objective": {"metric": "latency", "minImprovement": 0.05},
        "benchmark": {
            "concurrency": [2],
            "requests": 32,
            "warmup": 2,
            "inputTokens": 64,
            "outputTokens": 8,
        },
        "rollout": {
            "strategy": "canary",
            "steps": [{"weight": 10, "pause": "1s"}, {"weight": 50, "pause": "1s"}],
            # Checks the sample count cannot decide do not block; the objective must pass.
            "analysis": {"onNoData": "pass"},
        },
    }
    base.update(overrides)
    return base


def test_canary_promotes_a_faster_candidate(e2e: E2E) -> None:
    e2e.cluster.create(e2e.namespace, "chat", spec())
    obj = e2e.wait_phase("chat", {"Succeeded", "Failed", "RolledBack"}, timeout=40)
    status = obj["status"]
    assert status["phase"] == "Succeeded", e2e.explain(obj)
    sm = status["sagemaker"]
    endpoint = e2e.sandbox.client("sagemaker").describe_endpoint(EndpointName="chat-e2e")
    # Success is what SageMaker serves, not what the operator believes.
    assert endpoint["EndpointStatus"] == "InService"
    assert endpoint["EndpointConfigName"] == sm["servingEndpointConfig"]
    assert "-promoted-" in endpoint["EndpointConfigName"]
    assert [v["VariantName"] for v in endpoint["ProductionVariants"]] == [
        status["candidate"]["variantName"]
    ]
    verdicts = {c["name"]: c["verdict"] for c in status["checks"]}
    assert verdicts["objective_latency"] == "Pass"
    assert "Fail" not in verdicts.values()
    assert condition(obj, "Ready")["status"] == "True"
    assert condition(obj, "Terminal")["status"] == "False"
    events = [history["event"] for history in status["history"]]
    for expected in (
        "BaselineMeasured",
        "CandidateBuilt",
        "CandidateDeployed",
        "CandidatePromoted",
    ):
        assert expected in events
    # The canary shifted traffic in the spec's steps, with UpdateEndpointWeightsAndCapacities.
    weights = [
        c
        for c in e2e.sandbox.admin.calls()
        if c["operation"] == "UpdateEndpointWeightsAndCapacities"
    ]
    assert len(weights) >= 1
