"""Request bodies as the serving containers take them: LMI's and vLLM's /invocations.

LMI (djl-inference) takes LMI's {"inputs"} and OpenAI messages; vLLM's SageMaker route
takes only OpenAI chat ({"messages"}) and completions ({"prompt"}) bodies and answers any
other with a 400 that SageMaker passes on as ModelError, and streams server-sent events.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from endpoint_optimizer.sandbox.testing import SandboxHandle

from .conftest import FAST, ROLE, deploy, variant

VLLM = (
    "763104351884.dkr.ecr.us-east-1.amazonaws.com/"
    "vllm:0.11.2-gpu-py312-cu129-ubuntu22.04-sagemaker-v1.2"
)


def deploy_vllm(sm: Any, endpoint: str) -> None:
    sm.create_model(
        ModelName=f"{endpoint}-model",
        ExecutionRoleArn=ROLE,
        PrimaryContainer={
            "Image": VLLM,
            "Environment": {"SM_VLLM_MODEL": "meta-llama/Llama-3.1-8B-Instruct"},
        },
    )
    sm.create_endpoint_config(
        EndpointConfigName=f"{endpoint}-config",
        ProductionVariants=[variant("AllTraffic", f"{endpoint}-model")],
    )
    sm.create_endpoint(EndpointName=endpoint, EndpointConfigName=f"{endpoint}-config")
    sm.get_waiter("endpoint_in_service").wait(EndpointName=endpoint, WaiterConfig=FAST)


def invoke(rt: Any, body: dict[str, Any]) -> Any:
    response = rt.invoke_endpoint(
        EndpointName="ep", Body=json.dumps(body), ContentType="application/json"
    )
    return json.loads(response["Body"].read())


def test_vllm_refuses_an_lmi_body_with_the_servers_400_as_model_error(
    sandbox: SandboxHandle,
) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    deploy_vllm(sm, "ep")
    with pytest.raises(ClientError) as refused:
        invoke(rt, {"inputs": "hi", "parameters": {"max_new_tokens": 4}})
    error = refused.value.response["Error"]
    assert error["Code"] == "ModelError"
    assert refused.value.response["OriginalStatusCode"] == 400
    assert "Cannot find suitable handler for request" in error["Message"]
    with pytest.raises(ClientError):
        rt.invoke_endpoint_with_response_stream(
            EndpointName="ep", Body=json.dumps({"inputs": "hi"}), ContentType="application/json"
        )
    (first, second) = sandbox.admin.traffic("ep")
    assert first["status"] == second["status"] == 400


def test_vllm_answers_chat_and_completions_in_openai_shape(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    deploy_vllm(sm, "ep")
    chat = invoke(rt, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"]["completion_tokens"] == 4
    completion = invoke(rt, {"prompt": "hi", "max_tokens": 3})
    assert completion["object"] == "text_completion"
    assert isinstance(completion["choices"][0]["text"], str)
    assert completion["usage"]["completion_tokens"] == 3


def test_vllm_streams_server_sent_events_with_usage_and_done(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    deploy_vllm(sm, "ep")
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True}
    response = rt.invoke_endpoint_with_response_stream(
        EndpointName="ep", Body=json.dumps(body), ContentType="application/json"
    )
    raw = b"".join(event["PayloadPart"]["Bytes"] for event in response["Body"])
    events = [line.removeprefix("data: ") for line in raw.decode().split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content) == 5
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5


def test_lmi_takes_its_own_body_and_messages(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    deploy(sm, "ep")
    assert "generated_text" in invoke(rt, {"inputs": "hi", "parameters": {"max_new_tokens": 2}})
    chat = invoke(rt, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert chat["object"] == "chat.completion"
