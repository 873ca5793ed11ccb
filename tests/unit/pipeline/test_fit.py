"""The memory-fit check a smaller-instance proposal must pass (issue 21), against the H200
measurements of reference/h200-calibration.md and the instance tables."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.pipeline import fit
from endpoint_optimizer.pipeline.fit import LLAMA_8B, LLAMA_70B, ModelShape
from endpoint_optimizer.sagemaker import instances


def test_kv_bytes_per_token_match_the_calibrated_llama_shapes() -> None:
    assert LLAMA_8B.kv_bytes_per_token() == 131072
    assert LLAMA_70B.kv_bytes_per_token() == 327680
    assert LLAMA_8B.kv_bytes_per_token(kv_dtype_bytes=1) == 65536


@pytest.mark.parametrize(
    ("weights_gb", "kv_bytes", "context", "expected"),
    [
        # reference/h200-calibration.md, "max concurrent sequences at 90% of 141 GB".
        (16.1, 131072, 2048, 412),
        (9.08, 131072, 2048, 438),
        (5.81, 131072, 2048, 451),
        (16.1, 131072, 8192, 103),
        (9.08, 65536, 4096, 438),
        (72.7, 327680, 2048, 80),
        (40.6, 163840, 32768, 16),
        (141, 327680, 1024, 0),
    ],
)
def test_max_sequences_reproduces_the_h200_table(
    weights_gb: float, kv_bytes: int, context: int, expected: int
) -> None:
    got = fit.max_sequences(
        device_bytes=141e9,
        devices=1,
        weights_bytes=weights_gb * 1e9,
        kv_bytes_per_token=kv_bytes,
        tokens_per_sequence=context,
        overhead_bytes=0,
    )
    assert got == expected


def test_a_4_bit_8b_fits_one_l4_where_bf16_does_not() -> None:
    bf16 = fit.memory_fit("ml.g6.xlarge", LLAMA_8B, weight_bits=16, max_model_len=8192, batch=8)
    int4 = fit.memory_fit("ml.g6.xlarge", LLAMA_8B, weight_bits=4.25, max_model_len=8192, batch=8)
    assert not bf16.fits
    assert int4.fits
    assert bf16.have_gib == int4.have_gib == pytest.approx(21.6)
    assert bf16.need_gib is not None and bf16.need_gib > 21.6
    assert "over 21.6 GiB (90% of 24 GiB x 1)" in bf16.why
    assert "8 x 8192 tokens" in int4.why and "within" in int4.why


def test_tensor_parallelism_over_the_instance_devices_splits_weights_and_cache() -> None:
    one = fit.memory_fit("ml.p5e.48xlarge", LLAMA_70B, weight_bits=16, max_model_len=8192, batch=64)
    assert one.fits and one.devices == 8
    # The same model on one L40S: 141 GB of bf16 weights cannot fit 48 GiB.
    alone = fit.memory_fit("ml.g6e.2xlarge", LLAMA_70B, weight_bits=16, max_model_len=2048, batch=1)
    assert not alone.fits


@pytest.mark.parametrize("instance_type", ["ml.g7.2xlarge", "ml.m5.xlarge", "g6e.2xlarge"])
def test_an_instance_whose_memory_is_unknown_is_refused_with_the_reason(instance_type: str) -> None:
    answer = fit.memory_fit(instance_type, LLAMA_8B, weight_bits=4, max_model_len=4096, batch=1)
    assert not answer.fits
    assert answer.need_gib is None
    assert answer.why == f"{instance_type}: accelerator memory unknown, not proposed"


def test_smaller_instances_after_a_4_bit_win_list_fits_and_refusals_smallest_first() -> None:
    found = fit.smaller_instances(
        "ml.g6e.2xlarge", LLAMA_8B, weight_bits=4.25, max_model_len=8192, batch=8
    )
    names = [f.instance_type for f in found]
    totals = [instances.FAMILIES[instances.instance_family(n)].memory_gib for n in names]
    assert totals == sorted(totals) and all(t is not None and t < 48 for t in totals)
    assert {"ml.g6.xlarge", "ml.g5.xlarge", "ml.g4dn.xlarge"} <= set(names)
    assert not any(instances.is_neuron(n) for n in names)
    by_name = {f.instance_type: f for f in found}
    assert by_name["ml.g6.xlarge"].fits
    # The same search at a longer context and batch refuses the 16 GiB T4 but keeps the L4.
    wide = fit.smaller_instances(
        "ml.g6e.2xlarge", LLAMA_8B, weight_bits=4.25, max_model_len=16384, batch=8
    )
    refused = {f.instance_type for f in wide if not f.fits}
    assert "ml.g4dn.xlarge" in refused and "ml.g6.xlarge" not in refused
    # 4.0 GiB of weights + 16.0 of cache + 1.5: the 24 GiB L4 holds it with 0.1 GiB to spare.
    assert {f.instance_type: f for f in wide}["ml.g6.xlarge"].need_gib == pytest.approx(
        21.5, abs=0.05
    )
    assert not fit.smaller_instances(
        "ml.m5.xlarge", LLAMA_8B, weight_bits=4, max_model_len=1, batch=1
    )


def test_a_shape_with_a_zero_size_is_refused() -> None:
    with pytest.raises(ValueError, match="positive sizes"):
        ModelShape(params_b=8, layers=0, kv_heads=8, head_dim=128)


@pytest.mark.parametrize(
    "bad",
    [{"batch": 0}, {"max_model_len": 0}, {"utilization": 0.0}, {"utilization": 1.5}],
)
def test_a_fit_asked_with_a_meaningless_size_is_refused(bad: dict[str, float]) -> None:
    asked: dict[str, float] = {"max_model_len": 4096, "batch": 1, "utilization": 0.9, **bad}
    with pytest.raises(ValueError, match="memory_fit needs"):
        fit.memory_fit(
            "ml.g6.xlarge",
            LLAMA_8B,
            weight_bits=4,
            max_model_len=int(asked["max_model_len"]),
            batch=int(asked["batch"]),
            utilization=asked["utilization"],
        )


_GPU_TYPES = sorted(
    name
    for name in instances.DEVICES
    if (a := instances.accelerator(name)) is not None and a.kind == "gpu" and a.memory_gib
)


@settings(max_examples=300, deadline=None)
@given(
    instance_type=st.sampled_from(_GPU_TYPES),
    params_b=st.floats(0.5, 120),
    bits=st.sampled_from([4.0, 4.25, 8.0, 16.0]),
    max_model_len=st.integers(256, 131072),
    batch=st.integers(1, 512),
)
def test_fit_is_monotone_and_agrees_with_max_sequences(
    instance_type: str, params_b: float, bits: float, max_model_len: int, batch: int
) -> None:
    shape = ModelShape(params_b=params_b, layers=32, kv_heads=8, head_dim=128)
    answer = fit.memory_fit(
        instance_type, shape, weight_bits=bits, max_model_len=max_model_len, batch=batch
    )
    accelerator = instances.accelerator(instance_type)
    devices = instances.devices(instance_type)
    assert accelerator is not None and accelerator.memory_gib and devices
    most = fit.max_sequences(
        device_bytes=accelerator.memory_gib * fit.GIB,
        devices=devices,
        weights_bytes=shape.weights_bytes(bits),
        kv_bytes_per_token=shape.kv_bytes_per_token(),
        tokens_per_sequence=max_model_len,
    )
    if batch != most and batch != most + 1:  # the boundary is float rounding's to call
        assert answer.fits == (batch <= most)
    if answer.fits:
        smaller = fit.memory_fit(
            instance_type, shape, weight_bits=min(bits, 4.0), max_model_len=max_model_len,
            batch=max(1, batch - 1),
        )  # fmt: skip
        assert smaller.fits
