"""The human spot check for real: samples written, read, approved or rejected.

spec.evaluation.spotCheck with `approval: beforePromotion`: the comparison picks paired
samples (baseline and candidate answers to the same eval item) from the named classes,
or the two hardest by the baseline's score; the operator writes them to the ConfigMap
`<name>-spot-check` (owned by the OptimizedEndpoint) before the comparison enters status,
names it in status.spotCheck and in the AwaitingApproval message, and waits. The approve
lever promotes (spotCheck.approved true); the rollback lever rejects (approved false) and
returns traffic to the baseline.
"""

from __future__ import annotations

import html
import json
from typing import Any

from endpoint_optimizer.evaluation.spot_check import CONFIGMAP_KEY, SpotCheck
from endpoint_optimizer.report import render_report
from endpoint_optimizer.sandbox.evalset import DATA_FILE as EVAL_FILE
from tests.e2e.conftest import E2E, NO_MUST_PASS, spec

CONFIG_MAP = "support-evals"
KEY = "items.jsonl"
ENDS = {"Succeeded", "Failed", "RolledBack"}
HELD = {
    "strategy": "canary",
    "steps": [{"weight": 20, "pause": "1s"}],
    "analysis": {"onNoData": "pass"},
    "approval": "beforePromotion",
}


def spot_spec(e2e: E2E, **spot: Any) -> dict[str, Any]:
    items = EVAL_FILE.read_text().splitlines()[:60]
    e2e.cluster.create_configmap(e2e.namespace, CONFIG_MAP, {KEY: "\n".join(items)})
    return spec(
        rollout=HELD,
        evaluation={
            "dataset": {"configMapRef": {"name": CONFIG_MAP, "key": KEY}},
            "metric": "exact_match",
            "maxOutputTokens": 12,
            # 60 items cannot resolve a one-point margin: the spot check is the subject.
            "maxAbsoluteDrop": 0.5,
            "spotCheck": spot,
            "slices": NO_MUST_PASS,
        },
    )


def held_with_samples(e2e: E2E) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    obj = e2e.wait_phase("chat", {"AwaitingApproval", *ENDS})
    status = obj["status"]
    assert status["phase"] == "AwaitingApproval", e2e.explain(obj)
    spot = status["spotCheck"]
    assert spot["configMap"] == "chat-spot-check"
    assert "approved" not in spot
    assert "chat-spot-check" in status["message"], status["message"]
    config_map = e2e.cluster.request(
        "GET", f"/api/v1/namespaces/{e2e.namespace}/configmaps/chat-spot-check"
    )
    (owner,) = config_map["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "OptimizedEndpoint",
        "chat",
        obj["metadata"]["uid"],
    )
    text = config_map["data"][CONFIGMAP_KEY]
    samples = json.loads(text)["samples"]
    assert len(samples) == spot["samples"]
    for sample in samples:
        assert sample["prompt"] and sample["baselineAnswer"] and sample["candidateAnswer"]
    # The report shows them side by side, with the decision still open.
    page = render_report(obj, SpotCheck.model_validate_json(text))
    assert "waiting for a person" in page
    assert all(html.escape(s["prompt"]) in page for s in samples)
    return obj, samples


def test_spot_check_samples_are_written_then_approved_and_promoted(e2e: E2E) -> None:
    names = e2e.create("chat", spot_spec(e2e, samples=8, promptClasses=["arithmetic", "capital"]))
    obj, samples = held_with_samples(e2e)
    assert len(samples) == 8
    # Shared evenly between the named classes.
    classes = [s["promptClass"] for s in samples]
    assert classes.count("arithmetic") == classes.count("capital") == 4
    e2e.cluster.annotate(e2e.namespace, "chat", {"optimizer.dev/approve": "true"})
    obj = e2e.wait_phase("chat", ENDS)
    assert obj["status"]["phase"] == "Succeeded", e2e.explain(obj)
    assert obj["status"]["spotCheck"]["approved"] is True
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.promoted_config


def test_spot_check_rejected_rolls_back_to_the_baseline(e2e: E2E) -> None:
    # No classes named: the two hardest by the baseline's score on these items.
    names = e2e.create("chat", spot_spec(e2e, samples=6))
    obj, samples = held_with_samples(e2e)
    assert 0 < len(samples) <= 6
    assert len({s["promptClass"] for s in samples}) <= 2
    e2e.cluster.annotate(e2e.namespace, "chat", {"optimizer.dev/rollback": "true"})
    obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "RolledBack", e2e.explain(obj)
    assert status["spotCheck"]["approved"] is False
    assert any("spot check rejected" in h.get("message", "") for h in status["history"])
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.baseline_config
