"""Render the OptimizedEndpoint CRD and its reference docs from the pydantic models.

pydantic writes JSON Schema; Kubernetes wants a *structural* OpenAPI v3 schema: no
$ref, no anyOf over null, every node typed, no `additionalProperties: false` (the
apiserver prunes unknown fields instead), defaults only where they are valid. This
module converts one into the other, so crds/optimizedendpoint.yaml and
docs/crd-reference.md are never edited by hand (`endpoint-optimizer crd`, in
`endpoint_optimizer.generate`).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, NoDefault
from pydantic_core import core_schema

from endpoint_optimizer import GROUP, KIND, PLURAL, VERSION
from endpoint_optimizer.api import OptimizedEndpointSpec, OptimizedEndpointStatus

CRD_PATH = Path("crds/optimizedendpoint.yaml")
DOCS_PATH = Path("docs/crd-reference.md")

Schema = dict[str, Any]

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Endpoint", "type": "string", "jsonPath": ".spec.endpointName"},
    {
        "name": "Gain",
        "type": "number",
        "format": "float",
        "jsonPath": ".status.objectiveGain",
        "description": "Relative gain on the objective (0.18 = 18 % better)",
    },
    {
        "name": "TTFT-p99",
        "type": "string",
        "jsonPath": ".status.ttftP99Summary",
        "description": "Baseline → candidate TTFT p99",
    },
    {
        "name": "Acceptance",
        "type": "number",
        "format": "float",
        "jsonPath": ".status.candidate.acceptanceRate",
        "priority": 0,
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        # `kubectl get -o wide` only: what the pipeline does now, or how it ended (a
        # synthetic fallback is named here too, see pipeline/record.with_fallback_in_conditions).
        "name": "Message",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Progressing")].message',
        "priority": 1,
    },
]


class _FactoryDefaults(GenerateJsonSchema):
    """Emit defaults from default_factory too, so the apiserver fills nested defaults.

    A nested model's default becomes `{}`: the apiserver then applies that object's own
    property defaults, which is what pydantic does when it builds the default model.
    """

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            value = factory()  # type: ignore[call-arg]
            if isinstance(value, BaseModel):
                return {}
            return value
        return schema.get("default", NoDefault)


def _enum_max_length(values: list[Any]) -> int:
    # The CEL cost estimator charges string comparisons by maxLength; an enum without
    # one is costed as a string the size of a whole request.
    return max(len(str(v)) for v in values)


def _structural(node: Schema, defs: dict[str, Schema], nullable: bool = False) -> Schema:
    """Convert one pydantic JSON Schema node to a structural Kubernetes schema node."""
    node = copy.deepcopy(node)
    for key in ("title", "examples"):
        node.pop(key, None)

    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        merged = copy.deepcopy(target)
        merged.pop("title", None)
        extra_rules = node.pop("x-kubernetes-validations", [])
        merged.update(node)  # field description and default win over the class's
        if extra_rules:
            merged["x-kubernetes-validations"] = [
                *target.get("x-kubernetes-validations", []),
                *extra_rules,
            ]
        return _structural(merged, defs, nullable)

    if "allOf" in node and len(node["allOf"]) == 1:
        inner = node.pop("allOf")[0]
        return _structural({**inner, **node}, defs, nullable)

    if "anyOf" in node:
        options = node.pop("anyOf")
        non_null = [o for o in options if o.get("type") != "null"]
        if len(non_null) != 1:
            raise ValueError(f"cannot make a structural schema of anyOf {options}")
        if node.get("default", NoDefault) is None:
            node.pop("default")
        merged = {**non_null[0], **node}
        return _structural(merged, defs, nullable=len(non_null) != len(options))

    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "enum" in node:
        node.setdefault("type", "string")
        if node["type"] == "string":
            node.setdefault("maxLength", _enum_max_length(node["enum"]))

    if node.get("default", NoDefault) is None:
        node.pop("default")
    # OpenAPI 3.0 (like JSON Schema draft 4) spells exclusive bounds as booleans.
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(exclusive), int | float) and not isinstance(node[exclusive], bool):
            node[bound] = node[exclusive]
            node[exclusive] = True

    kind = node.get("type")
    if kind == "object":
        extra = node.pop("additionalProperties", None)
        if "properties" in node:
            node["properties"] = {
                name: _structural(child, defs) for name, child in node["properties"].items()
            }
            if "required" in node:
                node["required"] = sorted(node["required"])
        elif isinstance(extra, dict):
            node["additionalProperties"] = _structural(extra, defs)
        elif extra is True or extra is None:
            # A free-form map: the only place unknown fields are kept.
            node["x-kubernetes-preserve-unknown-fields"] = True
    elif kind == "array":
        node["items"] = _structural(node["items"], defs)
    elif kind is None and not node.get("x-kubernetes-preserve-unknown-fields"):
        raise ValueError(f"schema node without a type: {node}")

    if nullable:
        node["nullable"] = True
    return node


def model_schema(model: type[BaseModel], nullable_optional: bool = False) -> Schema:
    """The structural OpenAPI v3 schema of a pydantic model (camelCase)."""
    raw = model.model_json_schema(
        by_alias=True, mode="validation", schema_generator=_FactoryDefaults
    )
    defs = raw.pop("$defs", {})
    schema = _structural(raw, defs)
    if not nullable_optional:
        _strip_nullable(schema)
    return schema


def _strip_nullable(node: Schema) -> None:
    # A spec field is absent or set; null would only let `kubectl apply` store a value
    # that the model then reads as "unset". Status keeps nullable: kopf patches with null.
    node.pop("nullable", None)
    for child in node.get("properties", {}).values():
        _strip_nullable(child)
    if "items" in node:
        _strip_nullable(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        _strip_nullable(node["additionalProperties"])


def openapi_schema() -> Schema:
    """The CRD's openAPIV3Schema: apiVersion, kind, metadata, spec and status."""
    spec = model_schema(OptimizedEndpointSpec)
    status = model_schema(OptimizedEndpointStatus, nullable_optional=True)
    status["description"] = "Observed state, written by the operator."
    return {
        "type": "object",
        "description": "An LLM endpoint on SageMaker that the operator makes faster on the same "
        "GPU, rolling back anything that regresses.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }


def crd_manifest() -> Schema:
    """The whole CustomResourceDefinition as a dict."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": ["oe"],
                "categories": ["ml"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }


def render_crd() -> str:
    """The CRD as YAML, with a header saying where it comes from."""
    header = (
        "# Generated by `endpoint-optimizer crd -o crds/optimizedendpoint.yaml` from\n"
        "# operator/endpoint_optimizer/api/. Do not edit by hand.\n"
    )
    body = yaml.safe_dump(crd_manifest(), sort_keys=False, width=100, allow_unicode=True)
    return header + body


def apply_defaults(schema: Schema, value: Any) -> Any:
    """Prune nulls and fill defaults the way the apiserver does, on a copy.

    The apiserver drops a null field unless the schema says nullable, then applies
    defaults: so `maxModelLen: null` is stored as absent, `instanceCount: null` as 1.
    """
    value = copy.deepcopy(value)
    _default_into(schema, value)
    return value


def _default_into(schema: Schema, value: Any) -> None:
    if isinstance(value, dict):
        properties: dict[str, Schema] = schema.get("properties", {})
        for name, child in properties.items():
            if name in value and value[name] is None and not child.get("nullable"):
                del value[name]
            if name not in value and "default" in child:
                value[name] = copy.deepcopy(child["default"])
            if name in value:
                _default_into(child, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for item in value.values():
                _default_into(extra, item)
    elif isinstance(value, list) and "items" in schema:
        for item in value:
            _default_into(schema["items"], item)


# --------------------------------------------------------------------------- docs


def _type_text(node: Schema) -> str:
    kind = str(node.get("type", "any"))
    if kind == "array":
        return f"[]{_type_text(node['items'])}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map[string]{_type_text(node['additionalProperties'])}"
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    if node.get("format") == "date-time":
        return "time (RFC 3339)"
    return kind


def _constraints(node: Schema) -> str:
    bounds = [
        ("minimum", ">" if node.get("exclusiveMinimum") else "≥"),
        ("maximum", "<" if node.get("exclusiveMaximum") else "≤"),
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minItems", "items ≥"),
        ("maxItems", "items ≤"),
        ("maxProperties", "entries ≤"),
    ]
    parts = [f"{label} {node[key]}" for key, label in bounds if key in node and "enum" not in node]
    if "pattern" in node:
        # A `|` inside a Markdown table cell ends the cell, even inside backticks.
        parts.append("pattern `" + str(node["pattern"]).replace("|", "\\|") + "`")
    if node.get("x-kubernetes-list-type") == "set":
        parts.append("unique")
    return ", ".join(parts)


def _doc_rows(node: Schema, path: str, rows: list[str], rules: list[tuple[str, Schema]]) -> None:
    rules.extend((path, rule) for rule in node.get("x-kubernetes-validations", []))
    required = set(node.get("required", []))
    for name, child in node.get("properties", {}).items():
        child_path = f"{path}.{name}"
        default = child.get("default")
        default_text = "" if default is None else f"`{yaml.safe_dump(default).strip()}`"
        if default_text.endswith("\n...`"):
            default_text = default_text[:-5] + "`"
        description = str(child.get("description", "")).replace("|", "\\|").replace("\n", " ")
        rows.append(
            f"| `{child_path}` | {_type_text(child)} | {'yes' if name in required else ''} "
            f"| {default_text} | {_constraints(child)} | {description} |"
        )
        target = child
        if child.get("type") == "array":
            target = child["items"]
            child_path += "[]"
        elif isinstance(child.get("additionalProperties"), dict):
            target = child["additionalProperties"]
            child_path += "{}"
        _doc_rows(target, child_path, rows, rules)


def render_docs(appendix: Sequence[str] = ()) -> str:
    """docs/crd-reference.md: every field with type, default, bounds and description.

    `appendix`: Markdown lines placed before the printer columns (the technique x
    instance rules, which api does not import; see `endpoint_optimizer.generate`).
    """
    schema = openapi_schema()
    out = [
        "# OptimizedEndpoint reference",
        "",
        "Generated by `endpoint-optimizer crd --docs docs/crd-reference.md` from",
        "`operator/endpoint_optimizer/api/`; do not edit by hand.",
        "",
        f"`apiVersion: {GROUP}/{VERSION}`, `kind: {KIND}`, short name `oe`, namespaced.",
        "",
        "Units: durations are strings of number+unit (`ms`, `s`, `m`, `h`), e.g. `30s`, "
        "`5m`, `1h30m`; fractions are 0..1 (`0.05` = 5 %); traffic weights are integer "
        "percent; latencies in status are milliseconds.",
        "",
        "`objective` is an object: `metric` (`latency` = `e2eP50` | `ttftP99` | `itlP50` | "
        "`throughput` | `costPerMillionTokens`) says what better means "
        "and `minImprovement` (a fraction) says by how much the candidate must beat the "
        "baseline at `objective.concurrency` (unset: at every benchmark level).",
        "",
        "Rules that need the instance type (FP8 hardware, Neuron, TensorRT-LLM "
        "combinations, GPU counts) are checked by the operator before any AWS call "
        "(`endpoint_optimizer.sagemaker.matrix`); a refusal sets the Terminal condition.",
        "",
    ]
    for part in ("spec", "status"):
        rows: list[str] = []
        rules: list[tuple[str, Schema]] = []
        _doc_rows(schema["properties"][part], part, rows, rules)
        out += [
            f"## {part}",
            "",
            "| Field | Type | Required | Default | Bounds | Description |",
            "| --- | --- | --- | --- | --- | --- |",
            *rows,
            "",
        ]
        if rules:
            out += [
                f"### {part}: cross-field rules (CEL, checked at `kubectl apply`)",
                "",
                "| Where | Rule | Message |",
                "| --- | --- | --- |",
            ]
            for where, rule in rules:
                expression = str(rule["rule"]).replace("|", "\\|")
                message = str(rule["message"]).replace("|", "\\|")
                out.append(f"| `{where}` | `{expression}` | {message} |")
            out.append("")
    out += list(appendix)
    out += ["## Printer columns", "", "| Column | JSONPath |", "| --- | --- |"]
    out += [f"| {c['name']} | `{c['jsonPath']}` |" for c in PRINTER_COLUMNS]
    return "\n".join(out) + "\n"
