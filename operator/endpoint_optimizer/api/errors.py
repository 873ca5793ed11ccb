"""Refusals of bad input: each names the field by its camelCase path and what is allowed."""

from __future__ import annotations

from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from endpoint_optimizer.api.camel import CamelModel
from endpoint_optimizer.api.types import (
    CONDITION_REASON_PATTERN,
    CONFIGMAP_KEY_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    DURATION_PATTERN,
    INSTANCE_TYPE_PATTERN,
    REGION_PATTERN,
    ROLE_ARN_PATTERN,
    S3_URI_PATTERN,
    SAGEMAKER_NAME_PATTERN,
)

# --------------------------------------------------------------------------- parsing


class FieldProblem(CamelModel):
    """One refused field: its camelCase path and what is allowed."""

    path: str
    message: str


class SpecError(ValueError):
    """A spec that the model refuses; the message names each bad field by its camelCase path."""

    def __init__(self, problems: list[FieldProblem]) -> None:
        self.problems = problems
        lines = [f"{p.path}: {p.message}" for p in problems]
        super().__init__("invalid OptimizedEndpoint spec: " + "; ".join(lines))


def _path(prefix: str, loc: tuple[str | int, ...]) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not part.startswith("function-") and part not in ("[key]",):
            path += f".{part}"
    return path


# What each pattern allows, in words, for error messages.
_PATTERN_TEXT = {
    SAGEMAKER_NAME_PATTERN: "must be 1..63 letters, digits and hyphens, starting and ending "
    "with a letter or digit",
    S3_URI_PATTERN: "must be an S3 URI like s3://bucket/prefix/ (lower-case bucket name)",
    ROLE_ARN_PATTERN: "must be an IAM role ARN like arn:aws:iam::123456789012:role/name",
    REGION_PATTERN: "must be an AWS region like us-east-1",
    INSTANCE_TYPE_PATTERN: "must be a SageMaker instance type like ml.g6e.2xlarge",
    DURATION_PATTERN: "must be a duration like 30s, 5m or 1h30m (units ms, s, m, h)",
    DNS_SUBDOMAIN_PATTERN: "must be a Kubernetes name: lower-case letters, digits, - and .",
    CONFIGMAP_KEY_PATTERN: "must be a ConfigMap key: letters, digits, -, _ and .",
    CONDITION_REASON_PATTERN: "must be a CamelCase reason",
}


def _unwrap(annotation: Any) -> Any:
    """The model type inside Optional[...] / list[...] / Annotated[...], if any."""
    for _ in range(4):
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, UnionType):
            annotation = next(a for a in get_args(annotation) if a is not type(None))
        elif origin is list:
            annotation = get_args(annotation)[0]
        else:
            break
    return annotation


def _fields_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """camelCase field names of the model found at `loc` (empty if it is not a model)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = next(
            (f for name, f in current.model_fields.items() if (f.alias or name) == part), None
        )
        if field is None:
            return []
        current = _unwrap(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return []


def problems_from(
    error: ValidationError,
    prefix: str = "spec",
    model: type[BaseModel] | None = None,
) -> list[FieldProblem]:
    """Field problems from a pydantic ValidationError, with camelCase paths under `prefix`."""
    problems: list[FieldProblem] = []
    for item in error.errors(include_url=False):
        path = _path(prefix, tuple(item["loc"]))
        context = item.get("ctx") or {}
        field = context.get("field")
        if isinstance(field, str) and field:
            path = f"{path}.{field}" if not field.startswith("[") else path + field
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "string_pattern_mismatch" and context.get("pattern") in _PATTERN_TEXT:
            message = f"{_PATTERN_TEXT[context['pattern']]} (pattern {context['pattern']})"
        elif item["type"] == "extra_forbidden":
            loc = tuple(item["loc"])
            allowed = _fields_at(model, loc[:-1]) if model is not None else []
            message = f"unknown field {str(loc[-1])!r}" + (
                f"; allowed here: {', '.join(allowed)}" if allowed else ""
            )
        elif item["type"] == "missing":
            message = "field required"
        problems.append(FieldProblem(path=path, message=message))
    return problems
