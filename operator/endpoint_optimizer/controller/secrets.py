"""A model's Hugging Face token: read from its Secret when a request that needs it is sent.

`spec.model.tokenSecretRef` names a key of a Secret in the resource's namespace. The
token is read with the kubernetes client on demand (one GET, no cache, no watch: an
informer or kopf index would hold every Secret of every served namespace in memory and
need list/watch on them), added as HF_TOKEN to the CreateModel or CreateTrainingJob
request just before it is performed, and redacted from any error that AWS might echo it
in. It is never part of a plan, an Action the decision returns, status, an Event, a log
line or a metric.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
from typing import Any

from endpoint_optimizer.api import OptimizedEndpointSpec
from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.errors import SageMakerError
from endpoint_optimizer.aws.perform import ProgressSink, perform
from endpoint_optimizer.bench.shards import ShardLauncher
from endpoint_optimizer.pipeline.model import Action, ActionKind, RawMeasurement
from endpoint_optimizer.sagemaker import requests as rq

TOKEN_ENV = "HF_TOKEN"
FIELD = "spec.model.tokenSecretRef"
# The requests whose container downloads from the Hub: serving models, the llm-compressor job.
_TAKES_TOKEN = frozenset({ActionKind.CREATE_MODEL, ActionKind.CREATE_TRAINING_JOB})
_REDACTED = "[redacted HF_TOKEN]"


class TokenSecretError(Exception):
    """The Secret or its key cannot be read; the message names the field, never the value."""


@functools.cache
def _core_api() -> Any:
    from kubernetes import client, config  # imported on first use: most specs need none

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CoreV1Api()


def read_token(namespace: str, name: str, key: str) -> str:
    """GET the Secret and decode one key (blocking: call it from a worker thread)."""
    from kubernetes.client.exceptions import ApiException

    try:
        secret = _core_api().read_namespaced_secret(name, namespace)
    except ApiException as exc:
        raise TokenSecretError(
            f"{FIELD}: Secret {namespace}/{name} could not be read ({exc.status} {exc.reason}); "
            "create it, or grant the operator get on secrets in this namespace "
            "(chart value rbac.tokenSecretNamespaces)"
        ) from None
    value = (secret.data or {}).get(key)
    if not value:
        raise TokenSecretError(
            f"{FIELD}.key: Secret {namespace}/{name} has no key {key!r}; add it or name another"
        )
    return base64.b64decode(value).decode().strip()


def redact(text: str, token: str | None) -> str:
    return text.replace(token, _REDACTED) if token else text


async def perform_with_token(
    aws: AwsClients,
    spec: OptimizedEndpointSpec,
    action: Action,
    namespace: str,
    *datasets: str | None,
    progress: ProgressSink | None = None,
    launcher: ShardLauncher | None = None,
) -> RawMeasurement | None:
    """`perform`, with HF_TOKEN added to the requests that take it when the spec names one."""
    ref = spec.model.token_secret_ref
    if ref is None or action.kind not in _TAKES_TOKEN:
        return await perform(aws, spec, action, *datasets, progress=progress, launcher=launcher)
    token = await asyncio.to_thread(read_token, namespace, ref.name, ref.key)
    request = rq.add_environment(action.kind.value, action.request, {TOKEN_ENV: token})
    try:
        return await perform(aws, spec, dataclasses.replace(action, request=request), *datasets)
    except SageMakerError as exc:
        raise SageMakerError(
            exc.kind, exc.code, redact(exc.aws_message, token), exc.operation, exc.resource
        ) from None
    except Exception as exc:
        raise RuntimeError(redact(f"{type(exc).__name__}: {exc}", token)) from None
