"""Quality that cannot be skipped or averaged away (issue 20), against the sandbox.

- a numerical change without evaluation is refused before any SageMaker call, naming
  spec.evaluation and the waiver;
- a waiver is recorded in status and an Event;
- a candidate that breaks one class of the generated suites is rolled back with the class
  named, whatever the average says.
"""

from __future__ import annotations

from endpoint_optimizer.sandbox.config import Faults, QualityRegression
from tests.e2e.conftest import E2E, spec
from tests.e2e.harness import condition

ONE_STEP = {
    "strategy": "canary",
    "steps": [{"weight": 20, "pause": "1s"}],
    "analysis": {"onNoData": "pass"},
}
ENDS = {"Succeeded", "Failed", "RolledBack"}


def test_a_quantized_candidate_without_evaluation_is_refused_before_any_aws_call(
    e2e: E2E,
) -> None:
    body = spec(rollout=ONE_STEP)
    body.pop("evaluation")
    e2e.create("chat", body)
    obj = e2e.wait_phase("chat", ENDS)
    assert obj["status"]["phase"] == "Failed", e2e.explain(obj)
    terminal = condition(obj, "Terminal")
    assert terminal is not None and terminal["status"] == "True", e2e.explain(obj)
    assert "spec.evaluation" in terminal["message"]
    assert 'evaluation.waiver: "<reason>"' in terminal["message"]
    assert "evaluation.dataset or evaluation.generated" in terminal["message"]
    assert e2e.sandbox.admin.calls() == [], "a refused spec never reaches SageMaker"


def test_a_waiver_is_recorded_in_status_and_an_event(e2e: E2E) -> None:
    e2e.create("chat", spec(rollout=ONE_STEP))
    obj = e2e.wait_phase("chat", ENDS)
    assert obj["status"]["evaluationWaiver"] == "e2e control-flow test: latency only"
    waived = [e for e in e2e.cluster.events(e2e.namespace) if e.get("reason") == "EvaluationWaived"]
    assert waived and "quantization" in waived[0]["message"], waived
    assert "latency only" in waived[0]["message"]
    assert not any(c["kind"] in ("eval", "evalSlice") for c in obj["status"]["checks"])


def test_a_candidate_that_breaks_long_context_is_rolled_back_naming_the_class(e2e: E2E) -> None:
    names = e2e.create(
        "chat",
        spec(
            rollout=ONE_STEP,
            evaluation={
                "generated": {
                    "longContext": {"items": 40, "maxPromptTokens": 512},
                    "multiStepReasoning": {"items": 40},
                },
                "maxAbsoluteDrop": 0.02,
                "maxOutputTokens": 12,
            },
        ),
    )
    # Same speed; half the long-context answers go wrong, the reasoning ones do not.
    e2e.sandbox.admin.set_faults(
        Faults(
            quality_regressions=[
                QualityRegression(
                    model=names.candidate_model, accuracy_drop=0.5, prompt_classes=["long-context"]
                )
            ]
        )
    )
    obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "RolledBack", e2e.explain(obj)
    checks = {c["name"]: c for c in status["checks"]}
    broken = checks["eval@long-context"]
    assert broken["verdict"] == "Fail" and broken["samples"] == 40, e2e.explain(obj)
    assert "long-context dropped more than 2.0 points" in broken["reason"]
    assert checks["eval@multi-step-reasoning"]["verdict"] != "Fail", e2e.explain(obj)
    assert status["candidate"]["evalItems"] == 80
    assert status["rollout"]["rollbackReason"] == "eval", e2e.explain(obj)
    assert any(
        "eval@long-context" in (entry.get("message") or "") for entry in status["history"]
    ), e2e.explain(obj)
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.baseline_config
