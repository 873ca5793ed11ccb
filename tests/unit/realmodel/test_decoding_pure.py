"""Prompt-lookup drafting and the shipped eval data, without loading a model."""

from __future__ import annotations

import json
from pathlib import Path

from endpoint_optimizer.realmodel.decoding import lookup_draft
from endpoint_optimizer.realmodel.evalset import DATA, eval_items, write_data


def test_draft_continues_the_latest_earlier_match_of_the_last_ngram() -> None:
    context = [1, 2, 3, 9, 9, 1, 2, 3, 4, 5, 6, 1, 2, 3]
    # The latest earlier occurrence of [1, 2, 3] is at index 5; its continuation is 4, 5, 6.
    assert lookup_draft(context, 3) == [4, 5, 6]
    assert lookup_draft(context, 2) == [4, 5]


def test_draft_falls_back_to_shorter_ngrams_and_can_be_empty() -> None:
    assert lookup_draft([7, 8, 9, 7], 2) == [8, 9]  # only the unigram 7 repeats
    assert lookup_draft([1, 2, 3, 4], 3) == []
    assert lookup_draft([1, 1, 1], 0) == []


def test_committed_data_matches_the_generator(tmp_path: Path) -> None:
    for written in write_data(tmp_path):
        committed = DATA / written.name
        assert committed.read_text() == written.read_text(), f"regenerate {committed}"


def test_eval_items_are_balanced_and_answerable_from_their_prompt_or_table() -> None:
    items = eval_items()
    classes = {item["class"] for item in items}
    assert classes == {"capital", "copy_number", "copy_address", "extract_name"}
    for item in items:
        assert item["scorer"] in {"contains", "numeric"}
        if item["class"] != "capital":
            assert item["reference"] in item["prompt"]
    lines = (DATA / "evalset.jsonl").read_text().splitlines()
    assert len(lines) == len(items) == 240
    assert all(json.loads(line)["reference"] for line in lines)
