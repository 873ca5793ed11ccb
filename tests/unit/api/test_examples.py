"""Every example under examples/ is admitted by the CRD (schema + CEL) and loads in the model."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from endpoint_optimizer.api import EvalMetric, parse_spec
from endpoint_optimizer.bench.models import DatasetItem
from endpoint_optimizer.evaluation.dataset import parse_dataset
from endpoint_optimizer.evaluation.scorers import SCORERS

from .admission import REPO, admit

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def _documents(kind: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc and doc.get("kind") == kind:
                found.append((f"{path.name}:{doc['metadata']['name']}", doc))
    return found


RESOURCES = _documents("OptimizedEndpoint")


def test_there_are_at_least_four_examples() -> None:
    assert len(RESOURCES) >= 4


@pytest.mark.parametrize(("name", "resource"), RESOURCES, ids=[n for n, _ in RESOURCES])
def test_example_is_admitted_and_loads(name: str, resource: dict[str, Any]) -> None:
    defaulted, problems = admit(resource)
    assert problems == [], name
    # The apiserver's defaults and the model's defaults agree.
    assert parse_spec(defaulted["spec"]) == parse_spec(resource["spec"])


def test_examples_cover_the_four_issue_scenarios() -> None:
    specs = [parse_spec(r["spec"]) for _, r in RESOURCES]
    quantized = [s.optimizations.quantization for s in specs if s.optimizations.quantization]
    speculative = [
        s.optimizations.speculative_decoding for s in specs if s.optimizations.speculative_decoding
    ]
    assert {q.scheme.value for q in quantized if q.scheme} >= {"fp8"}
    assert {q.algorithm.value for q in quantized if q.algorithm} >= {"awq"}
    assert {s.method.value for s in speculative} >= {"ngram", "draftModel"}
    assert any(
        s.rollout.approval.value == "beforePromotion" and s.rollout.strategy.value == "canary"
        for s in specs
    )
    assert {s.objective.metric.value for s in specs} == {"latency", "throughput"}


def test_config_maps_the_examples_name_exist() -> None:
    config_maps = {
        (doc["metadata"]["namespace"], doc["metadata"]["name"]): set(doc["data"])
        for _, doc in _documents("ConfigMap")
    }
    for name, resource in RESOURCES:
        spec = parse_spec(resource["spec"])
        refs = [spec.benchmark.dataset, spec.evaluation.dataset if spec.evaluation else None]
        for ref in refs:
            if ref is None:
                continue
            key = (resource["metadata"]["namespace"], ref.config_map_ref.name)
            assert key in config_maps, f"{name}: ConfigMap {key} is not in examples/"
            assert ref.config_map_ref.key in config_maps[key], name


def test_example_datasets_parse_as_the_bench_and_the_eval_gate_read_them() -> None:
    for name, resource in RESOURCES:
        spec = parse_spec(resource["spec"])
        data = {
            (doc["metadata"]["namespace"], doc["metadata"]["name"]): doc["data"]
            for _, doc in _documents("ConfigMap")
        }
        namespace = resource["metadata"]["namespace"]
        if spec.evaluation is not None:
            ref = spec.evaluation.dataset.config_map_ref
            items = parse_dataset(data[(namespace, ref.name)][ref.key], source=name)
            assert items, name
        if spec.benchmark.dataset is not None:
            ref = spec.benchmark.dataset.config_map_ref
            lines = data[(namespace, ref.name)][ref.key].splitlines()
            prompts = [DatasetItem.model_validate_json(line) for line in lines if line.strip()]
            assert prompts, name


def test_every_eval_metric_has_a_scorer() -> None:
    assert {m.value for m in EvalMetric} <= set(SCORERS)
