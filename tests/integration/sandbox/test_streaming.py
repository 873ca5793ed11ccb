"""InvokeEndpointWithResponseStream and InvokeEndpoint through real boto3."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.exceptions import ClientError

from endpoint_optimizer.sandbox.serving import profile_from_environment, simulate
from endpoint_optimizer.sandbox.testing import SandboxHandle

from .conftest import deploy, stream_lines


def test_stream_carries_one_lmi_line_per_step_and_usage(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    deploy(sm, "ep")
    lines = stream_lines(
        rt, "ep", {"inputs": "Tell me a story.", "parameters": {"max_new_tokens": 12}}
    )
    assert all("token" in line and "text" in line["token"] for line in lines)
    assert sum(line["num_tokens"] for line in lines) == 12
    final = lines[-1]
    assert final["details"]["generated_tokens"] == 12
    assert final["generated_text"] == "".join(line["token"]["text"] for line in lines)
    (record,) = sandbox.admin.traffic("ep")
    assert record["output_tokens"] == 12
    (typed,) = sandbox.admin.traffic_records("ep")
    assert typed.chunk_tokens == [1] * 12 and typed.variant == "AllTraffic"
    assert record["t_start"] < record["t_first_token"] <= record["t_end"]


def test_openai_style_body_is_accepted(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    deploy(sm, "ep")
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    lines = stream_lines(rt, "ep", body)
    assert lines[-1]["details"]["generated_tokens"] == 5


def test_invoked_production_variant_and_unknown_endpoint(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    deploy(sm, "ep")
    response = rt.invoke_endpoint_with_response_stream(
        EndpointName="ep", Body=json.dumps({"inputs": "x", "parameters": {"max_new_tokens": 2}})
    )
    assert response["InvokedProductionVariant"] == "AllTraffic"
    response["Body"].close()
    with pytest.raises(ClientError) as missing:
        rt.invoke_endpoint(EndpointName="ghost", Body=b"{}")
    assert missing.value.response["Error"]["Code"] == "ValidationError"
    with pytest.raises(ClientError) as bad_name:
        rt.invoke_endpoint(EndpointName="bad_name", Body=b"{}")
    assert "regular expression pattern" in bad_name.value.response["Error"]["Message"]


def test_eval_prompt_gets_a_rule_based_answer(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    deploy(sm, "ep")
    response = rt.invoke_endpoint(
        EndpointName="ep",
        Body=json.dumps({"inputs": "Repeat the code exactly: AB-1234-CD"}),
        ContentType="application/json",
    )
    answer = json.loads(response["Body"].read())["generated_text"]
    assert answer in ("AB-1234-CD", "AB-1234-CZ", "I can't help with that.")
    body = {"inputs": "Repeat the code exactly: AB-1234-CD", "parameters": {"max_new_tokens": 50}}
    streamed = stream_lines(rt, "ep", body)
    assert streamed[-1]["generated_text"] == answer  # the same draw, streamed
    assert streamed[-1]["details"]["finish_reason"] == "eos_token"


def test_lines_split_across_payload_parts_reassemble(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    deploy(sm, "ep")
    sandbox.admin.configure({"payloadFragmentBytes": 7})
    response = rt.invoke_endpoint_with_response_stream(
        EndpointName="ep", Body=json.dumps({"inputs": "x", "parameters": {"max_new_tokens": 4}})
    )
    parts = [event["PayloadPart"]["Bytes"] for event in response["Body"]]
    assert max(len(part) for part in parts) == 7
    lines = [json.loads(line) for line in b"".join(parts).decode().splitlines()]
    assert lines[-1]["details"]["generated_tokens"] == 4


def test_live_stream_follows_the_pure_serving_model(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    deploy(sm, "ep")
    prompt = "Tell me about the sea. " * 80
    stream_lines(rt, "ep", {"inputs": prompt, "parameters": {"max_new_tokens": 32}})
    (record,) = sandbox.admin.traffic("ep")
    profile = profile_from_environment("ml.g6e.2xlarge", "s3://models/llama-3.1-8b/", {})
    (trace,) = simulate(profile, 1, 1, record["input_tokens"], 32)
    assert record["model_latency_ms"] == pytest.approx(trace.e2e, rel=0.15)


def test_a_burst_of_prompts_queues_for_prefill(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    deploy(sm, "ep")
    # Real time: each prefill takes ~80 ms, longer than the spread of thread start-ups.
    sandbox.admin.configure({"servingTimeScale": 1.0})
    body = {"inputs": "Describe the harbour. " * 200, "parameters": {"max_new_tokens": 1}}
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda _: stream_lines(rt, "ep", body), range(8)))
    ttfts = sorted(
        (r["t_first_token"] - r["t_start"]) / r["serving_time_scale"]
        for r in sandbox.admin.traffic("ep")
    )
    # Prefills serialize (~75 ms each), so TTFTs spread over ~7 prefills; the spread, unlike
    # a ratio, survives the whole process being stalled for a moment on a busy box.
    assert ttfts[-1] - ttfts[0] > 0.3


def test_speculative_variant_streams_multi_token_chunks_and_counters(
    sandbox: SandboxHandle,
) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    env = {
        "OPTION_SPECULATIVE_CONFIG": '{"method": "ngram", "num_speculative_tokens": 4}',
        "OPTION_RECORD_ACCEPTANCE_RATE": "true",
    }
    deploy(sm, "spec", env=env)
    deploy(sm, "plain", env={"OPTION_RECORD_ACCEPTANCE_RATE": "true"})
    body = {"inputs": "Summarize this text: " + "the cat sat. " * 40}
    body["parameters"] = {"max_new_tokens": 64}
    spec = stream_lines(rt, "spec", body)
    details = spec[-1]["details"]
    assert details["generated_tokens"] == 64
    assert len(spec) < 64  # several tokens per chunk
    assert 0 < details["accepted_tokens"] <= details["draft_tokens"]
    assert details["draft_tokens"] == 4 * (len(spec) - 1)  # k drafts per decode step
    plain = stream_lines(rt, "plain", body)
    assert len(plain) == 64
    assert "draft_tokens" not in plain[-1]["details"]
