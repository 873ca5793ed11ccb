"""Classification of AWS errors into what the control loop does next."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ParamValidationError

from endpoint_optimizer.aws.errors import ErrorKind, classify


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
