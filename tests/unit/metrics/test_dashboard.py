"""The shipped dashboard is the generated one, and every query reads families the exporter has."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from endpoint_optimizer.analysis.series import VariantRole
from endpoint_optimizer.metrics.dashboard import build_dashboard, render
from endpoint_optimizer.metrics.exporter import OperatorMetrics
from tests.unit.metrics.test_exporter import live_series, rollout_snapshot

REPO = Path(__file__).resolve().parents[3]
SHIPPED = REPO / "charts" / "endpoint-optimizer" / "dashboards" / "endpoint-optimizer.json"
RULES = REPO / "charts" / "endpoint-optimizer" / "rules" / "alerts.yaml"
DOCS = REPO / "docs" / "metrics.md"
METRIC = re.compile(r"\b(endpoint_optimizer_[a-z0-9_]+)")


def exported_names() -> set[str]:
    """Every series name the exporter can produce, labelled families included."""
    metrics = OperatorMetrics()
    metrics.endpoints.update("ml", "chat", rollout_snapshot())
    metrics.observe_live("ml", "chat", {VariantRole.BASELINE: live_series([3.0])})
    names: set[str] = set()
    for family in metrics.registry.collect():
        names.add(family.name)
        names.update(f"{family.name}{suffix}" for suffix in ("_total", "_bucket", "_sum", "_count"))
    return names


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [a["expr"] for a in dashboard["annotations"]["list"]]
    return exprs


def test_the_chart_ships_exactly_the_generated_dashboard() -> None:
    assert SHIPPED.read_text() == render(), (
        "regenerate: python -m endpoint_optimizer.metrics.dashboard > " + str(SHIPPED)
    )


def test_every_panel_has_a_query_and_per_resource_queries_follow_the_variables() -> None:
    dashboard = json.loads(SHIPPED.read_text())
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "namespace", "endpoint", "job"} <= variables
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 20
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            if "name=~" in expr or "namespace=~" in expr:
                assert "$namespace" in expr and "$endpoint" in expr, (panel["title"], expr)
            else:
                assert 'job=~"$job"' in expr, (panel["title"], expr)
    titles = {p["title"] for p in panels}
    assert {"Phase", "Canary weight", "TTFT", "ITL", "Output throughput",
            "Acceptance rate and floor", "Eval delta and allowed drop", "Rollbacks by reason",
            "Up", "Reconcile duration p95"} <= titles  # fmt: skip


def test_panels_never_overlap_on_the_grid() -> None:
    cells: set[tuple[int, int]] = set()
    for panel in build_dashboard()["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])}  # fmt: skip
        assert not mine & cells, panel["title"]
        cells |= mine


def test_dashboard_and_alerts_read_only_families_the_exporter_serves() -> None:
    names = exported_names()
    alert_exprs = [
        rule["expr"]
        for group in yaml.safe_load(RULES.read_text())["groups"]
        for rule in group["rules"]
    ]
    for expr in dashboard_exprs(build_dashboard()) + alert_exprs:
        for metric in METRIC.findall(expr):
            assert metric in names, f"{metric} in {expr!r} is not exported"


def test_every_family_is_documented() -> None:
    documented = set(METRIC.findall(DOCS.read_text()))
    metrics = OperatorMetrics()
    for family in metrics.registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        assert name in documented, f"{name} is missing from docs/metrics.md"


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (.ci/run installs it)")
def test_counter_panels_count_a_series_first_scraped_after_it_moved(tmp_path: Path) -> None:
    """A rollback (or promotion) that happened before its counter was ever scraped at 0.

    increase() alone reads such a series as 0 (it needs a sample before the step); the
    panels and annotations must still show it, and must not show a counter at 0 or an
    old one that did not move. promtool evaluates the shipped queries on fixed series.
    """
    dashboard = json.loads(SHIPPED.read_text())
    panels = {p["title"]: p["targets"][0]["expr"] for p in dashboard["panels"] if "targets" in p}
    annotations = {a["name"]: a["expr"] for a in dashboard["annotations"]["list"]}
    variables = {"$__range": "5m", "$namespace": "ml", "$endpoint": ".*"}

    def concrete(expr: str) -> str:
        for variable, value in variables.items():
            expr = expr.replace(variable, value)
        return expr

    rollbacks = "endpoint_optimizer_rollbacks_total"
    series = [
        # Born at 1 between two scrapes: the case increase() misses.
        {
            "series": f'{rollbacks}{{namespace="ml",name="fast",reason="updateFailed"}}',
            "values": "_ _ _ 1x10",
        },
        # Born at 0, moved later: increase() sees it.
        {
            "series": f'{rollbacks}{{namespace="ml",name="slow",reason="latency"}}',
            "values": "0 0 0 0 1x10",
        },
        # Never moved.
        {
            "series": f'{rollbacks}{{namespace="ml",name="quiet",reason="latency"}}',
            "values": "0x14",
        },
        # Moved long ago, outside the range.
        {"series": f'{rollbacks}{{namespace="ml",name="old",reason="eval"}}', "values": "1x14"},
        {
            "series": 'endpoint_optimizer_promotions_total{namespace="ml",name="fast"}',
            "values": "_ _ _ 1x10",
        },
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [
                {
                    "expr": concrete(panels["Rollbacks by reason"]),
                    "eval_time": "6m",
                    "exp_samples": [
                        {"labels": '{name="fast",reason="updateFailed"}', "value": 1},
                        {"labels": '{name="slow",reason="latency"}', "value": 1},
                    ],
                },
                {
                    "expr": concrete(panels["Promotions"]) + " > 0",
                    "eval_time": "6m",
                    "exp_samples": [{"labels": '{name="fast"}', "value": 1}],
                },
                {
                    "expr": concrete(annotations["Rollbacks"]),
                    "eval_time": "4m",
                    "exp_samples": [
                        {
                            "labels": f'{rollbacks}{{namespace="ml",name="fast",'
                            'reason="updateFailed"}',
                            "value": 1,
                        },
                        {
                            "labels": '{namespace="ml",name="slow",reason="latency"}',
                            "value": 1,
                        },
                    ],
                },
            ],
        }
    ]
    case = tmp_path / "dashboard_test.yaml"
    case.write_text(yaml.safe_dump({"rule_files": [], "tests": tests}))
    assert PROMTOOL is not None
    result = subprocess.run(
        [PROMTOOL, "test", "rules", str(case)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
