"""Candidates that must not be promoted: low acceptance rate, no gain on the objective."""

from __future__ import annotations

from endpoint_optimizer.sandbox.config import Faults, QualityRegression
from endpoint_optimizer.sandbox.evalset import DATA_FILE as EVAL_FILE
from tests.e2e.conftest import E2E, GUARD, spec
from tests.e2e.harness import condition

ONE_STEP = {
    "strategy": "canary",
    "steps": [{"weight": 20, "pause": "1s"}],
    "analysis": {"onNoData": "pass"},
}
ENDS = {"Succeeded", "Failed", "RolledBack"}


def test_a_low_acceptance_rate_rolls_back(e2e: E2E) -> None:
    names = e2e.create(
        "chat",
        spec(
            rollout=ONE_STEP,
            optimizations={
                "speculativeDecoding": {
                    "method": "ngram",
                    "numSpeculativeTokens": 4,
                    # No workload accepts this many drafted tokens.
                    "minAcceptanceRate": 0.99,
                }
            },
        ),
    )
    obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "RolledBack", e2e.explain(obj)
    acceptance = next(c for c in status["checks"] if c["name"] == "acceptance_rate")
    assert acceptance["verdict"] == "Fail", e2e.explain(obj)
    assert acceptance["candidate"] < 0.99
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.baseline_config


def test_a_candidate_without_gain_on_the_objective_is_not_promoted(e2e: E2E) -> None:
    names = e2e.create(
        "chat",
        spec(
            rollout=ONE_STEP,
            optimizations={},
            # A setting that does not change speed at this prompt length.
            container={"maxModelLen": 4096},
            objective={"metric": "latency", "minImprovement": 0.2},
        ),
    )
    obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "RolledBack", e2e.explain(obj)
    objective = next(c for c in status["checks"] if c["name"] == "objective_latency")
    assert objective["verdict"] == "NoImprovement", e2e.explain(obj)
    assert any(h["event"] == "NoImprovement" for h in status["history"])
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.baseline_config


def test_an_eval_drop_rolls_back(e2e: E2E) -> None:
    items = EVAL_FILE.read_text().splitlines()[:60]
    e2e.cluster.create_configmap(e2e.namespace, "support-evals", {"items.jsonl": "\n".join(items)})
    names = e2e.create(
        "chat",
        spec(
            rollout=ONE_STEP,
            evaluation={
                "dataset": {"configMapRef": {"name": "support-evals", "key": "items.jsonl"}},
                "metric": "exact_match",
                "maxAbsoluteDrop": 0.02,
                "maxOutputTokens": 12,
            },
        ),
    )
    # Same speed, worse answers: the quantized candidate gets a third of the items wrong.
    e2e.sandbox.admin.set_faults(
        Faults(
            quality_regressions=[QualityRegression(model=names.candidate_model, accuracy_drop=0.3)]
        )
    )
    obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "RolledBack", e2e.explain(obj)
    gate = next(c for c in status["checks"] if c["name"] == "eval_exact_match")
    assert gate["verdict"] == "Fail", e2e.explain(obj)
    assert status["candidate"]["evalItems"] == 60
    assert status["candidate"]["evalScore"] < status["baseline"]["evalScore"]
    # The A/A noise, measured once with the baseline (all 60 items asked twice: fewer than
    # noiseItems), is shown next to the margin: the drop is not the eval set's own noise.
    noise = status["evalNoise"]
    assert (noise["items"], noise["evalItems"], noise["discordant"]) == (60, 60, 0), noise
    assert "A/A noise (baseline asked 60 items twice): 0 scored differently" in gate["reason"]
    assert "margin -2.0" in gate["reason"]
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.baseline_config


def test_a_quota_error_is_terminal_with_the_aws_message_and_the_baseline_keeps_serving(
    e2e: E2E,
) -> None:
    names = e2e.create("chat", spec(rollout=ONE_STEP))
    e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: o.get("status", {}).get("phase") in ("Optimizing", "Deploying", *ENDS),
        timeout=GUARD,
        on_timeout=e2e.diagnostics,
    )
    # No capacity for the candidate's instances: SageMaker refuses the update.
    e2e.sandbox.admin.set_faults(Faults(quota_exceeded=["UpdateEndpoint"]))
    obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "Failed", e2e.explain(obj)
    terminal = condition(obj, "Terminal")
    assert terminal is not None and terminal["status"] == "True"
    assert terminal["reason"] == "QuotaExceeded"
    assert "ResourceLimitExceeded" in terminal["message"]
    assert "Service Quotas" in terminal["message"]
    endpoint = e2e.serving("chat-e2e")
    assert endpoint["EndpointStatus"] == "InService"
    assert endpoint["EndpointConfigName"] == names.baseline_config
    updates = [c for c in e2e.sandbox.admin.calls() if c["operation"] == "UpdateEndpoint"]
    assert len(updates) == 1, "a refused update is not retried unchanged"
