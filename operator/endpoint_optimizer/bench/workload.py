"""Request bodies: synthetic prompts of a given shape, or a JSONL dataset.

Synthetic prompts use common one-token English words, so a prompt of N words is
close to N tokens for Llama-family tokenizers, and start with a unique marker
so that a server's prefix cache cannot turn the benchmark into a cache test.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from endpoint_optimizer.bench.models import BenchConfig, DatasetItem, RequestFormat

_WORDS = [
    "time",
    "year",
    "people",
    "way",
    "day",
    "man",
    "thing",
    "woman",
    "life",
    "child",
    "world",
    "school",
    "state",
    "family",
    "student",
    "group",
    "country",
    "problem",
    "hand",
    "part",
    "place",
    "case",
    "week",
    "company",
    "system",
    "program",
    "question",
    "work",
    "government",
    "number",
    "night",
    "point",
    "home",
    "water",
    "room",
    "mother",
    "area",
    "money",
    "story",
    "fact",
    "month",
    "lot",
    "right",
    "study",
    "book",
    "eye",
    "job",
    "word",
    "business",
    "issue",
    "side",
    "kind",
    "head",
    "house",
    "service",
    "friend",
    "father",
    "power",
    "hour",
    "game",
    "line",
    "end",
    "member",
    "law",
    "car",
    "city",
    "name",
]


class DatasetError(ValueError):
    """A dataset file that cannot be read as benchmark prompts."""


def load_dataset(path: Path) -> list[DatasetItem]:
    items: list[DatasetItem] = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                items.append(DatasetItem.model_validate(json.loads(line)))
            except ValueError as exc:
                raise DatasetError(
                    f"{path}:{number}: expected a JSON object with one of prompt, messages "
                    f"or body (and optional outputTokens): {exc}"
                ) from exc
    if not items:
        raise DatasetError(f"{path}: the dataset has no prompts")
    return items


def synthetic_prompt(index: int, input_tokens: int, seed: int) -> str:
    rng = random.Random(seed * 1_000_003 + index)
    marker = f"[{seed}-{index}]"
    words = [rng.choice(_WORDS) for _ in range(max(input_tokens - 4, 1))]
    return marker + " " + " ".join(words)


def request_lengths(config: BenchConfig, index: int) -> tuple[int, int]:
    """(input tokens, output tokens) of synthetic request `index`: the means, or draws.

    Each request has its own generator, seeded by (seed, index), so a request's lengths
    do not depend on which process sends it or in what order (sharded levels, open loops).
    """
    if config.input_tokens_sd == 0 and config.output_tokens_sd == 0:
        return config.input_tokens, config.output_tokens
    rng = random.Random(f"lengths-{config.seed}-{index}")

    def draw(mean: int, sd: float) -> int:
        return max(1, round(rng.gauss(mean, sd))) if sd > 0 else mean

    return (
        draw(config.input_tokens, config.input_tokens_sd),
        draw(config.output_tokens, config.output_tokens_sd),
    )


def request_body(config: BenchConfig, index: int) -> bytes:
    """The JSON body for request `index` of a level (warm-up requests included)."""
    input_tokens, output_tokens = request_lengths(config, index)
    messages: list[dict[str, object]] | None = None
    prompt: str | None = None
    if config.dataset:
        item = config.dataset[index % len(config.dataset)]
        if item.body is not None:
            return json.dumps(item.body).encode()
        output_tokens = item.output_tokens or output_tokens
        messages, prompt = item.messages, item.prompt
    else:
        prompt = synthetic_prompt(index, input_tokens, config.seed)
    body: dict[str, object]
    usage = {"include_usage": True, "continuous_usage_stats": True}
    if config.request_format is RequestFormat.OPENAI:
        return json.dumps(
            {
                "messages": messages or [{"role": "user", "content": prompt or ""}],
                "max_tokens": output_tokens,
                "stream": True,
                "stream_options": usage,
            }
        ).encode()
    if prompt is None:
        prompt = "\n".join(str(m.get("content", "")) for m in messages or [])
    if config.request_format is RequestFormat.COMPLETIONS:
        body = {"prompt": prompt, "max_tokens": output_tokens, "stream": True}
        body["stream_options"] = usage
    else:
        body = {
            "inputs": prompt,
            "parameters": {"max_new_tokens": output_tokens, "details": True},
            "stream": True,
        }
    return json.dumps(body).encode()
