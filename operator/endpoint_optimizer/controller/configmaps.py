"""The ConfigMaps a spec names, read on demand; its datasets checked before any traffic.

Only a ConfigMap that spec.evaluation.dataset or spec.benchmark.dataset names is read, with
one GET, on the wake-ups that measure: no cache of every ConfigMap in the watched
namespaces (a kopf index kept all of them in memory: 150 unrelated ConfigMaps took the
operator from 84 to 220 MiB; docs/resilience.md). RBAC for this module: `get` on
configmaps, no watch. (The benchmark's Job path, controller/benchjobs.py, off unless
--bench-max-shards is set, also lists and deletes the result ConfigMaps its shards write,
by label; it goes through the `kubernetes` client, imported only when a Job runs.)

The GET goes through kopf's own API client (`kopf._cogs.clients.api`), not the
`kubernetes` package: it is the session kopf already logged in with (kubeconfig, service
account token, its re-login on 401), it costs no memory (importing `kubernetes` adds 22 MiB
of generated models to the process) and no second HTTP stack. It is kopf's internal module,
so it is used here only, and tests/e2e reads ConfigMaps through it against the emulator.

Both datasets are read and parsed before the wake-up's first action: a missing or malformed
ConfigMap costs no benchmark against production and no eval request, and it is a retryable
problem (the user fixes the ConfigMap, not the spec) that the controller backs off from.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import kopf
from kopf._cogs.clients import api as kopf_api
from kopf._cogs.clients import errors as kopf_errors

from endpoint_optimizer import GROUP, KIND, VERSION
from endpoint_optimizer.api import ConfigMapRef, OptimizedEndpointSpec, SpotCheckStatus
from endpoint_optimizer.aws.perform import bench_prompts
from endpoint_optimizer.bench.workload import DatasetError
from endpoint_optimizer.evaluation.dataset import EvalDatasetError, parse_dataset
from endpoint_optimizer.pipeline.assess import measurement_plan
from endpoint_optimizer.pipeline.model import Action, ActionKind
from endpoint_optimizer.pipeline.record import Folded
from endpoint_optimizer.sagemaker.naming import Owner

MEASUREMENTS = frozenset({ActionKind.MEASURE_BASELINE, ActionKind.COMPARE})

_log = logging.getLogger(__name__)


class ConfigMapProblem(Exception):
    """A ConfigMap the spec names cannot be used: missing, unreadable or malformed."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        self.message = message
        super().__init__(message)


class ConfigMapReader(Protocol):
    async def __call__(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The ConfigMap's data; None when it does not exist."""

    async def publish(self, owner: Owner, name: str, data: Mapping[str, str]) -> None:
        """Create or replace ConfigMap `name` in the owner's namespace, owned by it (so
        Kubernetes deletes it with the OptimizedEndpoint); ConfigMapProblem if refused."""


def spot_check_name(owner: Owner) -> str:
    """The spot-check ConfigMap of one OptimizedEndpoint (a DNS subdomain, <= 253)."""
    return f"{owner.name}-spot-check"


def owned_configmap(owner: Owner, name: str, data: Mapping[str, str]) -> dict[str, Any]:
    """The ConfigMap object, owned by the OptimizedEndpoint and labelled as ours."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": owner.namespace,
            "labels": {
                "app.kubernetes.io/managed-by": "endpoint-optimizer",
                f"{GROUP}/owner": owner.name,
            },
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": KIND,
                    "name": owner.name,
                    "uid": owner.uid,
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "data": dict(data),
    }


@dataclass
class KopfConfigMaps:
    """One GET per read through kopf's authenticated client (inside kopf's tasks only)."""

    settings: kopf.OperatorSettings
    reads: int = field(default=0)

    async def __call__(self, namespace: str, name: str) -> Mapping[str, str] | None:
        self.reads += 1
        try:
            with _problems("read", namespace, name, "`get`", "ConfigMapUnreadable"):
                body = await self.request(
                    "get", f"/api/v1/namespaces/{namespace}/configmaps/{name}"
                )
        except kopf_errors.APINotFoundError:
            return None
        data = body.get("data") or {}
        return {str(k): str(v) for k, v in data.items()}

    async def publish(self, owner: Owner, name: str, data: Mapping[str, str]) -> None:
        body = owned_configmap(owner, name, data)
        namespace = owner.namespace
        verbs = "`create` and `update`"
        with _problems("write", namespace, name, verbs, "ConfigMapUnwritable"):
            try:
                # Replace (an unconditional update: the operator is the only writer), or
                # create it the first time.
                await self.request("put", f"/api/v1/namespaces/{namespace}/configmaps/{name}", body)
            except kopf_errors.APINotFoundError:
                await self.request("post", f"/api/v1/namespaces/{namespace}/configmaps", body)

    async def request(self, method: str, path: str, payload: object = None) -> dict[str, Any]:
        """One call through kopf's client (named `request`: the RBAC test reads its verbs).

        No retries of kopf's own: a refusal (403) is reported at once, and the controller's
        backoff paces the next try.
        """
        response = await kopf_api.request(
            method, path, payload=payload, settings=self.settings, backoffs=[], logger=_log
        )
        async with response:
            body: dict[str, Any] = await response.json()
        return body


@contextlib.contextmanager
def _problems(doing: str, namespace: str, name: str, verbs: str, reason: str) -> Iterator[None]:
    """A refused or failed API call as the ConfigMapProblem that status.retry shows."""
    try:
        yield
    except kopf_errors.APINotFoundError as exc:
        if doing == "read":
            raise  # a ConfigMap that does not exist: the reader says None
        raise ConfigMapProblem(reason, f"writing ConfigMap {namespace}/{name}: {exc}") from None
    except kopf_errors.APIForbiddenError:
        raise ConfigMapProblem(
            "ConfigMapForbidden",
            f"the operator may not {doing} ConfigMap {namespace}/{name}: grant it {verbs} on "
            "configmaps in this namespace (the chart's RBAC does)",
        ) from None
    except (kopf_errors.APIError, aiohttp.ClientError, TimeoutError) as exc:
        verb = "reading" if doing == "read" else "writing"
        raise ConfigMapProblem(reason, f"{verb} ConfigMap {namespace}/{name}: {exc}") from None


@dataclass
class StaticConfigMaps:
    """ConfigMaps held in memory, by (namespace, name): for tests and tools without a cluster."""

    items: dict[tuple[str, str], Mapping[str, str]] = field(default_factory=dict)
    reads: int = field(default=0)

    async def __call__(self, namespace: str, name: str) -> Mapping[str, str] | None:
        self.reads += 1
        return self.items.get((namespace, name))

    async def publish(self, owner: Owner, name: str, data: Mapping[str, str]) -> None:
        self.items[(owner.namespace, name)] = dict(data)


@dataclass(frozen=True)
class Datasets:
    """The eval set's and the benchmark prompts' JSONL text (None: the spec sets none)."""

    evaluation: str | None = None
    benchmark: str | None = None


async def read_datasets(
    read: ConfigMapReader,
    spec: OptimizedEndpointSpec,
    namespace: str,
    actions: Sequence[Action],
) -> Datasets:
    """The datasets the wake-up's measurements use, read and parsed; ConfigMapProblem if not.

    Nothing is read when no action measures, so a resource waiting on a job or a canary
    pause makes no Kubernetes call for its datasets.
    """
    measuring = [a for a in actions if a.kind in MEASUREMENTS]
    if not measuring:
        return Datasets()
    evaluation = spec.evaluation
    eval_text = bench_text = None
    if (
        evaluation is not None
        and evaluation.dataset is not None
        and any(measurement_plan(spec, a).evaluate for a in measuring)
    ):
        ref = evaluation.dataset.config_map_ref
        eval_text = await _text(read, namespace, ref, "spec.evaluation.dataset")
        try:
            where = f"spec.evaluation.dataset: ConfigMap {namespace}/{ref.name} key {ref.key},"
            parse_dataset(eval_text, where)
        except EvalDatasetError as exc:
            raise ConfigMapProblem("DatasetInvalid", str(exc)) from None
    if spec.benchmark.dataset is not None:
        ref = spec.benchmark.dataset.config_map_ref
        bench_text = await _text(read, namespace, ref, "spec.benchmark.dataset")
        try:
            bench_prompts(bench_text, ref)
        except DatasetError as exc:
            raise ConfigMapProblem("DatasetInvalid", str(exc)) from None
    return Datasets(evaluation=eval_text, benchmark=bench_text)


async def _text(read: ConfigMapReader, namespace: str, ref: ConfigMapRef, field_path: str) -> str:
    data = await read(namespace, ref.name)
    if data is None:
        raise ConfigMapProblem(
            "ConfigMapMissing",
            f"{field_path}: ConfigMap {namespace}/{ref.name} does not exist; create it (the "
            "operator tries again with a backoff, and at once on optimizer.dev/refresh)",
        )
    text = data.get(ref.key)
    if text is None:
        keys = ", ".join(sorted(data)) or "none"
        raise ConfigMapProblem(
            "ConfigMapMissing",
            f"{field_path}: ConfigMap {namespace}/{ref.name} has no key {ref.key} (its keys: "
            f"{keys}); set {field_path}.configMapRef.key or add the key",
        )
    return text


async def publish_spot_check(
    store: ConfigMapReader, owner: Owner, folded: Folded
) -> dict[str, Any]:
    """Write the comparison's spot-check samples to their ConfigMap, then say so in status.

    The ConfigMap is written before the status that names it: a crash between the two
    measures the comparison again and rewrites the same ConfigMap (the pick is seeded).
    """
    assert folded.spot_check is not None
    name = spot_check_name(owner)
    await store.publish(owner, name, folded.spot_check.configmap_data())
    status = dict(folded.status)
    status["spotCheck"] = SpotCheckStatus(
        config_map=name, samples=len(folded.spot_check.samples)
    ).dump()
    return status
