"""Shadow is judged like the other strategies: the objective on the shadow's CloudWatch
aggregates, and the eval gate on pinned requests while the candidate is a weight-0
production variant (a shadow cannot be invoked with TargetVariant), before it shadows."""

from __future__ import annotations

from typing import Any

from endpoint_optimizer.sandbox.config import Faults, QualityRegression
from endpoint_optimizer.sandbox.evalset import DATA_FILE as EVAL_FILE
from tests.e2e.conftest import E2E, NO_MUST_PASS, production_traffic, spec
from tests.e2e.test_live_judge import ENDS
from tests.e2e.test_shadow import SHADOW


def evaluation(e2e: E2E, items: int, max_drop: float = 0.02) -> dict[str, Any]:
    lines = EVAL_FILE.read_text().splitlines()[:items]
    e2e.cluster.create_configmap(e2e.namespace, "support-evals", {"items.jsonl": "\n".join(lines)})
    return {
        "dataset": {"configMapRef": {"name": "support-evals", "key": "items.jsonl"}},
        "metric": "exact_match",
        "maxAbsoluteDrop": max_drop,
        "maxOutputTokens": 12,
        "slices": NO_MUST_PASS,
    }


def checks(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in obj["status"]["checks"]}


def configs_created(e2e: E2E) -> list[str]:
    return [
        str(c.get("resource", ""))
        for c in e2e.sandbox.admin.calls()
        if c["operation"] == "CreateEndpointConfig"
    ]


def test_a_shadow_candidate_that_is_not_faster_is_not_promoted(e2e: E2E) -> None:
    names = e2e.create(
        "chat",
        spec(
            rollout=SHADOW,
            optimizations={},
            # A setting that does not change speed at this prompt length.
            container={"maxModelLen": 4096},
            objective={"metric": "latency", "minImprovement": 0.2},
        ),
    )
    with production_traffic(e2e.sandbox, "chat-e2e"):
        obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "RolledBack", e2e.explain(obj)
    objective = checks(obj)["objective_latency_shadow"]
    assert objective["verdict"] == "NoImprovement", e2e.explain(obj)
    assert objective["samples"] >= 2
    assert objective["intervalHigh"] > 0.8, objective  # not 20 % faster, with confidence
    assert checks(obj)["live_latency"]["verdict"] == "Pass"  # not slower either
    assert any(h["event"] == "NoImprovement" for h in status["history"])
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.baseline_config


def test_a_shadow_candidate_with_an_eval_drop_is_rolled_back_before_it_shadows(
    e2e: E2E,
) -> None:
    names = e2e.create("chat", spec(rollout=SHADOW, evaluation=evaluation(e2e, 60)))
    e2e.sandbox.admin.set_faults(
        Faults(
            quality_regressions=[QualityRegression(model=names.candidate_model, accuracy_drop=0.3)]
        )
    )
    obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "RolledBack", e2e.explain(obj)
    gate = checks(obj)["eval_exact_match"]
    assert gate["verdict"] == "Fail", e2e.explain(obj)
    assert status["candidate"]["evalItems"] == 60
    assert status["candidate"]["evalScore"] < status["baseline"]["evalScore"]
    # Judged as a weight-0 production variant; the shadow config was never made.
    assert names.pinned_config in configs_created(e2e)
    assert names.rollout_config not in configs_created(e2e)
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.baseline_config


def test_a_good_shadow_candidate_with_an_eval_set_passes_pinned_then_shadow(e2e: E2E) -> None:
    # A 10-point allowance: 40 unchanged answers show no drop beyond it with confidence.
    names = e2e.create("chat", spec(rollout=SHADOW, evaluation=evaluation(e2e, 40, 0.1)))
    with production_traffic(e2e.sandbox, "chat-e2e"):
        obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "Succeeded", e2e.explain(obj)
    found = checks(obj)
    assert found["eval_exact_match"]["verdict"] == "Pass", e2e.explain(obj)
    assert found["objective_latency"]["verdict"] == "Pass"  # pinned benchmark
    assert found["objective_latency_shadow"]["verdict"] == "Pass", e2e.explain(obj)
    # The live judge's checks stand until the next comparison replaces the check list
    # (pipeline/record.py): on a busy host the shadow's comparison can fold after the
    # step's last interval, and the promotion follows with no live check left to show
    # (CI saw it once). The shadow objective above is judged on those same intervals.
    if "live_latency" in found:
        assert found["live_latency"]["verdict"] == "Pass", e2e.explain(obj)
    events = [h["event"] for h in status["history"]]
    assert events.index("PinnedChecksPassed") < events.index("ShadowStarted")
    assert events.index("ShadowStarted") < events.index("CandidatePromoted")
    assert configs_created(e2e).index(names.pinned_config) < configs_created(e2e).index(
        names.rollout_config
    )
    copies = [r for r in e2e.sandbox.admin.traffic_records("chat-e2e") if r.shadow]
    assert copies and {r.variant for r in copies} == {names.candidate_variant}
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.promoted_config
