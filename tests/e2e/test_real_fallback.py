"""An FP8 candidate on the real engine: the synthetic effect stands in, and status says so.

SmolLM2 on a CPU cannot run FP8, so the sandbox serves the candidate, and its
baseline with it while they are compared, from the synthetic engine, labelling every
response `engine=synthetic; fallback=<reason>`. The operator reads the label into
status.{baseline,candidate}.servedBy/engineNote, writes a SyntheticMeasurement history
entry and Event, and the report shows it. Before the candidate exists the baseline is
measured on the real model (the Baselining eval loads one fp32 worker).

Slow (one real model load): run with `pytest -m slow`.
"""

from __future__ import annotations

from endpoint_optimizer.report import render_report
from tests.e2e.conftest import E2E, NAMESPACE, NO_MUST_PASS
from tests.e2e.test_real_model import (  # noqa: F401 (fixtures used by name)
    _prepare,
    _spec,
    e2e_sandbox_config,
    e2e_sandbox_engine,
    pytestmark,
    real_engine,
)

FP8 = {"quantization": {"scheme": "fp8"}}


def test_an_fp8_candidate_is_measured_synthetically_and_labelled(e2e: E2E) -> None:
    _prepare(e2e)
    spec = _spec("real-fp8", "extract", FP8)
    # FP8 makes long-context and multi-step reasoning must-pass classes, which this eval set
    # lacks: undecided, they hold even under onNoData: pass. The fallback is the subject.
    spec["evaluation"]["slices"] = NO_MUST_PASS
    e2e.create("fp8", spec)
    done = e2e.wait_phase("fp8", {"Succeeded", "RolledBack", "Failed"}, timeout=540)
    status = done["status"]
    assert status["phase"] in ("Succeeded", "RolledBack"), e2e.explain(done)
    candidate, baseline = status["candidate"], status["baseline"]
    assert candidate["servedBy"] == "synthetic", e2e.explain(done)
    assert candidate["engineNote"].startswith("fp8 needs FP8 tensor cores")
    # The baseline was compared like with like: synthetic too, and it says why.
    assert baseline["servedBy"] == "synthetic"
    assert baseline["engineNote"].startswith("paired with ")
    assert "fp8 needs FP8" in baseline["engineNote"]
    # Scored on the real eval set by the synthetic quality model, not on filler text.
    assert candidate["evalItems"] > 0 and candidate["evalScore"] > 0.5
    history = {entry["event"]: entry.get("message", "") for entry in status["history"]}
    assert history["SyntheticMeasurement"].startswith("the verdicts rest on synthetic numbers")
    events = [
        event
        for event in e2e.cluster.events(NAMESPACE)
        if event.get("reason") == "SyntheticMeasurement"
    ]
    assert events and "fp8 needs FP8" in events[0]["message"]
    assert "synthetic engine (fp8 needs FP8 tensor cores" in render_report(done)
    # And where people look first (`kubectl describe`): the final condition messages.
    messages = {c["type"]: c["message"] for c in status["conditions"]}
    note = "(baseline and candidate measured on the synthetic engine: fp8 needs FP8"
    for kind in ("Progressing", "Ready"):
        assert note in messages[kind], messages
