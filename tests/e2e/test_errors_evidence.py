"""Errors are evidence: a failing candidate is judged on its failures, never promoted for
lack of data; a baseline made of errors is no measurement, tried again after a backoff."""

from __future__ import annotations

from endpoint_optimizer.sandbox.config import Faults, InvocationErrors
from endpoint_optimizer.sandbox.evalset import DATA_FILE as EVAL_FILE
from tests.e2e.conftest import E2E, NO_MUST_PASS, spec

ONE_STEP = {
    "strategy": "canary",
    "steps": [{"weight": 20, "pause": "1s"}],
    # The setting that promoted a candidate failing every request before: every latency
    # check had no data, and no data passed.
    "analysis": {"onNoData": "pass"},
}
ENDS = {"Succeeded", "Failed", "RolledBack"}


def test_a_candidate_failing_every_request_is_rolled_back_on_its_errors(e2e: E2E) -> None:
    names = e2e.create("chat", spec(rollout=ONE_STEP))
    e2e.sandbox.admin.set_faults(
        Faults(invocation_errors=[InvocationErrors(model=names.candidate_model)])
    )
    obj = e2e.wait_phase("chat", ENDS, timeout=90)
    status = obj["status"]
    assert status["phase"] == "RolledBack", e2e.explain(obj)
    errors = [c for c in status["checks"] if c["kind"] == "errors"]
    assert errors and all(c["verdict"] == "Fail" for c in errors), e2e.explain(obj)
    assert errors[0]["candidate"] == 1.0
    assert status["rollout"]["rollbackReason"] == "errors"
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.baseline_config


def test_a_baseline_made_of_errors_is_no_measurement_and_is_tried_again(e2e: E2E) -> None:
    names = e2e.create("chat", spec(rollout=ONE_STEP))
    e2e.sandbox.admin.set_faults(
        Faults(invocation_errors=[InvocationErrors(model=names.baseline_model)])
    )
    obj = e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: any(
            h["event"] == "MeasurementVoid" for h in o.get("status", {}).get("history", [])
        ),
        timeout=90,
    )
    status = obj["status"]
    assert status["phase"] == "Baselining", e2e.explain(obj)
    assert status["baseline"].get("measuredAt") is None
    retry = status["measurementRetry"]
    assert retry["action"] == "MeasureBaseline" and retry["attempts"] >= 1
    assert "failed" in retry["reason"]
    # Once the endpoint answers again, the next attempt measures it and the pipeline goes on.
    e2e.sandbox.admin.set_faults(Faults())
    obj = e2e.wait_phase("chat", ENDS, timeout=120)
    status = obj["status"]
    assert status["phase"] == "Succeeded", e2e.explain(obj)
    assert "measurementRetry" not in status


def test_a_void_baseline_benchmark_asks_the_endpoint_no_eval_item(e2e: E2E) -> None:
    # A benchmark made of errors voids the whole measurement, so its eval answers would be
    # thrown away: they are not asked for (each is a real, billed invocation).
    items = EVAL_FILE.read_text().splitlines()[:40]
    e2e.cluster.create_configmap(e2e.namespace, "support-evals", {"items.jsonl": "\n".join(items)})
    evaluation = {
        "dataset": {"configMapRef": {"name": "support-evals", "key": "items.jsonl"}},
        "metric": "exact_match",
        "maxOutputTokens": 12,
        "slices": NO_MUST_PASS,
    }
    names = e2e.create("chat", spec(rollout=ONE_STEP, evaluation=evaluation))
    e2e.sandbox.admin.set_faults(
        Faults(invocation_errors=[InvocationErrors(model=names.baseline_model)])
    )
    e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: any(
            h["event"] == "MeasurementVoid" for h in o.get("status", {}).get("history", [])
        ),
        timeout=90,
        on_timeout=e2e.diagnostics,
    )
    voided = e2e.sandbox.admin.traffic("chat-e2e")
    assert any(r["stream"] for r in voided), "the baseline was benchmarked"
    asked = [r for r in voided if not r["stream"]]
    assert asked == [], f"{len(asked)} eval requests for a void measurement"
    # Once the endpoint answers, the next attempt measures it, eval set and all.
    e2e.sandbox.admin.set_faults(Faults())
    obj = e2e.wait_phase("chat", ENDS, timeout=120)
    assert obj["status"]["phase"] == "Succeeded", e2e.explain(obj)
    assert any(not r["stream"] for r in e2e.sandbox.admin.traffic("chat-e2e"))
