"""Fault switches, CloudWatch metrics from served traffic, deterministic mode, OpenAI route."""

from __future__ import annotations

import json
import statistics
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, EventStreamError

from endpoint_optimizer.sandbox.config import (
    BreakStreams,
    DeterministicServing,
    Faults,
    LatencyRegression,
    QualityRegression,
    SandboxConfig,
)
from endpoint_optimizer.sandbox.evalset import load
from endpoint_optimizer.sandbox.serving import profile_from_environment
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox, wait_for

from .conftest import create_model, deploy, fast_config, stream_lines, variant


def test_throttling_fault_is_retried_by_botocore_and_logged(sandbox: SandboxHandle) -> None:
    sandbox.admin.set_faults(Faults(throttle_fraction=1.0, throttle_operations=["ListModels"]))
    sm = sandbox.client("sagemaker", retries={"mode": "standard", "total_max_attempts": 2})
    with pytest.raises(ClientError) as throttled:
        sm.list_models()
    assert throttled.value.response["Error"]["Code"] == "ThrottlingException"
    codes = [c["errorCode"] for c in sandbox.admin.calls() if c["operation"] == "ListModels"]
    assert codes == ["ThrottlingException", "ThrottlingException"]
    sm.list_endpoints()  # other operations are not throttled


def test_quota_fault_refuses_create_with_the_real_message(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    sandbox.admin.set_faults(Faults(quota_exceeded=["CreateEndpoint"]))
    with pytest.raises(ClientError) as refused:
        deploy(sm, "ep", wait=False)
    error = refused.value.response["Error"]
    assert error["Code"] == "ResourceLimitExceeded"
    assert "account-level service limit 'ml.g6e.2xlarge for endpoint usage'" in error["Message"]


def test_instance_quota_counts_instances_in_use() -> None:
    with running_sandbox(fast_config(instance_quotas={"ml.g6e.2xlarge": 1})) as sandbox:
        sm = sandbox.client("sagemaker")
        deploy(sm, "one", wait=False)
        with pytest.raises(ClientError) as refused:
            deploy(sm, "two", wait=False)
        assert "current utilization of 1 Instances" in refused.value.response["Error"]["Message"]


def test_failed_create_fault_and_slow_transitions(sandbox: SandboxHandle) -> None:
    sm = sandbox.client("sagemaker")
    sandbox.admin.set_faults(Faults(fail_endpoint_creates=["ep"], slow_transitions=20.0))
    deploy(sm, "ep", wait=False)
    # 360 s x 0.0002 x 20 = 1.4 s: still creating well after the unslowed 72 ms.
    assert sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "Creating"
    status = wait_for(
        lambda: (
            (s := sm.describe_endpoint(EndpointName="ep")["EndpointStatus"]) != "Creating" and s
        ),
        timeout=15,
    )
    assert status == "Failed"


def test_break_streams_sends_model_stream_error_mid_stream(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    deploy(sm, "ep")
    sandbox.admin.set_faults(Faults(break_streams=[BreakStreams(endpoint="ep", after_tokens=3)]))
    response = rt.invoke_endpoint_with_response_stream(
        EndpointName="ep", Body=json.dumps({"inputs": "x", "parameters": {"max_new_tokens": 10}})
    )
    received = b""
    with pytest.raises(EventStreamError) as broken:
        for event in response["Body"]:
            received += event["PayloadPart"]["Bytes"]
    assert broken.value.response["Error"]["Code"] == "ModelStreamError"
    assert 1 <= len(received.splitlines()) <= 3
    (record,) = sandbox.admin.traffic("ep")
    assert record["error"] == "ModelStreamError:StreamBroken"


def _ms_per_token(records: list[dict[str, Any]]) -> float:
    # On the engine's clock (model ms): a busy box delays wall-clock sends by milliseconds
    # against a few per token, but not the time the engine paced the stream by.
    return statistics.median(r["model_latency_ms"] / r["output_tokens"] for r in records)


def test_latency_regression_on_a_named_variant_slows_only_it(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    create_model(sm, "base")
    create_model(sm, "cand")
    sm.create_endpoint_config(
        EndpointConfigName="ab", ProductionVariants=[variant("a", "base"), variant("b", "cand")]
    )
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="ab")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig={"Delay": 0.02})
    sandbox.admin.set_faults(
        Faults(latency_regressions=[LatencyRegression(model="cand", factor=2)])
    )
    sandbox.admin.configure({"servingTimeScale": 0.1})
    body = {"inputs": "x", "parameters": {"max_new_tokens": 32}}
    for target in ("a", "b") * 3:
        stream_lines(rt, "ep", body, TargetVariant=target)
    records = sandbox.admin.traffic("ep")
    ratio = _ms_per_token([r for r in records if r["variant"] == "b"]) / _ms_per_token(
        [r for r in records if r["variant"] == "a"]
    )
    assert 1.4 < ratio < 2.8


def _accuracy(rt: Any, endpoint: str, items: list[Any]) -> tuple[float, int]:
    correct = refusals = 0
    for item in items:
        body = json.dumps({"inputs": item.prompt, "parameters": {"max_new_tokens": 8}})
        answer = json.loads(rt.invoke_endpoint(EndpointName=endpoint, Body=body)["Body"].read())
        text = answer["generated_text"]
        correct += text == item.reference
        refusals += text == "I can't help with that."
    return correct / len(items), refusals


def test_quality_regression_lowers_eval_accuracy_deterministically() -> None:
    items = load()[:60]
    with running_sandbox(fast_config(serving_time_scale=0.0005)) as sandbox:
        sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
        deploy(sm, "ep")
        before, _ = _accuracy(rt, "ep", items)
        again, _ = _accuracy(rt, "ep", items)
        assert before == again  # paired: same (seed, prompt) -> same outcome
        sandbox.admin.set_faults(
            Faults(quality_regressions=[QualityRegression(endpoint="ep", accuracy_drop=0.3)])
        )
        after, _ = _accuracy(rt, "ep", items)
    assert before >= 0.8
    assert before - after > 0.1


def test_cloudwatch_serves_per_variant_metrics_from_traffic(sandbox: SandboxHandle) -> None:
    sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
    cw = sandbox.client("cloudwatch")
    deploy(sm, "ep")
    body = {"inputs": "x", "parameters": {"max_new_tokens": 4}}
    for _ in range(4):
        stream_lines(rt, "ep", body)
    now = datetime.now(UTC)
    dims = [{"Name": "EndpointName", "Value": "ep"}, {"Name": "VariantName", "Value": "AllTraffic"}]

    def query(qid: str, namespace: str, metric: str, stat: str) -> dict[str, Any]:
        return {
            "Id": qid,
            "MetricStat": {
                "Metric": {"Namespace": namespace, "MetricName": metric, "Dimensions": dims},
                "Period": 60,
                "Stat": stat,
            },
        }

    result = cw.get_metric_data(
        MetricDataQueries=[
            query("inv", "AWS/SageMaker", "Invocations", "Sum"),
            query("lat", "AWS/SageMaker", "ModelLatency", "p99"),
            query("err", "AWS/SageMaker", "Invocation5XXErrors", "Sum"),
            query("mem", "/aws/sagemaker/Endpoints", "GPUMemoryUtilization", "Average"),
        ],
        StartTime=now - timedelta(minutes=5),
        EndTime=now + timedelta(minutes=1),
    )
    by_id = {r["Id"]: r["Values"] for r in result["MetricDataResults"]}
    assert sum(by_id["inv"]) == 4
    assert sum(by_id["err"]) == 0
    # Model time, not wall time: 3 decode steps of an 8B model on an L40S (~30 ms each).
    assert by_id["lat"] and all(60_000 < v < 200_000 for v in by_id["lat"])
    assert by_id["mem"] and all(50 < v <= 100 for v in by_id["mem"])
    bad_period = query("bad", "AWS/SageMaker", "Invocations", "Sum")
    bad_period["MetricStat"]["Period"] = 45
    with pytest.raises(ClientError) as invalid:
        cw.get_metric_data(
            MetricDataQueries=[bad_period], StartTime=now - timedelta(minutes=5), EndTime=now
        )
    assert "Period" in invalid.value.response["Error"]["Message"]


def test_deterministic_mode_has_fixed_ttft_itl_and_chunking() -> None:
    config = SandboxConfig(
        time_scale=0.0002,
        serving_time_scale=1.0,
        serving_mode="deterministic",
        deterministic=DeterministicServing(ttft_ms=100, itl_ms=20, tokens_per_chunk=2),
    )
    with running_sandbox(config) as sandbox:
        sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
        deploy(sm, "ep")
        lines = stream_lines(rt, "ep", {"inputs": "x", "parameters": {"max_new_tokens": 10}})
        (record,) = sandbox.admin.traffic("ep")
    assert [line["num_tokens"] for line in lines] == [2, 2, 2, 2, 2]
    # Sends follow an absolute schedule (TTFT 100 ms, then 2 tokens x 20 ms per chunk), so
    # scheduling delays never accumulate; a busy 2-core box can be late on any one send.
    offsets_ms = [(t - record["t_start"]) * 1000 for t in record["chunk_send_times"]]
    lateness = [offset - (100 + 40 * index) for index, offset in enumerate(offsets_ms)]
    assert min(lateness) > -1  # never early
    assert statistics.median(lateness) < 100  # ms, real time
    assert lateness[-1] < 300  # and lateness does not pile up


def test_profile_timings_give_each_variant_its_own_fixed_schedule() -> None:
    config = fast_config(
        serving_time_scale=0.05,
        serving_mode="deterministic",
        deterministic=DeterministicServing(timings="profile"),
        faults=Faults(latency_regressions=[LatencyRegression(model="slow", factor=3)]),
    )
    with running_sandbox(config) as sandbox:
        sm, rt = sandbox.client("sagemaker"), sandbox.client("sagemaker-runtime")
        create_model(sm, "base")
        create_model(sm, "fp8", env={"OPTION_QUANTIZE": "fp8"})
        create_model(sm, "slow")
        sm.create_endpoint_config(
            EndpointConfigName="abc",
            ProductionVariants=[variant("a", "base"), variant("b", "fp8"), variant("c", "slow")],
        )
        sm.create_endpoint(EndpointName="ep", EndpointConfigName="abc")
        sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig={"Delay": 0.02})
        body = {"inputs": "a prompt of some length " * 8, "parameters": {"max_new_tokens": 8}}
        for target in ("a", "b", "c") * 2:
            lines = stream_lines(rt, "ep", body, TargetVariant=target)
            assert [line["num_tokens"] for line in lines] == [1] * 8
        records = sandbox.admin.traffic("ep")
    # The schedule each variant's profile gives at batch 1, no jitter: prefill, then 7 steps.
    prompt = records[0]["input_tokens"]
    expected = {}
    for name, env in (("a", {}), ("b", {"OPTION_QUANTIZE": "fp8"})):
        profile = profile_from_environment("ml.g6e.2xlarge", "s3://models/llama-3.1-8b/", env)
        expected[name] = profile.prefill_ms(prompt) + 7 * profile.decode_step_ms(1, prompt)
    expected["c"] = 3 * expected["a"]
    for target, model_ms in expected.items():
        served = [r["model_latency_ms"] for r in records if r["variant"] == target]
        assert served == pytest.approx([model_ms, model_ms], rel=1e-9), target
    # FP8's modelled gain on an L40S, exactly, whatever the host was doing meanwhile.
    assert 0.65 < expected["b"] / expected["a"] < 0.8
    # The wall clock follows the same schedule (late on a busy box, never early).
    for record in records:
        wall_s = record["chunk_send_times"][-1] - record["t_start"]
        assert wall_s >= record["model_latency_ms"] * 0.05 / 1000 - 1e-3


def test_openai_route_streams_sse_with_usage_last(sandbox: SandboxHandle) -> None:
    deploy(sandbox.client("sagemaker"), "ep")
    body = {
        "model": "ep",
        "stream": True,
        "max_tokens": 6,
        "messages": [{"role": "user", "content": "hello"}],
    }
    request = urllib.request.Request(
        f"{sandbox.url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        events = [
            line[len("data: ") :]
            for line in response.read().decode().splitlines()
            if line.startswith("data: ")
        ]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["model"] == "ep" for c in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
    assert len(text.split()) == 6


def test_config_file_and_reset(tmp_path: Path) -> None:
    path = tmp_path / "sandbox.yaml"
    path.write_text("timeScale: 0.0002\nfaults:\n  failOptimizationJobs: [x]\n")
    config = SandboxConfig.from_file(path)
    assert config.faults.fail_optimization_jobs == ["x"]
    with running_sandbox(config) as sandbox:
        sm = sandbox.client("sagemaker")
        deploy(sm, "ep")
        assert sandbox.admin.state()["endpoints"]["ep"]["EndpointStatus"] == "InService"
        sandbox.admin.reset()
        state = sandbox.admin.state()
        assert state["endpoints"] == {} and state["models"] == {}
        assert state["config"]["faults"]["failOptimizationJobs"] == []
        assert sandbox.admin.calls() == []
