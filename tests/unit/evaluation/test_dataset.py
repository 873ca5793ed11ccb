"""Parsing eval datasets from ConfigMap text."""

from __future__ import annotations

import pytest

from endpoint_optimizer.evaluation.dataset import EvalDatasetError, parse_dataset, score_items

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
