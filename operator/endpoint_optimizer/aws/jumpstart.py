"""Reads a region's JumpStart metadata from S3 for `sagemaker.jumpstart` (GetObject only).

The SageMaker SDK reads the same objects (`models_manifest.json`, then the model's spec
file) from the region's JumpStart content bucket and keeps them for six hours; so does
this reader, per process, so a level-triggered wake-up every poll interval costs no S3
call. What S3 refuses (access, throttling) is a SageMakerError like any AWS failure; what
the metadata says about the spec (an unknown id or instance type) comes back in
`ModelSources.problem` for planning to refuse with the field's name.
"""

from __future__ import annotations

import threading
import time

from endpoint_optimizer.api import OptimizedEndpointSpec
from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.errors import classify
from endpoint_optimizer.sagemaker import jumpstart

# The SDK's JUMPSTART_DEFAULT_S3_CACHE_EXPIRATION_HORIZON.
CACHE_SECONDS = 6 * 3600.0


class MetadataCache:
    """Object bodies by (region, bucket, key), each kept for CACHE_SECONDS."""

    def __init__(self, seconds: float = CACHE_SECONDS) -> None:
        self.seconds = seconds
        self._items: dict[tuple[str, str, str], tuple[float, bytes]] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, str]) -> bytes | None:
        with self._lock:
            item = self._items.get(key)
        if item is None or item[0] < time.monotonic():
            return None
        return item[1]

    def put(self, key: tuple[str, str, str], body: bytes) -> None:
        with self._lock:
            self._items[key] = (time.monotonic() + self.seconds, body)


CACHE = MetadataCache()


async def read_sources(
    aws: AwsClients, spec: OptimizedEndpointSpec, cache: MetadataCache = CACHE
) -> jumpstart.ModelSources:
    """The JumpStart specs `spec` names, resolved; empty when it names none."""
    if not jumpstart.wanted(spec):
        return jumpstart.ModelSources()
    try:
        bucket = jumpstart.content_bucket(spec.region)
    except jumpstart.JumpStartError as exc:
        return jumpstart.ModelSources(problem=str(exc))
    s3 = aws.client("s3", spec.region)

    def read(key: str) -> bytes:
        cached = cache.get((spec.region, bucket, key))
        if cached is not None:
            return cached
        try:
            body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except Exception as exc:
            raise classify(exc, "GetObject", f"s3://{bucket}/{key}") from exc
        cache.put((spec.region, bucket, key), body)
        return body

    sources: jumpstart.ModelSources = await aws.run(lambda: jumpstart.resolve_sources(spec, read))
    return sources
