"""Instance prices for a search's cost per million tokens (issue 21): pure parts.

Where a price comes from, first found wins:

1. `spec.search.usdPerInstanceHour`: the user's own (a contract, a savings plan).
2. The operator's table, the chart's `pricing.usdPerInstanceHour` (by instance type, or
   `region/instance type`): one place for a platform team's negotiated prices.
3. The AWS Price List (GetProducts on AmazonSageMaker, product family "ML Instance",
   platoinstancetype "Hosting", the endpoint's region and instance type), on-demand USD
   per hour, with the term's effectiveDate: the authoritative, dated public price.

No table of prices is shipped in the image: prices differ by region, change, and the
Price List is where AWS publishes them with their date. Without any of the three the
search runs as before and each row says its cost is unknown, and why.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from endpoint_optimizer.api import InstancePrice, OptimizedEndpointSpec, SearchStatus

SERVICE_CODE = "AmazonSageMaker"
# The Price List Query API answers in us-east-1 (also ap-south-1 and eu-central-1); the
# region priced is a filter, not the endpoint the client calls.
PRICING_REGION = "us-east-1"
SPEC, OPERATOR, PRICE_LIST = "spec", "operator", "AWS Price List"


def filters(instance_type: str, region: str) -> list[dict[str, str]]:
    """GetProducts filters for one SageMaker hosting instance type in one region."""
    return [
        {"Type": "TERM_MATCH", "Field": "productFamily", "Value": "ML Instance"},
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
        {"Type": "TERM_MATCH", "Field": "instanceName", "Value": instance_type},
        {"Type": "TERM_MATCH", "Field": "platoinstancetype", "Value": "Hosting"},
    ]


def _hourly(item: Mapping[str, Any]) -> tuple[float, str] | None:
    """The on-demand USD hourly price of one Price List product, with its effective date."""
    terms = item.get("terms", {}).get("OnDemand", {})
    for term in terms.values() if isinstance(terms, Mapping) else ():
        for dim in (term.get("priceDimensions") or {}).values():
            if str(dim.get("unit", "")).lower() not in {"hrs", "hours", "hour"}:
                continue
            try:
                usd = float(dim.get("pricePerUnit", {}).get("USD", ""))
            except (TypeError, ValueError):
                continue
            if math.isfinite(usd) and usd >= 0:
                return usd, str(term.get("effectiveDate", ""))[:64]
    return None


def from_price_list(
    items: Iterable[str | Mapping[str, Any]], instance_type: str, region: str
) -> tuple[InstancePrice | None, str]:
    """GetProducts' PriceList (one JSON document per product) to one hourly price.

    More than one distinct price for the same filters is refused rather than guessed.
    """
    found: set[tuple[float, str]] = set()
    for raw in items:
        try:
            item = raw if isinstance(raw, Mapping) else json.loads(raw)
        except (TypeError, ValueError):
            continue
        if not isinstance(item, Mapping):
            continue
        attributes = item.get("product", {}).get("attributes", {})
        if attributes.get("instanceName") not in (None, instance_type):
            continue
        hourly = _hourly(item)
        if hourly is not None:
            found.add(hourly)
    prices = {usd for usd, _ in found}
    if not prices:
        return None, (
            f"the AWS Price List has no on-demand hosting price for {instance_type} in "
            f"{region}; set spec.search.usdPerInstanceHour or the chart's "
            "pricing.usdPerInstanceHour"
        )
    if len(prices) > 1:
        return None, (
            f"the AWS Price List gives {len(prices)} hosting prices for {instance_type} in "
            f"{region} ({', '.join(f'{p:g}' for p in sorted(prices))}); set "
            "spec.search.usdPerInstanceHour to the one that applies"
        )
    usd, effective = max(found, key=lambda f: f[1])
    return InstancePrice(
        usd_per_hour=usd,
        instance_type=instance_type,
        region=region,
        source=PRICE_LIST,
        effective=effective,
    ), ""


def from_table(table: Mapping[str, float], instance_type: str, region: str) -> InstancePrice | None:
    """The operator's table: `region/instance type` before `instance type`."""
    for key in (f"{region}/{instance_type}", instance_type):
        usd = table.get(key)
        if usd is not None:
            return InstancePrice(
                usd_per_hour=usd, instance_type=instance_type, region=region, source=OPERATOR
            )
    return None


def from_spec(spec: OptimizedEndpointSpec) -> InstancePrice | None:
    search = spec.search
    if search is None or search.usd_per_instance_hour is None:
        return None
    return InstancePrice(
        usd_per_hour=search.usd_per_instance_hour,
        instance_type=spec.instance_type,
        region=spec.region,
        source=SPEC,
    )


def alternative_types(spec: OptimizedEndpointSpec) -> list[str]:
    """Instance types of search.instanceTypes that give no price of their own."""
    if spec.search is None:
        return []
    return sorted(
        {
            a.instance_type
            for a in spec.search.instance_types
            if a.usd_per_instance_hour is None and a.instance_type != spec.instance_type
        }
    )


def missing_types(spec: OptimizedEndpointSpec, search: SearchStatus | None) -> list[str]:
    """The instance alternatives' types whose price is still to look up."""
    known = {p.instance_type for p in (search.prices if search is not None else [])}
    return [t for t in alternative_types(spec) if t not in known]


def price_of(
    declared: OptimizedEndpointSpec, search: SearchStatus | None, instance_type: str
) -> InstancePrice | None:
    """The hourly price of one instance type a search serves on: the declared type's (the
    spec's, else status.search.price), or an instance alternative's own, else looked up."""
    if instance_type == declared.instance_type:
        return from_spec(declared) or (search.price if search is not None else None)
    if declared.search is not None:
        for a in declared.search.instance_types:
            if a.instance_type == instance_type and a.usd_per_instance_hour is not None:
                return InstancePrice(
                    usd_per_hour=a.usd_per_instance_hour,
                    instance_type=instance_type,
                    region=declared.region,
                    source=SPEC,
                )
    for p in search.prices if search is not None else []:
        if p.instance_type == instance_type:
            return p
    return None


def hourly(
    declared: OptimizedEndpointSpec, search: SearchStatus | None, served: OptimizedEndpointSpec
) -> float | None:
    """What `served` (a stack's effective spec) costs an hour: its price x its count."""
    price = price_of(declared, search, served.instance_type)
    return None if price is None else price.usd_per_hour * served.instance_count


def cost_ratio(
    declared: OptimizedEndpointSpec,
    search: SearchStatus | None,
    reference: OptimizedEndpointSpec,
    candidate: OptimizedEndpointSpec,
) -> float | None:
    """Candidate's hourly cost over the reference's: 1.0 on the same instances (no price
    needed), None where a price that differs is unknown."""
    same = (reference.instance_type, reference.instance_count) == (
        candidate.instance_type,
        candidate.instance_count,
    )
    if same:
        return 1.0
    ref, cand = hourly(declared, search, reference), hourly(declared, search, candidate)
    if ref is None or cand is None or ref <= 0:
        return None
    return cand / ref


def wanted(spec: OptimizedEndpointSpec, known: InstancePrice | None) -> bool:
    """Whether a wake-up should look the price up: a search without the user's price, and
    none known yet for this instance type and region."""
    if spec.search is None or spec.search.usd_per_instance_hour is not None:
        return False
    return known is None or (known.instance_type, known.region) != (
        spec.instance_type,
        spec.region,
    )


def parse_table(text: str) -> dict[str, float]:
    """The chart's pricing.usdPerInstanceHour as the operator reads it (JSON object of
    `instance type` or `region/instance type` to USD per hour); refused with the key."""
    if not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"pricing.usdPerInstanceHour: not a JSON object ({exc})") from exc
    if not isinstance(raw, dict):
        raise ValueError("pricing.usdPerInstanceHour: must map instance types to USD per hour")
    table: dict[str, float] = {}
    for key, value in raw.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise ValueError(
                f"pricing.usdPerInstanceHour[{key!r}]: {value!r} is not a price; give USD per "
                "instance-hour as a number >= 0, e.g. 12.5"
            )
        table[str(key)] = float(value)
    return table
