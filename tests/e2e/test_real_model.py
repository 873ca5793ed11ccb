"""The whole pipeline against real SmolLM2 tokens: the verdicts come from measured values.

The real operator process runs on KMock against the sandbox, whose endpoints are
served by real SmolLM2-135M workers (SANDBOX_ENGINE=real on the model). Each
scenario is one OptimizedEndpoint; nothing in the sandbox is told what the
outcome should be:

- n-gram speculation on a copy-the-prompt workload: acceptance is high, the
  candidate is faster, it is promoted;
- the same candidate on a creative workload: acceptance falls below the floor and
  it is rolled back, with the measured value in the check;
- INT8 SmoothQuant (TensorRT-LLM): served as torch dynamic int8, faster but
  lossy on the eval set, rolled back by the eval gate;
- bf16: near-lossless, the eval gate passes.

Slow (one model load per distinct variant configuration; about 1-2 minutes per
scenario on two cores): run with `pytest -m slow`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from endpoint_optimizer.realmodel.evalset import DATA
from tests.e2e.conftest import E2E, IMAGE, NAMESPACE
from tests.e2e.real_engine import (  # noqa: F401 (fixtures, found by name)
    e2e_sandbox_config,
    e2e_sandbox_engine,
    needs_real_model,
    real_engine,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    needs_real_model,
]

EVAL_CLASSES = ("copy_number", "copy_address")
EVAL_PER_CLASS = 30
# bf16's answers differ from fp32's on a few items, and which ones depends on the batch
# composition (measured over all 240 items, three runs: 5 discordant pairs each, in both
# directions, all but one in copy_address; fp32 at the gate's concurrency 4 repeats exactly).
# Non-inferiority at the test's 5-point margin needs the items for it: at 60 items a single
# baseline-only flip puts the lower bound at -5.35 points (Inconclusive, as CI once saw), at
# 180 items (45 per class, all four classes) five one-sided flips still Pass (-4.94).
WIDE_EVAL_PER_CLASS = 45
# INT8's drop is real but its size varies with the batch composition, as bf16's flips do:
# at 60 items CI once saw -18.3 points with its upper bound at -3.96 against the 5-point
# margin (Inconclusive, promoted under onNoData: pass). All 60 items of each copy class
# (120 paired) narrow the interval by a factor of sqrt(2), to about +-10 points at that drop.
INT8_EVAL_PER_CLASS = 60


def _jsonl(name: str, keep: Any = None, limit: int | None = None) -> str:
    rows = [json.loads(line) for line in (DATA / name).read_text().splitlines()]
    if keep is not None:
        rows = [row for row in rows if keep(row)]
    per_class: dict[str, int] = {}
    kept = []
    for row in rows:
        bucket = str(row.get("class", ""))
        if limit is not None and per_class.get(bucket, 0) >= limit:
            continue
        per_class[bucket] = per_class.get(bucket, 0) + 1
        kept.append(row)
    return "".join(json.dumps(row) + "\n" for row in kept)


def _prepare(e2e: E2E) -> None:
    e2e.cluster.create_configmap(
        NAMESPACE,
        "real-data",
        {
            "eval.jsonl": _jsonl(
                "evalset.jsonl", lambda r: r["class"] in EVAL_CLASSES, EVAL_PER_CLASS
            ),
            "eval-wide.jsonl": _jsonl("evalset.jsonl", limit=WIDE_EVAL_PER_CLASS),
            "eval-int8.jsonl": _jsonl(
                "evalset.jsonl", lambda r: r["class"] in EVAL_CLASSES, INT8_EVAL_PER_CLASS
            ),
            "extract.jsonl": _jsonl("workload-extract.jsonl"),
            "creative.jsonl": _jsonl("workload-creative.jsonl"),
        },
    )


def _spec(
    endpoint: str, workload: str, optimizations: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "endpointName": endpoint,
        "region": "us-east-1",
        "executionRoleArn": "arn:aws:iam::123456789012:role/sagemaker-exec",
        "model": {
            "s3Uri": "s3://models/smollm2-135m-instruct/",
            "image": IMAGE,
            "environment": {"SANDBOX_ENGINE": "real", "OPTION_RECORD_ACCEPTANCE_RATE": "true"},
        },
        "instanceType": "ml.g6e.2xlarge",
        "optimizations": optimizations,
        "outputS3Uri": "s3://models/optimized/",
        "objective": {"metric": "latency", "minImprovement": 0.05},
        "benchmark": {
            "concurrency": [1],
            "requests": 30,
            "warmup": 1,
            "outputTokens": 12,
            "dataset": {"configMapRef": {"name": "real-data", "key": f"{workload}.jsonl"}},
            "requestTimeout": "60s",
            # The real engine is the subject here, not the judge: one round of 30, as
            # before the sequential judge (tests/e2e/test_sequential.py covers that).
            "judge": "fixed",
        },
        "evaluation": {
            "dataset": {"configMapRef": {"name": "real-data", "key": "eval.jsonl"}},
            "metric": "contains",
            "maxAbsoluteDrop": 0.05,
            "maxOutputTokens": 16,
            # The real engine on 2 CPU cores: no second asking of the eval set (A/A noise,
            # measured for this engine in benchmarks/bench_slice_power.py: 0 items differ).
            "noiseItems": 0,
        },
        "rollout": {
            "strategy": "canary",
            "steps": [{"weight": 50, "pause": "1s"}],
            "analysis": {"onNoData": "pass"},
        },
    }
    spec.update(extra)
    return spec


def _check(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for check in obj.get("status", {}).get("checks", []):
        if check.get("kind") == kind:
            return dict(check)
    raise AssertionError(f"no {kind} check in {obj.get('status', {}).get('checks')}")


NGRAM = {"speculativeDecoding": {"method": "ngram", "numSpeculativeTokens": 4}}


def test_ngram_on_an_extraction_workload_is_promoted(e2e: E2E) -> None:
    _prepare(e2e)
    e2e.create("ngram-extract", _spec("real-ngram-extract", "extract", NGRAM))
    done = e2e.wait_phase("ngram-extract", {"Succeeded", "RolledBack", "Failed"}, timeout=540)
    # The subject: on a copy-heavy workload the draft pays (server counters, not a guess).
    acceptance = _check(done, "acceptance")
    assert acceptance["verdict"] == "Pass", e2e.explain(done)
    assert acceptance["candidate"] >= 0.4
    assert "server" in done["status"]["candidate"]["acceptanceSource"]
    checks = done["status"].get("checks", [])
    failed = [c for c in checks if c.get("verdict") == "Fail"]
    if done["status"]["phase"] == "RolledBack" and failed:
        # Seen in CI at 609b280 (a quiet host): ttft_p50@c1 ratio 1.210 (CI 1.105-1.301)
        # against the default limit 1.100, with e2e p50 0.646, ITL 0.419, the objective
        # +35.4 % and acceptance 0.81; other runs kept the ratio under the limit. Real
        # n-gram speculation on this engine costs its first token about that much, and
        # the spec has no per-metric limit to allow it (no spec.benchmark thresholds yet).
        # A rollback is accepted only for that: TTFT alone, every other check not Fail.
        assert all(c["name"].startswith("ttft_") for c in failed), e2e.explain(done)
        assert _check(done, "objective")["verdict"] == "Pass", e2e.explain(done)
        pytest.xfail(
            "n-gram's first-token cost over the default TTFT limit: "
            + "; ".join(c["reason"] for c in failed)
        )
    assert done["status"]["phase"] == "Succeeded", e2e.explain(done)


def test_ngram_on_a_creative_workload_is_rolled_back_for_low_acceptance(e2e: E2E) -> None:
    _prepare(e2e)
    e2e.create("ngram-creative", _spec("real-ngram-creative", "creative", NGRAM))
    done = e2e.wait_phase("ngram-creative", {"Succeeded", "RolledBack", "Failed"}, timeout=540)
    assert done["status"]["phase"] == "RolledBack", e2e.explain(done)
    acceptance = _check(done, "acceptance")
    assert acceptance["verdict"] == "Fail"
    assert acceptance["candidate"] < 0.4


# A fresh-clone CI at a1568fd on a 2-core host: the baseline alone took 272 s (benchmark and
# 120 eval items on the real engine) and the candidate was still being measured at 540 s,
# while test_real_slices' int8 scenario took 445 s in the same run. Its budget, 840 s of
# a 900 s test, is this one's too.
@pytest.mark.timeout(900)
def test_int8_smoothquant_is_faster_but_rolled_back_by_the_eval_gate(e2e: E2E) -> None:
    _prepare(e2e)
    int8 = {
        "quantization": {"scheme": "smoothquant"},
        "compilation": {"tensorParallelDegree": 1},
    }
    spec = _spec("real-int8", "extract", int8)
    spec["evaluation"]["dataset"]["configMapRef"]["key"] = "eval-int8.jsonl"
    e2e.create("int8", spec)
    done = e2e.wait_phase("int8", {"Succeeded", "RolledBack", "Failed"}, timeout=840)
    assert done["status"]["phase"] == "RolledBack", e2e.explain(done)
    assert _check(done, "eval")["verdict"] == "Fail", e2e.explain(done)
    status = done["status"]
    assert status["candidate"]["evalScore"] < status["baseline"]["evalScore"]


def _native_bf16() -> bool:
    """Whether this CPU has bf16 instructions; without them torch emulates bf16 matmuls."""
    cpuinfo = Path("/proc/cpuinfo")
    flags = cpuinfo.read_text().split() if cpuinfo.exists() else []
    return "avx512_bf16" in flags or "amx_bf16" in flags


# Without bf16 instructions (the 2-core AMD EPYC development host has AVX2 only) torch
# emulates bf16: prefill of 400 tokens took 13.6 s against fp32's 2.0 s there, a CI run
# rolled bf16 back on TTFT (ratio 6.2, eval gate passed), and a run alone did not finish
# its comparison within 840 s. The scenario (near-lossless, prefill faster) needs the instructions.
@pytest.mark.skipif(
    not _native_bf16(), reason="no avx512_bf16/amx_bf16 on this CPU: torch emulates bf16, ~7x"
)
@pytest.mark.timeout(900)  # three times the eval items of the other scenarios
def test_bf16_passes_the_eval_gate(e2e: E2E) -> None:
    _prepare(e2e)
    # The subject is the quality gate: bf16 is near-lossless, and the wide eval set (180
    # paired items) must show it. Its speed on a CPU is a trade the operator judges as it
    # finds it: bf16 instructions speed prefill up and slow this engine's decode down.
    # Measured on two hosts with AMX: TTFT p50 ratio 0.494 (CI 0.421-0.557) and 0.614
    # (0.556-0.678); TPOT p50 1.111 (0.895-1.240), then 1.361 (1.114-1.446), which Failed
    # the decode checks and rolled bf16 back. So the test asserts the quality verdict, the
    # prefill gain, and that a rollback, when there is one, rests on speed alone. The
    # workload is prefill-heavy (4 output tokens), where the end-to-end objective can show
    # what bf16 buys: ratio 0.896 (0.817-0.982) in the run that failed on decode.
    objective = {"metric": "latency", "minImprovement": 0.0}
    spec = _spec("real-bf16", "extract", {}, container={"dtype": "bf16"}, objective=objective)
    spec["benchmark"]["outputTokens"] = 4
    spec["evaluation"]["dataset"]["configMapRef"]["key"] = "eval-wide.jsonl"
    e2e.create("bf16", spec)
    done = e2e.wait_phase("bf16", {"Succeeded", "RolledBack", "Failed"}, timeout=840)
    eval_check = _check(done, "eval")
    assert eval_check["verdict"] == "Pass", e2e.explain(done)
    assert f"over {WIDE_EVAL_PER_CLASS * 4} items" in eval_check["reason"]
    checks = {c["name"]: c for c in done["status"]["checks"]}
    ttft = checks["ttft_p50@c1"]
    assert ttft["verdict"] == "Pass" and ttft["intervalHigh"] < 1.0, e2e.explain(done)
    against = [c for c in checks.values() if c["verdict"] in ("Fail", "NoImprovement")]
    assert all(c["kind"] in ("benchmark", "objective", "live") for c in against), e2e.explain(done)
    assert done["status"]["phase"] == ("RolledBack" if against else "Succeeded"), e2e.explain(done)
