"""The spot check: seeded paired samples from named classes, held until approval."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from endpoint_optimizer.evaluation.dataset import parse_dataset
from endpoint_optimizer.evaluation.spot_check import (
    CONFIGMAP_KEY,
    SpotCheck,
    SpotSample,
    hardest_classes,
    pick_spot_check,
    spot_samples,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def samples() -> list[SpotSample]:
    out = []
    for prompt_class, count in (("math", 40), ("code", 8), ("chat", 40)):
        for i in range(count):
            out.append(
                SpotSample(
                    item_id=f"{prompt_class}-{i}",
                    prompt_class=prompt_class,
                    prompt=f"p{i}",
                    baseline_answer="a",
                    candidate_answer="b",
                )
            )
    return out


def test_same_seed_picks_the_same_samples_and_another_seed_differs() -> None:
    first = pick_spot_check(samples(), ["math", "chat"], 10, seed=1, now=NOW)
    again = pick_spot_check(list(reversed(samples())), ["math", "chat"], 10, seed=1, now=NOW)
    other = pick_spot_check(samples(), ["math", "chat"], 10, seed=2, now=NOW)
    ids = [s.item_id for s in first.samples]
    assert ids == [s.item_id for s in again.samples]
    assert ids != [s.item_id for s in other.samples]


def test_shares_are_even_and_a_short_class_gives_its_share_away() -> None:
    even = pick_spot_check(samples(), ["math", "chat"], 50, seed=0, now=NOW)
    assert sum(s.prompt_class == "math" for s in even.samples) == 25
    short = pick_spot_check(samples(), ["code", "math"], 50, seed=0, now=NOW)
    assert sum(s.prompt_class == "code" for s in short.samples) == 8
    assert len(short.samples) == 48  # code has 8, math 40: all of both
    assert {s.prompt_class for s in short.samples} == {"code", "math"}


def test_configmap_data_round_trips() -> None:
    spot = pick_spot_check(samples(), ["code"], 50, seed=3, now=NOW)
    data = spot.configmap_data()
    restored = SpotCheck.model_validate(json.loads(data[CONFIGMAP_KEY]))
    assert restored == spot
    assert len(restored.samples) == 8 and restored.requested == 50


def test_hardest_classes_have_the_lowest_baseline_scores() -> None:
    items = parse_dataset(
        "\n".join(
            [
                '{"id": "a1", "prompt": "p", "reference": "r", "class": "easy"}',
                '{"id": "a2", "prompt": "p", "reference": "r", "class": "easy"}',
                '{"id": "b1", "prompt": "p", "reference": "r", "class": "hard"}',
                '{"id": "c1", "prompt": "p", "reference": "r"}',
            ]
        )
    )
    assert hardest_classes(items, [1.0, 0.9, 0.1, 0.5], 2) == ["hard", "unclassified"]


def test_spot_samples_pair_items_with_both_answers() -> None:
    items = parse_dataset('{"id": "q", "prompt": "2+2?", "reference": "4", "class": "math"}')
    (sample,) = spot_samples(items, ["4"], ["5"])
    assert (sample.prompt_class, sample.baseline_answer, sample.candidate_answer) == (
        "math",
        "4",
        "5",
    )
    with pytest.raises(ValueError, match="answer every item"):
        spot_samples(items, ["4"], [])
