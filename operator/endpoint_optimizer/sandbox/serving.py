"""The sandbox's serving model: how fast a variant generates, as a pure, clock-free function.

A `VariantProfile` says what one production variant runs (GPU, model size, quantization,
compilation, speculative decoding, container limits, injected regressions). The cost
functions turn that into prefill time, decode-step time and memory capacity; `simulate`
runs a closed-loop, continuous-batching engine over them without sleeping, so a judge
benchmark can replay hundreds of rollouts in seconds. The live server paces real streams
with the same functions (see engine.py).

Calibration: the decode-step fit t = a + b*B + c*B*ctx and the prefill rate come from
reference/h200-calibration.md (Llama-3.1-8B and 70B shapes on an H200); other GPUs scale
the memory-bound parts by HBM bandwidth and prefill by matrix throughput. What each
technique changes (the FP8/INT4 factors, compilation, drafters) is in techniques.py.
Speculative decoding follows Leviathan et al.: E = (1 - a^(k+1)) / (1 - a) tokens per
step, each step costing the verify factor plus the draft cost. docs/sandbox.md has the table.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from endpoint_optimizer.sandbox.techniques import (
    COMPILED_DECODE,
    COMPILED_PREFILL,
    DRAFTERS,
    PRECISIONS,
    served_compiled,
    served_quantization,
    served_speculation,
)
from endpoint_optimizer.sandbox.techniques import Quantization as Quantization
from endpoint_optimizer.sandbox.techniques import Speculative as Speculative
from endpoint_optimizer.sandbox.techniques import SpeculativeMethod as SpeculativeMethod


@dataclass(frozen=True)
class Gpu:
    """One accelerator: memory in GB, HBM bandwidth in TB/s, dense bf16 TFLOP/s."""

    name: str
    memory_gb: float
    bandwidth_tbs: float
    bf16_tflops: float
    fp8: bool


H200 = Gpu("H200", 141.0, 4.8, 989.0, True)
_GPUS: dict[str, Gpu] = {
    "g4dn": Gpu("T4", 16.0, 0.32, 65.0, False),
    "g5": Gpu("A10G", 24.0, 0.6, 125.0, False),
    "g6": Gpu("L4", 24.0, 0.3, 121.0, True),
    "g6e": Gpu("L40S", 48.0, 0.864, 362.0, True),
    "g7e": Gpu("RTX PRO 6000", 96.0, 1.6, 500.0, True),
    "g7": Gpu("RTX PRO 6000", 96.0, 1.6, 500.0, True),
    "p4d": Gpu("A100-40GB", 40.0, 1.555, 312.0, False),
    "p4de": Gpu("A100-80GB", 80.0, 2.0, 312.0, False),
    "p5": Gpu("H100", 80.0, 3.35, 989.0, True),
    "p5e": H200,
    "p5en": H200,
    "p6-b200": Gpu("B200", 180.0, 8.0, 2250.0, True),
}
# GPUs per instance for the g families; p families carry 8.
_G_SIZE_GPUS = {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}

# Bytes of a KV-cache element against the 16-bit default: fp8 one byte; NVFP4 four bits
# plus one e4m3 scale per 16 values (4.5 bits).
KV_CACHE_BYTES = {"auto": 1.0, "fp8": 0.5, "nvfp4": 4.5 / 16}

# H200 measurements (ms) for Llama-3.1-8B, the anchor every other shape scales from.
_DECODE_BASE_MS_8B = 5.268  # weight read + fixed per-step work at B=1
_DECODE_PER_SEQ_MS_8B = 0.01396
_DECODE_PER_SEQ_CTX_MS_8B = 2.7839e-05  # KV read, per sequence per cached token
_PREFILL_MS_PER_TOKEN_8B = 0.0267  # b1_l2048 = 54.7 ms
_PREFILL_FIXED_MS = 1.3
_KV_BYTES_8B = 131072


@dataclass(frozen=True)
class VariantProfile:
    """What one variant serves, and how, as far as speed, memory and quality go."""

    instance_type: str = "ml.g6e.2xlarge"
    model_size_b: float = 8.0
    quantization: Quantization = "none"
    compiled: bool = False
    tensor_parallel_degree: int = 1
    max_batch_size: int = 256
    max_model_len: int = 8192
    gpu_memory_utilization: float = 0.9
    speculative: Speculative | None = None
    # Injected regressions (fault switches): multiply step times, subtract accuracy.
    latency_factor: float = 1.0
    quality_drop: float = 0.0
    refusal_increase: float = 0.0
    # The eval classes quality_drop applies to; empty: every class.
    quality_drop_classes: tuple[str, ...] = ()
    # Injected acceptance drift: multiplies the per-token draft acceptance (traffic that
    # the drafter stops predicting, e.g. free-form generation for n-gram lookup). Out of
    # the repr: the technique golden file pins profiles by repr, and at 1.0 nothing changes.
    acceptance_factor: float = field(default=1.0, repr=False)
    # OPTION_KV_CACHE_DTYPE: "auto" (the model's 16-bit dtype), "fp8" or "nvfp4". Out of
    # the repr for the same reason; a quantized cache holds more tokens and reads fewer bytes.
    kv_cache_dtype: str = field(default="auto", repr=False)

    def _kv_bytes(self) -> float:
        return kv_bytes_per_token(self.model_size_b) * KV_CACHE_BYTES.get(self.kv_cache_dtype, 1.0)

    @property
    def gpu(self) -> Gpu:
        return gpu_for(self.instance_type)

    @property
    def gpu_count(self) -> int:
        return gpu_count_for(self.instance_type)

    # -- cost functions (milliseconds) --------------------------------------------------

    def _tp_divisor(self) -> float:
        # Tensor parallelism splits the weight read; all-reduces claw ~8% back per doubling.
        tp = max(1, self.tensor_parallel_degree)
        return tp / (1.0 + 0.08 * math.log2(tp))

    def _weight_factor(self) -> float:
        precision = PRECISIONS[self.quantization]
        span = math.log(max(1.0, self.model_size_b / 8.0)) / math.log(70.0 / 8.0)
        return precision.weight_read - precision.large_model_gain * min(1.0, span)

    def decode_step_ms(self, batch: int, context: int) -> float:
        """One decode step (one token for each of `batch` sequences at `context` tokens)."""
        size = self.model_size_b / 8.0
        bandwidth = H200.bandwidth_tbs / self.gpu.bandwidth_tbs
        weights = _DECODE_BASE_MS_8B * size**0.93 * self._weight_factor()
        per_seq = _DECODE_PER_SEQ_MS_8B * size**0.42 * PRECISIONS[self.quantization].per_sequence
        kv = _DECODE_PER_SEQ_CTX_MS_8B * self._kv_bytes() / _KV_BYTES_8B
        step = (weights * bandwidth + per_seq * batch + kv * bandwidth * batch * context) / (
            self._tp_divisor()
        )
        if self.compiled:
            step *= COMPILED_DECODE
        return float(step * self.latency_factor)

    def prefill_ms(self, input_tokens: int) -> float:
        """Prefill of one prompt (compute-bound: scales with matrix throughput)."""
        size = self.model_size_b / 8.0
        tflops = H200.bf16_tflops / self.gpu.bf16_tflops
        precision = PRECISIONS[self.quantization]
        factor = precision.prefill
        if not self.gpu.fp8 and precision.prefill_without_fp8_cores is not None:
            factor = precision.prefill_without_fp8_cores
        ms = _PREFILL_FIXED_MS + _PREFILL_MS_PER_TOKEN_8B * input_tokens * size * tflops * factor
        ms /= self._tp_divisor()
        if self.compiled:
            ms *= COMPILED_PREFILL
        return ms * self.latency_factor

    def acceptance_alpha(self, overlap: float) -> float:
        """Per-token draft acceptance for a workload whose output overlaps the prompt."""
        if self.speculative is None:
            return 0.0
        low, high = DRAFTERS[self.speculative.method].acceptance
        alpha = low + (high - low) * min(1.0, max(0.0, overlap))
        return min(1.0, alpha * self.acceptance_factor)

    def draft_tokens(self, scheduled: int) -> int:
        """Draft tokens per request in a step that schedules `scheduled` requests: vLLM's
        batch-size schedule when the config carries one (none above its cut-off)."""
        if self.speculative is None:
            return 0
        return self.speculative.tokens_at(scheduled)

    def speculative_step_factor(self, batch: int, scheduled: int | None = None) -> float:
        """Cost of one speculative step relative to a plain decode step at this batch
        (`scheduled`: the requests the step schedules, prefills included; default `batch`).

        The verify factor follows the fused-kernel end of the c_verify bracket in
        h200-calibration.md (B1 k=3 ~1.05, B64 k=3 ~1.35): the gain shrinks as the batch
        grows and turns into a slowdown when compute saturates. A step the schedule gives
        no drafts is a plain decode step.
        """
        k = self.draft_tokens(batch if scheduled is None else scheduled)
        if self.speculative is None or k == 0:
            return 1.0
        verify = 1.0 + 0.015 * k + 0.0016 * k * batch
        return verify + DRAFTERS[self.speculative.method].cost_per_token * k

    # -- memory ---------------------------------------------------------------------------

    def weights_gb_per_gpu(self) -> float:
        tp = max(1, self.tensor_parallel_degree)
        return self.model_size_b * PRECISIONS[self.quantization].bytes_per_param / tp

    def kv_capacity_tokens(self) -> int:
        """KV-cache tokens the variant holds across all its GPUs (0 if weights don't fit)."""
        tp = max(1, self.tensor_parallel_degree)
        free_gb = (
            self.gpu.memory_gb * self.gpu_memory_utilization
            - self.weights_gb_per_gpu()
            - 1.5  # activations and CUDA graphs
        )
        if free_gb <= 0:
            return 0
        return int(free_gb * 1e9 * tp / self._kv_bytes())

    def batch_limit(self, tokens_per_sequence: int) -> int:
        """How many sequences run at once: the container limit or the KV cache, whichever binds."""
        per_seq = max(1, min(tokens_per_sequence, self.max_model_len))
        return max(0, min(self.max_batch_size, self.kv_capacity_tokens() // per_seq))

    def fits(self) -> bool:
        return self.kv_capacity_tokens() >= self.max_model_len

    @property
    def replicas(self) -> int:
        """Model copies per instance: LMI runs one per TP group of the instance's GPUs."""
        return max(1, self.gpu_count // max(1, self.tensor_parallel_degree))

    def gpu_memory_utilization_percent(self) -> float:
        """What the memory model implies CloudWatch's GPUMemoryUtilization reads (0-100·GPUs).

        vLLM-style engines reserve `gpu_memory_utilization` of each GPU up front.
        """
        used = min(self.gpu.memory_gb, self.gpu.memory_gb * self.gpu_memory_utilization)
        if self.kv_capacity_tokens() == 0:
            used = min(self.gpu.memory_gb, self.weights_gb_per_gpu())
        used_gpus = max(1, self.tensor_parallel_degree) * self.replicas
        return 100.0 * used / self.gpu.memory_gb * used_gpus


def kv_bytes_per_token(model_size_b: float) -> int:
    """KV bytes per token per sequence (bf16): 8B 131072, 70B 327680 (GQA, 8 KV heads)."""
    if model_size_b >= 60:
        return 327680
    return int(_KV_BYTES_8B * (model_size_b / 8.0) ** 0.4)


def instance_family(instance_type: str) -> str:
    parts = instance_type.split(".")
    return parts[1] if len(parts) >= 3 else instance_type


def gpu_for(instance_type: str) -> Gpu:
    return _GPUS.get(instance_family(instance_type), _GPUS["g5"])


def gpu_count_for(instance_type: str) -> int:
    family = instance_family(instance_type)
    if family.startswith("p"):
        return 8
    size = instance_type.rsplit(".", 1)[-1]
    return _G_SIZE_GPUS.get(size, 1)


_SIZE_PATTERN = re.compile(r"(?<![0-9.])(\d+(?:\.\d+)?)b(?![a-z])", re.IGNORECASE)


def model_size_from_uri(uri: str) -> float:
    """Model size in billions from an S3 URI or JumpStart id ("...-70b-..." -> 70); default 8."""
    match = _SIZE_PATTERN.search(uri.replace("_", "-"))
    return float(match.group(1)) if match else 8.0


def profile_from_environment(
    instance_type: str,
    model_uri: str,
    environment: Mapping[str, str],
    *,
    quantization: Quantization | None = None,
    compiled: bool = False,
    eagle: bool = False,
) -> VariantProfile:
    """Build a profile from what CreateModel/CreateEndpointConfig carried.

    `quantization`, `compiled` and `eagle` are what an optimization or training job baked
    into the artifacts the model serves from; the environment can add to them.
    """
    env = {key.upper(): value for key, value in environment.items()}
    gpus = gpu_count_for(instance_type)
    tp_raw = env.get("OPTION_TENSOR_PARALLEL_DEGREE", "max").strip().lower()
    tp = gpus if tp_raw in ("max", "") or not tp_raw.isdigit() else max(1, int(tp_raw))
    return VariantProfile(
        instance_type=instance_type,
        model_size_b=model_size_from_uri(model_uri),
        quantization=served_quantization(env, quantization),
        compiled=compiled or served_compiled(env),
        tensor_parallel_degree=tp,
        max_batch_size=_int_or(env.get("OPTION_MAX_ROLLING_BATCH_SIZE"), 256),
        max_model_len=_int_or(env.get("OPTION_MAX_MODEL_LEN"), 8192),
        gpu_memory_utilization=_float_or(env.get("OPTION_GPU_MEMORY_UTILIZATION"), 0.9),
        speculative=served_speculation(env, eagle),
        kv_cache_dtype=_kv_cache_dtype(env.get("OPTION_KV_CACHE_DTYPE")),
    )


def _kv_cache_dtype(raw: str | None) -> str:
    value = (raw or "auto").strip().lower()
    if value.startswith("fp8"):  # vLLM's fp8, fp8_e4m3, fp8_e5m2
        return "fp8"
    return value if value in KV_CACHE_BYTES else "auto"


def _int_or(raw: str | None, default: int) -> int:
    try:
        return int(str(raw).strip()) if raw is not None else default
    except ValueError:
        return default


def _float_or(raw: str | None, default: float) -> float:
    try:
        return float(raw) if raw is not None else default
    except ValueError:
        return default


# -- the simulated engine ------------------------------------------------------------------


@dataclass
class RequestTrace:
    """One simulated request. Times are ms from the start of the run (engine clock)."""

    index: int
    client: int
    t_arrival: float
    t_start: float  # admitted into the batch (queueing = t_start - t_arrival)
    t_first_token: float
    token_times: list[float] = field(default_factory=list)
    # tokens emitted per streamed chunk (one chunk per engine step for this request)
    chunk_tokens: list[int] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0

    @property
    def t_end(self) -> float:
        return self.token_times[-1] if self.token_times else self.t_first_token

    @property
    def ttft(self) -> float:
        return self.t_first_token - self.t_arrival

    @property
    def e2e(self) -> float:
        return self.t_end - self.t_arrival


def draw_step_tokens(
    profile: VariantProfile, alpha: float, rng: random.Random, scheduled: int = 1
) -> tuple[int, int]:
    """Tokens one decode step emits for one sequence, and how many drafts were accepted
    (`scheduled`: the requests the step schedules, which vLLM's batch schedule reads)."""
    k = profile.draft_tokens(scheduled)
    if k == 0:
        return 1, 0
    accepted = 0
    while accepted < k and rng.random() < alpha:
        accepted += 1
    return accepted + 1, accepted


@dataclass
class _Active:
    trace: RequestTrace
    remaining: int
    context: int


def simulate(
    profile: VariantProfile,
    concurrency: int,
    requests: int,
    input_tokens: int,
    output_tokens: int,
    seed: int = 0,
    overlap: float = 0.2,
) -> list[RequestTrace]:
    """Closed-loop load: `concurrency` clients each send the next request when one ends.

    Continuous batching: each engine iteration admits waiting requests up to the batch
    limit (their prefill lengthens that iteration, which is how a newcomer stalls the
    running streams), then advances every running sequence by one (speculative) step.
    One instance; when TP leaves GPUs over, clients spread evenly over the model copies.
    No sleeping; times come back in milliseconds.
    """
    if concurrency < 1 or requests < 1:
        return []
    replicas = min(profile.replicas, concurrency)
    if replicas > 1:
        traces: list[RequestTrace] = []
        for replica in range(replicas):
            clients = len(range(replica, concurrency, replicas))
            share = len(range(replica, requests, replicas))
            for trace in (
                _simulate_copy(
                    profile,
                    clients,
                    share,
                    input_tokens,
                    output_tokens,
                    seed * 1000 + replica,
                    overlap,
                )
                if share
                else []
            ):
                trace.client = trace.client * replicas + replica
                traces.append(trace)
        traces.sort(key=lambda trace: (trace.t_arrival, trace.client))
        for index, trace in enumerate(traces):
            trace.index = index
        return traces
    return _simulate_copy(
        profile, concurrency, requests, input_tokens, output_tokens, seed, overlap
    )


def _simulate_copy(
    profile: VariantProfile,
    concurrency: int,
    requests: int,
    input_tokens: int,
    output_tokens: int,
    seed: int,
    overlap: float,
) -> list[RequestTrace]:
    """One model copy's engine loop (see simulate)."""
    rng = random.Random(seed)
    limit = max(1, profile.batch_limit(input_tokens + output_tokens))
    alpha = profile.acceptance_alpha(overlap)
    now = 0.0
    issued = 0
    waiting: list[RequestTrace] = []
    for client in range(min(concurrency, requests)):
        waiting.append(RequestTrace(issued, client, now, 0.0, 0.0, input_tokens=input_tokens))
        issued += 1
    active: list[_Active] = []
    done: list[RequestTrace] = []
    while waiting or active:
        admitted = waiting[: max(0, limit - len(active))]
        del waiting[: len(admitted)]
        step_ms = 0.0
        for trace in admitted:
            trace.t_start = now
            step_ms += profile.prefill_ms(input_tokens)
        newcomers = [_Active(trace, output_tokens, input_tokens) for trace in admitted]
        scheduled = len(active) + len(newcomers)
        drafts = profile.draft_tokens(scheduled)
        if active:
            mean_ctx = sum(seq.context for seq in active) // len(active)
            step_ms += profile.decode_step_ms(len(active), mean_ctx) * (
                profile.speculative_step_factor(len(active), scheduled)
            )
        now += step_ms
        for seq in newcomers:
            # The prefill yields the first token.
            seq.trace.t_first_token = now
            seq.trace.token_times.append(now)
            seq.trace.chunk_tokens.append(1)
            seq.remaining -= 1
            seq.context += 1
        finished: list[_Active] = []
        for seq in active:
            emitted, accepted = draw_step_tokens(profile, alpha, rng, scheduled)
            emitted = min(emitted, seq.remaining)
            if drafts:
                seq.trace.draft_tokens += drafts
                seq.trace.accepted_tokens += min(accepted, emitted)
            seq.trace.token_times.extend([now] * emitted)
            seq.trace.chunk_tokens.append(emitted)
            seq.remaining -= emitted
            seq.context += emitted
        active.extend(newcomers)
        for seq in active:
            if seq.remaining <= 0:
                finished.append(seq)
        for seq in finished:
            active.remove(seq)
            seq.trace.output_tokens = len(seq.trace.token_times)
            done.append(seq.trace)
            if issued < requests:
                waiting.append(
                    RequestTrace(issued, seq.trace.client, now, 0.0, 0.0, input_tokens=input_tokens)
                )
                issued += 1
    done.sort(key=lambda trace: trace.index)
    return done


# -- eval quality -----------------------------------------------------------------------

_BASE_REFUSAL = 0.005

EvalOutcome = Literal["correct", "wrong", "refusal"]


def item_uniforms(seed: int, prompt: str) -> tuple[float, float, float, float]:
    """Four uniforms in [0, 1) that depend only on (seed, prompt): paired across variants."""
    digest = hashlib.sha256(f"{seed}\x00{prompt}".encode()).digest()
    return tuple(  # type: ignore[return-value]
        int.from_bytes(digest[i * 8 : i * 8 + 8], "big") / 2.0**64 for i in range(4)
    )


def eval_outcome(
    profile: VariantProfile, seed: int, prompt: str, base_accuracy: float
) -> EvalOutcome:
    """Correct, wrong or refusal for one eval item on one variant.

    The baseline is correct when u1 < base_accuracy. A quantized variant redraws a
    scheme-dependent share of items (u2 < share) with a shifted probability (u3), so the
    mean moves by the §6.1 delta and the per-item discordance is realistic.
    """
    u1, u2, u3, u4 = item_uniforms(seed, prompt)
    precision = PRECISIONS[profile.quantization]
    big = profile.model_size_b >= 40
    delta = precision.accuracy_delta[1 if big else 0] - profile.quality_drop
    share = precision.perturbed_share
    if profile.quality_drop > 0:
        share = max(share, min(1.0, 4 * profile.quality_drop))
    p = base_accuracy
    correct = u1 < p
    if share > 0 and u2 < share:
        correct = u3 < min(1.0, max(0.0, p + delta / share))
    refusal = _BASE_REFUSAL + precision.refusal_increase + profile.refusal_increase
    if u4 < refusal:
        return "refusal"
    return "correct" if correct else "wrong"


def with_regression(
    profile: VariantProfile,
    latency_factor: float = 1.0,
    quality_drop: float = 0.0,
    refusal_increase: float = 0.0,
    prompt_classes: tuple[str, ...] = (),
    acceptance_factor: float = 1.0,
) -> VariantProfile:
    """The profile with an injected latency, quality or acceptance regression."""
    return replace(
        profile,
        acceptance_factor=profile.acceptance_factor * acceptance_factor,
        latency_factor=profile.latency_factor * latency_factor,
        quality_drop=profile.quality_drop + quality_drop,
        quality_drop_classes=tuple(dict.fromkeys((*profile.quality_drop_classes, *prompt_classes))),
        refusal_increase=profile.refusal_increase + refusal_increase,
    )
