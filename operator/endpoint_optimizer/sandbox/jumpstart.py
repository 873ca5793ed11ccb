"""JumpStart metadata in the sandbox's S3: a few models' manifest and spec files.

GetObject on any region's JumpStart content bucket (the SDK's names, from sagemaker-core's
region table) answers from `data/jumpstart/`: `models_manifest.json` and the spec files it
names, in the format the SageMaker SDK parses (`JumpStartModelHeader`,
`JumpStartModelSpecs`). The models: Llama 3.1 8B Instruct (two versions; the newer one
with a deployment config that carries a SageMaker-provided draft), Llama 3.1 70B
Instruct, Llama 3.2 1B Instruct (a JumpStart draft) and Mistral 7B Instruct v0.3; the
Llama ones are gated (EULA). Images are the region's LMI image, as JumpStart's are.
"""

from __future__ import annotations

import functools
from pathlib import Path

from endpoint_optimizer.sagemaker import jumpstart

DATA = Path(__file__).with_name("data") / "jumpstart"


@functools.cache
def _buckets() -> frozenset[str]:
    return jumpstart.content_buckets()


def is_metadata_bucket(bucket: str) -> bool:
    return bucket in _buckets()


def metadata_object(key: str) -> bytes | None:
    """The object at `key` of a content bucket, or None (S3's NoSuchKey)."""
    path = (DATA / key).resolve()
    if DATA.resolve() not in path.parents or not path.is_file():
        return None
    return path.read_bytes()
