"""Eval datasets: JSONL text (as the operator reads it from a ConfigMap) into items.

One JSON object per line: `prompt` and `reference` (strings, required), `scorer`
(optional: overrides the spec's metric for this item), `class` (optional prompt
class, used by the spot check) and `id` (optional; defaults to the line number).
Blank lines are skipped. Errors name the line and the field.
"""

from __future__ import annotations

import json

from pydantic import ConfigDict, Field, ValidationError

from endpoint_optimizer.api.camel import CamelModel
from endpoint_optimizer.evaluation.scorers import SCORERS, score


class EvalDatasetError(ValueError):
    """The dataset text is not valid JSONL of eval items; the message names line and field."""


class EvalItem(CamelModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    id: str
    prompt: str = Field(min_length=1)
    reference: str
    scorer: str | None = None
    prompt_class: str | None = Field(default=None, alias="class")


def parse_dataset(text: str, source: str = "dataset") -> list[EvalItem]:
    """Parse JSONL; `source` names the ConfigMap key in error messages."""
    items: list[EvalItem] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as error:
            raise EvalDatasetError(
                f"{source} line {number}: not JSON ({error.msg}); each line must be one object"
            ) from error
        if not isinstance(raw, dict):
            raise EvalDatasetError(f"{source} line {number}: expected a JSON object")
        raw.setdefault("id", str(number))
        if not isinstance(raw["id"], str):
            raw["id"] = str(raw["id"])
        try:
            item = EvalItem.model_validate(raw)
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "item"
            raise EvalDatasetError(
                f"{source} line {number}: field {field!r}: {first['msg']}"
            ) from error
        if item.scorer is not None and item.scorer not in SCORERS:
            raise EvalDatasetError(
                f"{source} line {number}: field 'scorer': unknown {item.scorer!r}; "
                f"use one of {sorted(SCORERS)}"
            )
        if item.id in seen:
            raise EvalDatasetError(f"{source} line {number}: field 'id': duplicate {item.id!r}")
        seen.add(item.id)
        items.append(item)
    if not items:
        raise EvalDatasetError(f"{source}: no items; add JSONL lines with prompt and reference")
    return items


def score_items(items: list[EvalItem], answers: list[str], metric: str) -> list[float]:
    """Score each answer against its item; an item's own `scorer` overrides `metric`."""
    if len(items) != len(answers):
        raise ValueError(f"{len(answers)} answers for {len(items)} eval items; answer every item")
    return [
        score(answer, item.reference, item.scorer or metric)
        for item, answer in zip(items, answers, strict=True)
    ]
