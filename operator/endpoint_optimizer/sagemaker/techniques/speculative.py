"""Speculative decoding: n-gram prompt lookup, a draft model, or EAGLE heads.

n-gram and draft-model speculation are serving options (vLLM's speculative config
through LMI); the draft model is mounted as the SDK mounts it. EAGLE heads are trained
by an optimization job (ModelSpeculativeDecodingConfig). The pipeline keeps any of
them only where the measured acceptance rate pays for it.

The concurrency cut-off (analysis/cutoff.py) reaches vLLM as
`num_speculative_tokens_per_batch_size` in the same speculative config: a batch-size ->
draft-length schedule of V1's scheduler (vLLM 0.25 and later; docs/analysis.md says
which containers honour what), K up to the cut-off and 0 above it.
"""

from __future__ import annotations

import json
from typing import Any

from endpoint_optimizer.api import OptimizedEndpointSpec, SpeculativeMethod
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker.techniques.base import Technique

CONFIG_MEMBER = "ModelSpeculativeDecodingConfig"
# vLLM V1's batch-size schedule for the draft length (Dynamic speculative decoding).
BATCH_SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
CONFIG_OPTION = "OPTION_SPECULATIVE_CONFIG"


def ngram_environment(
    num_speculative_tokens: int, lookup_min: int | None = None, lookup_max: int | None = None
) -> dict[str, str]:
    """n-gram (prompt lookup) speculation: vLLM's speculative_config through LMI."""
    config: dict[str, Any] = {"method": "ngram", "num_speculative_tokens": num_speculative_tokens}
    if lookup_max is not None:
        config["prompt_lookup_max"] = lookup_max
    if lookup_min is not None:
        config["prompt_lookup_min"] = lookup_min
    return {CONFIG_OPTION: json.dumps(config, separators=(",", ":"))}


def with_batch_cutoff(environment: dict[str, str], batch_size: int) -> dict[str, str]:
    """`environment` with speculation off above `batch_size` running requests.

    vLLM reads [start, end, K] entries with inclusive ranges, and a batch above the last
    range keeps the last K: [[1, N, k], [N+1, N+1, 0]] drafts k up to N and none above.
    Raises ValueError when there is no speculative config JSON to extend.
    """
    raw = environment.get(CONFIG_OPTION)
    if raw is None:
        raise ValueError(f"{CONFIG_OPTION}: no speculative config to add the cut-off to")
    config = json.loads(raw)
    if not isinstance(config, dict) or "num_speculative_tokens" not in config:
        raise ValueError(f"{CONFIG_OPTION}: not a speculative config with num_speculative_tokens")
    k = int(config["num_speculative_tokens"])
    config[BATCH_SCHEDULE_KEY] = [[1, batch_size, k], [batch_size + 1, batch_size + 1, 0]]
    return {**environment, CONFIG_OPTION: json.dumps(config, separators=(",", ":"))}


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
