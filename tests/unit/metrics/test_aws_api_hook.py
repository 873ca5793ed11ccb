"""The botocore hook counts real calls and throttled attempts of a real boto3 client."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError

from endpoint_optimizer.metrics.exporter import OperatorMetrics
from tests.unit.metrics.scrape import scrape, value, values


class SageMakerStandIn(ThreadingHTTPServer):
    """Answers the JSON 1.1 protocol: the first `throttle` requests are throttled, then OK."""

    throttle = 0
    error_code = "ThrottlingException"
    answer: dict[str, object] = {"Endpoints": []}  # noqa: RUF012 - one server per test


class Handler(BaseHTTPRequestHandler):
    server: SageMakerStandIn

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.server.throttle > 0:
            self.server.throttle -= 1
            status, body = 400, {"__type": self.server.error_code, "message": "Rate exceeded"}
        else:
            status, body = 200, self.server.answer
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[SageMakerStandIn]:
    server = SageMakerStandIn(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def client(endpoint_url: str, attempts: int) -> object:
    return boto3.client(
        "sagemaker",
        region_name="us-east-1",
        endpoint_url=endpoint_url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"mode": "standard", "total_max_attempts": attempts}),
    )


def test_a_throttled_then_successful_call_counts_one_ok_call_and_one_throttled_attempt(
    stand_in: SageMakerStandIn,
) -> None:
    metrics = OperatorMetrics()
    sagemaker = client(f"http://127.0.0.1:{stand_in.server_port}", attempts=2)
    metrics.instrument(sagemaker)
    metrics.instrument(sagemaker)  # a second time changes nothing
    stand_in.throttle = 1

    sagemaker.list_endpoints()  # type: ignore[attr-defined]
    samples = scrape(metrics.registry)

    calls = "endpoint_optimizer_aws_api_calls_total"
    assert value(samples, calls, service="sagemaker", operation="ListEndpoints", code="OK") == 1
    assert values(samples, calls, code="ThrottlingException") == []
    throttled = "endpoint_optimizer_aws_api_throttled_attempts_total"
    assert value(samples, throttled, service="sagemaker", operation="ListEndpoints") == 1


def test_a_call_that_stays_throttled_counts_its_error_code(stand_in: SageMakerStandIn) -> None:
    metrics = OperatorMetrics()
    sagemaker = client(f"http://127.0.0.1:{stand_in.server_port}", attempts=1)
    metrics.instrument(sagemaker)
    stand_in.throttle = 1

    with pytest.raises(ClientError):
        sagemaker.list_endpoints()  # type: ignore[attr-defined]
    stand_in.error_code = "ValidationException"
    stand_in.throttle = 1
    with pytest.raises(ClientError):
        sagemaker.list_endpoints()  # type: ignore[attr-defined]
    samples = scrape(metrics.registry)

    calls = "endpoint_optimizer_aws_api_calls_total"
    assert value(samples, calls, operation="ListEndpoints", code="ThrottlingException") == 1
    assert value(samples, calls, operation="ListEndpoints", code="ValidationException") == 1
    throttled = "endpoint_optimizer_aws_api_throttled_attempts_total"
    assert value(samples, throttled, operation="ListEndpoints") == 1


def test_an_unreachable_endpoint_counts_the_exception_class_not_its_message(
    stand_in: SageMakerStandIn,
) -> None:
    port = stand_in.server_port
    stand_in.shutdown()
    stand_in.server_close()
    metrics = OperatorMetrics()
    sagemaker = client(f"http://127.0.0.1:{port}", attempts=1)
    metrics.instrument(sagemaker)

    with pytest.raises(EndpointConnectionError):
        sagemaker.list_endpoints()  # type: ignore[attr-defined]
    samples = scrape(metrics.registry)

    calls = "endpoint_optimizer_aws_api_calls_total"
    assert value(samples, calls, operation="ListEndpoints", code="EndpointConnectionError") == 1


def optimization_job(status: str, configs: list[dict[str, object]]) -> dict[str, object]:
    """A DescribeOptimizationJob answer: created at t, ended 1500 s later (epoch seconds)."""
    return {
        "OptimizationJobArn": "arn:aws:sagemaker:us-east-1:123456789012:optimization-job/q",
        "OptimizationJobStatus": status,
        "OptimizationJobName": "q",
        "CreationTime": 1_764_000_000.0,
        "OptimizationStartTime": 1_764_000_060.0,
        "OptimizationEndTime": 1_764_001_500.0,
        "LastModifiedTime": 1_764_001_500.0,
        "ModelSource": {"S3": {"S3Uri": "s3://models/llama/"}},
        "DeploymentInstanceType": "ml.g6.12xlarge",
        "OptimizationConfigs": configs,
        "OutputConfig": {"S3OutputLocation": "s3://out/"},
        "RoleArn": "arn:aws:iam::123456789012:role/sagemaker-exec",
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    }


def test_a_finished_optimization_job_is_timed_once_from_the_describes_the_operator_makes(
    stand_in: SageMakerStandIn,
) -> None:
    metrics = OperatorMetrics()
    sagemaker = client(f"http://127.0.0.1:{stand_in.server_port}", attempts=1)
    metrics.instrument(sagemaker)
    quantize = {"ModelQuantizationConfig": {"OverrideEnvironment": {"OPTION_QUANTIZE": "fp8"}}}
    compile_ = {"ModelCompilationConfig": {"Image": "trtllm"}}

    stand_in.answer = optimization_job("INPROGRESS", [quantize])
    sagemaker.describe_optimization_job(OptimizationJobName="q")  # type: ignore[attr-defined]
    stand_in.answer = optimization_job("COMPLETED", [quantize, compile_])
    for _ in range(3):  # the operator polls a finished job more than once
        sagemaker.describe_optimization_job(OptimizationJobName="q")  # type: ignore[attr-defined]
    samples = scrape(metrics.registry)

    job = "endpoint_optimizer_optimization_job_duration_seconds"
    labels = {"technique": "compilation+quantization", "status": "COMPLETED"}
    assert value(samples, f"{job}_count", **labels) == 1
    assert value(samples, f"{job}_sum", **labels) == 1500
    assert value(samples, f"{job}_bucket", **labels, le="1800.0") == 1
    assert value(samples, f"{job}_bucket", **labels, le="1200.0") == 0
    assert values(samples, f"{job}_count", status="INPROGRESS") == []
