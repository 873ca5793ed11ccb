"""boto3 clients from the standard SDK chain, called from asyncio through a bounded thread pool.

Why a thread pool and not aiobotocore: boto3 is what the sandbox, the bench and
the SageMaker SDK already use; aiobotocore pins botocore to its own release
train (it would fight the project's botocore 1.44) and adds a second HTTP stack.
Our calls are few (a handful of Describe calls per resource per poll) and short,
so a small pool bounds concurrency (and so AWS request rate) without either cost.

Credentials, region, `AWS_ENDPOINT_URL` and the service-specific endpoint
variables (`AWS_ENDPOINT_URL_SAGEMAKER`, ...) all come from botocore's own chain:
nothing but configuration separates the sandbox from AWS. Retries use botocore's
`standard` mode (jittered exponential backoff, a retry quota), so a throttling
storm is absorbed client-side before it becomes a classified error here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
from botocore import xform_name
from botocore.config import Config

from endpoint_optimizer.aws.errors import classify

SERVICES = ("sagemaker", "sagemaker-runtime", "cloudwatch", "logs", "application-autoscaling")


def client_config(max_attempts: int = 4, read_timeout: float = 70.0) -> Config:
    """botocore config: standard retries; read timeout above InvokeEndpoint's 60 s limit."""
    return Config(
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        read_timeout=read_timeout,
        connect_timeout=10,
        max_pool_connections=32,
        user_agent_extra="endpoint-optimizer",
    )


class AwsClients:
    """One boto3 client per (service, region), shared by all resources, plus the call pool.

    `max_measurements`: how many benchmark/eval measurements run at once across all
    resources (`measuring()`); the others wait their turn. Each measurement holds a
    runtime client, a stream thread per concurrent request and its per-request
    records until summarized, so 200 resources turning InService together would
    otherwise hold 200 of each (and skew each other's latencies on one host).
    """

    def __init__(
        self,
        max_concurrency: int = 8,
        config: Config | None = None,
        on_new_client: Callable[[Any], None] | None = None,
        max_measurements: int = 4,
    ) -> None:
        if max_measurements < 1:
            raise ValueError(f"max_measurements must be at least 1, got {max_measurements}")
        self._executor = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="aws")
        self._measurements = asyncio.Semaphore(max_measurements)
        self._config = config or client_config()
        self._session = boto3.session.Session()
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        # e.g. the metrics exporter's instrument(): counts calls and throttled attempts.
        self._on_new_client = on_new_client

    def client(self, service: str, region: str) -> Any:
        """A boto3 client; endpoint and credentials from the standard SDK chain."""
        key = (service, region)
        with self._lock:
            if key not in self._clients:
                # boto3 clients are thread-safe; the session is not, hence the lock.
                self._clients[key] = self._session.client(
                    service,  # type: ignore[call-overload]
                    region_name=region,
                    config=self._config,
                )
                if self._on_new_client is not None:
                    self._on_new_client(self._clients[key])
            return self._clients[key]

    async def call(
        self, service: str, region: str, operation: str, resource: str = "", **params: Any
    ) -> dict[str, Any]:
        """Run one API call in the pool; raise SageMakerError on failure."""
        method: Callable[..., dict[str, Any]] = getattr(
            self.client(service, region), xform_name(operation)
        )
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, functools.partial(method, **params))
        except Exception as exc:
            raise classify(exc, operation, resource) from exc

    @contextlib.asynccontextmanager
    async def measuring(self) -> AsyncIterator[None]:
        """Hold one of the process-wide measurement slots for the block."""
        async with self._measurements:
            yield

    async def run(self, fn: Callable[[], Any]) -> Any:
        """Run a blocking callable (e.g. a benchmark) in the same bounded pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        for client in self._clients.values():
            client.close()
