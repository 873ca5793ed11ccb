"""The request sender of one process's share of a benchmark: lean or boto3, one interface.

A sender is `await send(index, inference_id, body, scheduled_at) -> RawTimeline`; the
runner's closed and open loops, the guard and the workers do not know which client
is behind it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from endpoint_optimizer.bench.client import StreamingClient, make_runtime_client
from endpoint_optimizer.bench.lean import LeanStreamingClient
from endpoint_optimizer.bench.models import BenchClient, BenchConfig, BenchTarget
from endpoint_optimizer.bench.timeline import RawTimeline

Send = Callable[[int, str, bytes, float], Awaitable[RawTimeline]]


@asynccontextmanager
async def open_sender(
    target: BenchTarget,
    config: BenchConfig,
    streams: int,
    runtime_client: Any | None = None,
) -> AsyncIterator[Send]:
    """A sender for up to `streams` requests in flight, closed on exit.

    `runtime_client`: a boto3 sagemaker-runtime client to send through (the boto3
    path), or, on the lean path, whose endpoint and service model to use.
    """
    # Building a client parses botocore's models: a tenth of a second the loop would stall.
    client = runtime_client or await asyncio.to_thread(
        make_runtime_client, target, streams, config.read_timeout_s, config.max_attempts
    )
    if config.client is BenchClient.LEAN:
        lean = LeanStreamingClient(
            target, streams, config.read_timeout_s, config.max_attempts, runtime_client=client
        )
        try:
            yield lean.stream_one
        finally:
            await lean.close()
        return
    streaming = StreamingClient(target, client)
    pool = ThreadPoolExecutor(max_workers=max(streams, 1), thread_name_prefix="bench-stream")

    async def send(index: int, inference_id: str, body: bytes, scheduled_at: float) -> RawTimeline:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            pool, streaming.stream_one, index, inference_id, body, scheduled_at
        )

    try:
        yield send
    finally:
        await asyncio.to_thread(pool.shutdown, wait=True)
