"""A quantized KV cache for the real engine: the numerics of OPTION_KV_CACHE_DTYPE.

Keys and values are rounded to the cache's format as they are stored (after RoPE, as the
engines store them) and read back dequantized; the arithmetic stays in the model's dtype,
so what changes is exactly what the cache keeps.

- `fp8`: float8 e4m3 with scale 1.0, vLLM's `kv_cache_dtype="fp8"` without calibrated
  scales (its documented default).
- `nvfp4`: TensorRT-LLM's NVFP4 format, four-bit e2m1 values in blocks of 16 along the
  head dimension, each block with an e4m3 scale (its amax over 6). TensorRT-LLM adds a
  per-tensor fp32 scale above the block scales; this leaves it out (the block scales of
  SmolLM2-135M's keys and values sit inside e4m3's range without it).
"""

from __future__ import annotations

from typing import Any

KV_CACHE_DTYPES = ("auto", "fp8", "nvfp4")
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_BLOCK = 16


def cache_factory(torch: Any, base: Any, dtype: str) -> Any:
    """A DynamicCache class (`base`) that stores keys and values in `dtype`."""
    if dtype == "auto":
        return base
    if dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"unknown KV-cache dtype {dtype!r}; one of {KV_CACHE_DTYPES}")
    grid = torch.tensor(_E2M1)
    # Round to nearest on the e2m1 grid: the bucket between neighbouring midpoints (a tie
    # goes to the smaller magnitude).
    midpoints = (grid[1:] + grid[:-1]) / 2

    def fp8(t: Any) -> Any:
        return t.to(torch.float8_e4m3fn).to(t.dtype)

    def nvfp4(t: Any) -> Any:
        shape = t.shape
        blocks = t.reshape(*shape[:-1], shape[-1] // _BLOCK, _BLOCK)
        amax = blocks.abs().amax(-1, keepdim=True)
        scale = fp8(amax / 6.0).clamp(min=1e-12)
        magnitude = (blocks / scale).abs().clamp(max=6.0)
        nearest = torch.bucketize(magnitude, midpoints.to(t.dtype))
        return (grid.to(t.dtype)[nearest] * blocks.sign() * scale).reshape(shape)

    rounding = fp8 if dtype == "fp8" else nvfp4

    class QuantizedCache(base):  # type: ignore[misc]
        def update(self, key: Any, value: Any, layer_idx: int, *args: Any, **kw: Any) -> Any:
            return super().update(rounding(key), rounding(value), layer_idx, *args, **kw)

    QuantizedCache.__name__ = f"{dtype.upper()}Cache"
    return QuantizedCache
