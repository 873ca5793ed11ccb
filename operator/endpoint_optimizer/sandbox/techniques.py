"""What each technique does to what a variant serves: the sandbox's model of SageMaker and LMI.

Read from the wire alone: the OptimizationConfigs members a finished job ran, LMI's
`OPTION_*` variables, the llm-compressor job's hyperparameters. Never from the
operator's own techniques table (sagemaker/techniques/): a variable the operator gets
wrong is served the way SageMaker would serve it, not the way the operator meant it.

A technique's effect has two halves. What it bakes into artifacts (`bake`,
`trained_quantization`) and what the serving environment switches on
(`served_quantization`, `served_speculation`, `served_compiled`) say *which* technique a
variant runs; the tables (`PRECISIONS`, `DRAFTERS`, `COMPILED_*`) say what that costs
and gains, and serving.py's cost functions apply them. Calibration:
reference/h200-calibration.md (speed, memory), reference/anchors-bench-eval.md §6
(quality, acceptance); docs/sandbox.md has the table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any, Literal

Quantization = Literal["none", "fp8", "int8", "w4a16"]
SpeculativeMethod = Literal["ngram", "draft", "eagle"]

# ------------------------------------------------------------------ quantization


@dataclass(frozen=True)
class Precision:
    """Serving weights at one precision, against bf16: speed and memory factors, quality."""

    weight_read: float  # decode's weight-read time
    per_sequence: float  # decode's per-sequence work
    prefill: float
    bytes_per_param: float
    # Extra weight-read saving at 70B: fixed per-step work weighs less on a big model
    # (H200: FP8 B1 1.37x on 8B, 1.76x on 70B).
    large_model_gain: float = 0.0
    # Prefill factor on GPUs without FP8 tensor cores (weight-only Marlin kernels).
    prefill_without_fp8_cores: float | None = None
    # Accuracy delta (absolute, fraction) at ~8B and at >= 40B (anchors-bench-eval §6.1).
    accuracy_delta: tuple[float, float] = (0.0, 0.0)
    # Share of eval items whose outcome is redrawn (drives paired discordance).
    perturbed_share: float = 0.0
    refusal_increase: float = 0.0


# h200-calibration.md fits; W4A16 with a Marlin-class kernel per anchors-bench-eval §6.3:
# ~0.5x at low batch, losing ground as the batch grows.
PRECISIONS: dict[Quantization, Precision] = {
    "none": Precision(weight_read=1.0, per_sequence=1.0, prefill=1.0, bytes_per_param=2.0),
    "fp8": Precision(
        weight_read=0.73,
        per_sequence=0.93,
        prefill=0.68,
        bytes_per_param=1.06,
        large_model_gain=0.16,
        prefill_without_fp8_cores=0.95,
        perturbed_share=0.03,
    ),
    "int8": Precision(
        weight_read=0.76,
        per_sequence=0.95,
        prefill=0.7,
        bytes_per_param=1.06,
        large_model_gain=0.16,
        accuracy_delta=(-0.005, -0.003),
        perturbed_share=0.04,
        refusal_increase=0.001,
    ),
    "w4a16": Precision(
        weight_read=0.5,
        per_sequence=3.0,
        prefill=0.95,
        bytes_per_param=0.6,
        accuracy_delta=(-0.012, -0.005),
        perturbed_share=0.08,
        refusal_increase=0.003,
    ),
}


def served_quantization(environment: Mapping[str, str], baked: Quantization | None) -> Quantization:
    """The precision a variant serves: what its weights were baked at, else what
    `OPTION_QUANTIZE` asks LMI for (`environment` upper-cased)."""
    if baked is not None and baked != "none":
        return baked
    option = environment.get("OPTION_QUANTIZE")
    return "none" if option is None else _option_precision(option)


def _option_precision(option: str) -> Quantization:
    option = option.strip().lower()
    if option in ("fp8", "fp8_e4m3"):
        return "fp8"
    if option in ("smoothquant", "int8", "w8a8", "int8_w8a8"):
        return "int8"
    if option in ("awq", "gptq", "w4a16", "marlin", "int4"):
        return "w4a16"
    return "none"


def _job_quantization(option: str) -> Quantization:
    # What an optimization job writes for its OPTION_QUANTIZE: it always quantizes.
    option = option.lower()
    if "fp8" in option:
        return "fp8"
    if option in ("smoothquant", "int8", "w8a8"):
        return "int8"
    return "w4a16"


# The entry point's `scheme` hyperparameter -> the precision it yields. W8A16 has no
# precision of its own: int8 (8-bit weights, ~half the bytes of bf16) is the closest; it
# slightly overstates prefill, which weight-only quantization does not speed up.
_TRAINING_SCHEMES: dict[str, Quantization] = {"W4A16": "w4a16", "W8A8": "int8", "W8A16": "int8"}
# Without a readable `scheme`, the first of these found in the hyperparameters or the
# environment names the precision.
_TRAINING_NEEDLES: tuple[tuple[str, Quantization], ...] = (
    ("fp8", "fp8"),
    ("w8a8", "int8"),
    ("smoothquant", "int8"),
    ("int8", "int8"),
    ("w4a16", "w4a16"),
    ("awq", "w4a16"),
    ("gptq", "w4a16"),
)


def trained_quantization(
    hyperparameters: Mapping[str, Any], environment: Mapping[str, Any]
) -> Quantization:
    """The precision of the checkpoint an llm-compressor training job writes."""
    raw = hyperparameters.get("scheme")
    if isinstance(raw, str):
        try:
            value = json.loads(raw)  # JSON-encoded, as the SDK sends hyperparameters
        except ValueError:
            value = raw  # a bare string
        scheme = _TRAINING_SCHEMES.get(str(value).upper())
        if scheme is not None:
            return scheme
    text = json.dumps([dict(hyperparameters), dict(environment)]).lower()
    for needle, found in _TRAINING_NEEDLES:
        if needle in text:
            return found
    return "w4a16"


# ------------------------------------------------------------------ speculative decoding

BATCH_SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"


@dataclass(frozen=True)
class Speculative:
    method: SpeculativeMethod
    num_speculative_tokens: int
    # vLLM V1's num_speculative_tokens_per_batch_size, as [start, end, K] entries: the draft
    # length of a step is looked up by the number of requests that step schedules.
    # Out of the repr: the techniques golden file pins the profiles' repr from before it.
    batch_schedule: tuple[tuple[int, int, int], ...] = field(default=(), repr=False)

    def tokens_at(self, batch: int) -> int:
        """Draft tokens per request in a step of `batch` requests, as vLLM's scheduler
        looks them up (vllm/v1/spec_decode/dynamic/utils.py build_dynamic_sd_schedule_lookup):
        inclusive ranges, a gap keeps the previous K, a batch above the last range keeps
        the last K, and K is capped at num_speculative_tokens."""
        k = self.num_speculative_tokens
        for start, end, tokens in self.batch_schedule:
            if batch < start:
                break
            k = min(self.num_speculative_tokens, tokens)
            if batch <= end:
                break
        return k


@dataclass(frozen=True)
class Drafter:
    """One speculative method: how often its drafts are accepted and what drafting costs."""

    # Per-token acceptance at workload overlap 0 and 1 (anchors-bench-eval §6.4).
    acceptance: tuple[float, float]
    # The draft's cost per drafted token, as a share of one target decode step.
    cost_per_token: float
    # Draft length when the environment names none.
    default_tokens: int


DRAFTERS: dict[SpeculativeMethod, Drafter] = {
    "ngram": Drafter(acceptance=(0.2, 0.8), cost_per_token=0.005, default_tokens=5),
    "draft": Drafter(acceptance=(0.55, 0.7), cost_per_token=0.08, default_tokens=5),
    "eagle": Drafter(acceptance=(0.58, 0.7), cost_per_token=0.04, default_tokens=3),
}


def served_speculation(environment: Mapping[str, str], eagle: bool) -> Speculative | None:
    """The speculation LMI serves with (`environment` upper-cased; `eagle`: trained heads)."""
    speculative: Speculative | None = None
    if eagle:
        speculative = Speculative("eagle", DRAFTERS["eagle"].default_tokens)
    if "OPTION_SPECULATIVE_CONFIG" in environment:
        return _speculative_from_config(environment["OPTION_SPECULATIVE_CONFIG"]) or speculative
    if environment.get("OPTION_SPECULATIVE_DRAFT_MODEL"):
        draft = environment["OPTION_SPECULATIVE_DRAFT_MODEL"].strip()
        method: SpeculativeMethod = "ngram" if draft.lower() in ("[ngram]", "ngram") else "draft"
        k = _int_or(environment.get("OPTION_SPECULATIVE_LENGTH"), DRAFTERS[method].default_tokens)
        return Speculative(method, k)
    return speculative


def _speculative_from_config(raw: str) -> Speculative | None:
    try:
        config = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(config, dict):
        return None
    name = str(config.get("method", "draft_model")).lower()
    method: SpeculativeMethod
    if name in ("ngram", "[ngram]", "prompt_lookup", "suffix"):
        method = "ngram"
    elif name.startswith("eagle") or name in ("mtp", "medusa"):
        method = "eagle"
    else:
        method = "draft"
    k = _int_or(str(config.get("num_speculative_tokens", "")), DRAFTERS[method].default_tokens)
    return Speculative(method, max(1, k), _batch_schedule(config.get(BATCH_SCHEDULE_KEY)))


def _batch_schedule(raw: object) -> tuple[tuple[int, int, int], ...]:
    """The [start, end, K] entries in order; () when absent or not a schedule vLLM takes
    (it refuses those at startup; the sandbox serves without the schedule)."""
    if not isinstance(raw, list) or not raw:
        return ()
    entries: list[tuple[int, int, int]] = []
    for entry in raw:
        if not isinstance(entry, list) or len(entry) != 3:
            return ()
        try:
            start, end, k = (int(v) for v in entry)
        except (TypeError, ValueError):
            return ()
        if start < 1 or end < start or k < 0:
            return ()
        entries.append((start, end, k))
    entries.sort()
    if entries[0][0] != 1 or any(b[0] <= a[1] for a, b in pairwise(entries)):
        return ()
    return tuple(entries)


def _int_or(raw: str | None, default: int) -> int:
    try:
        return int(str(raw).strip()) if raw is not None else default
    except ValueError:
        return default


# ------------------------------------------------------------------ compilation

COMPILED_DECODE = 0.9  # TensorRT-LLM fused kernels
COMPILED_PREFILL = 0.85


def served_compiled(environment: Mapping[str, str]) -> bool:
    """Whether the environment asks LMI for its TensorRT-LLM engine (upper-cased keys)."""
    return environment.get("OPTION_ROLLING_BATCH", "").lower() == "trtllm"


# ------------------------------------------------------------------ optimization jobs


@dataclass(frozen=True)
class Baked:
    """What the jobs behind an S3 prefix baked into the weights it holds."""

    quantization: Quantization | None = None
    compiled: bool = False
    eagle: bool = False


def _quantize(baked: Baked, environment: Mapping[str, str]) -> Baked:
    return replace(baked, quantization=_job_quantization(environment.get("OPTION_QUANTIZE", "fp8")))


def _compile(baked: Baked, environment: Mapping[str, str]) -> Baked:
    # A compilation job quantizes too when its environment asks (smoothquant on TRT-LLM).
    option = environment.get("OPTION_QUANTIZE")
    quantization = baked.quantization if option is None else _job_quantization(option)
    return replace(baked, compiled=True, quantization=quantization)


def _train_eagle_heads(baked: Baked, environment: Mapping[str, str]) -> Baked:
    return replace(baked, eagle=True)


# OptimizationConfigs member -> what running it does to the weights. ModelShardingConfig
# writes the same weights split for the fast loader: nothing the serving model sees.
JOB_EFFECTS: dict[str, Callable[[Baked, Mapping[str, str]], Baked]] = {
    "ModelQuantizationConfig": _quantize,
    "ModelCompilationConfig": _compile,
    "ModelSpeculativeDecodingConfig": _train_eagle_heads,
}
# Members whose output needs the compiled engine's image (RecommendedInferenceImage).
COMPILING_MEMBERS = frozenset({"ModelCompilationConfig"})


def bake(baked: Baked, member: str, environment: Mapping[str, str]) -> Baked:
    """The weights after one OptimizationConfigs element ran with `environment`
    (OptimizationEnvironment plus the element's OverrideEnvironment)."""
    effect = JOB_EFFECTS.get(member)
    return baked if effect is None else effect(baked, environment)
