"""Where a search's instance price comes from (pipeline/pricing.py), and how it is used."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from endpoint_optimizer.api import InstancePrice, SearchRow, parse_spec
from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.pipeline import pricing
from endpoint_optimizer.sandbox.pricing import products
from tests.unit.pipeline.test_search_record import (
    _flying,
    _measurement,
    _record,
    _status,
    objective,
)
from tests.unit.pipeline.test_search_status import BASE


def _item(usd: str, unit: str = "Hrs", instance: str = "ml.g6e.12xlarge") -> str:
    return json.dumps(
        {
            "product": {"attributes": {"instanceName": instance}},
            "terms": {
                "OnDemand": {
                    "T1": {
                        "effectiveDate": "2026-11-01T00:00:00Z",
                        "priceDimensions": {"D1": {"unit": unit, "pricePerUnit": {"USD": usd}}},
                    }
                }
            },
        }
    )


def test_one_on_demand_hourly_price_is_read_with_its_date() -> None:
    price, problem = pricing.from_price_list([_item("13.5")], "ml.g6e.12xlarge", "us-east-1")
    assert problem == "" and price is not None
    assert (price.usd_per_hour, price.effective) == (13.5, "2026-11-01T00:00:00Z")
    # The sandbox's products parse the same way (the shape it answers GetProducts with).
    ours = [json.dumps(p) for p in products()]
    price, _ = pricing.from_price_list(ours, "ml.p5en.48xlarge", "eu-west-1")
    assert price is None  # every region's product: more than one price, refused
    region = [
        json.dumps(p) for p in products() if p["product"]["attributes"]["regionCode"] == "eu-west-1"
    ]
    price, _ = pricing.from_price_list(region, "ml.p5en.48xlarge", "eu-west-1")
    assert price is not None and price.usd_per_hour == 88.0


@pytest.mark.parametrize(
    ("items", "said"),
    [
        ([], "has no on-demand hosting price"),
        ([_item("n/a")], "has no on-demand hosting price"),
        ([_item("1.0", unit="GB-Mo")], "has no on-demand hosting price"),
        (["{not json"], "has no on-demand hosting price"),
        ([_item("13.5"), _item("14.0")], "gives 2 hosting prices"),
    ],
)
def test_no_price_or_an_ambiguous_one_is_refused_with_what_to_do(
    items: list[str], said: str
) -> None:
    price, problem = pricing.from_price_list(items, "ml.g6e.12xlarge", "us-east-1")
    assert price is None and said in problem and "usdPerInstanceHour" in problem


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[1]", "must map instance types"),
        ("{", "not a JSON object"),
        ('{"ml.g6e.2xlarge": -1}', "ml.g6e.2xlarge"),
        ('{"ml.g6e.2xlarge": "cheap"}', "ml.g6e.2xlarge"),
        ('{"ml.g6e.2xlarge": true}', "ml.g6e.2xlarge"),
    ],
)
def test_the_operator_table_is_refused_naming_the_key(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=r"pricing\.usdPerInstanceHour") as caught:
        pricing.parse_table(text)
    assert said in str(caught.value)


def test_the_table_is_read_region_first_and_an_empty_one_is_empty() -> None:
    assert pricing.parse_table("") == {}
    table = pricing.parse_table('{"ml.g6e.2xlarge": 3, "eu-west-1/ml.g6e.2xlarge": 3.3}')
    eu = pricing.from_table(table, "ml.g6e.2xlarge", "eu-west-1")
    us = pricing.from_table(table, "ml.g6e.2xlarge", "us-east-1")
    assert eu is not None and us is not None and (eu.usd_per_hour, us.usd_per_hour) == (3.3, 3.0)
    assert pricing.from_table(table, "ml.p5en.48xlarge", "us-east-1") is None


def _spec(**search: Any) -> Any:
    body = copy.deepcopy(BASE)
    body["search"].update(search)
    return parse_spec(body)


def test_a_lookup_is_wanted_only_for_a_search_without_the_user_s_price() -> None:
    spec = _spec()
    assert pricing.wanted(spec, None)
    known = InstancePrice(
        usd_per_hour=13.0, instance_type="ml.g6e.12xlarge", region="us-east-1", source="x"
    )
    assert not pricing.wanted(spec, known)
    # The instance type changed (an edit): looked up again.
    assert pricing.wanted(spec, known.model_copy(update={"instance_type": "ml.g6e.2xlarge"}))
    assert not pricing.wanted(_spec(usdPerInstanceHour=10.0), None)
    body = copy.deepcopy(BASE)
    del body["search"]
    body["optimizations"] = {"quantization": {"scheme": "fp8"}}
    assert not pricing.wanted(parse_spec(body), None)


def test_a_looked_up_price_gives_the_rows_their_cost_and_the_spec_s_wins() -> None:
    looked_up = InstancePrice(
        usd_per_hour=36.0, instance_type="ml.g6e.12xlarge", region="us-east-1", source="x"
    )
    rows: list[SearchRow] = _flying()
    row = _record(BASE, _status(rows, price=looked_up), _measurement(objective(Verdict.PASS)))
    # 300 tokens/s is 1.08M tokens an hour: $36 / 1.08 = $33.33 per million.
    assert row.cost_per_million_tokens == pytest.approx(36.0 / 1.08, abs=1e-3)
    spec = {**BASE, "search": {**BASE["search"], "usdPerInstanceHour": 10.8}}
    row = _record(spec, _status(_flying(), price=looked_up), _measurement(objective(Verdict.PASS)))
    assert row.cost_per_million_tokens == pytest.approx(10.0, abs=1e-3)
