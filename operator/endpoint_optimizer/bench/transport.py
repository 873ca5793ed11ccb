"""How a shard's plan reaches its pod and its result comes back: ConfigMaps, bounded.

The plan (targets, settings, prompts, the split and the start barrier) is one ConfigMap
the coordinator writes and every shard pod reads. Each shard writes its `ShardResult`
back as ConfigMaps of its own: the result's JSON, compressed with zlib, in `binaryData`.
A ConfigMap holds at most 1 MiB (data and binaryData together), so a compressed result
larger than `PART_BYTES` is split over several ConfigMaps ("parts", numbered, each
labelled with the run, the shard and the part count) that the coordinator joins before
decompressing. Raw samples, not histograms: the merge stays exact (bench.shards). For
scale: a request of 256 output tokens carries about 770 floats of per-token timings, about
16 KiB of JSON and 5 KiB compressed (timings do not compress well), so a shard of 1,000
such requests is about 5 MB in 7 parts.

While a shard runs, where the plan asks for it (`progress_interval_s`), it also keeps one
small ConfigMap, `<run>-s<i>-progress`, with the count of measured requests it has
finished, rewritten at that interval from a thread of its own (the client blocks; the
benchmark's event loop never waits on the API server). The coordinator sums them to show
a level on pods moving, not only begun and done. Progress is information, never evidence:
a write that fails is logged and the shard goes on, and no verdict reads it.

The pods talk to the API server with the `kubernetes` client, in-cluster (the
operator's ServiceAccount token) or from KUBECONFIG, as controller/secrets.py does:
`get` on the plan, `create` of its result parts, `create` and `patch` of its progress.
Nothing else.
"""

from __future__ import annotations

import base64
import os
import threading
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from endpoint_optimizer.bench.shards import ShardPlan, ShardResult
from endpoint_optimizer.logs import get_logger

log = get_logger(__name__)

# ConfigMaps are refused above 1 MiB (1,048,576 bytes of keys and values). The API server
# counts binaryData decoded, but the request carries it base64 (4/3 larger): a part of
# 700 KiB keeps even the JSON request under 1 MiB, with room for the object's metadata.
CONFIGMAP_LIMIT = 1024 * 1024
PART_BYTES = 700 * 1024
RESULT_KEY = "result.json.zlib"
PLAN_KEY = "plan.json"
LABEL_RUN = "optimizer.dev/bench-run"
LABEL_SHARD = "optimizer.dev/bench-shard"
ANNOTATION_PARTS = "optimizer.dev/bench-parts"
ANNOTATION_PART = "optimizer.dev/bench-part"
LABEL_PROGRESS = "optimizer.dev/bench-progress"
PROGRESS_KEY = "done"


class TransportError(ValueError):
    """A plan or a result that cannot be read back; the message says which and why."""


def plan_of(text: str) -> ShardPlan:
    try:
        return ShardPlan.model_validate_json(text)
    except ValueError as exc:
        raise TransportError(f"the shard plan cannot be read: {exc}") from exc


def encode_result(result: ShardResult) -> list[bytes]:
    """The result's compressed JSON in parts of at most PART_BYTES."""
    packed = zlib.compress(result.model_dump_json(by_alias=True).encode(), 6)
    return [packed[i : i + PART_BYTES] for i in range(0, len(packed), PART_BYTES)] or [b""]


def decode_result(parts: Sequence[bytes]) -> ShardResult:
    try:
        return ShardResult.model_validate_json(zlib.decompress(b"".join(parts)))
    except (zlib.error, ValueError) as exc:
        raise TransportError(f"a shard result cannot be read: {exc}") from exc


def part_name(run: str, shard: int, part: int) -> str:
    return f"{run}-s{shard}-p{part}"


def result_configmaps(
    run: str, namespace: str, result: ShardResult, owner_references: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The ConfigMaps that carry `result` of shard `result.shard` of run `run`."""
    parts = encode_result(result)
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": part_name(run, result.shard, k),
                "namespace": namespace,
                "labels": {
                    "app.kubernetes.io/managed-by": "endpoint-optimizer",
                    LABEL_RUN: run,
                    LABEL_SHARD: str(result.shard),
                },
                "annotations": {ANNOTATION_PARTS: str(len(parts)), ANNOTATION_PART: str(k)},
                "ownerReferences": [dict(ref) for ref in owner_references],
            },
            "binaryData": {RESULT_KEY: base64.b64encode(part).decode()},
        }
        for k, part in enumerate(parts)
    ]


def results_from_configmaps(
    configmaps: Sequence[Mapping[str, Any]],
) -> tuple[list[ShardResult], dict[int, str]]:
    """(results, {shard: why it could not be read}) from a run's result ConfigMaps."""
    by_shard: dict[int, dict[int, tuple[int, bytes]]] = {}
    problems: dict[int, str] = {}
    for cm in configmaps:
        meta = cm.get("metadata") or {}
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        try:
            shard = int(labels[LABEL_SHARD])
            count = int(annotations[ANNOTATION_PARTS])
            k = int(annotations[ANNOTATION_PART])
            data = base64.b64decode((cm.get("binaryData") or {})[RESULT_KEY])
        except (KeyError, ValueError) as exc:
            name = meta.get("name", "?")
            problems[int(labels.get(LABEL_SHARD, -1))] = f"ConfigMap {name} unreadable: {exc}"
            continue
        by_shard.setdefault(shard, {})[k] = (count, data)
    results = []
    for shard, parts in sorted(by_shard.items()):
        counts = {count for count, _ in parts.values()}
        if len(counts) != 1 or sorted(parts) != list(range(next(iter(counts)))):
            problems[shard] = f"result parts {sorted(parts)} of {sorted(counts)}: incomplete"
            continue
        try:
            results.append(decode_result([parts[k][1] for k in sorted(parts)]))
        except TransportError as exc:
            problems[shard] = str(exc)
    return results, problems


def api_client() -> Any:
    """A `kubernetes` ApiClient of its own configuration: in-cluster (the ServiceAccount's
    token), else KUBECONFIG as it is now (the client's default path is read at import)."""
    from kubernetes import client, config  # the pod's first API call; most runs need none

    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        config.load_kube_config(
            config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration
        )
    return client.ApiClient(configuration)


def _core_api() -> Any:
    from kubernetes import client

    return client.CoreV1Api(api_client())


def read_plan(namespace: str, name: str) -> tuple[ShardPlan, list[dict[str, Any]]]:
    """GET the plan ConfigMap (blocking): the plan, and its owner references, which the
    result parts copy (so they go with the OptimizedEndpoint should the coordinator
    never delete them)."""
    body = _core_api().read_namespaced_config_map(name, namespace)
    text = (body.data or {}).get(PLAN_KEY)
    if text is None:
        raise TransportError(f"ConfigMap {namespace}/{name} has no {PLAN_KEY}")
    references = [
        {
            "apiVersion": r.api_version,
            "kind": r.kind,
            "name": r.name,
            "uid": r.uid,
            "controller": bool(r.controller),
            "blockOwnerDeletion": False,
        }
        for r in (body.metadata.owner_references or [])
    ]
    return plan_of(text), references


def write_result(
    namespace: str, run: str, result: ShardResult, owner_references: Sequence[Mapping[str, Any]]
) -> int:
    """Create the result's ConfigMaps (blocking); the number of parts written."""
    api = _core_api()
    configmaps = result_configmaps(run, namespace, result, owner_references)
    for body in configmaps:
        api.create_namespaced_config_map(namespace, body)
    return len(configmaps)


def progress_name(run: str, shard: int) -> str:
    return f"{run}-s{shard}-progress"


def is_progress(configmap: Mapping[str, Any]) -> bool:
    labels = (configmap.get("metadata") or {}).get("labels") or {}
    return LABEL_PROGRESS in labels


def progress_configmap(
    run: str, namespace: str, shard: int, done: int, owner_references: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Shard `shard`'s count of finished measured requests (every target together)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": progress_name(run, shard),
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/managed-by": "endpoint-optimizer",
                LABEL_RUN: run,
                LABEL_SHARD: str(shard),
                LABEL_PROGRESS: "true",
            },
            "ownerReferences": [dict(ref) for ref in owner_references],
        },
        "data": {PROGRESS_KEY: str(done)},
    }


def progress_from_configmaps(configmaps: Sequence[Mapping[str, Any]]) -> int:
    """The measured requests the shards say they have finished, summed; a count that
    cannot be read counts as none (progress is information, never evidence)."""
    total = 0
    for cm in configmaps:
        if not is_progress(cm):
            continue
        try:
            total += max(0, int((cm.get("data") or {})[PROGRESS_KEY]))
        except (KeyError, ValueError):
            continue
    return total


class ProgressWriter:
    """Counts a shard's finished measured requests (`done`, from the benchmark's loop) and
    writes the count every `interval_s` from a thread, and once more on exit when it moved.

    `write(body)` stores one progress ConfigMap; by default, through the API server
    (`create` the first time, then `patch`). A failed write is logged and retried at the
    next interval: the shard's measurement never waits on it or fails for it.
    """

    def __init__(
        self,
        *,
        namespace: str,
        run: str,
        shard: int,
        warmup: int,
        owner_references: Sequence[Mapping[str, Any]],
        interval_s: float,
        write: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.namespace, self.run, self.shard, self.warmup = namespace, run, shard, warmup
        self.owner_references = list(owner_references)
        self.interval_s = interval_s
        self.count = 0
        self.written = -1
        self._write = write or self._to_api_server
        self._api: Any = None
        self.closed = False  # the coordinator deleted the count: the run is over for it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-progress", daemon=True)

    def done(self, index: int) -> None:
        if index >= self.warmup:
            self.count += 1

    def __enter__(self) -> ProgressWriter:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.flush()

    def flush(self) -> None:
        count = self.count
        if count == self.written or self.closed:
            return
        body = progress_configmap(
            self.run, self.namespace, self.shard, count, self.owner_references
        )
        try:
            self._write(body)
        except Exception as exc:  # information only: the next interval retries
            log.warning("bench progress not written", shard=self.shard, error=type(exc).__name__)
            return
        self.written = count

    def _to_api_server(self, body: dict[str, Any]) -> None:
        """`create` the first time (a 409: this pod's earlier run wrote one; patch it), then
        `patch` the count. A 404 on a patch means the coordinator has cleaned the run up
        (it gave up on the level): nothing more is written, so nothing is left behind."""
        from kubernetes.client.exceptions import ApiException

        if self._api is None:
            self._api = _core_api()
        api = self._api
        name = body["metadata"]["name"]
        if self.written >= 0:
            try:
                api.patch_namespaced_config_map(name, self.namespace, {"data": body["data"]})
            except ApiException as exc:
                if exc.status != 404:
                    raise
                self.closed = True
            return
        try:
            api.create_namespaced_config_map(self.namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            api.patch_namespaced_config_map(name, self.namespace, {"data": body["data"]})
