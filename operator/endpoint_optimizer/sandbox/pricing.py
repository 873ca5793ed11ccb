"""AWS Price List Query API (JSON 1.1, X-Amz-Target AWSPriceListService.<Operation>).

GetProducts only, for ServiceCode AmazonSageMaker: one product per (region, instance
type) of the sandbox's price table (data/price_list.json: the sandbox's own prices, not
AWS's), with the attributes the Price List carries for a SageMaker hosting instance
(productFamily "ML Instance", regionCode, instanceName, platoinstancetype "Hosting") and
one on-demand term priced per hour. Filters are matched as the API documents them:
TERM_MATCH and EQUALS exact, CONTAINS a substring, ANY_OF / NONE_OF a comma-separated
list. A service code the sandbox has no products for is NotFoundException; a bad request
is InvalidParameterException (the Price List has no ValidationException).
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from importlib import resources
from typing import Any

from endpoint_optimizer.sandbox.control import AwsError, ControlPlane, modelled
from endpoint_optimizer.sandbox.validation import RequestInvalid, validate

SERVICE = "pricing"
TARGET_PREFIX = "AWSPriceListService"
SERVICE_CODE = "AmazonSageMaker"
PAGE = 100


@cache
def _table() -> dict[str, Any]:
    text = resources.files("endpoint_optimizer.sandbox").joinpath("data/price_list.json")
    loaded: dict[str, Any] = json.loads(text.read_text())
    return loaded


def _sku(region: str, instance_type: str) -> str:
    return hashlib.sha256(f"{region}/{instance_type}".encode()).hexdigest()[:16].upper()


def products() -> list[dict[str, Any]]:
    """Every product of the table, as the Price List documents them."""
    table = _table()
    out = []
    for region, prices in table["usdPerHour"].items():
        for instance_type, usd in prices.items():
            sku = _sku(region, instance_type)
            term = f"{sku}.JRTCKXETXF"
            out.append(
                {
                    "product": {
                        "productFamily": "ML Instance",
                        "attributes": {
                            "servicecode": SERVICE_CODE,
                            "servicename": "Amazon SageMaker",
                            "regionCode": region,
                            "instanceName": instance_type,
                            "platoinstancetype": "Hosting",
                            "productFamily": "ML Instance",
                            "usagetype": f"{region}-Host:{instance_type}",
                            "operation": "RunInstance",
                        },
                        "sku": sku,
                    },
                    "serviceCode": SERVICE_CODE,
                    "terms": {
                        "OnDemand": {
                            term: {
                                "priceDimensions": {
                                    f"{term}.6YS6EN2CT7": {
                                        "unit": "Hrs",
                                        "description": f"${usd} per Hosting {instance_type} hour "
                                        f"in {region}",
                                        "pricePerUnit": {"USD": f"{usd:.10f}"},
                                        "beginRange": "0",
                                        "endRange": "Inf",
                                        "rateCode": f"{term}.6YS6EN2CT7",
                                        "appliesTo": [],
                                    }
                                },
                                "sku": sku,
                                "effectiveDate": table["effectiveDate"],
                                "offerTermCode": "JRTCKXETXF",
                                "termAttributes": {},
                            }
                        }
                    },
                    "version": "20261101000000",
                    "publicationDate": table["publicationDate"],
                }
            )
    return out


def _matches(product: dict[str, Any], f: dict[str, str]) -> bool:
    attributes = {
        **product["product"]["attributes"],
        "productFamily": product["product"]["productFamily"],
        "sku": product["product"]["sku"],
    }
    have = attributes.get(f["Field"])
    if have is None:
        return f["Type"] == "NONE_OF"
    value, kind = f["Value"], f["Type"]
    if kind in {"TERM_MATCH", "EQUALS"}:
        return bool(have.lower() == value.lower())
    if kind == "CONTAINS":
        return value.lower() in have.lower()
    listed = {v.strip().lower() for v in value.split(",")}
    return (have.lower() in listed) == (kind == "ANY_OF")


class PriceList:
    """The Price List Query API over the control plane's call log and faults."""

    def __init__(self, control: ControlPlane) -> None:
        self.control = control

    def handle(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        error_code: str | None = None
        try:
            if operation in self.control.config.faults.access_denied:
                raise AwsError(
                    "AccessDeniedException",
                    f"User is not authorized to perform: pricing:{operation}",
                )
            try:
                validate(SERVICE, operation, params)
            except RequestInvalid as exc:
                raise AwsError("InvalidParameterException", str(exc)) from exc
            if operation != "GetProducts":
                raise AwsError(
                    "UnknownOperationException",
                    f"The sandbox does not implement {TARGET_PREFIX}.{operation}.",
                )
            return modelled(
                SERVICE, operation, self._get_products(params), "InternalErrorException"
            )
        except AwsError as exc:
            error_code = exc.code
            raise
        finally:
            self.control.record_call(operation, str(params.get("ServiceCode", "")), error_code)

    def _get_products(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("ServiceCode") != SERVICE_CODE:
            raise AwsError(
                "NotFoundException",
                f"The sandbox has no products for service code {params.get('ServiceCode')!r}.",
            )
        version = params.get("FormatVersion", "aws_v1")
        if version != "aws_v1":
            raise AwsError("InvalidParameterException", f"Invalid format version: {version}")
        found = [p for p in products() if all(_matches(p, f) for f in params.get("Filters", []))]
        size = int(params.get("MaxResults", PAGE))
        start = 0
        if token := params.get("NextToken"):
            try:
                start = int(token)
            except ValueError as exc:
                raise AwsError("InvalidNextTokenException", "The next token is invalid.") from exc
        page = found[start : start + size]
        out: dict[str, Any] = {
            "FormatVersion": "aws_v1",
            "PriceList": [json.dumps(p) for p in page],
        }
        if start + size < len(found):
            out["NextToken"] = str(start + size)
        return out
