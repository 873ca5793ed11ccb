"""An eval set that breaks mid-rollout stops at parsing: no benchmark against production.

The eval ConfigMap is read on every comparison. Before, an item whose `regex`
reference Python could not compile passed parsing, and each poll benchmarked both
variants and asked for every eval answer before the scoring raised. Now the eval set is
parsed completely (patterns compiled with RE2) before a comparison sends anything; the
sandbox's traffic record is the evidence.
"""

from __future__ import annotations

import time

from endpoint_optimizer.sandbox.evalset import DATA_FILE as EVAL_FILE
from tests.e2e.conftest import E2E, NO_MUST_PASS, spec
from tests.e2e.test_faults import settle

CONFIG_MAP = "support-evals"
KEY = "items.jsonl"
# The first step holds 10 s (20 s at the tests' time scale of 0.5): the ConfigMap breaks
# inside it, and the second step's comparison is the first to read the broken set.
STEPS = {
    "strategy": "canary",
    "steps": [{"weight": 10, "pause": "20s"}, {"weight": 50, "pause": "1s"}],
    "analysis": {"onNoData": "pass"},
}
BROKEN = '{"prompt": "What is 2 + 2?", "reference": "(unclosed", "scorer": "regex"}'


def test_an_eval_set_broken_mid_rollout_sends_no_benchmark_request(e2e: E2E) -> None:
    items = EVAL_FILE.read_text().splitlines()[:40]
    e2e.cluster.create_configmap(e2e.namespace, CONFIG_MAP, {KEY: "\n".join(items)})
    names = e2e.create(
        "chat",
        spec(
            rollout=STEPS,
            evaluation={
                "dataset": {"configMapRef": {"name": CONFIG_MAP, "key": KEY}},
                "metric": "exact_match",
                "maxOutputTokens": 12,
                "slices": NO_MUST_PASS,
            },
        ),
    )
    e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: o.get("status", {}).get("rollout", {}).get("comparedStep") == 0,
        timeout=90,
        what="the first step's comparison",
        on_timeout=e2e.diagnostics,
    )
    compared = e2e.sandbox.admin.traffic("chat-e2e")
    assert any(r["stream"] for r in compared), "the first comparison benchmarked"
    e2e.cluster.request(
        "PATCH",
        f"/api/v1/namespaces/{e2e.namespace}/configmaps/{CONFIG_MAP}",
        {"data": {KEY: "\n".join([*items, BROKEN])}},
        content_type="application/merge-patch+json",
    )
    broken_at = len(e2e.sandbox.admin.traffic("chat-e2e"))
    broken_since = time.monotonic()
    e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: o.get("status", {}).get("rollout", {}).get("stepIndex") == 1,
        timeout=60,
        what="the second step",
        on_timeout=e2e.diagnostics,
    )
    # Two endpoint rechecks (30 wake-ups) of the second step: each would have compared
    # (and did, before).
    settle(e2e, rechecks=2)
    obj = e2e.cluster.get(e2e.namespace, "chat")
    after = e2e.sandbox.admin.traffic("chat-e2e")[broken_at:]
    benchmark = [r for r in after if r["stream"]]
    evaluation = [r for r in after if not r["stream"]]
    print(
        f"in {time.monotonic() - broken_since:.1f} s after the break: {len(benchmark)} "
        f"benchmark and {len(evaluation)} eval requests"
    )
    assert (len(benchmark), len(evaluation)) == (0, 0), e2e.explain(obj)
    error = obj["status"]["lastError"]
    assert f"ConfigMap {e2e.namespace}/{CONFIG_MAP} key {KEY}, line 41: field 'reference'" in error
    assert "missing )" in error and "github.com/google/re2" in error
    # A dataset that stays broken while the candidate holds 10 % is not waited out with
    # users on the candidate: after the retries the traffic goes back to the baseline.
    end = e2e.wait_phase("chat", {"Failed"}, timeout=90)
    assert end["status"]["rollout"]["rollbackReason"] == "error", e2e.explain(end)
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.baseline_config
