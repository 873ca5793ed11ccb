"""What a real apiserver does with an OptimizedEndpoint, in-process: default, schema, CEL.

Structural defaulting, then the OpenAPI schema (a JSON Schema draft 4 validator: OpenAPI
3.0 spells exclusive bounds as booleans, like draft 4), then every
`x-kubernetes-validations` rule evaluated with cel-python at the node that carries it.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml

from endpoint_optimizer.api.crd import apply_defaults

REPO = Path(__file__).resolve().parents[3]
CRD_FILE = REPO / "crds" / "optimizedendpoint.yaml"


@functools.cache
def root_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@functools.cache
def _program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def _path_text(parts: Any) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".")


def _strict_problems(schema: dict[str, Any], value: Any, path: str, out: list[str]) -> None:
    # What draft 4 does not know: kubectl's strict field validation (unknown fields are
    # errors, not silently pruned), x-kubernetes-list-type: set (no duplicates) and map
    # (no two items with the same keys).
    if isinstance(value, dict) and "properties" in schema:
        for key, item in value.items():
            child = schema["properties"].get(key)
            if child is None:
                if not schema.get("x-kubernetes-preserve-unknown-fields"):
                    out.append(f"{path}.{key}: unknown field {key!r}")
            else:
                _strict_problems(child, item, f"{path}.{key}", out)
    elif isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key, item in value.items():
            _strict_problems(schema["additionalProperties"], item, f"{path}.{key}", out)
    elif isinstance(value, list) and "items" in schema:
        if schema.get("x-kubernetes-list-type") == "set":
            seen: list[Any] = []
            for index, item in enumerate(value):
                if item in seen:
                    out.append(f"{path}[{index}]: Duplicate value: {item!r}")
                seen.append(item)
        keys = schema.get("x-kubernetes-list-map-keys")
        if schema.get("x-kubernetes-list-type") == "map" and keys:
            found: list[Any] = []
            for index, item in enumerate(value):
                key = tuple(item.get(k) for k in keys) if isinstance(item, dict) else (item,)
                if key in found:
                    named = dict(zip(keys, key, strict=True))
                    out.append(f"{path}[{index}]: Duplicate value: {named!r}")
                found.append(key)
        for index, item in enumerate(value):
            _strict_problems(schema["items"], item, f"{path}[{index}]", out)


def _draft4(node: Any) -> Any:
    """OpenAPI's `nullable: true` as draft 4 says it: a type list with "null"."""
    if isinstance(node, list):
        return [_draft4(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _draft4(value) for key, value in node.items()}
    if converted.pop("nullable", False) and "type" in converted:
        converted["type"] = [converted["type"], "null"]
        if "enum" in converted:
            converted["enum"] = [*converted["enum"], None]
    return converted


@functools.cache
def _validator() -> jsonschema.Draft4Validator:
    return jsonschema.Draft4Validator(_draft4(root_schema()))


def schema_problems(resource: dict[str, Any]) -> list[str]:
    validator = _validator()
    problems = [
        f"{_path_text(error.absolute_path)}: {error.message}"
        for error in validator.iter_errors(resource)
    ]
    strict: list[str] = []
    spec = root_schema()["properties"]
    for name in ("spec", "status"):
        if name in resource:
            _strict_problems(spec[name], resource[name], name, strict)
    return sorted(problems + strict)


_ABSENT = object()


def _cel_walk(
    schema: dict[str, Any], value: Any, path: str, out: list[str], old: Any = _ABSENT
) -> None:
    for rule in schema.get("x-kubernetes-validations", []):
        activation = {"self": celpy.json_to_cel(value)}
        if "oldSelf" in rule["rule"]:
            # Transition rules run only on update, where the old value exists.
            if old is _ABSENT:
                continue
            activation["oldSelf"] = celpy.json_to_cel(old)
        result = _program(rule["rule"]).evaluate(activation)
        if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            detail = "" if isinstance(result, celpy.celtypes.BoolType) else f" ({result})"
            # The apiserver reports at fieldPath (relative, e.g. `.scheme`) when a rule has one.
            out.append(f"{path}{rule.get('fieldPath', '')}: {rule['message']}{detail}")
    if isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name in value:
                old_child = old.get(name, _ABSENT) if isinstance(old, dict) else _ABSENT
                _cel_walk(child, value[name], f"{path}.{name}", out, old_child)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                _cel_walk(extra, item, f"{path}.{key}", out)
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            _cel_walk(schema["items"], item, f"{path}[{index}]", out)


def cel_problems(resource: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    out: list[str] = []
    _cel_walk(root_schema(), resource, "", out, _ABSENT if old is None else old)
    return [p.lstrip(".") for p in out]


def admit(
    resource: dict[str, Any], old: dict[str, Any] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The defaulted resource and every schema and CEL refusal (empty: admitted).

    `old` is the stored object on an update (transition rules compare with it).
    """
    defaulted: dict[str, Any] = apply_defaults(root_schema(), resource)
    problems = schema_problems(defaulted)
    if not problems:
        # The apiserver only runs CEL on values that passed the schema's types.
        stored = None if old is None else apply_defaults(root_schema(), old)
        problems = cel_problems(defaulted, stored)
    return defaulted, problems


def _compile_all(node: dict[str, Any]) -> None:
    for rule in node.get("x-kubernetes-validations", []):
        _program(rule["rule"])
    for child in node.get("properties", {}).values():
        _compile_all(child)
    if "items" in node:
        _compile_all(node["items"])


# Compile every rule once at import: cel-python's parser raises the recursion limit the
# first time it runs, which hypothesis warns about when it happens inside a test.
_compile_all(root_schema())
