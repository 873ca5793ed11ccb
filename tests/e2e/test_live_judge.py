"""The live CloudWatch judge during canary steps, through the real operator and the sandbox.

Production traffic is the test's own: a few threads invoking the endpoint without
TargetVariant, so SageMaker's weights split it. The candidate slows down only after the
pinned benchmark comparison has passed, so only the live judge can catch it.
"""

from __future__ import annotations

import urllib.request
from typing import Any

from endpoint_optimizer.sandbox.config import Faults, LatencyRegression
from tests.e2e.conftest import E2E, GUARD, free_port, production_traffic, spec

ENDS = {"Succeeded", "Failed", "RolledBack"}


def rollout(pause: str) -> dict[str, Any]:
    # Interval 2s x TIME_SCALE 0.5: one-second CloudWatch periods.
    return {
        "strategy": "canary",
        "steps": [{"weight": 50, "pause": pause}],
        "analysis": {"interval": "2s", "onNoData": "pass", "minInvocations": 5},
    }


def live_state(obj: dict[str, Any]) -> dict[str, Any]:
    """status.rollout: the live judge's state (liveJudge) and the compared step."""
    state: dict[str, Any] = obj.get("status", {}).get("rollout", {})
    return state


def test_a_candidate_that_slows_down_on_live_traffic_is_rolled_back(e2e: E2E) -> None:
    # The step's pause is the window the live judge has to catch the slowdown in; the
    # rollback ends it early, so a long one costs nothing and a busy machine fits in it.
    names = e2e.create("chat", spec(rollout=rollout("240s")))
    with production_traffic(e2e.sandbox, "chat-e2e"):
        compared = e2e.cluster.wait_for(
            e2e.namespace,
            "chat",
            lambda o: live_state(o).get("comparedStep") == 0,
            timeout=GUARD,
            what="the step's benchmark comparison",
            on_timeout=e2e.diagnostics,
        )
        assert compared["status"]["phase"] == "Analyzing", e2e.explain(compared)
        assert all(c["verdict"] != "Fail" for c in compared["status"]["checks"])
        # 4x its own FP8 timings: over twice the baseline's (FP8 serves the 70B at ~0.57x).
        e2e.sandbox.admin.set_faults(
            Faults(latency_regressions=[LatencyRegression(model=names.candidate_model, factor=4.0)])
        )
        obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "RolledBack", e2e.explain(obj)
    assert "LiveCheckFailed" in [h["event"] for h in status["history"]], e2e.explain(obj)
    latency = next(c for c in status["checks"] if c["name"] == "live_latency")
    assert latency["verdict"] == "Fail", e2e.explain(obj)
    assert latency["candidate"] > 2 * latency["baseline"], latency
    assert live_state(obj)["liveJudge"]["decision"] == "Rollback"
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.baseline_config
    # CloudWatch's aggregate needs two intervals to reject; the probes' TTFT and TPOT
    # (rollout.analysis.probes, on by default) can decide in the first.
    assert live_state(obj)["liveJudge"]["intervals"] >= 1


def test_a_good_candidate_passes_each_live_interval_and_the_dashboard_sees_them(e2e: E2E) -> None:
    port = free_port()
    e2e.operator.stop()
    e2e.operator.extra_args = (*e2e.operator.extra_args, "--metrics-port", str(port))
    e2e.operator.start()
    # The step's pause holds the sequential comparison's rounds (longer on a busy host)
    # and then two intervals at least.
    e2e.create("chat", spec(rollout=rollout("120s")))
    with production_traffic(e2e.sandbox, "chat-e2e"):
        obj = e2e.wait_phase("chat", ENDS)
    # The newest periods read stay exported until the resource is deleted.
    scraped = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    status = obj["status"]
    assert status["phase"] == "Succeeded", e2e.explain(obj)
    live = live_state(obj)["liveJudge"]
    assert live["decision"] == "Continue" and live["failures"] == 0, live
    assert live["intervals"] >= 2, e2e.explain(obj)
    checks = {c["name"]: c for c in status["checks"]}
    assert checks["live_latency"]["verdict"] == "Pass"
    assert checks["live_errors_5xx"]["verdict"] == "Pass"
    # Log lines below the handler (the executor's) carry the resource's context.
    performed = [ln for ln in e2e.operator.log_tail(400).splitlines() if "performed" in ln]
    assert performed, e2e.operator.log_tail(40)
    assert all("namespace=ml" in ln and "generation=1" in ln for ln in performed), performed[:3]
    assert any("phase=" in ln for ln in performed)
    text = scraped.decode()
    lines = [ln for ln in text.splitlines() if ln.startswith("endpoint_optimizer_live_")]
    assert any('variant="candidate"' in ln for ln in lines), text[-2000:]
    assert any('variant="baseline"' in ln for ln in lines), text[-2000:]


def test_probes_alone_catch_a_live_slowdown_without_production_traffic(e2e: E2E) -> None:
    # No production traffic: CloudWatch sees only the probes, pinned to each variant
    # (rollout.analysis.probes), and the probes' own TTFT and TPOT carry the verdict.
    names = e2e.create(
        "chat",
        spec(
            rollout={
                "strategy": "canary",
                "steps": [{"weight": 10, "pause": "240s"}],
                "analysis": {
                    "interval": "2s",
                    "onNoData": "pass",
                    "minInvocations": 5,
                    "probes": {
                        "perInterval": 8,
                        "concurrency": 2,
                        "inputTokens": 32,
                        "outputTokens": 8,
                    },
                },
            }
        ),
    )
    e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: live_state(o).get("comparedStep") == 0,
        timeout=GUARD,
        what="the step's benchmark comparison",
        on_timeout=e2e.diagnostics,
    )
    probed_before = len(
        [
            r
            for r in e2e.sandbox.admin.traffic_records("chat-e2e")
            if r.variant == names.candidate_variant
        ]
    )
    e2e.sandbox.admin.set_faults(
        Faults(latency_regressions=[LatencyRegression(model=names.candidate_model, factor=4.0)])
    )
    obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "RolledBack", e2e.explain(obj)
    latency = next(c for c in status["checks"] if c["name"] == "live_latency")
    assert latency["verdict"] == "Fail", e2e.explain(obj)
    assert "probe" in latency["reason"] + latency["source"] + latency["rule"], latency
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.baseline_config
    # The candidate got the probes (pinned), one interval's worth at a time.
    pinned = [
        r
        for r in e2e.sandbox.admin.traffic_records("chat-e2e")
        if r.variant == names.candidate_variant
    ]
    assert len(pinned) - probed_before >= 8
    # probes.concurrency: after the step's comparison only probes reach the candidate,
    # and they run two at a time.
    probes = [r for r in pinned[probed_before:] if r.t_end is not None]
    overlap = max(
        sum(o.t_start <= r.t_start < (o.t_end or o.t_start) for o in probes) for r in probes
    )
    assert overlap == 2, overlap
