"""What a failed AWS call means for the control loop, by what the error is.

botocore's `standard` retry mode has already retried throttling and transient
errors (with jittered backoff) by the time an error reaches us; what is left is
classified once, here, so the pipeline never string-matches AWS messages:

- THROTTLED / TRANSIENT: try again later, with the controller's backoff (controller/retry.py);
  never spin. Throttling of any call (InvokeEndpoint too), 5xx answers, a container's
  ModelError whose OriginalStatusCode is 5xx (429: throttled), a broken stream, and every
  connection failure below HTTP (a TCP reset is botocore's ConnectionClosedError).
- NOT_FOUND: "Could not find ..." (endpoints, models, configs), ResourceNotFound (jobs) or
  Application Auto Scaling's ObjectNotFoundException (a target or policy that is not there).
- ALREADY_EXISTS: "Cannot create already existing ..." / ResourceInUse: adopt our own, once
  it proves ours (aws/ownership.py); NOT_OURS when it does not.
- PERMANENT: validation, quota, access denied, a container that refuses the request (a
  ModelError with a 4xx OriginalStatusCode): a Terminal condition with the AWS message and
  what to do; retrying unchanged would fail the same way.
"""

from __future__ import annotations

from enum import StrEnum

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    CredentialRetrievalError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    PartialCredentialsError,
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
    NOT_OURS = "NotOurs"


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
        # Application Auto Scaling: another update of the same target is in flight.
        "ConcurrentUpdateException",
        "InternalServiceException",
        "ModelNotReadyException",
        # Event-stream errors in a streamed answer: the container broke off mid-answer.
        "ModelStreamError",
        "InternalStreamFailure",
    }
)
# The container's own answer to a request (SageMaker Runtime wraps it, HTTP 424).
MODEL_ERROR = "ModelError"
_CREDENTIAL_ERRORS = (NoCredentialsError, PartialCredentialsError, CredentialRetrievalError)
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
    ErrorKind.TRANSIENT: "the operator backs off and retries",
    ErrorKind.NOT_OURS: "the operator touches nothing it cannot prove it made or was given",
}


_MODEL_REFUSED = (
    "the model container refused the request: check spec.benchmark.requestFormat (and "
    "spec.evaluation.requestFormat) against the body it serves (lmi, chat or completions), "
    "the prompts against spec.container.maxModelLen, and the model's settings; the same "
    "request would fail again"
)


class SageMakerError(Exception):
    """A classified AWS error, naming the operation and the resource it was about."""

    def __init__(
        self,
        kind: ErrorKind,
        code: str,
        message: str,
        operation: str,
        resource: str = "",
        advice: str | None = None,
    ) -> None:
        self.kind = kind
        self.code = code
        self.aws_message = message
        self.operation = operation
        self.resource = resource
        self.advice = advice if advice is not None else _ADVICE.get(kind)
        super().__init__(self.describe())

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE

    def describe(self) -> str:
        about = f" {self.resource}" if self.resource else ""
        text = f"{self.operation}{about}: {self.code}: {self.aws_message}"
        return f"{text} ({self.advice})" if self.advice else text


def classify_code(
    code: str, message: str, status: int | None = None, original_status: int | None = None
) -> ErrorKind:
    """The kind of an AWS error answer; `original_status`: a ModelError's container status."""
    lowered = message.lower()
    if code == MODEL_ERROR:
        return _model_error(original_status)
    if code in _THROTTLING_CODES or status == 429:
        return ErrorKind.THROTTLED
    if code in ("ResourceNotFound", "ObjectNotFoundException") or "could not find" in lowered:
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


def _model_error(original_status: int | None) -> ErrorKind:
    """A container's error by its own status: 5xx (and none given) passes, 429 is load,
    any other 4xx is the request itself (too long a prompt, a bad parameter)."""
    if original_status == 429:
        return ErrorKind.THROTTLED
    if original_status is None or original_status >= 500:
        return ErrorKind.TRANSIENT
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
        original = exc.response.get("OriginalStatusCode")
        kind = classify_code(code, message, status, original if isinstance(original, int) else None)
        advice = _MODEL_REFUSED if code == MODEL_ERROR and kind is ErrorKind.INVALID else None
        return SageMakerError(kind, code, message, operation, resource, advice)
    if isinstance(exc, ParamValidationError):
        return SageMakerError(
            ErrorKind.INVALID, "ParamValidationError", str(exc), operation, resource
        )
    if isinstance(exc, _CREDENTIAL_ERRORS):
        return SageMakerError(
            ErrorKind.ACCESS_DENIED, type(exc).__name__, str(exc), operation, resource
        )
    if isinstance(exc, NoRegionError):
        return SageMakerError(ErrorKind.INVALID, type(exc).__name__, str(exc), operation, resource)
    if isinstance(exc, ConnectionError | HTTPClientError | IncompleteReadError):
        # Below HTTP (a TCP reset is ConnectionClosedError, a read timeout, a broken read):
        # the request may or may not have arrived, and nothing about it was refused.
        return SageMakerError(
            ErrorKind.TRANSIENT, type(exc).__name__, str(exc), operation, resource
        )
    if isinstance(exc, BotoCoreError | OSError):
        # Another client-side failure of the SDK: retried, and said in status, never a
        # handler exception that stalls the resource without one.
        return SageMakerError(
            ErrorKind.TRANSIENT, type(exc).__name__, str(exc), operation, resource
        )
    raise exc
