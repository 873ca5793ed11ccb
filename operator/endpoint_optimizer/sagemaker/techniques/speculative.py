"""Speculative decoding: n-gram prompt lookup, a draft model, or EAGLE heads.

n-gram and draft-model speculation are serving options (vLLM's speculative config
through LMI); the draft model is mounted as the SDK mounts it. EAGLE heads are trained
by an optimization job (ModelSpeculativeDecodingConfig). The pipeline keeps any of
them only where the measured acceptance rate pays for it.
"""

from __future__ import annotations

import json
from typing import Any

from endpoint_optimizer.api import OptimizedEndpointSpec, SpeculativeMethod
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker.techniques.base import Technique

CONFIG_MEMBER = "ModelSpeculativeDecodingConfig"


def ngram_environment(
    num_speculative_tokens: int, lookup_min: int | None = None, lookup_max: int | None = None
) -> dict[str, str]:
    """n-gram (prompt lookup) speculation: vLLM's speculative_config through LMI."""
    config: dict[str, Any] = {"method": "ngram", "num_speculative_tokens": num_speculative_tokens}
    if lookup_max is not None:
        config["prompt_lookup_max"] = lookup_max
    if lookup_min is not None:
        config["prompt_lookup_min"] = lookup_min
    return {"OPTION_SPECULATIVE_CONFIG": json.dumps(config, separators=(",", ":"))}


def draft_environment(num_speculative_tokens: int) -> dict[str, str]:
    """Draft-model speculation length (the draft itself is attached by `rq.create_model`)."""
    return {"OPTION_SPECULATIVE_LENGTH": str(num_speculative_tokens)}


class SpeculativeDecoding(Technique):
    label = "speculativeDecoding"
    config_members = (CONFIG_MEMBER,)
    runs_on_neuron = False

    def applies(self, spec: OptimizedEndpointSpec) -> bool:
        return spec.optimizations.speculative_decoding is not None

    def job_configs(self, spec: OptimizedEndpointSpec) -> list[rq.OptimizationConfig]:
        speculative = spec.optimizations.speculative_decoding
        if speculative is None or speculative.method is not SpeculativeMethod.EAGLE:
            return []
        body: dict[str, Any] = {"Technique": "EAGLE"}
        data = speculative.eagle_training_data
        if data is not None:
            body["TrainingDataSource"] = {
                "S3Uri": data.s3_uri,
                "S3DataType": data.s3_data_type.value,
            }
        return [rq.OptimizationConfig(CONFIG_MEMBER, body)]

    def serving_environment(self, spec: OptimizedEndpointSpec) -> dict[str, str]:
        speculative = spec.optimizations.speculative_decoding
        if speculative is None:
            return {}
        if speculative.method is SpeculativeMethod.NGRAM:
            return ngram_environment(
                speculative.num_speculative_tokens,
                speculative.prompt_lookup_min,
                speculative.prompt_lookup_max,
            )
        if speculative.method is SpeculativeMethod.DRAFT_MODEL:
            return draft_environment(speculative.num_speculative_tokens)
        return {}


SPECULATIVE = SpeculativeDecoding()
