"""The Price List Query API in the sandbox, and the operator's price lookup through it.

Real boto3 (the `pricing` service model) against the sandbox over HTTP; the sandbox's
prices are its own (data/price_list.json), in the shape the Price List documents.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.pricing import PriceCache, read_price
from endpoint_optimizer.pipeline import pricing
from endpoint_optimizer.sandbox.testing import SandboxHandle


def _products(sandbox: SandboxHandle, **params: Any) -> list[dict[str, Any]]:
    client = sandbox.client("pricing")
    out = client.get_products(ServiceCode="AmazonSageMaker", **params)
    return [json.loads(item) for item in out["PriceList"]]


def test_get_products_filters_a_hosting_instance_in_a_region(sandbox: SandboxHandle) -> None:
    found = _products(sandbox, Filters=pricing.filters("ml.g6e.12xlarge", "us-east-1"))
    assert len(found) == 1
    attributes = found[0]["product"]["attributes"]
    assert (attributes["instanceName"], attributes["regionCode"]) == (
        "ml.g6e.12xlarge",
        "us-east-1",
    )
    price, problem = pricing.from_price_list(
        [json.dumps(p) for p in found], "ml.g6e.12xlarge", "us-east-1"
    )
    assert problem == "" and price is not None
    assert price.usd_per_hour == 13.0 and price.source == pricing.PRICE_LIST
    assert price.effective.startswith("2026-11-01")
    # ANY_OF, CONTAINS and NONE_OF as documented.
    any_of = {"Type": "ANY_OF", "Field": "regionCode", "Value": "us-west-2,eu-west-1"}
    assert {
        p["product"]["attributes"]["regionCode"] for p in _products(sandbox, Filters=[any_of])
    } == {
        "us-west-2",
        "eu-west-1",
    }
    contains = {"Type": "CONTAINS", "Field": "instanceName", "Value": "p5en"}
    assert {
        p["product"]["attributes"]["instanceName"] for p in _products(sandbox, Filters=[contains])
    } == {"ml.p5en.48xlarge"}
    none_of = {"Type": "NONE_OF", "Field": "regionCode", "Value": "us-east-1"}
    assert all(
        p["product"]["attributes"]["regionCode"] != "us-east-1"
        for p in _products(sandbox, Filters=[none_of])
    )


def test_pages_and_errors_are_the_price_list_s(sandbox: SandboxHandle) -> None:
    client = sandbox.client("pricing")
    first = client.get_products(ServiceCode="AmazonSageMaker", MaxResults=2)
    assert len(first["PriceList"]) == 2 and first["NextToken"]
    paginator = client.get_paginator("get_products")
    total = sum(len(p["PriceList"]) for p in paginator.paginate(ServiceCode="AmazonSageMaker"))
    assert total == len(_products(sandbox))
    with pytest.raises(client.exceptions.NotFoundException):
        client.get_products(ServiceCode="AmazonEC2Nope")
    with pytest.raises(client.exceptions.InvalidParameterException):
        client.get_products(ServiceCode="AmazonSageMaker", MaxResults=101)
    with pytest.raises(client.exceptions.InvalidNextTokenException):
        client.get_products(ServiceCode="AmazonSageMaker", NextToken="not-a-token")
    sandbox.admin.set_faults({"accessDenied": ["GetProducts"]})
    with pytest.raises(client.exceptions.AccessDeniedException):
        client.get_products(ServiceCode="AmazonSageMaker")


async def test_the_operator_reads_the_price_once_a_day_and_says_why_when_it_cannot(
    sandbox: SandboxHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in sandbox.environment.items():
        monkeypatch.setenv(key, value)
    aws = AwsClients(max_concurrency=2)
    cache = PriceCache()
    try:
        price, problem = await read_price(aws, "ml.g6e.12xlarge", "us-east-1", {}, cache=cache)
        assert problem == "" and price is not None and price.usd_per_hour == 13.0
        calls = [c for c in sandbox.admin.calls() if c["operation"] == "GetProducts"]
        assert len(calls) == 1
        # Cached: a second wake-up does not call again.
        assert await read_price(aws, "ml.g6e.12xlarge", "us-east-1", {}, cache=cache) == (price, "")
        assert len([c for c in sandbox.admin.calls() if c["operation"] == "GetProducts"]) == 1
        # The operator's table wins, region-qualified before the bare type; no call.
        table = {"ml.g6e.12xlarge": 11.0, "us-east-1/ml.g6e.12xlarge": 12.0}
        listed, _ = await read_price(aws, "ml.g6e.12xlarge", "us-east-1", table, cache=PriceCache())
        assert listed is not None and (listed.usd_per_hour, listed.source) == (12.0, "operator")
        # An instance type the Price List has no price for: none, and what to do.
        none, why = await read_price(aws, "ml.g6e.48xlarge", "us-east-1", {}, cache=cache)
        assert none is None and "usdPerInstanceHour" in why and "ml.g6e.48xlarge" in why
        # A role without pricing:GetProducts: none, and the permission named.
        sandbox.admin.set_faults({"accessDenied": ["GetProducts"]})
        none, why = await read_price(aws, "ml.g6e.12xlarge", "eu-west-1", {}, cache=cache)
        assert none is None and "pricing:GetProducts" in why
        # Lookup off: never called.
        before = len(sandbox.admin.calls())
        none, why = await read_price(aws, "ml.p4d.24xlarge", "us-east-1", {}, look_up=False)
        assert none is None and "pricing.lookUp" in why
        assert len(sandbox.admin.calls()) == before
    finally:
        aws.close()
