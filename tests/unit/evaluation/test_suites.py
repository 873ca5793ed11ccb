"""The generated suites: deterministic, gradeable, sized from the spec."""

from __future__ import annotations

import pytest

from endpoint_optimizer.api import parse_spec
from endpoint_optimizer.api.spec import LongContextSuite, ReasoningSuite
from endpoint_optimizer.evaluation.dataset import EvalDatasetError, parse_eval_set
from endpoint_optimizer.evaluation.scorers import score
from endpoint_optimizer.evaluation.suites import (
    CHARS_PER_TOKEN,
    generated_items,
    long_context_budget,
    long_context_items,
    reasoning_items,
)
from endpoint_optimizer.sandbox import evalset
from tests.unit.api.test_model import minimal_spec


def test_the_same_seed_gives_the_same_items_and_another_seed_others() -> None:
    one = long_context_items(LongContextSuite(items=20), 1024)
    assert one == long_context_items(LongContextSuite(items=20), 1024)
    assert one != long_context_items(LongContextSuite(items=20, seed=1), 1024)
    assert reasoning_items(ReasoningSuite(items=20)) == reasoning_items(ReasoningSuite(items=20))


def test_long_context_items_stay_within_the_budget_and_place_the_fact_at_every_depth() -> None:
    items = long_context_items(LongContextSuite(items=44), 2048)
    lengths = [len(item.prompt) / CHARS_PER_TOKEN for item in items]
    assert max(lengths) <= 2048 and min(lengths) < 0.3 * 2048
    depths = set()
    for item in items:
        text = item.prompt.split("Question:")[0]
        depths.add(round(text.index(item.reference) / len(text), 1))
    assert {0.0, 0.5, 1.0} <= depths
    assert all(score(f"The code is {i.reference}.", i.reference, "contains") for i in items)


def test_reasoning_answers_are_exact_and_another_solver_agrees() -> None:
    items = reasoning_items(ReasoningSuite(items=200, minSteps=3, maxSteps=8))
    for item in items:
        solved = evalset.lookup(item.prompt)
        assert solved is not None and solved.reference == item.reference
        assert score(f"so the answer is\n{item.reference}", item.reference, "numeric") == 1.0
    assert {item.prompt.count("Then ") for item in items} == set(range(3, 9))


def test_the_longest_prompt_follows_max_model_len() -> None:
    spec = parse_spec(
        minimal_spec(
            container={"maxModelLen": 8192},
            evaluation={"generated": {"longContext": {}}, "maxOutputTokens": 192},
        )
    )
    assert spec.evaluation is not None and spec.evaluation.generated is not None
    suite = spec.evaluation.generated.long_context
    assert suite is not None
    assert long_context_budget(spec, suite) == int((8192 - 192) * 0.9)


def test_generated_items_mix_with_the_dataset_and_ids_cannot_clash() -> None:
    spec = parse_spec(
        minimal_spec(
            evaluation={
                "dataset": {"configMapRef": {"name": "e", "key": "k"}},
                "generated": {"multiStepReasoning": {"items": 5}},
            }
        )
    )
    assert spec.evaluation is not None
    generated = generated_items(spec)
    mixed = parse_eval_set('{"prompt": "p", "reference": "r"}', spec.evaluation, generated)
    assert [i.prompt_class for i in mixed] == [None] + ["multi-step-reasoning"] * 5
    clash = f'{{"id": "{generated[0].id}", "prompt": "p", "reference": "r"}}'
    with pytest.raises(EvalDatasetError, match="also a generated item"):
        parse_eval_set(clash, spec.evaluation, generated)
