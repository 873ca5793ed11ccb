"""Alert rules: promtool accepts them, each alert has unit tests, the chart ships the same rules."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "charts" / "endpoint-optimizer" / "rules" / "alerts.yaml"
RULE_TESTS = Path(__file__).parent / "rules" / "alerts_test.yaml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (.ci/run installs Debian's prometheus)"
)


def alerts(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=60, cwd=RULE_TESTS.parent
    )


@needs_promtool
def test_promtool_accepts_the_rule_file() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", RULE_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_unit_test() -> None:
    defined = set(alerts(yaml.safe_load(RULES.read_text())["groups"]))
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert defined == tested
    assert {
        "EndpointOptimizerRollback",
        "EndpointOptimizerRolloutStuck",
        "EndpointOptimizerAcceptanceBelowFloor",
        "EndpointOptimizerSageMakerThrottling",
        "EndpointOptimizerDown",
        "EndpointOptimizerNotReconciling",
    } <= defined


def test_the_chart_prometheusrule_carries_the_file_with_the_release_job() -> None:
    from tests.unit.chart.rendering import profile_values, render

    rendered = render(profile_values("monitoring"))
    rule = rendered.one("PrometheusRule")
    service = rendered.one("Service")["metadata"]["name"]
    shipped = alerts(rule["spec"]["groups"])
    source = alerts(yaml.safe_load(RULES.read_text())["groups"])

    assert set(shipped) == set(source)
    for name, original in source.items():
        expected = original["expr"].replace('job="endpoint-optimizer"', f'job="{service}"')
        assert shipped[name]["expr"] == expected
        assert shipped[name]["annotations"] == original["annotations"]
        assert shipped[name].get("for") == original.get("for")
    assert f'up{{job="{service}"}}' in shipped["EndpointOptimizerDown"]["expr"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


@needs_promtool
def test_promtool_accepts_the_rules_the_chart_renders(tmp_path: Path) -> None:
    from tests.unit.chart.rendering import profile_values, render

    rule = render(profile_values("monitoring")).one("PrometheusRule")
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))

    result = promtool("check", "rules", str(rendered))
    assert result.returncode == 0, result.stdout + result.stderr
    source = alerts(yaml.safe_load(RULES.read_text())["groups"])
    assert f"SUCCESS: {len(source)} rules found" in result.stdout
