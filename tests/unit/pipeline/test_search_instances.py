"""spec.search.instanceTypes: a smaller instance after a kept quantization (issue 21).

The stack's effective spec, the memory check that refuses what cannot fit, the prices
each instance type costs, and the cost objective judged across instance types.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from endpoint_optimizer.analysis.benchmark import objective_check
from endpoint_optimizer.api import (
    InstancePrice,
    OptimizedEndpointStatus,
    Phase,
    SearchRow,
    SearchStatus,
    parse_spec,
)
from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.pipeline import fit, pricing
from endpoint_optimizer.pipeline.search_status import judged_cost_ratio
from tests.unit.analysis.test_benchmark import level
from tests.unit.pipeline.test_search_status import BASE

SHAPE = {"parametersBillion": 70.6, "layers": 80, "kvHeads": 8, "headDim": 128}


def _spec(**search: Any) -> Any:
    body = copy.deepcopy(BASE)
    body["instanceType"] = "ml.g5.48xlarge"
    body["search"] = {
        "quantization": [{"name": "awq", "scheme": "awq"}],
        "instanceTypes": [
            {"name": "g5-12x", "instanceType": "ml.g5.12xlarge"},
            {"name": "g6e-12x", "instanceType": "ml.g6e.12xlarge", "usdPerInstanceHour": 13.0},
            {"name": "two", "instanceType": "ml.g5.12xlarge", "instanceCount": 2,
             "tensorParallelDegree": 2},
        ],
        "memoryFit": {**SHAPE, "maxModelLen": 2048},
        **search,
    }  # fmt: skip
    return parse_spec(body)


def test_a_stack_with_an_instance_alternative_is_served_on_it() -> None:
    spec = _spec()
    on = spec.searched(["awq", "g5-12x"])
    assert (on.instance_type, on.instance_count) == ("ml.g5.12xlarge", 1)
    assert on.optimizations.quantization is not None
    # Served with the sequence length the memory check assumed.
    assert on.container.max_model_len == 2048
    assert on.container.tensor_parallel_degree is None  # every GPU of the instance
    two = spec.searched(["awq", "two"])
    assert (two.instance_count, two.container.tensor_parallel_degree) == (2, 2)
    # The stack without it stays on the declared instance.
    assert spec.searched(["awq"]).instance_type == "ml.g5.48xlarge"


@pytest.mark.parametrize(
    ("instance", "fits", "fits_bf16"),
    [
        ("ml.g5.12xlarge", True, False),  # 4 x 24 GiB: ~10 GiB of 4-bit weights each
        ("ml.g6e.12xlarge", True, True),  # 4 x 48 GiB: even bf16's 33 GiB each
        ("ml.g5.2xlarge", False, False),  # one A10G: 39.5 GiB of weights alone
        ("ml.g6e.2xlarge", False, False),  # one L40S: 39.5 + 2.5 + 1.5 over 43.2
    ],
)
def test_the_memory_check_of_a_4_bit_70b(instance: str, fits: bool, fits_bf16: bool) -> None:
    shape = fit.ModelShape(70.6, 80, 8, 128)
    found = fit.stack_fit(
        instance, shape, scheme="awq", kv_cache_dtype=None, max_model_len=2048, batch=4
    )
    assert found.fits is fits, found.why
    bf16 = fit.stack_fit(
        instance, shape, scheme=None, kv_cache_dtype=None, max_model_len=2048, batch=4
    )
    assert bf16.fits is fits_bf16, bf16.why
    # An FP8 KV cache halves the cache, not the weights.
    half = fit.stack_fit(
        instance, shape, scheme="awq", kv_cache_dtype="fp8", max_model_len=2048, batch=4
    )
    assert half.need_gib is not None and found.need_gib is not None
    assert half.need_gib < found.need_gib


def test_a_copy_on_fewer_gpus_must_fit_on_them() -> None:
    shape = fit.ModelShape(70.6, 80, 8, 128)
    four = fit.stack_fit(
        "ml.g5.12xlarge", shape, scheme="awq", kv_cache_dtype=None, max_model_len=2048, batch=4
    )
    one = fit.stack_fit(
        "ml.g5.12xlarge",
        shape,
        scheme="awq",
        kv_cache_dtype=None,
        max_model_len=2048,
        batch=4,
        tensor_parallel_degree=1,
    )
    assert four.fits and not one.fits


def _status(price: float | None = 20.0, looked_up: float | None = 7.0) -> SearchStatus:
    return SearchStatus(
        price=None
        if price is None
        else InstancePrice(
            usd_per_hour=price, instance_type="ml.g5.48xlarge", region="us-east-1", source="x"
        ),
        prices=[]
        if looked_up is None
        else [
            InstancePrice(
                usd_per_hour=looked_up,
                instance_type="ml.g5.12xlarge",
                region="us-east-1",
                source="AWS Price List",
            )
        ],
    )


def test_each_instance_type_has_its_own_price() -> None:
    spec = _spec()
    search = _status()
    # The alternative's own price, else the looked-up one; the declared type's from status.
    assert pricing.missing_types(spec, None) == ["ml.g5.12xlarge"]
    assert pricing.missing_types(spec, search) == []
    assert pricing.hourly(spec, search, spec.searched(["awq", "g5-12x"])) == 7.0
    assert pricing.hourly(spec, search, spec.searched(["awq", "two"])) == 14.0
    assert pricing.hourly(spec, search, spec.searched(["awq", "g6e-12x"])) == 13.0
    assert pricing.hourly(spec, search, spec.searched(["awq"])) == 20.0
    ref, cand = spec.searched(["awq"]), spec.searched(["awq", "g5-12x"])
    assert pricing.cost_ratio(spec, search, ref, cand) == pytest.approx(0.35)
    # The same instances need no price; another one with an unknown price gives none.
    assert pricing.cost_ratio(spec, SearchStatus(), ref, spec.searched(["awq"])) == 1.0
    assert pricing.cost_ratio(spec, _status(looked_up=None), ref, cand) is None


def test_the_judged_ratio_is_the_candidate_s_over_its_reference_s() -> None:
    spec = _spec()
    search = _status()
    search.rows = [
        SearchRow(name="awq", rung="quantization", verdict="", measured=True, gain=0.4),
        SearchRow(name="g5-12x", rung="instanceTypes", base=["awq"]),
    ]
    status = OptimizedEndpointStatus(phase=Phase.SEARCHING, search=search)
    # In flight: g5-12x against the best (AWQ on the declared g5.48xlarge).
    assert judged_cost_ratio(spec, status) == pytest.approx(0.35)
    # Search done with the winner on g5.12xlarge: the rollout judges it against the
    # baseline, also on g5.48xlarge.
    search.rows[0].verdict = "Kept"
    search.rows[1].measured, search.rows[1].verdict = True, "Kept"
    search.best, search.done = ["awq", "g5-12x"], "every rung tried"
    status.phase = Phase.ANALYZING
    assert judged_cost_ratio(spec, status) == pytest.approx(0.35)


def test_a_cost_objective_across_instance_types_takes_the_price_ratio() -> None:
    base, cand = level(1, 1), level(1, 2, 2.0)  # half the tokens per second
    same = objective_check("costPerMillionTokens", 0.2, [base], [cand])
    assert same.verdict is Verdict.NO_IMPROVEMENT  # twice the cost on the same instance
    cheaper = objective_check("costPerMillionTokens", 0.2, [base], [cand], cost_ratio=0.35)
    # Half the throughput at 35 % of the price: 70 % of the cost, a 30 % gain.
    assert cheaper.verdict is Verdict.PASS, cheaper.reason
    assert cheaper.interval_low is not None and same.interval_low is not None
    assert cheaper.interval_low == pytest.approx(same.interval_low * 0.35)
    assert "price ratio 0.350" in cheaper.rule
    unknown = objective_check("costPerMillionTokens", 0.2, [base], [cand], cost_ratio=None)
    assert unknown.verdict is Verdict.INCONCLUSIVE and "pricing:GetProducts" in unknown.reason
    # Other objectives ignore prices.
    latency = objective_check("latency", 0.2, [base], [cand], cost_ratio=None)
    assert latency.verdict is Verdict.NO_IMPROVEMENT
