"""examples/eval-sets.yaml is the generator's output, and its eval sets can pass their gates."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import yaml

from endpoint_optimizer.api import parse_spec
from endpoint_optimizer.api.checks import CheckKind, Verdict
from endpoint_optimizer.demo import eval_sets
from endpoint_optimizer.evaluation.dataset import parse_dataset, parse_eval_set
from endpoint_optimizer.evaluation.gate import eval_check
from endpoint_optimizer.evaluation.scorers import score
from endpoint_optimizer.evaluation.slices import (
    SlicePolicy,
    items_to_resolve,
    must_pass,
    slice_checks,
)
from endpoint_optimizer.evaluation.suites import generated_items
from endpoint_optimizer.sandbox import evalset

from ..api.admission import REPO


def _config_maps() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all(eval_sets.FILE.read_text(encoding="utf-8"))
    return {d["metadata"]["name"]: d for d in docs if d}


def test_the_checked_in_eval_sets_are_the_generators_output() -> None:
    assert eval_sets.FILE.read_text(encoding="utf-8") == eval_sets.render(), (
        "examples/eval-sets.yaml differs from the generator: run "
        "`python -m endpoint_optimizer.demo.eval_sets`"
    )


def _resources() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc and doc["kind"] == "OptimizedEndpoint":
                found.append((path.name, doc))
    return [*found, ("README.md walk-through", walkthrough())]


def walkthrough() -> dict[str, Any]:
    """The OptimizedEndpoint of README.md's walk-through, as a reader copies it."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Walk-through") :]
    block = section[section.index("```yaml") + len("```yaml") : section.index("```\n", 8)]
    resource: dict[str, Any] = yaml.safe_load(block)
    return resource


@pytest.mark.parametrize(("name", "resource"), _resources(), ids=[n for n, _ in _resources()])
def test_each_example_eval_set_passes_its_gates_when_the_candidate_answers_alike(
    name: str, resource: dict[str, Any]
) -> None:
    spec = parse_spec(resource["spec"])
    evaluation = spec.evaluation
    assert evaluation is not None and evaluation.has_eval_set, name
    text = None
    if evaluation.dataset is not None:
        ref = evaluation.dataset.config_map_ref
        config_map = _config_maps()[ref.name]
        assert config_map["metadata"]["namespace"] == resource["metadata"]["namespace"], name
        text = config_map["data"][ref.key]
    items = parse_eval_set(text, evaluation, generated_items(spec))
    same = [1.0] * len(items)
    overall = eval_check(same, same, evaluation.metric.value, evaluation.max_absolute_drop)
    assert overall.verdict is Verdict.PASS, (name, overall.reason)
    policy = SlicePolicy(
        metric=evaluation.metric.value,
        margin=evaluation.max_absolute_drop,
        confidence=evaluation.confidence,
        min_items=evaluation.slices.min_items,
        must_pass=tuple(must_pass(spec)),
    )
    for check in slice_checks(items, same, same, policy):
        if check.kind is CheckKind.EVAL:  # must-pass: its Inconclusive would hold
            assert check.verdict is Verdict.PASS, (name, check.reason)


def test_support_evals_can_pass_a_one_point_margin_when_the_candidate_agrees() -> None:
    items = parse_dataset(_config_maps()["support-evals"]["data"]["items.jsonl"])
    assert len(items) >= items_to_resolve(0.01)
    assert len({item.prompt for item in items}) == len(items)
    same = [1.0] * len(items)
    assert eval_check(same, same, "exact_match", 0.01).verdict.value == "Pass"


def test_every_example_spot_check_class_has_the_samples_it_asks_for() -> None:
    items = parse_dataset(_config_maps()["support-evals"]["data"]["items.jsonl"])
    per_class = Counter(item.prompt_class for item in items)
    checked = 0
    for name, resource in _resources():
        evaluation = parse_spec(resource["spec"]).evaluation
        if evaluation is None or evaluation.spot_check is None:
            continue
        classes = evaluation.spot_check.prompt_classes
        share = -(-evaluation.spot_check.samples // len(classes))
        assert all(per_class[c] >= share for c in classes), (name, per_class)
        checked += 1
    assert checked >= 1


def test_the_sandbox_reads_each_support_question_and_knows_its_answer() -> None:
    for item in eval_sets.support_items():
        found = evalset.lookup(item["prompt"])
        assert found is not None, item["prompt"]
        assert found.kind.startswith("support-")
        assert found.reference == item["reference"]
        # The sandbox's answer scores with the item's own scorer; a wrong one does not.
        scorer = item.get("scorer", "exact_match")
        assert score(found.reference, item["reference"], scorer) == 1.0
        assert score(evalset.wrong_answer(found, 0.3), item["reference"], scorer) == 0.0
        assert score(evalset.wrong_answer(found, 0.7), item["reference"], scorer) == 0.0


def test_a_support_question_written_by_hand_is_answered_by_what_it_asks() -> None:
    asked = evalset.lookup(
        "Hi! Can I get a refund 20 days after purchase if the policy allows 14 days? "
        "Answer yes or no."
    )
    assert asked is not None and asked.reference == "no"
    total = evalset.lookup(
        "My invoice lists a subtotal of $10 and tax of $0.80. What is the total I am charged?"
    )
    assert total is not None and total.reference == "10.80"
