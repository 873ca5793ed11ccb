"""Per-slice non-inferiority: a class that breaks is failed by name, however the average looks."""

from __future__ import annotations

from typing import Any

import pytest

from endpoint_optimizer.api import SpecError, parse_spec
from endpoint_optimizer.api.checks import CheckKind, Verdict
from endpoint_optimizer.evaluation.dataset import EvalItem
from endpoint_optimizer.evaluation.gate import eval_check
from endpoint_optimizer.evaluation.slices import (
    SlicePolicy,
    items_to_resolve,
    must_pass,
    slice_checks,
    slice_power,
)
from endpoint_optimizer.sagemaker.techniques.settings import SETTINGS
from tests.unit.api.test_model import minimal_spec

EVAL = {"dataset": {"configMapRef": {"name": "evals", "key": "items.jsonl"}}}


def _items(counts: dict[str, int]) -> list[EvalItem]:
    return [
        EvalItem(id=f"{name}-{i}", prompt="p", reference="r", prompt_class=name)
        for name, count in counts.items()
        for i in range(count)
    ]


def _policy(**overrides: Any) -> SlicePolicy:
    fields: dict[str, Any] = {
        "metric": "exact_match",
        "margin": 0.01,
        "confidence": 0.95,
        "min_items": 30,
        "must_pass": (),
    }
    return SlicePolicy(**(fields | overrides))


def test_a_broken_class_fails_by_name_while_the_average_passes() -> None:
    items = _items({"chat": 8000, "long-context": 400})
    base = [1.0] * len(items)
    # 20 of 400 long-context items lost (5 points); the other 8000 unchanged.
    cand = [0.0 if 8000 <= i < 8020 else 1.0 for i in range(len(items))]
    overall = eval_check(base, cand, "exact_match", 0.01)
    assert overall.verdict is Verdict.PASS
    checks = {c.name: c for c in slice_checks(items, base, cand, _policy())}
    assert checks["eval@long-context"].verdict is Verdict.FAIL
    assert "long-context dropped more than 1.0 points" in checks["eval@long-context"].reason
    assert checks["eval@chat"].verdict is Verdict.PASS
    assert "Bonferroni over 2 slices" in checks["eval@chat"].rule


def test_must_pass_classes_hold_when_missing_or_undecided_others_only_inform() -> None:
    items = _items({"chat": 40})
    base = [1.0] * 40
    cand = [1.0] * 39 + [0.0]
    checks = {
        c.name: c for c in slice_checks(items, base, cand, _policy(must_pass=("long-context",)))
    }
    missing = checks["eval@long-context"]
    assert missing.kind is CheckKind.EVAL and missing.verdict is Verdict.INCONCLUSIVE
    assert "evaluation.generated" in missing.reason and missing.samples == 0
    assert checks["eval@chat"].kind is CheckKind.EVAL_SLICE
    assert checks["eval@chat"].verdict is Verdict.INCONCLUSIVE


def test_classes_below_min_items_are_not_judged_alone() -> None:
    items = _items({"chat": 29, "code": 30})
    scores = [1.0] * len(items)
    assert [c.name for c in slice_checks(items, scores, scores, _policy())] == ["eval@code"]


@pytest.mark.parametrize(
    ("optimizations", "expected"),
    [
        ({"quantization": {"scheme": "awq"}}, ["long-context", "multi-step-reasoning"]),
        ({"quantization": {"scheme": "fp8"}}, ["long-context", "multi-step-reasoning"]),
        (
            {
                "quantization": {
                    "via": "llmCompressor",
                    "algorithm": "rtn",
                    "weightActivation": "W8A16",
                }
            },
            [],
        ),
        ({"speculativeDecoding": {"method": "ngram"}}, []),
    ],
)
def test_low_bit_schemes_must_pass_long_context_and_reasoning(
    optimizations: dict[str, Any], expected: list[str]
) -> None:
    spec = parse_spec(
        minimal_spec(outputS3Uri="s3://bucket/out/", optimizations=optimizations, evaluation=EVAL)
    )
    assert must_pass(spec) == expected
    named = parse_spec(
        minimal_spec(
            outputS3Uri="s3://bucket/out/",
            optimizations=optimizations,
            evaluation=EVAL | {"slices": {"mustPass": []}},
        )
    )
    assert must_pass(named) == []


def test_a_quantized_kv_cache_needs_an_eval_and_must_pass_long_context() -> None:
    container = {"kvCacheDtype": "nvfp4"}
    with pytest.raises(SpecError, match="evaluation"):
        parse_spec(minimal_spec(container=container))
    spec = parse_spec(minimal_spec(container=container, evaluation=EVAL))
    assert spec.changes_numerics()
    assert must_pass(spec) == ["long-context", "multi-step-reasoning"]
    assert SETTINGS.environment(spec)["OPTION_KV_CACHE_DTYPE"] == "nvfp4"


def test_the_default_suite_size_resolves_the_margin_and_keeps_the_error_rates() -> None:
    # A candidate that agrees on every item needs this many to pass a one-point margin.
    assert items_to_resolve(0.01) == 361
    passed, failed = slice_power(600, 0.85, drop=0.0, changed=0.01, trials=300)
    assert passed > 0.8 and failed == 0.0
    # At a true drop equal to the margin, at most alpha pass (intersection-union test).
    passed, _ = slice_power(600, 0.85, drop=0.01, changed=0.05, trials=300)
    assert passed <= 0.06
    _, failed = slice_power(600, 0.85, drop=0.05, changed=0.1, trials=300)
    assert failed > 0.95
