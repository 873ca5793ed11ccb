"""Candidates that must not be promoted: low acceptance rate, no gain on the objective."""

from __future__ import annotations

from tests.e2e.conftest import E2E, spec

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
    obj = e2e.wait_phase("chat", ENDS, timeout=60)
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
    obj = e2e.wait_phase("chat", ENDS, timeout=60)
    status = obj["status"]
    assert status["phase"] == "RolledBack", e2e.explain(obj)
    objective = next(c for c in status["checks"] if c["name"] == "objective_latency")
    assert objective["verdict"] == "NoImprovement", e2e.explain(obj)
    assert any(h["event"] == "NoImprovement" for h in status["history"])
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.baseline_config
