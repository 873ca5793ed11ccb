"""Does a model fit an instance's accelerator memory? The check before a smaller instance.

Issue 21: after a 4-bit or 8-bit win, a rung may propose a smaller instance type, but only
one the model still fits: weights at their bits, plus the KV cache at `maxModelLen` for a
full batch, plus a fixed overhead (activations, CUDA graphs), within the share of memory
the engine reserves (`gpu_memory_utilization`, LMI's and vLLM's 0.9 by default). Tensor
parallelism over the instance's devices splits both weights and cache.

Pure: instance facts come from `sagemaker.instances` (per-device memory and device counts);
the model's shape is given. The arithmetic is checked against the H200 measurements in
reference/h200-calibration.md (max concurrent sequences at 90 % of 141 GB).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from endpoint_optimizer.sagemaker import instances

GIB = 1024**3
# Activations of a full prefill batch and CUDA graphs; the calibration measured 2.79 GB for
# an 8x2048 bf16 prefill of an 8B model, and engines size the cache after a profiling run,
# so 1.5 GiB per device is a floor, not a guess at the peak.
OVERHEAD_GIB = 1.5
DEFAULT_UTILIZATION = 0.9


@dataclass(frozen=True)
class ModelShape:
    """What memory a model needs: its parameter count and its attention's KV layout.

    From the model's config.json: `num_hidden_layers`, `num_key_value_heads`, and
    `head_dim` (or `hidden_size / num_attention_heads`).
    """

    params_b: float
    layers: int
    kv_heads: int
    head_dim: int

    def __post_init__(self) -> None:
        if self.params_b <= 0 or min(self.layers, self.kv_heads, self.head_dim) <= 0:
            raise ValueError(f"a model shape needs positive sizes, got {self}")

    def weights_bytes(self, bits: float) -> float:
        """Weights at `bits` per parameter (4-bit group-128 schemes carry ~4.25 with scales)."""
        return self.params_b * 1e9 * bits / 8

    def kv_bytes_per_token(self, kv_dtype_bytes: float = 2.0) -> float:
        """K and V, every layer: Llama-3.1-8B in bf16 is 131072 bytes per token."""
        return 2 * self.layers * self.kv_heads * self.head_dim * kv_dtype_bytes


# Llama-3.1 shapes (config.json): 8B and 70B, grouped-query attention with 8 KV heads.
LLAMA_8B = ModelShape(params_b=8.03, layers=32, kv_heads=8, head_dim=128)
LLAMA_70B = ModelShape(params_b=70.6, layers=80, kv_heads=8, head_dim=128)


@dataclass(frozen=True)
class Fit:
    """One instance type's answer: fits or not, per device, with the numbers and why."""

    instance_type: str
    fits: bool
    need_gib: float | None  # per device
    have_gib: float | None  # per device, the engine's reserved share
    devices: int | None
    why: str


def max_sequences(
    *,
    device_bytes: float,
    devices: int,
    weights_bytes: float,
    kv_bytes_per_token: float,
    tokens_per_sequence: int,
    utilization: float = DEFAULT_UTILIZATION,
    overhead_bytes: float = OVERHEAD_GIB * GIB,
) -> int:
    """How many sequences of `tokens_per_sequence` the cache holds once the weights are in."""
    free = devices * (device_bytes * utilization - overhead_bytes) - weights_bytes
    if free <= 0 or tokens_per_sequence <= 0:
        return 0
    return math.floor(free / (kv_bytes_per_token * tokens_per_sequence))


def memory_fit(
    instance_type: str,
    shape: ModelShape,
    *,
    weight_bits: float,
    max_model_len: int,
    batch: int,
    kv_dtype_bytes: float = 2.0,
    utilization: float = DEFAULT_UTILIZATION,
) -> Fit:
    """Whether `batch` sequences of `max_model_len` tokens fit beside the weights.

    Refuses, with the reason, an instance whose memory the tables do not know: a proposal
    the check cannot make is not made.
    """
    if max_model_len < 1 or batch < 1 or not 0 < utilization <= 1 or kv_dtype_bytes <= 0:
        raise ValueError(
            f"memory_fit needs maxModelLen and batch of at least 1, a utilization in (0, 1] "
            f"and a positive KV element size; got {max_model_len}, {batch}, {utilization}, "
            f"{kv_dtype_bytes}"
        )
    accelerator = instances.accelerator(instance_type)
    devices = instances.devices(instance_type)
    if accelerator is None or accelerator.memory_gib is None or devices is None:
        return Fit(
            instance_type, False, None, None, devices,
            f"{instance_type}: accelerator memory unknown, not proposed",
        )  # fmt: skip
    have = accelerator.memory_gib * utilization
    weights = shape.weights_bytes(weight_bits) / devices
    cache = shape.kv_bytes_per_token(kv_dtype_bytes) * max_model_len * batch / devices
    need = (weights + cache) / GIB + OVERHEAD_GIB
    fits = need <= have
    why = (
        f"{instance_type}: {need:.1f} GiB per device (weights {weights / GIB:.1f}, "
        f"KV cache {cache / GIB:.1f} for {batch} x {max_model_len} tokens, overhead "
        f"{OVERHEAD_GIB:g}) {'within' if fits else 'over'} {have:.1f} GiB "
        f"({utilization:.0%} of {accelerator.memory_gib} GiB x {devices})"
    )
    return Fit(instance_type, fits, round(need, 2), round(have, 2), devices, why)


def smaller_instances(
    current: str,
    shape: ModelShape,
    *,
    weight_bits: float,
    max_model_len: int,
    batch: int,
    kv_dtype_bytes: float = 2.0,
    utilization: float = DEFAULT_UTILIZATION,
    candidates: Iterable[str] | None = None,
) -> list[Fit]:
    """GPU instance types with less accelerator memory than `current`, each with its fit.

    Smallest first; those that cannot fit are kept in the list (refused, with the numbers)
    so the search's table shows why a cheaper instance was not tried.
    """
    total = _total_gib(current)
    if total is None:
        return []
    pool = instances.DEVICES if candidates is None else candidates
    smaller = [
        name
        for name in pool
        if name != current
        and (size := _total_gib(name)) is not None
        and size < total
        and (accelerator := instances.accelerator(name)) is not None
        and accelerator.kind == "gpu"
    ]
    smaller.sort(key=lambda name: (_total_gib(name) or 0.0, name))
    return [
        memory_fit(
            name,
            shape,
            weight_bits=weight_bits,
            max_model_len=max_model_len,
            batch=batch,
            kv_dtype_bytes=kv_dtype_bytes,
            utilization=utilization,
        )
        for name in smaller
    ]


def _total_gib(instance_type: str) -> float | None:
    accelerator = instances.accelerator(instance_type)
    devices = instances.devices(instance_type)
    if accelerator is None or accelerator.memory_gib is None or devices is None:
        return None
    return float(accelerator.memory_gib * devices)


# Bits per parameter a served quantization scheme occupies, over the whole model: the
# quantized layers' bits with their group scales, plus the embeddings and LM head, which
# stay 16-bit (a 4-bit 70B checkpoint is ~40 GB, 0.56 bytes a parameter; 8-bit ~72 GB).
# The sandbox's calibration (sandbox/techniques.py) uses the same sizes. Unquantized: bf16.
SCHEME_BITS = {"fp8": 8.5, "int8": 8.5, "smoothquant": 8.5, "awq": 4.8, "gptq": 4.8}
KV_BYTES = {None: 2.0, "fp8": 1.0, "nvfp4": 0.5}


def stack_fit(
    instance_type: str,
    shape: ModelShape,
    *,
    scheme: str | None,
    kv_cache_dtype: str | None,
    max_model_len: int,
    batch: int,
    tensor_parallel_degree: int | None = None,
    utilization: float | None = None,
) -> Fit:
    """A search stack on `instance_type`: its quantization's bits, its KV cache dtype, the
    sequences it must hold. With a tensor-parallel degree below the instance's devices, one
    model copy spans only that many devices (and must fit on them)."""
    devices = instances.devices(instance_type)
    fit = memory_fit(
        instance_type,
        shape,
        weight_bits=SCHEME_BITS.get(scheme or "", 16.0),
        max_model_len=max_model_len,
        batch=batch,
        kv_dtype_bytes=KV_BYTES.get(kv_cache_dtype, 2.0),
        utilization=utilization or DEFAULT_UTILIZATION,
    )
    if tensor_parallel_degree is None or devices is None or tensor_parallel_degree >= devices:
        return fit
    # Fewer devices per copy: the same arithmetic on a copy's share of the instance.
    per_copy = memory_fit(
        instance_type,
        ModelShape(
            shape.params_b * devices / tensor_parallel_degree,
            shape.layers,
            shape.kv_heads,
            shape.head_dim,
        ),
        weight_bits=SCHEME_BITS.get(scheme or "", 16.0),
        max_model_len=max_model_len,
        batch=max(1, math.ceil(batch * devices / tensor_parallel_degree)),
        kv_dtype_bytes=KV_BYTES.get(kv_cache_dtype, 2.0),
        utilization=utilization or DEFAULT_UTILIZATION,
    )
    return per_copy
