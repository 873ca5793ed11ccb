"""Server-side printing: the Table that `kubectl get` asks for, as a real API server makes it.

kubectl asks for `application/json;as=Table;g=meta.k8s.io;v=v1` and prints the rows it
gets; columns are the server's. For a custom resource they are the CRD's
additionalPrinterColumns (a JSONPath per column; a `date` becomes an age, as the
apiextensions server does); for the core kinds the demo serves, the columns of the
API server's own printers (pkg/printers/internalversion).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from endpoint_optimizer.demo.kinds import Column, Kind

TABLE_MEDIA = "as=Table"
_NAME = Column(
    "Name", "string", format="name", description="Name must be unique within a namespace."
)
_AGE = Column("Age", "date", ".metadata.creationTimestamp")

# The core kinds' printers: (columns, cells(object, now)).
_EVENT_COLUMNS = (
    Column("Last Seen"),
    Column("Type"),
    Column("Reason"),
    Column("Object"),
    Column("Subobject", priority=1),
    Column("Source", priority=1),
    Column("Message"),
    Column("First Seen", priority=1),
    Column("Count", priority=1),
    Column("Name", priority=1),
)


def wants_table(accept: str) -> bool:
    return TABLE_MEDIA in accept.replace(" ", "")


def age(timestamp: Any, now: datetime) -> str | None:
    """Kubernetes' HumanDuration of the time since `timestamp` (RFC 3339), e.g. `42s`, `3m5s`."""
    if not isinstance(timestamp, str) or not timestamp:
        return None
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    seconds = int(max(0.0, (now - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


_STEP = re.compile(r"\.([A-Za-z0-9_-]+)|\[\?\(@\.([A-Za-z0-9_]+)==\"([^\"]*)\"\)\]|\[(\d+)\]")


def json_path(obj: Any, path: str) -> Any:
    """The value at a printer column's simple JSONPath (`.a.b`, `[0]`, `[?(@.k=="v")]`).

    The CRD's columns use no more than that; anything else is refused by name rather
    than answered wrongly.
    """
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    position, node = 0, obj
    while position < len(path):
        match = _STEP.match(path, position)
        if match is None:
            raise ValueError(f"unsupported JSONPath {path!r} at {path[position:]!r}")
        position = match.end()
        key, filter_key, filter_value, index = match.groups()
        if key is not None:
            node = node.get(key) if isinstance(node, Mapping) else None
        elif filter_key is not None:
            items = node if isinstance(node, list) else []
            node = next(
                (
                    i
                    for i in items
                    if isinstance(i, Mapping) and str(i.get(filter_key)) == filter_value
                ),
                None,
            )
        else:
            node = node[int(index)] if isinstance(node, list) and int(index) < len(node) else None
        if node is None:
            return None
    return node


def _cell(column: Column, value: Any, now: datetime) -> Any:
    """As the apiextensions server's cellForJSONValue: typed cells, dates as ages."""
    if value is None:
        return None
    if column.type == "string":
        return value if isinstance(value, str) else _text(value)
    if column.type == "date":
        return age(value, now)
    if column.type == "integer":
        return (
            int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        )
    if column.type == "number":
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if column.type == "boolean":
        return value if isinstance(value, bool) else None
    return None


def _text(value: Any) -> str:
    import json

    return (
        json.dumps(value, separators=(",", ":")) if isinstance(value, dict | list) else str(value)
    )


def columns_of(kind: Kind) -> tuple[Column, ...]:
    if kind.columns:
        return (_NAME, *kind.columns)
    if kind.plural == "events":
        return _EVENT_COLUMNS
    if kind.plural == "namespaces":
        return (_NAME, Column("Status", description="The phase of the namespace."), _AGE)
    if kind.plural == "configmaps":
        return (_NAME, Column("Data", "string"), _AGE)
    return (_NAME, Column("Created At", "date", ".metadata.creationTimestamp"))


def _event_cells(event: Mapping[str, Any], now: datetime) -> list[Any]:
    involved = event.get("involvedObject") or {}
    last = event.get("lastTimestamp") or event.get("eventTime") or ""
    first = event.get("firstTimestamp") or event.get("eventTime") or ""
    source = event.get("source") or {}
    count = int(event.get("count") or 1)
    last_seen = age(last, now) or "<unknown>"
    if count > 1:
        last_seen += f" (x{count} over {age(first, now) or '<unknown>'})"
    subobject = involved.get("fieldPath") or ""
    return [
        last_seen,
        event.get("type", ""),
        event.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        subobject,
        ", ".join(v for v in (source.get("component"), source.get("host")) if v)
        or event.get("reportingComponent", ""),
        str(event.get("message", "")).strip(),
        age(first, now) or "<unknown>",
        count,
        event.get("metadata", {}).get("name", ""),
    ]


def cells(kind: Kind, obj: Mapping[str, Any], now: datetime) -> list[Any]:
    metadata = obj.get("metadata") or {}
    if kind.columns:
        return [metadata.get("name", "")] + [
            _cell(column, json_path(obj, column.json_path), now) for column in kind.columns
        ]
    if kind.plural == "events":
        return _event_cells(obj, now)
    created = age(metadata.get("creationTimestamp"), now)
    if kind.plural == "namespaces":
        return [metadata.get("name", ""), (obj.get("status") or {}).get("phase", "Active"), created]
    if kind.plural == "configmaps":
        data = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
        return [metadata.get("name", ""), data, created]
    return [metadata.get("name", ""), metadata.get("creationTimestamp")]


def _row_object(obj: Mapping[str, Any], include: str) -> dict[str, Any]:
    if include == "Object":
        return dict(obj)
    if include == "None":
        return {}
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(obj.get("metadata") or {}),
    }


def table(
    kind: Kind,
    objects: Iterable[Mapping[str, Any]],
    *,
    resource_version: str,
    include_object: str = "Metadata",
    headers: bool = True,
    now: datetime | None = None,
) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table of `objects` with `kind`'s columns."""
    now = now or datetime.now(UTC)
    columns: Sequence[Column] = columns_of(kind)
    result: dict[str, Any] = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "rows": [
            {"cells": cells(kind, obj, now), "object": _row_object(obj, include_object)}
            for obj in objects
        ],
    }
    if headers:
        result["columnDefinitions"] = [
            {
                "name": c.name,
                "type": "string" if c.type == "date" else c.type,
                "format": c.format,
                "description": c.description or c.name,
                "priority": c.priority,
            }
            for c in columns
        ]
    return result
