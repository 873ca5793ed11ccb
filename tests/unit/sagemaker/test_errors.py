"""Classification of AWS errors into what the control loop does next."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)

from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.errors import ErrorKind, SageMakerError, classify
from endpoint_optimizer.aws.evaluate import labelled_answers
from endpoint_optimizer.sandbox.config import Faults, InvocationErrors
from endpoint_optimizer.sandbox.testing import SandboxHandle
from tests.e2e.conftest import IMAGE


def client_error(code: str, message: str, status: int = 400) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "Op",
    )


@pytest.mark.parametrize(
    ("code", "message", "status", "kind"),
    [
        ("ThrottlingException", "Rate exceeded", 400, ErrorKind.THROTTLED),
        ("ValidationException", 'Could not find endpoint "arn:x".', 400, ErrorKind.NOT_FOUND),
        ("ResourceNotFound", "Optimization job j not found", 400, ErrorKind.NOT_FOUND),
        (
            "ValidationException",
            'Cannot create already existing endpoint "arn:aws:sagemaker:x".',
            400,
            ErrorKind.ALREADY_EXISTS,
        ),
        ("ResourceInUse", "Job name in use", 400, ErrorKind.ALREADY_EXISTS),
        (
            "ResourceLimitExceeded",
            "The account-level service limit 'ml.g5.12xlarge for endpoint usage' is 2 Instances",
            400,
            ErrorKind.QUOTA,
        ),
        ("AccessDeniedException", "User is not authorized", 400, ErrorKind.ACCESS_DENIED),
        ("ValidationException", "1 validation error detected", 400, ErrorKind.INVALID),
        ("InternalFailure", "oops", 500, ErrorKind.TRANSIENT),
        ("ServiceUnavailable", "busy", 503, ErrorKind.TRANSIENT),
    ],
)
def test_client_errors_are_classified(
    code: str, message: str, status: int, kind: ErrorKind
) -> None:
    error = classify(client_error(code, message, status), "CreateEndpoint", "endpoint e")
    assert error.kind is kind
    assert error.aws_message == message
    assert "CreateEndpoint endpoint e" in str(error)


def test_permanent_errors_say_what_to_do() -> None:
    quota = classify(client_error("ResourceLimitExceeded", "limit"), "CreateEndpoint")
    assert not quota.retryable
    assert "Service Quotas" in str(quota)
    access = classify(client_error("AccessDeniedException", "no"), "CreateModel")
    assert "iam:PassRole" in str(access)


def test_connection_and_parameter_errors_are_classified() -> None:
    assert (
        classify(EndpointConnectionError(endpoint_url="http://x"), "Op").kind is ErrorKind.TRANSIENT
    )
    assert classify(ParamValidationError(report="bad"), "Op").kind is ErrorKind.INVALID


def model_error(original_status: int | None) -> ClientError:
    response: dict[str, Any] = {
        "Error": {"Code": "ModelError", "Message": f"Received server error ({original_status})"},
        "ResponseMetadata": {"HTTPStatusCode": 424},
    }
    if original_status is not None:
        response["OriginalStatusCode"] = original_status
    return ClientError(response, "InvokeEndpoint")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("original", "kind"),
    [
        (503, ErrorKind.TRANSIENT),  # the container was overloaded or restarting
        (500, ErrorKind.TRANSIENT),
        (None, ErrorKind.TRANSIENT),  # no status given: nothing says the request was wrong
        (429, ErrorKind.THROTTLED),
        (400, ErrorKind.INVALID),  # the container refused this request: too long, say
        (422, ErrorKind.INVALID),
    ],
)
def test_a_model_error_is_classified_by_the_containers_own_status(
    original: int | None, kind: ErrorKind
) -> None:
    assert classify(model_error(original), "InvokeEndpoint").kind is kind


def test_connection_failures_below_http_are_transient_and_missing_credentials_are_not() -> None:
    reset = ConnectionClosedError(endpoint_url="http://x")
    assert classify(reset, "DescribeEndpoint").kind is ErrorKind.TRANSIENT
    assert classify(ReadTimeoutError(endpoint_url="http://x"), "Op").kind is ErrorKind.TRANSIENT
    assert classify(ConnectTimeoutError(endpoint_url="http://x"), "Op").retryable
    assert classify(NoCredentialsError(), "Op").kind is ErrorKind.ACCESS_DENIED
    throttled = client_error("ThrottlingException", "Rate exceeded")
    assert classify(throttled, "InvokeEndpoint").kind is ErrorKind.THROTTLED


@pytest.mark.parametrize(
    ("original", "kind"), [(503, ErrorKind.TRANSIENT), (400, ErrorKind.INVALID)]
)
async def test_the_eval_reads_a_containers_error_by_what_it_is(
    sandbox: SandboxHandle, original: int, kind: ErrorKind
) -> None:
    """Over real HTTP: the sandbox's container answers ModelError with OriginalStatusCode."""
    sm = sandbox.client("sagemaker")
    sm.create_model(
        ModelName="m",
        ExecutionRoleArn="arn:aws:iam::123456789012:role/x",
        PrimaryContainer={"Image": IMAGE, "ModelDataUrl": "s3://models/m/"},
    )
    sm.create_endpoint_config(
        EndpointConfigName="c",
        ProductionVariants=[
            {"VariantName": "v", "ModelName": "m", "InstanceType": "ml.g6e.2xlarge"}
            | {"InitialInstanceCount": 1}
        ],
    )
    sm.create_endpoint(EndpointName="e", EndpointConfigName="c")
    deadline = time.monotonic() + 30
    while sm.describe_endpoint(EndpointName="e")["EndpointStatus"] != "InService":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    sandbox.admin.set_faults(Faults(invocation_errors=[InvocationErrors(original_status=original)]))
    aws = AwsClients(
        max_concurrency=2, config=Config(retries={"mode": "standard", "total_max_attempts": 1})
    )
    try:
        with pytest.raises(SageMakerError) as raised:
            await labelled_answers(aws, "us-east-1", "e", "v", ["What is 2+2?"], 8)
    finally:
        aws.close()
    assert raised.value.kind is kind
    assert raised.value.code == "ModelError"
    assert "What is 2+2" not in str(raised.value)
