"""Eval datasets: JSONL text (as the operator reads it from a ConfigMap) into items.

One JSON object per line: `prompt` and `reference` (strings, required), `scorer`
(optional: overrides the spec's metric for this item), `class` (optional prompt
class, used by the spot check) and `id` (optional; defaults to the line number).
Blank lines are skipped. Errors name the line and the field.

Parsing is complete and strict because it is the last look before traffic: the
operator parses the eval set before it benchmarks or asks for answers, so whatever
would fail later (a regex reference RE2 cannot compile, a class the spot check cannot
name, an oversized reference) is refused here, with the line and what to change,
instead of after a benchmark against production.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints, ValidationError

from endpoint_optimizer.api.camel import CamelModel
from endpoint_optimizer.api.spec import EvaluationSpec
from endpoint_optimizer.api.types import PromptClass
from endpoint_optimizer.evaluation.scorers import SCORERS, PatternError, check_pattern, score

# A ConfigMap holds at most 1 MiB (Kubernetes' limit); an eval set is read whole.
MAX_DATASET_BYTES = 1 << 20
# A reference is an answer, not a document: this bounds ROUGE-L's work per item.
MAX_REFERENCE_CHARS = 16_384
MAX_ID_CHARS = 253


class EvalDatasetError(ValueError):
    """The dataset text is not valid JSONL of eval items; the message names line and field."""


class EvalItem(CamelModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    id: Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_CHARS)]
    prompt: str = Field(min_length=1)
    reference: str = Field(max_length=MAX_REFERENCE_CHARS)
    scorer: str | None = None
    # The spot check's spec.evaluation.spotCheck.promptClasses names these: same syntax.
    prompt_class: PromptClass | None = Field(default=None, alias="class")


def parse_dataset(text: str, source: str = "dataset", metric: str | None = None) -> list[EvalItem]:
    """Parse JSONL; `source` names the ConfigMap key in error messages.

    `metric`: the spec's scorer for items without their own; with it, every item that
    scores by `regex` has its pattern compiled here (without it, only those that say so).
    """
    size = len(text.encode())
    if size > MAX_DATASET_BYTES:
        raise EvalDatasetError(
            f"{source}: {size} bytes, more than {MAX_DATASET_BYTES} (a ConfigMap's limit); "
            "split the eval set or lower its items' length"
        )
    if metric is not None and metric not in SCORERS:
        raise EvalDatasetError(
            f"evaluation.metric: unknown scorer {metric!r}; use one of {sorted(SCORERS)}"
        )
    items: list[EvalItem] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        item = _parse_line(line, number, source)
        if item.scorer is not None and item.scorer not in SCORERS:
            raise EvalDatasetError(
                f"{source} line {number}: field 'scorer': unknown {item.scorer!r}; "
                f"use one of {sorted(SCORERS)}"
            )
        if (item.scorer or metric) == "regex":
            try:
                check_pattern(item.reference)
            except PatternError as error:
                raise EvalDatasetError(
                    f"{source} line {number}: field 'reference' (scored by regex): {error}"
                ) from None
        if item.id in seen:
            raise EvalDatasetError(f"{source} line {number}: field 'id': duplicate {item.id!r}")
        seen.add(item.id)
        items.append(item)
    if not items:
        raise EvalDatasetError(f"{source}: no items; add JSONL lines with prompt and reference")
    return items


def _parse_line(line: str, number: int, source: str) -> EvalItem:
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as error:
        raise EvalDatasetError(
            f"{source} line {number}: not JSON ({error.msg}); each line must be one object"
        ) from None
    if not isinstance(raw, dict):
        raise EvalDatasetError(f"{source} line {number}: expected a JSON object")
    raw.setdefault("id", str(number))
    if isinstance(raw["id"], int | float) and not isinstance(raw["id"], bool):
        raw["id"] = str(raw["id"])
    try:
        return EvalItem.model_validate(raw)
    except ValidationError as error:
        # The messages only: a validation error's repr would carry the prompt.
        first = error.errors(include_input=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "item"
        raise EvalDatasetError(f"{source} line {number}: field {field!r}: {first['msg']}") from None


def parse_eval_set(
    text: str | None, evaluation: EvaluationSpec, generated: Sequence[EvalItem] = ()
) -> list[EvalItem]:
    """spec.evaluation's eval set, checked against the spec: the dataset's items cut to
    maxItems (None: no dataset), then the generated suites' items.

    Every line is checked (not only the first maxItems), so the set that fails
    tomorrow with a larger maxItems fails today.
    """
    items: list[EvalItem] = []
    where = "evaluation.generated"
    if text is not None and evaluation.dataset is not None:
        ref = evaluation.dataset.config_map_ref
        where = f"ConfigMap {ref.name} key {ref.key}"
        items = parse_dataset(text, f"spec.evaluation.dataset: {where}", evaluation.metric.value)
        items = items[: evaluation.max_items or len(items)]
        taken = {item.id for item in items}
        clash = next((item.id for item in generated if item.id in taken), None)
        if clash is not None:
            raise EvalDatasetError(
                f"spec.evaluation.dataset: {where}: id {clash!r} is also a generated item's "
                "(evaluation.generated); rename the dataset's item"
            )
    items += generated
    if evaluation.spot_check is not None:
        present = sorted({item.prompt_class for item in items if item.prompt_class})
        missing = [c for c in evaluation.spot_check.prompt_classes if c not in present]
        if missing:
            raise EvalDatasetError(
                f"spec.evaluation.spotCheck.promptClasses: {', '.join(missing)} is no item's "
                f"class in {where} (classes there: {', '.join(present) or 'none'}); fix the "
                "name or add items of that class"
            )
    return items


def score_items(items: list[EvalItem], answers: list[str], metric: str) -> list[float]:
    """Score each answer against its item; an item's own `scorer` overrides `metric`."""
    if len(items) != len(answers):
        raise ValueError(f"{len(answers)} answers for {len(items)} eval items; answer every item")
    return [
        score(answer, item.reference, item.scorer or metric)
        for item, answer in zip(items, answers, strict=True)
    ]
