"""Reads a registry the way Prometheus does: text exposition, parsed back into samples."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def scrape(registry: CollectorRegistry) -> list[Sample]:
    text = generate_latest(registry).decode()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def values(samples: list[Sample], family: str, /, **labels: str) -> list[float]:
    """Values of the samples called `family` whose labels include `labels`."""
    return [
        sample.value
        for sample in samples
        if sample.name == family and all(sample.labels.get(k) == v for k, v in labels.items())
    ]


def value(samples: list[Sample], family: str, /, **labels: str) -> float:
    found = values(samples, family, **labels)
    assert len(found) == 1, f"expected one {family}{labels}, found {found}"
    return found[0]
