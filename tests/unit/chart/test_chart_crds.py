"""The chart carries the CRD that `crds/` holds, byte for byte, and it is valid."""

from __future__ import annotations

import kubernetes_validate
import pytest
from kubernetes_validate.utils import latest_version

from tests.unit.chart.rendering import CHART, REPO, chart_crds

KUBERNETES_VERSIONS = ("1.29", latest_version())


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_chart_crds_validate_against_kubernetes(version: str) -> None:
    crds = chart_crds()
    assert [crd["kind"] for crd in crds] == ["CustomResourceDefinition"]
    for crd in crds:
        kubernetes_validate.validate(crd, version, strict=True)


def test_chart_crd_is_the_file_crds_holds() -> None:
    generated = REPO / "crds" / "optimizedendpoint.yaml"
    shipped = CHART / "crds" / "optimizedendpoint.yaml"
    assert generated.is_file(), (
        "crds/optimizedendpoint.yaml is missing: run `endpoint-optimizer crd`"
    )
    assert shipped.read_bytes() == generated.read_bytes(), (
        "charts/endpoint-optimizer/crds/optimizedendpoint.yaml differs from "
        "crds/optimizedendpoint.yaml: copy the generated file into the chart"
    )
