"""Emulated Kubernetes for the demo and the tests: KMock on 127.0.0.1 and the real operator.

Kubernetes is KMock's `KubernetesEmulator` (real API paths, lists, watch streams) run
in a background thread with its own event loop, so the demo and the tests alike can
talk to it over real HTTP while `endpoint-optimizer run` talks to it from another
process. The emulator is extended where kopf, the operator or kubectl depend on what a real API
server does and KMock leaves out: `metadata.uid`, `metadata.generation` (bumped when
the spec changes), `metadata.resourceVersion` (a list's too, and a watch from it sends
only what changed after it) and `creationTimestamp`; field and label selectors (so
`kubectl describe` shows the object's own Events); discovery with short names and the
OpenAPI documents `kubectl apply` validates against (kinds.py); the Tables `kubectl get`
prints (tables.py).

`Cluster` is a small kubectl: apply, patch, annotate, get, delete, and `wait_for` a
condition with a deadline (never a guessed sleep).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp.web
import kmock
import kmock._internal.parsing as kmock_parsing
import yaml

from endpoint_optimizer import GROUP, KIND, PLURAL, VERSION
from endpoint_optimizer.demo import protobuf
from endpoint_optimizer.demo.kinds import (
    AGGREGATED,
    SERVER_VERSION,
    Catalogue,
    Kind,
    field_problems,
    kind_from_crd,
)
from endpoint_optimizer.demo.tables import table, wants_table

_ALL_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}


def load_crd() -> dict[str, Any]:
    """The project's CRD, generated from api.py (the same document as crds/)."""
    from endpoint_optimizer.api.crd import crd_manifest

    return copy.deepcopy(crd_manifest())


_kmock_parse_path = kmock_parsing.parse_path


def _parse_path(path: str) -> kmock_parsing.ParsedPath:
    """kmock 0.8 reads `/api/v1/namespaces[/NAME]` as a namespace prefix and answers 500.

    kopf lists and watches namespaces at start, so the harness reads those two paths
    as the cluster-scoped `namespaces` resource and leaves every other path to kmock.
    """
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and len(parts) <= 4:
        return kmock_parsing.ParsedPath(
            group="", version="v1", plural="namespaces", name=parts[3] if len(parts) == 4 else None
        )
    parsed: kmock_parsing.ParsedPath = _kmock_parse_path(path)
    return parsed


kmock_parsing.parse_path = _parse_path


class ApiServer(kmock.KubernetesEmulator):
    """KMock's emulator plus what a real API server does that kopf and kubectl rely on."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._revision = 0
        self.catalogue = Catalogue()

    async def _handle(self, request: kmock.Request) -> Any:
        try:
            return await self._serve(request)
        finally:
            self._forget(request)

    def _forget(self, request: kmock.Request) -> None:
        """Drop a served request from KMock's request history: it keeps only those in flight.

        KMock records every request it serves, and to route a new one it walks that whole
        history once per reaction, looking for the request by identity (`request in
        view`), with the reaction's criteria applied to every entry on the way. The cost
        of a request grew with the number served before it: in a long e2e run (an
        operator's watch events and status patches and a test's polling, a few thousand
        requests) the emulator came to take most of the CPU of the process it shares
        with the sandbox, and the sandbox's serving slowed under the benchmark it served.
        Nothing here reads the history, and only a request in flight is ever looked for.
        """
        history: list[kmock.Request] = self._requests
        for index in range(len(history) - 1, -1, -1):
            if history[index] is request:
                del history[index]
                return

    async def _serve(self, request: kmock.Request) -> Any:
        if request.method == "GET" and (served := self._document(request)) is not None:
            return served
        if request.headers.get("Content-Type", "").startswith(protobuf.MEDIA_TYPE):
            try:
                decoded = protobuf.decode(request.body)
            except protobuf.ProtobufError as exc:
                return _status(415, "UnsupportedMediaType", str(exc))
            # kmock parsed the body as JSON (and found none); its Request is frozen.
            object.__setattr__(request, "data", decoded)
        if request.action == kmock.action.WATCH and request.resource is not None:
            return await self._stream(request)
        if request.headers.get("Content-Type", "").startswith(APPLY_PATCH):
            self._server_side_apply(request)
        if (refused := self._validate(request)) is not None:
            return refused
        if request.action == kmock.action.DELETE and request.resource and request.name:
            # A delete that only marks the object (finalizers) changes it: a new revision,
            # so a watch from an older resourceVersion still sends it.
            key = (request.resource, request.namespace, request.name)
            if key in self.objects and not self.objects[key].deleted:
                self._revision += 1
                self.objects[key].patch({"metadata": {"resourceVersion": str(self._revision)}})
        if request.resource is not None and isinstance(request.data, dict):
            self._revision += 1
            if request.headers.get("Content-Type", "").startswith(STRATEGIC_MERGE):
                request.data.update(_without_directives(request.data))
            metadata = request.data.setdefault("metadata", {})
            if request.action == kmock.action.CREATE:
                self._complete(request, metadata)
            elif request.action == kmock.action.UPDATE and request.name is not None:
                metadata["resourceVersion"] = str(self._revision)
                key = (request.resource, request.namespace, request.name)
                if request.subresource is None and "spec" in request.data and key in self.objects:
                    current = self.objects[key]
                    if not current.deleted:
                        raw = current.raw
                        merged = _merge(raw.get("spec", {}), request.data["spec"])
                        if merged != raw.get("spec", {}):
                            generation = int(raw.get("metadata", {}).get("generation", 1))
                            metadata["generation"] = generation + 1
                if request.subresource == "status":
                    # A real server ignores everything but status on the status subresource.
                    for extra in [k for k in request.data if k not in ("status", "metadata")]:
                        del request.data[extra]
                    request.data["metadata"] = {"resourceVersion": metadata["resourceVersion"]}
        return await super()._handle(request)

    def _server_side_apply(self, request: kmock.Request) -> None:
        """`kubectl apply --server-side`: the applied object, created when it is new.

        A real server tracks which manager owns which field; the demo has one person
        applying, so the applied fields are merged in (or the object is created).
        """
        with contextlib.suppress(yaml.YAMLError):
            object.__setattr__(request, "data", yaml.safe_load(request.body.decode()))
        if request.resource is None or request.name is None:
            return
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            object.__setattr__(request, "action", kmock.action.CREATE)

    def _validate(self, request: kmock.Request) -> aiohttp.web.Response | None:
        """Field validation as the request asks for it (kubectl asks for Strict)."""
        mode = request.params.get("fieldValidation", "Ignore")
        kind = self._kind(request)
        if mode == "Ignore" or kind is None or request.subresource is not None:
            return None
        if request.action not in (kmock.action.CREATE, kmock.action.UPDATE):
            return None
        if not isinstance(request.data, dict):
            return None
        problems = field_problems(kind, request.data, patch=request.action == kmock.action.UPDATE)
        if not problems or mode == "Warn":
            return None
        name = request.name or (request.data.get("metadata") or {}).get("name", "")
        unknown = [p for p in problems if p.startswith("unknown field")]
        if unknown:
            return _status(
                400,
                "BadRequest",
                f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
                f"strict decoding error: {', '.join(unknown)}",
            )
        causes = [
            {"reason": "FieldValueInvalid", "field": p.split(":", 1)[0], "message": p}
            for p in problems
        ]
        details = {"name": name, "group": kind.group, "kind": kind.kind, "causes": causes}
        return _status(
            422,
            "Invalid",
            f'{kind.kind}.{kind.group or "core"} "{name}" is invalid: ' + "; ".join(problems),
            details,
        )

    def _complete(self, request: kmock.Request, metadata: dict[str, Any]) -> None:
        """What the server fills in on create: names, uid, timestamps, kind and apiVersion."""
        if "name" not in metadata and "generateName" in metadata:
            metadata["name"] = metadata["generateName"] + uuid.uuid4().hex[:8]
        metadata.setdefault("uid", str(uuid.uuid4()))
        metadata.setdefault("generation", 1)
        metadata.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        if request.namespace and "namespace" not in metadata:
            metadata["namespace"] = request.namespace
        metadata["resourceVersion"] = str(self._revision)
        kind = self._kind(request)
        if kind is not None:
            request.data.setdefault("apiVersion", kind.group_version)
            request.data.setdefault("kind", kind.kind)
            if kind.plural == "namespaces":
                request.data.setdefault("status", {}).setdefault("phase", "Active")

    def _kind(self, request: kmock.Request) -> Kind | None:
        resource = request.resource
        if resource is None:
            return None
        return self.catalogue.find(
            str(resource.group or ""), str(resource.version or ""), str(resource.plural or "")
        )

    def _document(self, request: kmock.Request) -> Any:
        """Discovery and OpenAPI, as kubectl asks for them; None for everything else."""
        path = "/" + request.url.path.strip("/")
        accept = request.headers.get("Accept", "")
        catalogue = self.catalogue
        parts = path.strip("/").split("/")
        document: dict[str, Any] | None = None
        content_type = "application/json"
        if path == "/version":
            document = dict(SERVER_VERSION)
        elif path in ("/api", "/apis"):
            if "as=APIGroupDiscoveryList" in accept and "v=v2" in accept:
                document, content_type = catalogue.aggregated(core=path == "/api"), AGGREGATED
            else:
                document = catalogue.api_versions() if path == "/api" else catalogue.group_list()
        elif parts[0] == "api" and len(parts) == 2:
            document = catalogue.resource_list("", parts[1])
        elif parts[0] == "apis" and len(parts) == 2:
            document = catalogue.group(parts[1])
        elif parts[0] == "apis" and len(parts) == 3:
            document = catalogue.resource_list(parts[1], parts[2])
        elif path == "/openapi/v2":
            if "json" not in accept and "*/*" not in accept:
                return _status(406, "NotAcceptable", "only application/json is served")
            document = catalogue.openapi_v2()
        elif path == "/openapi/v3":
            document = catalogue.openapi_v3_index()
        elif path.startswith("/openapi/v3/"):
            document = catalogue.openapi_v3(path.removeprefix("/openapi/v3/"))
        else:
            return None
        if document is None:
            return _status(
                404, "NotFound", f"the server could not find the requested resource {path}"
            )
        return aiohttp.web.Response(
            text=json.dumps(document), headers={"Content-Type": content_type}
        )

    def _matching(self, request: kmock.Request) -> list[dict[str, Any]]:
        """The live objects a list or watch request selects (namespace, name, selectors)."""
        fields = _selector(request.params.get("fieldSelector", ""))
        labels = _selector(request.params.get("labelSelector", ""))
        found = []
        for (resource, namespace, name), obj in list(self.objects.items()):
            if obj.deleted or resource != request.resource:
                continue
            if request.namespace is not None and namespace != request.namespace:
                continue
            if request.name is not None and name != request.name:
                continue
            raw: dict[str, Any] = obj.raw
            if _selects(fields, _field_reader(raw)) and _selects(labels, _label_reader(raw)):
                found.append(raw)
        return found

    async def _serve_list(self, request: kmock.Request) -> Any:
        kind = self._kind(request)
        if kind is None:
            return await super()._serve_list(request)
        async with self._lock:
            objects = self._matching(request)
        version = str(self._revision)
        if wants_table(request.headers.get("Accept", "")):
            return table(
                kind,
                objects,
                resource_version=version,
                include_object=request.params.get("includeObject", "Metadata"),
            )
        return {
            "apiVersion": kind.group_version,
            "kind": f"{kind.kind}List",
            "metadata": {"resourceVersion": version},
            "items": objects,
        }

    async def _serve_fetch(self, request: kmock.Request) -> Any:
        kind = self._kind(request)
        found: dict[str, Any] = await super()._serve_fetch(request)  # type: ignore[assignment]
        if kind is not None and wants_table(request.headers.get("Accept", "")):
            return table(
                kind,
                [found],
                resource_version=str(self._revision),
                include_object=request.params.get("includeObject", "Metadata"),
            )
        return found

    async def _stream(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """A watch as a real server streams it: JSON lines, `Content-Type: application/json`.

        (kmock streams `application/octet-stream`, which kubectl refuses to decode.)
        """
        raw = request._raw_request
        assert raw is not None
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        with contextlib.suppress(ConnectionError):
            async for frame in self._watch_frames(request):
                await response.write(json.dumps(frame).encode() + b"\n")
        return response

    async def _watch_frames(self, request: kmock.Request) -> AsyncIterator[dict[str, Any]]:
        """Events after the request's resourceVersion, selected and (for kubectl) as Tables."""
        kind = self._kind(request)
        as_table = kind is not None and wants_table(request.headers.get("Accept", ""))
        include = request.params.get("includeObject", "Metadata")
        since = _revision_of(request.params.get("resourceVersion"))
        fields = _selector(request.params.get("fieldSelector", ""))
        headers = True

        def frame(event: Mapping[str, Any]) -> dict[str, Any]:
            nonlocal headers
            if not as_table or kind is None:
                return dict(event)
            converted = table(
                kind,
                [event["object"]],
                resource_version=str(
                    event["object"].get("metadata", {}).get("resourceVersion", "")
                ),
                include_object=include,
                headers=headers,
            )
            headers = False
            return {"type": event["type"], "object": converted}

        async with self._lock:
            initial = [
                obj
                for obj in self._matching(request)
                if since is None
                or (_revision_of(obj.get("metadata", {}).get("resourceVersion")) or since + 1)
                > since
            ]
        for obj in initial:
            yield frame({"type": "ADDED", "object": obj})
        assert request.resource is not None
        async for event in self._buses[request.resource]:
            obj = event.get("object", {})
            metadata = obj.get("metadata", {})
            if request.namespace is not None and metadata.get("namespace") != request.namespace:
                continue
            if request.name is not None and metadata.get("name") != request.name:
                continue
            if not _selects(fields, _field_reader(obj)):
                continue
            yield frame(event)

    async def _render_error(self, exc: Exception) -> Any:
        # A failed JSON-patch `test` (kopf's optimistic lock on resourceVersion) is a 422
        # on a real server, which kopf retries on its next cycle; kmock answers 500, which
        # kopf retries with the same stale test for about a minute.
        if type(exc).__name__ in ("JsonPatchTestFailed", "JsonPatchConflict"):
            exc = kmock.KubernetesError(status=422, reason="Invalid", message=str(exc))
        return await super()._render_error(exc)


STRATEGIC_MERGE = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch"


def _without_directives(patch: Any) -> Any:
    """A strategic merge patch less its `$`-directives: what kubectl sends for core kinds.

    The demo's core kinds (ConfigMaps, Namespaces) have maps and plain lists only, where
    a strategic merge is a JSON merge; the directives only order or retain list keys.
    """
    if isinstance(patch, dict):
        return {k: _without_directives(v) for k, v in patch.items() if not k.startswith("$")}
    return patch


def _status(
    code: int, reason: str, message: str, details: Mapping[str, Any] | None = None
) -> aiohttp.web.Response:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = dict(details)
    return aiohttp.web.Response(
        text=json.dumps(body), status=code, headers={"Content-Type": "application/json"}
    )


def _revision_of(value: Any) -> int | None:
    try:
        revision = int(str(value))
    except (TypeError, ValueError):
        return None
    return revision if revision > 0 else None


Selector = list[tuple[str, str, str | None]]


def _selector(text: str) -> Selector:
    """`a=b,c!=d,e` (equality-based field and label selectors): (key, operator, value)."""
    terms: Selector = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            terms.append((key.strip(), "!=", value.strip()))
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            terms.append((key.strip(), "=", value.strip()))
        elif term.startswith("!"):
            terms.append((term[1:].strip(), "absent", None))
        else:
            terms.append((term, "present", None))
    return terms


def _selects(terms: Selector, value_of: Callable[[str], Any]) -> bool:
    for key, operator, wanted in terms:
        value = value_of(key)
        text = None if value is None else str(value)
        if operator == "=" and (text or "") != wanted:
            return False
        if operator == "!=" and (text or "") == wanted:
            return False
        if operator == "present" and value is None:
            return False
        if operator == "absent" and value is not None:
            return False
    return True


def _field_reader(obj: Mapping[str, Any]) -> Callable[[str], Any]:
    """The value at a field selector's dotted path (`involvedObject.name`) of `obj`."""

    def read(path: str) -> Any:
        node: Any = obj
        for key in path.split("."):
            node = node.get(key) if isinstance(node, Mapping) else None
        return node

    return read


def _label_reader(obj: Mapping[str, Any]) -> Callable[[str], Any]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return lambda key: labels.get(key)


def _merge(base: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386), to tell whether a spec patch changes anything."""
    if not isinstance(patch, dict):
        return patch
    result = dict(base) if isinstance(base, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


class EmulatorThread:
    """Runs the emulator and its HTTP server in a thread with its own event loop."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="kmock")
        self._stack = contextlib.AsyncExitStack()
        self.emulator: ApiServer | None = None
        self.url = ""

    def start(self) -> ApiServer:
        self._thread.start()
        emulator: ApiServer = self._call(self._start())
        return emulator

    def _call(self, coro: Any, timeout: float = 10.0) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    async def _start(self) -> ApiServer:
        emulator = await self._stack.enter_async_context(ApiServer())
        server = await self._stack.enter_async_context(kmock.Server(emulator, host="127.0.0.1"))
        self.emulator = emulator
        self.url = str(server.url).rstrip("/")
        return emulator

    def register(self, crd: Mapping[str, Any]) -> None:
        """Declare the core kinds kopf and kubectl need and the CRD's kind (discovery too)."""
        assert self.emulator is not None
        catalogue = self.emulator.catalogue
        for version in crd["spec"]["versions"]:
            catalogue.add(kind_from_crd(crd, version))
        resources = self.emulator.resources
        for kind in catalogue.kinds:
            resources[f"{kind.group_version}/{kind.plural}"] = kmock.ResourceInfo(
                kind=kind.kind,
                singular=kind.singular,
                namespaced=kind.namespaced,
                verbs=_ALL_VERBS,
                shortnames=set(kind.short_names),
                categories=set(kind.categories),
                subresources=set(kind.subresources),
            )

    def stop(self) -> list[Exception]:
        errors: list[Exception] = []
        with contextlib.suppress(Exception):
            self._call(self._stop(errors))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        return errors

    async def _stop(self, errors: list[Exception]) -> None:
        try:
            await self._stack.aclose()
        except Exception as exc:  # the emulator re-raises what it served as 500s
            errors.append(exc)


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status


@dataclass
class Cluster:
    """A tiny kubectl over real HTTP against the emulator."""

    url: str
    group: str = GROUP
    version: str = VERSION
    plural: str = PLURAL

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, exc.read().decode()) from None
        return json.loads(text) if text else None

    def path(self, namespace: str, name: str | None = None, sub: str | None = None) -> str:
        path = f"/apis/{self.group}/{self.version}/namespaces/{namespace}/{self.plural}"
        if name is not None:
            path += f"/{name}"
        if sub is not None:
            path += f"/{sub}"
        return path

    def create_configmap(self, namespace: str, name: str, data: Mapping[str, str]) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": dict(data),
        }
        self.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", body)

    def create_namespace(self, namespace: str) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        self.request("POST", "/api/v1/namespaces", body)

    def create(self, namespace: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": f"{self.group}/{self.version}",
            "kind": KIND,
            "metadata": {"name": name, "namespace": namespace},
            "spec": dict(spec),
        }
        created: dict[str, Any] = self.request("POST", self.path(namespace), body)
        return created

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self.request("GET", self.path(namespace, name))
        return obj

    def exists(self, namespace: str, name: str) -> bool:
        try:
            self.get(namespace, name)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def patch(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        patched: dict[str, Any] = self.request(
            "PATCH",
            self.path(namespace, name),
            dict(patch),
            content_type="application/merge-patch+json",
        )
        return patched

    def patch_spec(self, namespace: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        return self.patch(namespace, name, {"spec": dict(spec)})

    def annotate(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        self.patch(namespace, name, {"metadata": {"annotations": dict(annotations)}})

    def delete(self, namespace: str, name: str) -> None:
        self.request("DELETE", self.path(namespace, name))

    def events(self, namespace: str) -> list[dict[str, Any]]:
        listing = self.request("GET", f"/api/v1/namespaces/{namespace}/events")
        return list(listing.get("items", []))

    def wait_for(
        self,
        namespace: str,
        name: str,
        predicate: Callable[[dict[str, Any]], bool],
        *,
        timeout: float = 60.0,
        what: str = "condition",
        on_timeout: Callable[[], str] | None = None,
    ) -> dict[str, Any]:
        """Poll until `predicate(obj)` holds; at the deadline fail with the last status."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                last = self.get(namespace, name)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                last = {}
            if last and predicate(last):
                return last
            time.sleep(0.05)
        detail = on_timeout() if on_timeout is not None else ""
        raise AssertionError(
            f"{namespace}/{name}: {what} not reached within {timeout}s; "
            f"last status: {json.dumps(last.get('status', {}), indent=1)[:3000]}\n{detail}"
        )

    def wait_for_phase(
        self, namespace: str, name: str, phases: str | set[str], **kwargs: Any
    ) -> dict[str, Any]:
        wanted = {phases} if isinstance(phases, str) else phases
        return self.wait_for(
            namespace,
            name,
            lambda obj: obj.get("status", {}).get("phase") in wanted,
            what=f"phase in {sorted(wanted)}",
            **kwargs,
        )

    def wait_gone(
        self,
        namespace: str,
        name: str,
        *,
        timeout: float = 60.0,
        on_timeout: Callable[[], str] | None = None,
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.exists(namespace, name):
                return
            time.sleep(0.05)
        detail = on_timeout() if on_timeout is not None else ""
        raise AssertionError(f"{namespace}/{name} still exists after {timeout}s\n{detail}")


def condition(obj: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions", []):
        if cond.get("type") == type_:
            return dict(cond)
    return None


def write_kubeconfig(url: str, directory: Path) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kmock", "cluster": {"server": url}}],
        "users": [{"name": "tester", "user": {"token": "kmock-test-token"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "tester"}}],
        "current-context": "kmock",
    }
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class OperatorProcess:
    """`endpoint-optimizer run` as a real subprocess, with its log kept for failure reports."""

    kubeconfig: Path
    namespace: str
    aws_endpoint_url: str | None
    log_path: Path
    extra_env: Mapping[str, str] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("AWS_", "KUBECONFIG", "ENDPOINT_OPTIMIZER_"))
        }
        env.update(
            {
                "KUBECONFIG": str(self.kubeconfig),
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true",
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.aws_endpoint_url is not None:
            env["AWS_ENDPOINT_URL"] = self.aws_endpoint_url
        env.update(self.extra_env)
        command = [
            sys.executable,
            "-m",
            "endpoint_optimizer.cli",
            "run",
            "--namespace",
            self.namespace,
            *self.extra_args,
        ]
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def log_tail(self, lines: int = 60) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: a crash, no cleanup (issue 7's restart tests)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


@contextlib.contextmanager
def running_cluster() -> Iterator[tuple[EmulatorThread, Cluster]]:
    """The emulator with the CRD registered; yields it and a client; stops it after."""
    thread = EmulatorThread()
    thread.start()
    crd = load_crd()
    thread.register(crd)
    cluster = Cluster(thread.url)
    cluster.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    try:
        yield thread, cluster
    finally:
        thread.stop()


def tempdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="eo-demo-"))
