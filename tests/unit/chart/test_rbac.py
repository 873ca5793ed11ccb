"""The chart's RBAC grants exactly what the operator's code and kopf use, nothing more."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.chart.kube_calls import Needs, Rule, kopf_framework_needs, scan
from tests.unit.chart.operator_code import operator_modules
from tests.unit.chart.rendering import REPO, Rendered, profile_values, render

PACKAGE = REPO / "operator" / "endpoint_optimizer"


@pytest.fixture(scope="module")
def needs() -> Needs:
    # Only what `endpoint-optimizer run` imports: the demo's emulated cluster and the
    # sandbox make API calls too, but never in the operator's pod.
    return scan(PACKAGE, operator_modules().values())


def _rules(role: dict[str, Any]) -> set[Rule]:
    expanded: set[Rule] = set()
    for rule in role["rules"]:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), f"wildcard in {rule}"
                    expanded.add((group, resource, verb))
    return expanded


def _granted(rendered: Rendered, kind: str) -> set[Rule]:
    found: set[Rule] = set()
    for role in rendered.of_kind(kind):
        found |= _rules(role)
    return found


def _explain(missing: set[Rule], extra: set[Rule], evidence: dict[Rule, list[str]]) -> str:
    lines = [
        f"missing {rule} (used at {evidence.get(rule, ['kopf'])[:2]})" for rule in sorted(missing)
    ]
    lines += [f"granted but unused {rule}" for rule in sorted(extra)]
    return "\n".join(lines)


def test_scan_finds_the_operator_handlers(needs: Needs) -> None:
    assert ("optimizer.dev", "optimizedendpoints", "watch") in needs.namespaced
    assert needs.standalone, "run must start kopf with standalone=True (one replica, no peering)"


# spec.model.tokenSecretRef's read: granted only by the tokenSecretNamespaces Roles.
SECRET_GET: Rule = ("", "secrets", "get")


def test_the_operator_reads_secrets_only_with_get(needs: Needs) -> None:
    assert {r for r in needs.namespaced if r[1] == "secrets"} == {SECRET_GET}


def test_secret_get_is_granted_only_in_the_token_secret_namespaces() -> None:
    for profile in ("cluster-wide", "namespaced"):
        assert SECRET_GET not in _granted(render(profile_values(profile)), "ClusterRole")
        values = profile_values(profile) | {
            "rbac": {"create": True, "tokenSecretNamespaces": ["ml", "batch"]}
        }
        rendered = render(values)
        tokens = [
            r for r in rendered.of_kind("Role") if r["metadata"]["name"].endswith("-token-secrets")
        ]
        assert sorted(r["metadata"]["namespace"] for r in tokens) == ["batch", "ml"]
        assert all(_rules(r) == {SECRET_GET} for r in tokens)
        others = [r for r in rendered.of_kind("Role") if r not in tokens]
        assert all(SECRET_GET not in _rules(r) for r in others)
        assert SECRET_GET not in _granted(rendered, "ClusterRole")
        bindings = [
            b
            for b in rendered.of_kind("RoleBinding")
            if b["metadata"]["name"].endswith("-token-secrets")
        ]
        assert len(bindings) == 2


def test_cluster_wide_cluster_role_equals_what_the_operator_uses(needs: Needs) -> None:
    framework_namespaced, framework_cluster = kopf_framework_needs(clusterwide=True, scanning=True)
    expected = (set(needs.namespaced) - {SECRET_GET}) | framework_namespaced | framework_cluster
    granted = _granted(render(profile_values("cluster-wide")), "ClusterRole")
    assert granted == expected, _explain(expected - granted, granted - expected, needs.evidence)


@pytest.mark.parametrize("scanning", [True, False])
def test_namespaced_roles_equal_what_the_operator_uses(needs: Needs, scanning: bool) -> None:
    framework_namespaced, framework_cluster = kopf_framework_needs(
        clusterwide=False, scanning=scanning
    )
    values = profile_values("namespaced") | {"rbac": {"kopfScanning": scanning}}
    rendered = render(values)
    expected = (set(needs.namespaced) - {SECRET_GET}) | framework_namespaced
    for role in rendered.of_kind("Role"):
        granted = _rules(role)
        assert granted == expected, _explain(expected - granted, granted - expected, needs.evidence)
    assert _granted(rendered, "ClusterRole") == framework_cluster


def test_no_peering_objects_are_granted() -> None:
    for profile in ("cluster-wide", "namespaced"):
        rendered = render(profile_values(profile))
        resources = {
            r for _, r, _ in _granted(rendered, "ClusterRole") | _granted(rendered, "Role")
        }
        assert not {r for r in resources if "kopfpeering" in r}


def test_scanner_reads_decorators_events_and_rest_calls(tmp_path: Any) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text('GROUP = "example.dev"\nPLURAL = "widgets"\n')
    (package / "handlers.py").write_text(
        """
import kopf
from pkg import GROUP, PLURAL
RESOURCE = (GROUP, "v1", PLURAL)

@kopf.timer(*RESOURCE, interval=5)
async def beat(body, patch, **_):
    patch.status["phase"] = "x"
    kopf.info(body, reason="R", message="m")

@kopf.index("v1", "secrets")
def by_name(name, **_):
    return name

async def read_eval_set(session, namespace, name):
    async with session.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}") as rsp:
        return await rsp.json()

async def store(session, namespace, body):
    await session.post(f"/api/v1/namespaces/{namespace}/configmaps", json=body)

def legacy(core):
    core.patch_namespaced_config_map("n", "ns", {})

async def main():
    await kopf.operator(standalone=True, clusterwide=True)
"""
    )
    needs = scan(package)
    assert needs.standalone
    assert set(needs.namespaced) == {
        ("example.dev", "widgets", "list"),
        ("example.dev", "widgets", "watch"),
        ("example.dev", "widgets", "patch"),
        ("example.dev", "widgets/status", "patch"),
        ("", "events", "create"),
        ("", "secrets", "list"),
        ("", "secrets", "watch"),
        ("", "configmaps", "get"),
        ("", "configmaps", "create"),
        ("", "configmaps", "patch"),
    }


def test_operator_code_is_what_the_run_command_imports() -> None:
    modules = operator_modules()
    # The runner imports the handlers inside its command function; they are followed.
    assert {"endpoint_optimizer.controller.run", "endpoint_optimizer.controller.handlers"} <= set(
        modules
    )
    assert "endpoint_optimizer.cli" not in modules
    assert not [
        m
        for m in modules
        if m.startswith(("endpoint_optimizer.sandbox", "endpoint_optimizer.jobs"))
    ]
