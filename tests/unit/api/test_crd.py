"""The generated CRD: up to date, structural, bounded for the CEL cost budget, valid."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from endpoint_optimizer.api import (
    MAX_HISTORY,
    ConditionStatus,
    ConditionType,
    LevelMeasurement,
    OptimizedEndpointStatus,
    Phase,
    RolloutStatus,
    SageMakerResources,
    SpotCheckStatus,
    VariantMeasurements,
)
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.api.crd import apply_defaults, crd_manifest, render_crd, render_docs
from endpoint_optimizer.cli import main
from endpoint_optimizer.generate import matrix_section

from .admission import CRD_FILE, REPO, root_schema, schema_problems


def test_checked_in_crd_matches_the_model() -> None:
    assert CRD_FILE.read_text(encoding="utf-8") == render_crd(), (
        "crds/optimizedendpoint.yaml is stale: run `endpoint-optimizer crd "
        "-o crds/optimizedendpoint.yaml -o charts/endpoint-optimizer/crds/optimizedendpoint.yaml "
        "--docs docs/crd-reference.md`"
    )


def test_checked_in_docs_match_the_model() -> None:
    docs = REPO / "docs" / "crd-reference.md"
    assert docs.read_text(encoding="utf-8") == render_docs(matrix_section()), (
        "docs/crd-reference.md is stale: run `endpoint-optimizer crd --docs docs/crd-reference.md`"
    )


def test_cli_writes_crd_and_docs(tmp_path: Path) -> None:
    out, docs = tmp_path / "crd.yaml", tmp_path / "ref.md"
    copy = tmp_path / "chart" / "crds" / "crd.yaml"
    result = CliRunner().invoke(main, ["crd", "-o", str(out), "-o", str(copy), "--docs", str(docs)])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(out.read_text(encoding="utf-8")) == crd_manifest()
    assert copy.read_bytes() == out.read_bytes()
    assert "`spec.rollout.steps[].weight`" in docs.read_text(encoding="utf-8")
    printed = CliRunner().invoke(main, ["crd"])
    assert printed.output == render_crd()
    fresh = CliRunner().invoke(main, ["crd", "--check", "-o", str(out), "--docs", str(docs)])
    assert fresh.exit_code == 0, fresh.output
    docs.write_text("edited by hand\n", encoding="utf-8")
    stale = CliRunner().invoke(main, ["crd", "--check", "-o", str(out), "--docs", str(docs)])
    assert stale.exit_code == 1 and str(docs) in stale.output and str(out) not in stale.output
    assert docs.read_text(encoding="utf-8") == "edited by hand\n"


@pytest.mark.parametrize("version", ["1.28", "1.31"])
def test_crd_is_a_valid_apiextensions_v1_object(version: str) -> None:
    assert kubernetes_validate.validate(crd_manifest(), version, strict=True) == version


def test_crd_names_subresource_and_columns() -> None:
    spec = crd_manifest()["spec"]
    assert spec["names"]["shortNames"] == ["oe"]
    assert spec["scope"] == "Namespaced"
    version = spec["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Phase"] == ".status.phase"
    assert columns["Acceptance"] == ".status.candidate.acceptanceRate"
    assert columns["Age"] == ".metadata.creationTimestamp"
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority") == 1]
    assert wide == ["Message"]
    assert columns["Message"] == '.status.conditions[?(@.type=="Progressing")].message'


def _nodes(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)]
    for name, child in node.get("properties", {}).items():
        found += _nodes(child, f"{path}.{name}")
    if "items" in node:
        found += _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found += _nodes(node["additionalProperties"], f"{path}{{}}")
    return found


def test_schema_is_structural() -> None:
    for path, node in _nodes(root_schema()):
        for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "not", "$defs", "title"):
            assert forbidden not in node, f"{path} has {forbidden}"
        assert node.get("additionalProperties") is not False, path
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
        assert not ("properties" in node and "additionalProperties" in node), path


def test_only_free_form_state_preserves_unknown_fields() -> None:
    free_form = [
        path
        for path, node in _nodes(root_schema())
        if node.get("x-kubernetes-preserve-unknown-fields") and path != ".metadata"
    ]
    assert free_form == [".status.rollout.liveJudgeState"]


def test_every_spec_value_is_bounded_for_the_cel_cost_estimator() -> None:
    spec = root_schema()["properties"]["spec"]
    for path, node in _nodes(spec, "spec"):
        kind = node.get("type")
        if kind == "string":
            assert "maxLength" in node, f"{path} has no maxLength"
        elif kind == "array":
            assert "maxItems" in node, f"{path} has no maxItems"
        elif kind == "object" and "additionalProperties" in node:
            assert "maxProperties" in node, f"{path} has no maxProperties"


def test_cel_rules_avoid_costly_macros_and_guard_indexes() -> None:
    rules = [
        r["rule"] for _, n in _nodes(root_schema()) for r in n.get("x-kubernetes-validations", [])
    ]
    assert len(rules) >= 10
    for rule in rules:
        assert not re.search(r"\.(map|filter|exists_one)\(|isSorted", rule), rule
        for clause in rule.split(" && "):
            for index in re.findall(r"self\[(\d+)\]", clause):
                guard = re.search(r"size\(self\) < (\d+)", clause)
                assert guard and int(guard.group(1)) >= int(index) + 1, clause


def test_defaults_fill_nested_objects_like_the_apiserver() -> None:
    defaulted = apply_defaults(root_schema(), {"spec": {"rollout": {"strategy": "shadow"}}})
    spec = defaulted["spec"]
    assert spec["benchmark"]["concurrency"] == [1, 8]
    assert spec["rollout"]["analysis"] == {
        "interval": "1m",
        "failureLimit": 2,
        "latencyMargin": 0.0,
        "onNoData": "pause",
        "minInvocations": 20,
        "probes": {"perInterval": 20, "concurrency": 1, "inputTokens": 128, "outputTokens": 32},
    }
    assert spec["rollout"]["steps"] == []
    assert "evaluation" not in spec and "outputS3Uri" not in spec


def test_cel_field_paths_name_existing_fields() -> None:
    with_path = 0
    for path, node in _nodes(root_schema()):
        for rule in node.get("x-kubernetes-validations", []):
            if "fieldPath" not in rule:
                continue
            with_path += 1
            target = node
            for part in rule["fieldPath"].lstrip(".").split("."):
                assert part in target.get("properties", {}), f"{path}: {rule['fieldPath']}"
                target = target["properties"][part]
    assert with_path >= 10


def _full_status() -> OptimizedEndpointStatus:
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    level = LevelMeasurement(
        concurrency=16,
        requests=160,
        errors=1,
        ttft_p50_ms=120.0,
        ttft_p90_ms=200.0,
        ttft_p99_ms=410.5,
        itl_p50_ms=9.0,
        itl_p90_ms=12.0,
        itl_p99_ms=20.0,
        tpot_p50_ms=9.5,
        tpot_p99_ms=19.0,
        e2e_p50_ms=2500.0,
        e2e_p90_ms=3100.0,
        e2e_p99_ms=3900.0,
        output_tokens_per_second=1500.0,
        requests_per_second=5.5,
    )
    variant = VariantMeasurements(
        variant_name="candidate-1",
        levels=[level],
        acceptance_rate=0.63,
        acceptance_source="server",
        eval_score=0.91,
        refusal_rate=0.01,
        eval_items=200,
        measured_at=now,
    )
    status = OptimizedEndpointStatus(
        phase=Phase.ANALYZING,
        paused=True,
        observed_generation=3,
        baseline=variant,
        candidate=variant,
        checks=[
            Check(
                name="ttft_p99@c16",
                kind=CheckKind.BENCHMARK,
                verdict=Verdict.PASS,
                baseline=410.5,
                candidate=300.0,
                threshold=0.0,
                unit="ms",
                interval_low=-120.0,
                interval_high=-90.0,
                samples=160,
                rule="bootstrap",
                reason="faster",
                source="bench",
            )
        ],
        objective_gain=0.18,
        ttft_p99_summary="410ms → 300ms",
        sagemaker=SageMakerResources(
            endpoint_name="e",
            models=["m1"],
            endpoint_configs=["c1"],
            optimization_jobs=["j1"],
            training_jobs=["t1"],
            alarms=["a1"],
            adopted=True,
        ),
        rollout=RolloutStatus(
            step_index=1,
            canary_weight=50,
            step_started_at=now,
            failed_checks=1,
            live_judge_state={"windows": [{"ok": True}], "n": 3},
        ),
        candidate_hash="abc123",
        candidate_techniques=["quantization"],
        spot_check=SpotCheckStatus(config_map="spot", samples=10, approved=None),
        message="judging step 2",
        last_error="",
    )
    status.set_condition(ConditionType.PROGRESSING, ConditionStatus.TRUE, "Canary", "", now, 3)
    status.record(now, "StepStarted", "50 %")
    return status


@pytest.mark.parametrize("exclude_none", [True, False])
def test_a_full_status_is_stored_without_pruning(exclude_none: bool) -> None:
    # Fields the schema lacks would be pruned silently by the apiserver: the status the
    # control loop writes must match the CRD field for field, nulls included.
    status = _full_status().model_dump(mode="json", by_alias=True, exclude_none=exclude_none)
    resource = {"apiVersion": "optimizer.dev/v1alpha1", "kind": "OptimizedEndpoint"}
    resource |= {"metadata": {"name": "x"}, "spec": {}, "status": status}
    problems = [p for p in schema_problems(resource) if not p.startswith("spec")]
    assert problems == []
    assert OptimizedEndpointStatus.model_validate(status) == _full_status()


def test_every_field_has_a_description_for_kubectl_explain() -> None:
    # status.checks[] comes from analysis.verdict.Check, whose enums describe themselves.
    missing = [
        path
        for path, node in _nodes(root_schema())
        if path.startswith((".spec.", ".status."))
        and not path.startswith(".status.checks[]")
        and not node.get("description")
        and not path.endswith("[]")
        and not path.endswith("{}")
    ]
    assert missing == []


def test_status_fields_assigned_past_their_bounds_still_fit_the_crd() -> None:
    status = _full_status()
    status.message = "m" * 5000
    status.last_error = "e" * 9000
    status.history = status.history * (MAX_HISTORY + 5)
    status.history[-1].message = "h" * 3000
    status.conditions[0].message = "c" * 40000
    dumped = status.dump()
    resource = {"apiVersion": "optimizer.dev/v1alpha1", "kind": "OptimizedEndpoint"}
    resource |= {"metadata": {"name": "x"}, "spec": {}, "status": dumped}
    assert [p for p in schema_problems(resource) if not p.startswith("spec")] == []
    assert len(dumped["history"]) == MAX_HISTORY
    assert OptimizedEndpointStatus.model_validate(dumped).message == "m" * 1024


def test_unmeasurable_numbers_are_written_as_null() -> None:
    status = _full_status()
    assert status.candidate is not None
    status.candidate.levels[0].ttft_p99_ms = float("nan")
    status.objective_gain = float("inf")
    status.checks[0].baseline = float("-inf")
    dumped = status.model_dump(mode="json", by_alias=True)
    assert dumped["candidate"]["levels"][0]["ttftP99Ms"] is None
    assert dumped["objectiveGain"] is None and dumped["checks"][0]["baseline"] is None
    assert dumped["candidate"]["levels"][0]["e2eP99Ms"] == 3900.0
    assert "NaN" not in json.dumps(status.dump())
