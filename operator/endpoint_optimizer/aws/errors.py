"""What a failed AWS call means for the control loop.

botocore's `standard` retry mode has already retried throttling and transient
errors (with jittered backoff) by the time an error reaches us; what is left is
classified once, here, so the pipeline never string-matches AWS messages:

- THROTTLED / TRANSIENT: try again on a later wake-up; never spin.
- NOT_FOUND: "Could not find ..." (endpoints, models, configs) or ResourceNotFound (jobs).
- ALREADY_EXISTS: "Cannot create already existing ..." / ResourceInUse: adopt our own.
- PERMANENT: validation, quota, access denied: a Terminal condition with the AWS
  message and what to do; retrying unchanged would fail the same way.
"""

from __future__ import annotations

from enum import StrEnum

from botocore.exceptions import (
    ClientError,
    ConnectionError,
    EndpointConnectionError,
    ParamValidationError,
    ReadTimeoutError,
)


class ErrorKind(StrEnum):
    THROTTLED = "Throttled"
    TRANSIENT = "Transient"
    NOT_FOUND = "NotFound"
    ALREADY_EXISTS = "AlreadyExists"
    QUOTA = "QuotaExceeded"
    ACCESS_DENIED = "AccessDenied"
    INVALID = "InvalidRequest"
    IN_USE = "InUse"


RETRYABLE = frozenset({ErrorKind.THROTTLED, ErrorKind.TRANSIENT, ErrorKind.IN_USE})

_THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "SlowDown",
        "PriorRequestNotComplete",
    }
)
_TRANSIENT_CODES = frozenset(
    {
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalFailure",
        "InternalError",
        "InternalServerError",
        "ServiceUnavailable",
        "InternalDependencyException",
        "ModelNotReadyException",
    }
)
_ACCESS_CODES = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "UnauthorizedOperation",
        "UnrecognizedClientException",
    }
)

_ADVICE: dict[ErrorKind, str] = {
    ErrorKind.QUOTA: "request a higher limit in AWS Service Quotas, or lower instanceCount, "
    "then bump the spec",
    ErrorKind.ACCESS_DENIED: "grant the operator's IAM identity this action (and iam:PassRole "
    "on spec.executionRoleArn), then annotate optimizer.dev/refresh",
    ErrorKind.INVALID: "fix the field the message names in the spec; the same request would "
    "fail again",
    ErrorKind.THROTTLED: "the operator backs off and retries; lower --aws-concurrency if it "
    "persists",
    ErrorKind.TRANSIENT: "the operator retries on the next wake-up",
}


class SageMakerError(Exception):
    """A classified AWS error, naming the operation and the resource it was about."""

    def __init__(
        self, kind: ErrorKind, code: str, message: str, operation: str, resource: str = ""
    ) -> None:
        self.kind = kind
        self.code = code
        self.aws_message = message
        self.operation = operation
        self.resource = resource
        super().__init__(self.describe())

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE

    def describe(self) -> str:
        about = f" {self.resource}" if self.resource else ""
        advice = _ADVICE.get(self.kind)
        text = f"{self.operation}{about}: {self.code}: {self.aws_message}"
        return f"{text} ({advice})" if advice else text


def classify_code(code: str, message: str, status: int | None = None) -> ErrorKind:
    lowered = message.lower()
    if code in _THROTTLING_CODES:
        return ErrorKind.THROTTLED
    if code == "ResourceNotFound" or "could not find" in lowered:
        return ErrorKind.NOT_FOUND
    if code in ("ResourceInUse", "ResourceAlreadyExists") or (
        "cannot create already existing" in lowered or "already exists" in lowered
    ):
        return ErrorKind.ALREADY_EXISTS
    if code == "ResourceLimitExceeded" or "service limit" in lowered:
        return ErrorKind.QUOTA
    if code in _ACCESS_CODES or "not authorized" in lowered:
        return ErrorKind.ACCESS_DENIED
    if code in _TRANSIENT_CODES or (status is not None and status >= 500):
        return ErrorKind.TRANSIENT
    if code == "ConflictException":
        return ErrorKind.IN_USE
    return ErrorKind.INVALID


def classify(exc: BaseException, operation: str, resource: str = "") -> SageMakerError:
    """Translate a botocore exception into a SageMakerError."""
    if isinstance(exc, SageMakerError):
        return exc
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        message = str(error.get("Message", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return SageMakerError(
            classify_code(code, message, status), code, message, operation, resource
        )
    if isinstance(exc, ParamValidationError):
        return SageMakerError(
            ErrorKind.INVALID, "ParamValidationError", str(exc), operation, resource
        )
    if isinstance(exc, EndpointConnectionError | ConnectionError | ReadTimeoutError):
        return SageMakerError(
            ErrorKind.TRANSIENT, type(exc).__name__, str(exc), operation, resource
        )
    raise exc
