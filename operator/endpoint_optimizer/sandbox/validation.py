"""Server-side request validation from botocore's own service model.

botocore checks required members, types and minimums before sending; AWS checks the
rest (max lengths, patterns, enums) and answers ValidationException. We check all of
it against the same JSON model the client used, and word the error like AWS does:
"1 validation error detected: Value 'x' at 'endpointName' failed to satisfy constraint:
Member must satisfy regular expression pattern: ...".
"""

from __future__ import annotations

import base64
import functools
import re
from typing import Any

import botocore.session
from botocore.model import OperationModel, ServiceModel, Shape


class RequestInvalid(Exception):
    """A request that breaks the service model's constraints."""


@functools.cache
def service_model(service: str) -> ServiceModel:
    return botocore.session.get_session().get_service_model(service)


def operation_model(service: str, operation: str) -> OperationModel | None:
    model = service_model(service)
    if operation not in model.operation_names:
        return None
    return model.operation_model(operation)


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str] | None:
    # The model's patterns are Java regexes; the few Python cannot compile are skipped.
    try:
        return re.compile(pattern, re.DOTALL)
    except re.error:
        return None


def _lower_camel(name: str) -> str:
    return name[:1].lower() + name[1:]


def validate(service: str, operation: str, params: dict[str, Any]) -> None:
    """Raise RequestInvalid with AWS's wording for the first constraints the input breaks."""
    model = operation_model(service, operation)
    if model is None or model.input_shape is None:
        return
    errors: list[str] = []
    _check(model.input_shape, params, "", errors)
    if errors:
        shown = errors[:5]
        noun = "error" if len(errors) == 1 else "errors"
        raise RequestInvalid(f"{len(errors)} validation {noun} detected: " + "; ".join(shown))


def response_errors(service: str, operation: str, output: dict[str, Any]) -> list[str]:
    """Where a response breaks the output shape: the sandbox's own bugs, caught in tests."""
    model = operation_model(service, operation)
    if model is None or model.output_shape is None:
        return []
    errors: list[str] = []
    _check(model.output_shape, output, "", errors)
    return errors


def _fail(errors: list[str], value: Any, path: str, constraint: str) -> None:
    shown = value if isinstance(value, str | int | float | bool) else "[...]"
    errors.append(f"Value '{shown}' at '{path}' failed to satisfy constraint: {constraint}")


def _check(shape: Shape, value: Any, path: str, errors: list[str]) -> None:
    kind = shape.type_name
    meta = shape.metadata
    if kind == "structure":
        if not isinstance(value, dict):
            _fail(errors, value, path, "Member must be a structure")
            return
        members = shape.members  # type: ignore[attr-defined]
        for required in shape.required_members:
            if value.get(required) is None:
                sub = f"{path}.{_lower_camel(required)}" if path else _lower_camel(required)
                errors.append(
                    f"Value null at '{sub}' failed to satisfy constraint: Member must not be null"
                )
        for name, member_value in value.items():
            if name not in members or member_value is None:
                continue
            sub = f"{path}.{_lower_camel(name)}" if path else _lower_camel(name)
            _check(members[name], member_value, sub, errors)
        if getattr(shape, "is_tagged_union", False) and len(value) != 1:
            _fail(errors, "[...]", path, "Member must have exactly one member set")
        return
    if kind == "list":
        if not isinstance(value, list):
            _fail(errors, value, path, "Member must be a list")
            return
        _check_length(meta, len(value), value, path, errors)
        member = shape.member  # type: ignore[attr-defined]
        for index, item in enumerate(value, start=1):
            _check(member, item, f"{path}.{index}.member", errors)
        return
    if kind == "map":
        if not isinstance(value, dict):
            _fail(errors, value, path, "Member must be a map")
            return
        _check_length(meta, len(value), value, path, errors)
        for key, item in value.items():
            _check(shape.key, key, f"{path}.key", errors)  # type: ignore[attr-defined]
            _check(shape.value, item, f"{path}.{key}.value", errors)  # type: ignore[attr-defined]
        return
    if kind == "string":
        if not isinstance(value, str):
            _fail(errors, value, path, "Member must be a string")
            return
        _check_length(meta, len(value), value, path, errors)
        enum = shape.enum  # type: ignore[attr-defined]
        if enum and value not in enum:
            _fail(errors, value, path, f"Member must satisfy enum value set: [{', '.join(enum)}]")
        pattern = meta.get("pattern")
        if pattern:
            regex = _compiled(pattern)
            if regex is not None and regex.fullmatch(value) is None:
                _fail(
                    errors,
                    value,
                    path,
                    f"Member must satisfy regular expression pattern: {pattern}",
                )
        return
    if kind in ("integer", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(errors, value, path, "Member must be an integer")
            return
        _check_range(meta, value, path, errors)
        return
    if kind in ("float", "double"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            _fail(errors, value, path, "Member must be a number")
            return
        _check_range(meta, float(value), path, errors)
        return
    if kind == "boolean":
        if not isinstance(value, bool):
            _fail(errors, value, path, "Member must be a boolean")
        return
    if kind == "blob" and isinstance(value, str):
        try:
            size = len(base64.b64decode(value))
        except ValueError:
            _fail(errors, "[...]", path, "Member must be base64 encoded")
            return
        _check_length(meta, size, "[...]", path, errors)


def _check_length(
    meta: dict[str, Any], size: int, value: Any, path: str, errors: list[str]
) -> None:
    if "min" in meta and size < meta["min"]:
        limit = meta["min"]
        _fail(errors, value, path, f"Member must have length greater than or equal to {limit}")
    if "max" in meta and size > meta["max"]:
        limit = meta["max"]
        _fail(errors, value, path, f"Member must have length less than or equal to {limit}")


def _check_range(meta: dict[str, Any], value: float, path: str, errors: list[str]) -> None:
    if "min" in meta and value < meta["min"]:
        _fail(errors, value, path, f"Member must have value greater than or equal to {meta['min']}")
    if "max" in meta and value > meta["max"]:
        _fail(errors, value, path, f"Member must have value less than or equal to {meta['max']}")
