"""One tenant cannot stall the others: a hostile eval pattern is scored while the loop ticks.

The operator serves every resource, lever and the liveness endpoint from one asyncio
loop. A `regex` eval reference with catastrophic backtracking used to be scored on it
(Python's re, 2**n steps for (A+)+$ on n A's and a mismatch), freezing all of them.
Here a wake-up of the real reconcile path measures a baseline against the sandbox and
scores such a pattern while a heartbeat coroutine ticks; the heartbeat's ticks are the
evidence.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import time

from endpoint_optimizer.bench import limits
from endpoint_optimizer.controller.configmaps import StaticConfigMaps
from endpoint_optimizer.controller.reconcile import Dependencies, wake
from endpoint_optimizer.sandbox.testing import SandboxHandle
from tests.e2e.conftest import spec as e2e_spec
from tests.unit.controller.test_reconcile import make_body, merge

ENDPOINT = "isolation-test"
# 27 A's: Python's re needs about 2**27 steps (20 s on a quiet core) to fail (A+)+$ on the
# sandbox's answer (the code, or the code with its last character changed).
CODE = "A" * 27 + "-"
HOSTILE = r"^(A+)+$"
TICK_S = 0.02
# Ticks the heartbeat may miss in a row: 3 s, far above what load does to a runnable
# process and far below the stall of the old code (about 1,000 ticks on a quiet host).
MAX_MISSED_TICKS = 150


class Heartbeat:
    """A coroutine that ticks every TICK_S on the loop; gaps say how long the loop froze."""

    def __init__(self) -> None:
        self.ticks: list[float] = []

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(TICK_S)
            self.ticks.append(loop.time())

    def most_missed(self) -> int:
        gaps = [later - earlier for earlier, later in zip(self.ticks, self.ticks[1:], strict=False)]
        return max((int(gap / TICK_S) - 1 for gap in gaps), default=0)


async def test_a_hostile_eval_pattern_does_not_stall_the_event_loop(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    evaluation = {
        "dataset": {"configMapRef": {"name": "evals", "key": "items.jsonl"}},
        "metric": "regex",
        "maxOutputTokens": 40,
    }
    items = f'{{"prompt": "Repeat the code exactly: {CODE}", "reference": "{HOSTILE}"}}'
    deps.config_maps = StaticConfigMaps({("ml", "evals"): {"items.jsonl": items}})
    body = make_body(e2e_spec(endpointName=ENDPOINT, evaluation=evaluation))
    heartbeat = Heartbeat()
    beating = asyncio.create_task(heartbeat.run())
    deadline = time.monotonic() + 120
    try:
        while not (body["status"].get("baseline") or {}).get("levels"):
            assert time.monotonic() < deadline, body["status"].get("message")
            woken = await wake(deps, body, {})
            merge(body["status"], woken.status_patch)
            await asyncio.sleep(0.02)
    finally:
        beating.cancel()
    baseline = body["status"]["baseline"]
    status = json.dumps(body["status"])[:3000]
    assert baseline["evalItems"] == 1 and baseline["evalScore"] == 0.0, status
    assert len(heartbeat.ticks) > 10, "the heartbeat ran while the wake-ups did"
    missed = heartbeat.most_missed()
    print(f"heartbeat: {len(heartbeat.ticks)} ticks, at most {missed} missed in a row")
    assert missed <= MAX_MISSED_TICKS, f"the loop froze for {missed} ticks of {TICK_S} s"


async def test_a_benchmark_above_the_operators_limit_is_refused_before_any_request(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    # The CRD admits 512 (its ceiling is 1024); this operator holds 128 per variant.
    limits.configure(limits.BenchLimits())
    benchmark = {"concurrency": [512], "requests": 32, "inputTokens": 64, "outputTokens": 8}
    body = make_body(e2e_spec(endpointName=ENDPOINT, benchmark=benchmark))
    deadline = time.monotonic() + 60
    while "spec.benchmark.concurrency" not in body["status"].get("lastError", ""):
        assert time.monotonic() < deadline, body["status"].get("message")
        woken = await wake(deps, body, {})
        merge(body["status"], woken.status_patch)
        await asyncio.sleep(0.02)
    error = body["status"]["lastError"]
    assert "512 is above this operator's limit of 128 requests in flight per variant" in error
    assert body["status"]["phase"] == "Baselining"
    assert sandbox.admin.traffic(ENDPOINT) == []
    assert multiprocessing.active_children() == [], "no benchmark client was spawned"
