"""Parsing eval datasets from ConfigMap text."""

from __future__ import annotations

from typing import Any

import pytest

from endpoint_optimizer.api import EvaluationSpec
from endpoint_optimizer.evaluation.dataset import (
    MAX_REFERENCE_CHARS,
    EvalDatasetError,
    parse_dataset,
    parse_eval_set,
    score_items,
)

TEXT = """
{"prompt": "2+2?", "reference": "4", "scorer": "numeric", "class": "math"}

{"id": "q2", "prompt": "Capital of France?", "reference": "Paris"}
"""


def test_items_parse_with_class_scorer_and_default_ids() -> None:
    items = parse_dataset(TEXT)
    assert [item.id for item in items] == ["2", "q2"]
    assert items[0].prompt_class == "math" and items[0].scorer == "numeric"
    assert items[1].prompt_class is None


def test_item_scorer_overrides_the_spec_metric() -> None:
    items = parse_dataset(TEXT)
    assert score_items(items, ["it is 4", "paris"], "exact_match") == [1.0, 1.0]
    with pytest.raises(ValueError, match="answer every item"):
        score_items(items, ["4"], "exact_match")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"prompt": "x"}', "line 1: field 'reference'"),
        ('{"prompt": "x", "reference": "y"}\nnot json', "line 2: not JSON"),
        ('{"prompt": "x", "reference": "y", "scorer": "bleu"}', "field 'scorer': unknown"),
        ('{"prompt": "x", "reference": "y", "extra": 1}', "line 1: field 'extra'"),
        ("[1, 2]", "expected a JSON object"),
        (
            '{"id": 1, "prompt": "x", "reference": "y"}\n'
            '{"id": "1", "prompt": "z", "reference": "y"}',
            "duplicate",
        ),
        ("\n\n", "no items"),
    ],
)
def test_errors_name_the_line_and_field(text: str, message: str) -> None:
    with pytest.raises(EvalDatasetError, match=message):
        parse_dataset(text, source="support-evals/items.jsonl")


def test_a_regex_reference_re2_cannot_compile_is_refused_at_parse_with_its_line() -> None:
    text = '{"prompt": "x", "reference": "ok"}\n{"prompt": "y", "reference": "(a)\\\\1"}'
    # The spec's metric decides how items without their own scorer are scored.
    assert len(parse_dataset(text, metric="exact_match")) == 2
    with pytest.raises(EvalDatasetError, match=r"line 2: field 'reference' \(scored by regex\)"):
        parse_dataset(text, metric="regex")
    own = '{"prompt": "y", "reference": "(?=x)", "scorer": "regex"}'
    with pytest.raises(EvalDatasetError, match=r"line 1: .*lookaround is not supported"):
        parse_dataset(own, metric="exact_match")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            '{"prompt": "x", "reference": "' + "r" * (MAX_REFERENCE_CHARS + 1) + '"}',
            "line 1: field 'reference': String should have at most",
        ),
        ('{"prompt": "x", "reference": "y", "class": "two words"}', "line 1: field 'class'"),
        ('{"prompt": "x", "reference": "y", "id": ["a"]}', "line 1: field 'id'"),
        ('{"prompt": "x", "reference": "y", "id": ""}', "line 1: field 'id'"),
    ],
)
def test_sizes_and_classes_are_bounded(line: str, message: str) -> None:
    with pytest.raises(EvalDatasetError, match=message) as refused:
        parse_dataset(line)
    assert "r" * 100 not in str(refused.value), "the message does not echo the data"


def test_an_eval_set_above_a_configmap_size_is_refused() -> None:
    line = '{"prompt": "' + "p" * 1000 + '", "reference": "y"}\n'
    with pytest.raises(EvalDatasetError, match="more than 1048576"):
        parse_dataset(line * 1100)


def _evaluation(**overrides: Any) -> EvaluationSpec:
    fields: dict[str, Any] = {"dataset": {"configMapRef": {"name": "evals", "key": "items"}}}
    fields.update(overrides)
    return EvaluationSpec.model_validate(fields)


def test_the_eval_set_is_checked_against_the_spec_on_every_line_then_cut() -> None:
    text = "\n".join(
        [
            '{"prompt": "a", "reference": "\\\\d+", "class": "math"}',
            '{"prompt": "b", "reference": "x", "class": "copy"}',
            '{"prompt": "c", "reference": "(unclosed"}',
        ]
    )
    with pytest.raises(
        EvalDatasetError, match=r"^spec\.evaluation\.dataset: ConfigMap evals key items line 3"
    ):
        # maxItems 2 would never score line 3; it is refused all the same.
        parse_eval_set(text, _evaluation(metric="regex", maxItems=2))
    items = parse_eval_set(text, _evaluation(metric="contains", maxItems=2))
    assert [item.id for item in items] == ["1", "2"]


def test_spot_check_classes_must_be_classes_of_the_eval_set() -> None:
    text = '{"prompt": "a", "reference": "1", "class": "math"}'
    spot = {"spotCheck": {"promptClasses": ["math", "maths"]}}
    with pytest.raises(
        EvalDatasetError,
        match=r"spotCheck\.promptClasses: maths is no item's class .* \(classes there: math\)",
    ):
        parse_eval_set(text, _evaluation(**spot))
    assert parse_eval_set(text, _evaluation(spotCheck={"promptClasses": ["math"]}))
