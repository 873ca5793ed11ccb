"""Render the Helm chart offline with the real Helm library (helm-python-sdk)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "endpoint-optimizer"
RELEASE = "eo"
RELEASE_NAMESPACE = "optimizer-system"

# The documented profiles (charts/endpoint-optimizer/profiles/*.yaml) plus the defaults.
PROFILES: tuple[str, ...] = ("default", "namespaced", "cluster-wide", "monitoring", "sandbox")


@dataclass(frozen=True)
class Rendered:
    """What `helm template` would print: objects by template, and NOTES.txt."""

    objects: list[dict[str, Any]]
    sources: dict[str, str]  # object identity -> template path, for error messages
    notes: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [obj for obj in self.objects if obj["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.of_kind(kind)
        assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
        return found[0]


def profile_values(profile: str) -> dict[str, Any]:
    if profile == "default":
        return {}
    values = yaml.safe_load((CHART / "profiles" / f"{profile}.yaml").read_text())
    assert isinstance(values, dict), f"profiles/{profile}.yaml is not a mapping"
    return values


def identity(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    return f"{obj['kind']}/{meta.get('namespace', '-')}/{meta.get('name')}"


def render(values: dict[str, Any] | None = None) -> Rendered:
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(
            values or {}, name=RELEASE, namespace=RELEASE_NAMESPACE, is_install=True
        )
    objects: list[dict[str, Any]] = []
    sources: dict[str, str] = {}
    notes = ""
    for template, text in sorted(manifests.items()):
        if template.endswith("NOTES.txt"):
            notes = text
            continue
        for document in yaml.safe_load_all(text):
            if document:
                objects.append(document)
                sources[identity(document)] = template
    return Rendered(objects=objects, sources=sources, notes=notes)


def chart_crds() -> list[dict[str, Any]]:
    """The objects Helm installs from crds/ (not templated)."""
    with helm.Chart.load(CHART) as chart:
        return [
            document
            for crd in chart.crds
            for document in yaml.safe_load_all(crd["data"])
            if document
        ]
