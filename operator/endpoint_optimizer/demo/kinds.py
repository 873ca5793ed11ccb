"""The kinds the demo's API server serves, and the documents kubectl reads about them.

kubectl learns what a server serves before it sends anything: discovery (`/api`,
`/apis`, per group-version resource lists, or one aggregated document) maps `oe` to
`optimizedendpoints.optimizer.dev/v1alpha1`, and the OpenAPI documents (`/openapi/v2`,
`/openapi/v3/...`) give `kubectl apply` the schemas it validates a manifest against.
A real API server generates both from its types and from each CRD; so does this
module: the OptimizedEndpoint's entries come from the CRD (api/crd.py: names, short
names, printer columns, the structural schema), the core kinds' from the small
schemas below, which keep the fields a person writes in a manifest.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
# What /version answers: the Kubernetes release the emulated API stands in for.
SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-kmock",
    "gitCommit": "",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23",
    "compiler": "gc",
    "platform": "linux/amd64",
}
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
# The query parameters of a write that kubectl looks for before it relies on them: with
# `fieldValidation` listed, `kubectl apply` asks the server to refuse unknown fields
# (as against a real server since 1.27) instead of validating on its own.
WRITE_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation")

Schema = dict[str, Any]


@dataclass(frozen=True)
class Column:
    """One column of `kubectl get` (a Table's column definition and how to fill it)."""

    name: str
    type: str = "string"
    json_path: str = ""
    format: str = ""
    description: str = ""
    priority: int = 0


@dataclass(frozen=True)
class Kind:
    """One resource the server serves: its names, its columns and its schema."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    schema: Schema
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    # Empty: the server's own printer for this kind (tables.py), else the CRD's columns.
    columns: tuple[Column, ...] = ()

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def definition(self) -> str:
        """The schema's name in the OpenAPI documents, as the API server names it."""
        if self.group == "":
            return f"io.k8s.api.core.{self.version}.{self.kind}"
        if self.group == "apiextensions.k8s.io":
            return (
                f"io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{self.version}.{self.kind}"
            )
        reversed_group = ".".join(reversed(self.group.split(".")))
        return f"{reversed_group}.{self.version}.{self.kind}"

    def base_path(self, namespace: str | None = None) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace is not None:
            return f"{root}/namespaces/{namespace}/{self.plural}"
        return f"{root}/{self.plural}"


def kind_from_crd(crd: Mapping[str, Any], version: Mapping[str, Any]) -> Kind:
    """The Kind a CRD version declares, as an API server derives it."""
    spec = crd["spec"]
    names = spec["names"]
    columns = tuple(
        Column(
            name=str(c["name"]),
            type=str(c.get("type", "string")),
            json_path=str(c["jsonPath"]),
            format=str(c.get("format", "")),
            description=str(c.get("description", "")),
            priority=int(c.get("priority", 0)),
        )
        for c in version.get("additionalPrinterColumns") or ()
    )
    if not columns:
        columns = (Column("Age", "date", ".metadata.creationTimestamp"),)
    return Kind(
        group=str(spec["group"]),
        version=str(version["name"]),
        plural=str(names["plural"]),
        kind=str(names["kind"]),
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        schema=copy.deepcopy(version.get("schema", {}).get("openAPIV3Schema", {})),
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        subresources=tuple(version.get("subresources") or ()),
        columns=columns,
    )


def _ref(name: str) -> Schema:
    return {"$ref": f"#/definitions/{name}"}


def _strings() -> Schema:
    return {"type": "object", "additionalProperties": {"type": "string"}}


def _object(description: str, properties: Mapping[str, Schema], **extra: Any) -> Schema:
    return {"type": "object", "description": description, "properties": dict(properties), **extra}


_OWNER_REFERENCE = _object(
    "An object this one depends on.",
    {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "name": {"type": "string"},
        "uid": {"type": "string"},
        "controller": {"type": "boolean"},
        "blockOwnerDeletion": {"type": "boolean"},
    },
    required=["apiVersion", "kind", "name", "uid"],
)
# ObjectMeta as a person writes it, and the fields the server fills in.
_OBJECT_META = _object(
    "Standard object metadata.",
    {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": _strings(),
        "annotations": _strings(),
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "ownerReferences": {"type": "array", "items": _ref(f"{META}.OwnerReference")},
        "uid": {"type": "string"},
        "resourceVersion": {"type": "string"},
        "generation": {"type": "integer", "format": "int64"},
        "creationTimestamp": {"type": "string", "format": "date-time"},
        "deletionTimestamp": {"type": "string", "format": "date-time"},
        "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
        "managedFields": {
            "type": "array",
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    },
)


def _top(kind: str, description: str, **properties: Schema) -> Schema:
    return _object(
        description,
        {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": _ref(f"{META}.ObjectMeta"),
            **properties,
        },
    )


CONFIG_MAP = _top(
    "ConfigMap",
    "Configuration data: the demo's eval sets.",
    data=_strings(),
    binaryData={"type": "object", "additionalProperties": {"type": "string", "format": "byte"}},
    immutable={"type": "boolean"},
)
SECRET = _top(
    "Secret",
    "Secret data: a model's Hugging Face token.",
    data={"type": "object", "additionalProperties": {"type": "string", "format": "byte"}},
    stringData=_strings(),
    type={"type": "string"},
    immutable={"type": "boolean"},
)
NAMESPACE = _top(
    "Namespace",
    "A scope for names.",
    spec=_object("", {"finalizers": {"type": "array", "items": {"type": "string"}}}),
    status=_object("", {"phase": {"type": "string"}}),
)
_OBJECT_REFERENCE = _object(
    "The object an Event is about.",
    {
        k: {"type": "string"}
        for k in ("apiVersion", "kind", "name", "namespace", "uid", "fieldPath", "resourceVersion")
    },
)
EVENT = _top(
    "Event",
    "A report of something that happened to an object.",
    involvedObject=_OBJECT_REFERENCE,
    reason={"type": "string"},
    message={"type": "string"},
    type={"type": "string"},
    count={"type": "integer", "format": "int32"},
    firstTimestamp={"type": "string", "format": "date-time"},
    lastTimestamp={"type": "string", "format": "date-time"},
    eventTime={"type": "string", "format": "date-time"},
    source=_object("", {"component": {"type": "string"}, "host": {"type": "string"}}),
    reportingComponent={"type": "string"},
    reportingInstance={"type": "string"},
    action={"type": "string"},
)
CUSTOM_RESOURCE_DEFINITION = _top(
    "CustomResourceDefinition",
    "A custom resource's names, versions and schema.",
    spec={"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    status={"type": "object", "x-kubernetes-preserve-unknown-fields": True},
)

CORE_KINDS: tuple[Kind, ...] = (
    Kind("", "v1", "namespaces", "Namespace", False, NAMESPACE, ("ns",), (), ("status",)),
    Kind("", "v1", "configmaps", "ConfigMap", True, CONFIG_MAP, ("cm",)),
    Kind("", "v1", "secrets", "Secret", True, SECRET),
    Kind("", "v1", "events", "Event", True, EVENT, ("ev",)),
    Kind(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        CUSTOM_RESOURCE_DEFINITION,
        ("crd", "crds"),
        ("api-extensions",),
        ("status",),
    ),
)


@dataclass
class Catalogue:
    """Every served kind, and the discovery and OpenAPI documents derived from them."""

    kinds: list[Kind] = field(default_factory=lambda: list(CORE_KINDS))

    def add(self, kind: Kind) -> None:
        self.kinds = [
            k
            for k in self.kinds
            if (k.group, k.version, k.plural) != (kind.group, kind.version, kind.plural)
        ] + [kind]

    def find(self, group: str, version: str, plural: str) -> Kind | None:
        return next(
            (k for k in self.kinds if (k.group, k.version, k.plural) == (group, version, plural)),
            None,
        )

    def groups(self) -> dict[str, list[str]]:
        """Named API groups (not the core group) and their versions, in registration order."""
        found: dict[str, list[str]] = {}
        for kind in self.kinds:
            if kind.group and kind.version not in found.setdefault(kind.group, []):
                found[kind.group].append(kind.version)
        return found

    # ----------------------------------------------------------------- discovery

    def api_versions(self) -> Schema:
        """`/api`: the core group's versions."""
        return {
            "kind": "APIVersions",
            "apiVersion": "v1",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
        }

    def group_list(self) -> Schema:
        """`/apis`: the named groups."""
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [self._group(name, versions) for name, versions in self.groups().items()],
        }

    def group(self, name: str) -> Schema | None:
        """`/apis/GROUP`."""
        versions = self.groups().get(name)
        if versions is None:
            return None
        return {"kind": "APIGroup", "apiVersion": "v1", **self._group(name, versions)}

    @staticmethod
    def _group(name: str, versions: Sequence[str]) -> Schema:
        entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"name": name, "versions": entries, "preferredVersion": entries[0]}

    def resource_list(self, group: str, version: str) -> Schema | None:
        """`/api/v1` or `/apis/GROUP/VERSION`: the resources of one group-version."""
        kinds = [k for k in self.kinds if (k.group, k.version) == (group, version)]
        if not kinds:
            return None
        resources: list[Schema] = []
        for kind in kinds:
            resources.append(
                {
                    "name": kind.plural,
                    "singularName": kind.singular,
                    "namespaced": kind.namespaced,
                    "kind": kind.kind,
                    "verbs": list(VERBS),
                    "shortNames": list(kind.short_names),
                    "categories": list(kind.categories),
                }
            )
            for sub in kind.subresources:
                resources.append(
                    {
                        "name": f"{kind.plural}/{sub}",
                        "singularName": "",
                        "namespaced": kind.namespaced,
                        "kind": kind.kind,
                        "verbs": ["get", "patch", "update"],
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    def aggregated(self, core: bool) -> Schema:
        """Aggregated discovery (apidiscovery.k8s.io/v2): `/api` (core) or `/apis` (named)."""
        groups = {"": ["v1"]} if core else self.groups()
        items = []
        for name, versions in groups.items():
            entries = []
            for version in versions:
                kinds = [k for k in self.kinds if (k.group, k.version) == (name, version)]
                entries.append(
                    {
                        "version": version,
                        "freshness": "Current",
                        "resources": [self._aggregated_resource(k) for k in kinds],
                    }
                )
            items.append({"metadata": {"name": name}, "versions": entries})
        return {
            "kind": "APIGroupDiscoveryList",
            "apiVersion": "apidiscovery.k8s.io/v2",
            "metadata": {},
            "items": items,
        }

    @staticmethod
    def _aggregated_resource(kind: Kind) -> Schema:
        response = {"group": kind.group, "version": kind.version, "kind": kind.kind}
        entry: Schema = {
            "resource": kind.plural,
            "responseKind": response,
            "scope": "Namespaced" if kind.namespaced else "Cluster",
            "singularResource": kind.singular,
            "verbs": list(VERBS),
        }
        if kind.short_names:
            entry["shortNames"] = list(kind.short_names)
        if kind.categories:
            entry["categories"] = list(kind.categories)
        if kind.subresources:
            entry["subresources"] = [
                {"subresource": sub, "responseKind": response, "verbs": ["get", "patch", "update"]}
                for sub in kind.subresources
            ]
        return entry

    # ----------------------------------------------------------------- OpenAPI

    def _definitions(self, kinds: Sequence[Kind]) -> dict[str, Schema]:
        definitions: dict[str, Schema] = {
            f"{META}.ObjectMeta": copy.deepcopy(_OBJECT_META),
            f"{META}.OwnerReference": copy.deepcopy(_OWNER_REFERENCE),
        }
        for kind in kinds:
            schema = copy.deepcopy(kind.schema)
            properties = schema.setdefault("properties", {})
            properties["metadata"] = _ref(f"{META}.ObjectMeta")
            properties.setdefault("apiVersion", {"type": "string"})
            properties.setdefault("kind", {"type": "string"})
            schema["type"] = "object"
            schema["x-kubernetes-group-version-kind"] = [
                {"group": kind.group, "version": kind.version, "kind": kind.kind}
            ]
            definitions[kind.definition] = schema
        return definitions

    @staticmethod
    def _paths(kinds: Sequence[Kind], ref: str) -> Schema:
        """A path per collection and per object, each with its operations' GVK."""
        paths: Schema = {}
        for kind in kinds:
            gvk = {"group": kind.group, "version": kind.version, "kind": kind.kind}
            response = {"200": {"description": "OK", "schema": {"$ref": ref + kind.definition}}}
            collection = kind.base_path("{namespace}" if kind.namespaced else None)
            for path, verbs in (
                (collection, ("get", "post")),
                (collection + "/{name}", ("get", "put", "patch", "delete")),
            ):
                paths[path] = {
                    verb: {
                        "operationId": f"{verb}{kind.kind}",
                        "parameters": [
                            {"name": name, "in": "query", "type": "string", "uniqueItems": True}
                            for name in WRITE_PARAMETERS
                            if verb in ("post", "put", "patch")
                        ],
                        "responses": response,
                        "x-kubernetes-action": verb,
                        "x-kubernetes-group-version-kind": gvk,
                    }
                    for verb in verbs
                }
        return paths

    def openapi_v2(self) -> Schema:
        """`/openapi/v2`: one Swagger 2.0 document for every kind."""
        return {
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
            "paths": self._paths(self.kinds, "#/definitions/"),
            "definitions": self._definitions(self.kinds),
        }

    def openapi_v3_index(self) -> Schema:
        """`/openapi/v3`: one document per group-version, each at a URL with its hash."""
        paths = {}
        for prefix in self._v3_prefixes():
            digest = hashlib.sha256(
                json.dumps(self.openapi_v3(prefix), sort_keys=True).encode()
            ).hexdigest()[:16]
            paths[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash={digest.upper()}"}
        return {"paths": paths}

    def _v3_prefixes(self) -> list[str]:
        prefixes = []
        for kind in self.kinds:
            prefix = f"apis/{kind.group}/{kind.version}" if kind.group else f"api/{kind.version}"
            if prefix not in prefixes:
                prefixes.append(prefix)
        return prefixes

    def openapi_v3(self, prefix: str) -> Schema | None:
        """`/openapi/v3/api/v1` or `/openapi/v3/apis/GROUP/VERSION`: OpenAPI 3.0 for one GV."""
        parts = prefix.strip("/").split("/")
        if parts[:1] == ["api"] and len(parts) == 2:
            group, version = "", parts[1]
        elif parts[:1] == ["apis"] and len(parts) == 3:
            group, version = parts[1], parts[2]
        else:
            return None
        kinds = [k for k in self.kinds if (k.group, k.version) == (group, version)]
        if not kinds:
            return None
        text = json.dumps(
            {
                "paths": self._paths(kinds, "#/components/schemas/"),
                "schemas": self._definitions(kinds),
            }
        ).replace('"#/definitions/', '"#/components/schemas/')
        converted = json.loads(text)
        for methods in converted["paths"].values():
            for operation in methods.values():
                schema = operation["responses"]["200"].pop("schema")
                operation["responses"]["200"]["content"] = {"application/json": {"schema": schema}}
                for parameter in operation["parameters"]:
                    parameter["schema"] = {"type": parameter.pop("type")}
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
            "paths": converted["paths"],
            "components": {"schemas": converted["schemas"]},
        }


def _resolve(schema: Mapping[str, Any], definitions: Mapping[str, Schema]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return definitions.get(ref.rsplit("/", 1)[-1], {})
    return schema


_JSON_TYPES: Mapping[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def field_problems(kind: Kind, obj: Any, *, patch: bool = False) -> list[str]:
    """What a real API server's strict field validation and schema check say of `obj`.

    Unknown fields (the apiserver's `strict decoding error`), wrong types, values outside
    an enum and, unless `obj` is a patch, missing required fields; each names the field.
    The CRD's CEL rules are not evaluated here: the operator reports what they would.
    """
    definitions = {
        f"{META}.ObjectMeta": _OBJECT_META,
        f"{META}.OwnerReference": _OWNER_REFERENCE,
    }
    root = copy.deepcopy(kind.schema)
    root.setdefault("properties", {})["metadata"] = _ref(f"{META}.ObjectMeta")
    problems: list[str] = []

    def walk(schema: Mapping[str, Any], value: Any, path: str) -> None:
        schema = _resolve(schema, definitions)
        if value is None:
            if not (patch or schema.get("nullable")):
                problems.append(f"{path}: Invalid value: null: must not be null")
            return
        expected = schema.get("type")
        allowed = _JSON_TYPES.get(str(expected))
        if schema.get("x-kubernetes-int-or-string"):
            allowed = (int, str)
        if allowed is not None and (
            not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed)
        ):
            problems.append(
                f"{path}: Invalid value: {type(value).__name__}: {path} in body must be of "
                f"type {expected}"
            )
            return
        if "enum" in schema and value not in schema["enum"]:
            supported = ", ".join(json.dumps(v) for v in schema["enum"])
            problems.append(
                f"{path}: Unsupported value: {json.dumps(value)}: supported values: {supported}"
            )
        if isinstance(value, dict):
            properties = schema.get("properties")
            extra = schema.get("additionalProperties")
            if not patch:
                for name in schema.get("required", []):
                    if name not in value:
                        problems.append(f"{path}.{name}: Required value")
            for key, item in value.items():
                if isinstance(properties, Mapping) and key in properties:
                    walk(properties[key], item, f"{path}.{key}")
                elif isinstance(extra, Mapping):
                    walk(extra, item, f"{path}.{key}")
                elif properties is not None and not schema.get(
                    "x-kubernetes-preserve-unknown-fields"
                ):
                    problems.append(f'unknown field "{path}.{key}"'.replace('".', '"'))
        elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
            for index, item in enumerate(value):
                walk(schema["items"], item, f"{path}[{index}]")

    if isinstance(obj, dict):
        for key, item in obj.items():
            if key in ("apiVersion", "kind"):
                continue
            child = root["properties"].get(key)
            if child is None:
                problems.append(f'unknown field "{key}"')
            else:
                walk(child, item, key)
    return problems
