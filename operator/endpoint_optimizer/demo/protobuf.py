"""Kubernetes' protobuf encoding of the core kinds kubectl creates, read into JSON objects.

`kubectl create configmap` and `kubectl create namespace` send their object as
`application/vnd.kubernetes.protobuf` (no JSON fallback on a 415), so the demo's API
server reads that encoding for the kinds a person creates with kubectl: the envelope
(`k8s\\0` + runtime.Unknown) and ConfigMap, Namespace and their ObjectMeta, field
numbers as in k8s.io/api's generated.proto. Fields it does not know are skipped, as a
protobuf reader does; a kind it does not know is refused by name.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"


class ProtobufError(ValueError):
    """The body is not a Kubernetes protobuf object the demo reads."""


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # string | bytes | int | bool | map | map-bytes | message
    repeated: bool = False
    message: Mapping[int, Field] | None = None


_TYPE_META = {1: Field("apiVersion", "string"), 2: Field("kind", "string")}
_UNKNOWN = {
    1: Field("typeMeta", "message", message=_TYPE_META),
    2: Field("raw", "bytes"),
    3: Field("contentEncoding", "string"),
    4: Field("contentType", "string"),
}
_OWNER_REFERENCE = {
    1: Field("kind", "string"),
    3: Field("name", "string"),
    4: Field("uid", "string"),
    5: Field("apiVersion", "string"),
    6: Field("controller", "bool"),
    7: Field("blockOwnerDeletion", "bool"),
}
_OBJECT_META = {
    1: Field("name", "string"),
    2: Field("generateName", "string"),
    3: Field("namespace", "string"),
    5: Field("uid", "string"),
    6: Field("resourceVersion", "string"),
    7: Field("generation", "int"),
    11: Field("labels", "map"),
    12: Field("annotations", "map"),
    13: Field("ownerReferences", "message", repeated=True, message=_OWNER_REFERENCE),
    14: Field("finalizers", "string", repeated=True),
}
KINDS: Mapping[str, Mapping[int, Field]] = {
    "ConfigMap": {
        1: Field("metadata", "message", message=_OBJECT_META),
        2: Field("data", "map"),
        3: Field("binaryData", "map-bytes"),
        4: Field("immutable", "bool"),
    },
    "Namespace": {
        1: Field("metadata", "message", message=_OBJECT_META),
        2: Field("spec", "message", message={1: Field("finalizers", "string", repeated=True)}),
        3: Field("status", "message", message={1: Field("phase", "string")}),
    },
}


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if position >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, raw value) of every field in a message."""
    found: list[tuple[int, int, Any]] = []
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, position = _varint(data, position)
        elif wire == 1:
            value, position = data[position : position + 8], position + 8
        elif wire == 2:
            length, position = _varint(data, position)
            value, position = data[position : position + length], position + length
        elif wire == 5:
            value, position = data[position : position + 4], position + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        found.append((number, wire, value))
    return found


def _message(data: bytes, schema: Mapping[int, Field]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for number, _, raw in _fields(data):
        spec = schema.get(number)
        if spec is None:
            continue
        if spec.type in ("map", "map-bytes"):
            entry = {n: v for n, _, v in _fields(raw)}
            key = bytes(entry.get(1, b"")).decode()
            payload = bytes(entry.get(2, b""))
            text = (
                base64.b64encode(payload).decode() if spec.type == "map-bytes" else payload.decode()
            )
            result.setdefault(spec.name, {})[key] = text
            continue
        if spec.type == "string":
            value: Any = bytes(raw).decode()
        elif spec.type == "bytes":
            value = bytes(raw)
        elif spec.type == "int":
            value = int(raw)
        elif spec.type == "bool":
            value = bool(raw)
        else:
            assert spec.message is not None
            value = _message(bytes(raw), spec.message)
        if spec.repeated:
            result.setdefault(spec.name, []).append(value)
        elif value or spec.type == "message":
            # Go's JSON omits empty fields (omitempty) that its protobuf writes out.
            result[spec.name] = value
    return result


def decode(body: bytes) -> dict[str, Any]:
    """The object in a protobuf-encoded request body, as the JSON a client would send."""
    if not body.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf object (no k8s\\0 prefix)")
    envelope = _message(body[len(MAGIC) :], _UNKNOWN)
    type_meta = envelope.get("typeMeta", {})
    kind = str(type_meta.get("kind", ""))
    schema = KINDS.get(kind)
    if schema is None:
        raise ProtobufError(f"{kind or 'an object'} in protobuf: send it as JSON")
    obj = _message(envelope.get("raw", b""), schema)
    return {"apiVersion": type_meta.get("apiVersion", "v1"), "kind": kind, **obj}
