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

from endpoint_optimizer.crd import apply_defaults

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


def schema_problems(resource: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft4Validator(root_schema())
    problems = []
    for error in validator.iter_errors(resource):
        path = ".".join(str(p) for p in error.absolute_path)
        problems.append(f"{path}: {error.message}")
    return sorted(problems)


def _cel_walk(schema: dict[str, Any], value: Any, path: str, out: list[str]) -> None:
    for rule in schema.get("x-kubernetes-validations", []):
        result = _program(rule["rule"]).evaluate({"self": celpy.json_to_cel(value)})
        if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            detail = "" if isinstance(result, celpy.celtypes.BoolType) else f" ({result})"
            out.append(f"{path}: {rule['message']}{detail}")
    if isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name in value:
                _cel_walk(child, value[name], f"{path}.{name}", out)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                _cel_walk(extra, item, f"{path}.{key}", out)
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            _cel_walk(schema["items"], item, f"{path}[{index}]", out)


def cel_problems(resource: dict[str, Any]) -> list[str]:
    out: list[str] = []
    _cel_walk(root_schema(), resource, "", out)
    return [p.lstrip(".") for p in out]


def admit(resource: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The defaulted resource and every schema and CEL refusal (empty: admitted)."""
    defaulted: dict[str, Any] = apply_defaults(root_schema(), resource)
    problems = schema_problems(defaulted)
    if not problems:
        # The apiserver only runs CEL on values that passed the schema's types.
        problems = cel_problems(defaulted)
    return defaulted, problems
