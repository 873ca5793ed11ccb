"""The instance price a search's costs use: the operator's table, else the AWS Price List.

GetProducts (the Price List Query API, `pricing:GetProducts`, no resource scoping) is
called at most once per (instance type, region) a day per operator process: the price
changes rarely, and the answer (or why there is none) is kept in status.search, which is
the search's only memory. A failure of the lookup never holds the search: the rows then
carry no cost, and status.search.priceProblem says why and how to give a price.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from endpoint_optimizer.api import InstancePrice
from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.errors import RETRYABLE, ErrorKind, SageMakerError
from endpoint_optimizer.pipeline import pricing

CACHE_SECONDS = 24 * 3600.0
# GetProducts returns at most 100 products a page; a hosting instance in one region is
# one or two products, so a second page means the filters matched something else.
MAX_PAGES = 3


class PriceCache:
    """Looked-up prices (or why none) by (instance type, region), each kept a day."""

    def __init__(self, seconds: float = CACHE_SECONDS) -> None:
        self.seconds = seconds
        self._items: dict[tuple[str, str], tuple[float, InstancePrice | None, str]] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> tuple[InstancePrice | None, str] | None:
        with self._lock:
            item = self._items.get(key)
        if item is None or item[0] < time.monotonic():
            return None
        return item[1], item[2]

    def put(self, key: tuple[str, str], price: InstancePrice | None, problem: str) -> None:
        with self._lock:
            self._items[key] = (time.monotonic() + self.seconds, price, problem)


CACHE = PriceCache()


async def read_price(
    aws: AwsClients,
    instance_type: str,
    region: str,
    table: Mapping[str, float],
    look_up: bool = True,
    cache: PriceCache = CACHE,
) -> tuple[InstancePrice | None, str]:
    """The hourly price of `instance_type` in `region`, or why none is known."""
    listed = pricing.from_table(table, instance_type, region)
    if listed is not None:
        return listed, ""
    if not look_up:
        return None, (
            f"no price for {instance_type} in {region}: the operator's Price List lookup is "
            "off (pricing.lookUp); set spec.search.usdPerInstanceHour or the chart's "
            "pricing.usdPerInstanceHour"
        )
    key = (instance_type, region)
    cached = cache.get(key)
    if cached is not None:
        return cached
    items: list[str | Mapping[str, Any]] = []
    token = ""
    try:
        for _ in range(MAX_PAGES):
            params: dict[str, object] = {
                "ServiceCode": pricing.SERVICE_CODE,
                "Filters": pricing.filters(instance_type, region),
                "FormatVersion": "aws_v1",
                "MaxResults": 100,
            }
            if token:
                params["NextToken"] = token
            out = await aws.call(
                "pricing",
                pricing.PRICING_REGION,
                "GetProducts",
                f"price of {instance_type} in {region}",
                **params,
            )
            items.extend(out.get("PriceList", []))
            token = str(out.get("NextToken") or "")
            if not token:
                break
    except SageMakerError as exc:
        problem = (
            f"the AWS Price List could not be read ({exc.code or exc.kind.value}: "
            f"{exc.aws_message[:200]}); "
            + (
                "grant the operator pricing:GetProducts, or "
                if exc.kind is ErrorKind.ACCESS_DENIED
                else ""
            )
            + "set spec.search.usdPerInstanceHour or the chart's pricing.usdPerInstanceHour"
        )
        if exc.kind in RETRYABLE:
            return None, problem  # tried again on a later wake-up: not cached
        cache.put(key, None, problem)
        return None, problem
    price, problem = pricing.from_price_list(items, instance_type, region)
    cache.put(key, price, problem)
    return price, problem
