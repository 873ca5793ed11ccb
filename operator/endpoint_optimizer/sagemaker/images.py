"""Default serving images from the SageMaker Python SDK's image-URI configuration.

The table users already rely on (`image_uris.retrieve("djl-lmi", ...)`) ships as
JSON inside the `sagemaker-core` distribution, a declared runtime dependency of the
operator. It is read as data, located through the installed distribution's files:
importing `sagemaker.core` would replace the process's traceback printing with rich's
and load the SDK's heavy modules. Nothing is vendored by hand; an install that lost the
distribution gets a message that says what to do.
"""

from __future__ import annotations

import functools
import json
from importlib import metadata
from typing import Any

_DISTRIBUTION = "sagemaker-core"
_CONFIG_DIR = "sagemaker/core/image_uri_config"

# Framework keys of the SDK's config: LMI (vLLM / lmi-dist), TensorRT-LLM, Neuron.
LMI = "djl-lmi"
TENSORRT_LLM = "djl-tensorrtllm"
NEURONX = "djl-neuronx"


class ImageLookupError(LookupError):
    """No default image can be named; the message says which field to set instead."""


@functools.cache
def _framework_config(framework: str) -> dict[str, Any]:
    try:
        dist = metadata.distribution(_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise ImageLookupError(
            f"no default {framework} image: the {_DISTRIBUTION} package (the SageMaker SDK's "
            "image table, a dependency of the operator) is not installed; reinstall the "
            "operator with its dependencies, or set spec.model.image to a serving image URI"
        ) from None
    path = dist.locate_file(f"{_CONFIG_DIR}/{framework}.json")
    try:
        text = path.read_text()
    except (OSError, AttributeError):
        raise ImageLookupError(
            f"{_DISTRIBUTION} {dist.version} has no {framework} image table; set spec.model.image"
        ) from None
    config: dict[str, Any] = json.loads(text)
    return config


def framework_for(instance_type: str, compiled: bool = False) -> str:
    """The container family for an instance type: Neuron on inf2/trn, TRT-LLM if compiled."""
    family = instance_type.removeprefix("ml.").split(".")[0]
    if family.startswith(("inf", "trn")):
        return NEURONX
    return TENSORRT_LLM if compiled else LMI


def default_image(region: str, framework: str = LMI, version: str = "latest") -> str:
    """`{account}.dkr.ecr.{region}.{domain}/{repository}:{tag}` as the SDK would build it."""
    config = _framework_config(framework)
    version = config.get("version_aliases", {}).get(version, version)
    entry = config.get("versions", {}).get(version)
    if entry is None:
        raise ImageLookupError(f"{framework} has no version {version!r}; set spec.model.image")
    account = entry.get("registries", {}).get(region)
    if account is None:
        raise ImageLookupError(
            f"{framework} {version} has no image in region {region}; set spec.model.image"
        )
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{domain}/{entry['repository']}:{entry['tag_prefix']}"
