"""Scalar types of the OptimizedEndpoint resource: patterns, durations, CEL helpers.

Units: durations are strings like "30s", "5m", "1h30m" (see `duration_seconds`);
latencies in status are milliseconds; fractions are 0..1 (0.05 = 5 %); traffic
weights are integer percent.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import StringConstraints
from pydantic_core import PydanticCustomError

# --------------------------------------------------------------------------- scalar types

SAGEMAKER_NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
S3_URI_PATTERN = r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?$"
ROLE_ARN_PATTERN = r"^arn:aws[a-z\-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/\-]{1,512}$"
REGION_PATTERN = r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]{1,2}$"
INSTANCE_TYPE_PATTERN = r"^ml\.[a-z0-9]+(-[a-z0-9]+)*\.[a-z0-9]+$"
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
CONFIGMAP_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
ENV_NAME_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

SageMakerName = Annotated[
    str, StringConstraints(min_length=1, max_length=63, pattern=SAGEMAKER_NAME_PATTERN)
]
S3Uri = Annotated[str, StringConstraints(min_length=8, max_length=1024, pattern=S3_URI_PATTERN)]
RoleArn = Annotated[
    str, StringConstraints(min_length=20, max_length=2048, pattern=ROLE_ARN_PATTERN)
]
Region = Annotated[str, StringConstraints(max_length=32, pattern=REGION_PATTERN)]
InstanceType = Annotated[str, StringConstraints(max_length=64, pattern=INSTANCE_TYPE_PATTERN)]
Duration = Annotated[str, StringConstraints(min_length=2, max_length=32, pattern=DURATION_PATTERN)]
ImageUri = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=r"^\S+$")]
ModelId = Annotated[
    str, StringConstraints(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")
]
HfId = Annotated[
    str,
    StringConstraints(
        min_length=1,
        max_length=256,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*(/[A-Za-z0-9][A-Za-z0-9._\-]*)?$",
    ),
]
LayerName = Annotated[str, StringConstraints(min_length=1, max_length=256)]
PromptClass = Annotated[
    str, StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
]

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_DURATION_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(value: str) -> float:
    """Seconds in a duration string like "90s", "5m" or "1h30m" (Go-style units ms|s|m|h)."""
    if not re.fullmatch(DURATION_PATTERN, value):
        raise ValueError(
            f"duration {value!r} is not valid: use a number and a unit ms|s|m|h, "
            "e.g. 30s, 5m, 1h30m"
        )
    return sum(
        float(number) * _DURATION_UNIT_SECONDS[unit]
        for number, unit in _DURATION_PART.findall(value)
    )


def rule(field: str, message: str) -> PydanticCustomError:
    """A cross-field refusal naming `field` (camelCase, relative to the model that raises)."""
    return PydanticCustomError("spec_rule", message, {"field": field})


def cel(*rules: tuple[str, str] | tuple[str, str, str]) -> dict[str, Any]:
    """json_schema_extra carrying CEL rules, copied into the CRD.

    Each rule is (rule, message) or (rule, message, fieldPath); fieldPath (Kubernetes
    1.28+) makes the apiserver report the refusal at that field instead of the object.
    """
    validations = []
    for rule, message, *field_path in rules:
        validation = {"rule": rule, "message": message}
        if field_path:
            validation["fieldPath"] = field_path[0]
        validations.append(validation)
    return {"x-kubernetes-validations": validations}
