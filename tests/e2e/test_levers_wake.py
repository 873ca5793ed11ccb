"""Lever annotations wake the operator at once: a poll interval (600 s) no test waits for.

With such a poll the heartbeat fires once, when the resource appears; every later step
in these tests happens only because an annotation changed. `refresh` re-observes (the
sandbox's call log shows the Describe calls, status.observedLevers the value honoured);
approve, pause, resume and rollback act on the same wake-up.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.conftest import E2E, GUARD, spec
from tests.e2e.harness import (
    condition,
)

POLL_INTERVAL = "600"
# Far under the poll: an answer within this came from the annotation, not the heartbeat
# (and generous: a busy machine answers in seconds what a quiet one does in milliseconds).
WAKE_TIMEOUT = 120.0
REFRESH = "optimizer.dev/refresh"
HELD = {
    "strategy": "canary",
    "steps": [{"weight": 20, "pause": "1s"}],
    "analysis": {"onNoData": "pass"},
    "approval": "beforePromotion",
}


@pytest.fixture
def e2e_poll_interval() -> str:
    """The e2e fixture's operator with a 600 s heartbeat: it fires once, at creation."""
    return POLL_INTERVAL


def honoured(value: str) -> Any:
    def check(obj: dict[str, Any]) -> bool:
        levers = obj.get("status", {}).get("observedLevers") or {}
        return bool(levers.get(REFRESH) == value)

    return check


def first_beat(e2e: E2E, name: str) -> dict[str, Any]:
    """The one heartbeat: the resource starts baselining and asks for its endpoint."""
    return e2e.cluster.wait_for(
        e2e.namespace,
        name,
        lambda o: o.get("status", {}).get("phase") == "Baselining",
        timeout=GUARD,
        what="the first heartbeat",
        on_timeout=e2e.diagnostics,
    )


def refresh(e2e: E2E, name: str, value: str) -> dict[str, Any]:
    e2e.cluster.annotate(e2e.namespace, name, {REFRESH: value})
    return e2e.cluster.wait_for(
        e2e.namespace,
        name,
        honoured(value),
        timeout=WAKE_TIMEOUT,
        what=f"refresh {value} honoured",
        on_timeout=e2e.diagnostics,
    )


def describes_after(e2e: E2E, since: float, operation: str) -> list[dict[str, Any]]:
    return [
        c
        for c in e2e.sandbox.admin.calls()
        if c["operation"] == operation and c["wallTime"] >= since and not c.get("errorCode")
    ]


def test_refresh_observes_at_once_and_drives_the_pipeline_to_an_approval_that_acts_at_once(
    e2e: E2E,
) -> None:
    e2e.create("chat", spec(rollout=HELD))
    first_beat(e2e, "chat")

    # One refresh: the endpoint (InService by now in the sandbox) is described again and the
    # baseline is measured, although the next heartbeat is ten minutes away.
    since = time.time()
    obj = refresh(e2e, "chat", "1")
    assert describes_after(e2e, since, "DescribeEndpoint"), e2e.explain(obj)
    assert obj["status"]["observedLevers"] == {REFRESH: "1"}

    # Each honoured refresh is one wake-up: refresh until the promotion waits for approval.
    deadline = time.monotonic() + GUARD
    value = 1
    while obj["status"].get("phase") != "AwaitingApproval":
        assert obj["status"].get("phase") not in ("Failed", "RolledBack"), e2e.explain(obj)
        assert time.monotonic() < deadline, e2e.explain(obj)
        value += 1
        obj = refresh(e2e, "chat", str(value))

    since = time.time()
    e2e.cluster.annotate(e2e.namespace, "chat", {"optimizer.dev/approve": "true"})
    obj = e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: o.get("status", {}).get("phase") in ("Promoting", "Succeeded"),
        timeout=WAKE_TIMEOUT,
        what="the approval acted on",
        on_timeout=e2e.diagnostics,
    )
    updates = describes_after(e2e, since, "UpdateEndpoint")
    assert updates, e2e.explain(obj)
    assert obj["status"]["observedLevers"]["optimizer.dev/approve"] == "true"


def test_pause_resume_and_rollback_act_without_waiting_for_the_heartbeat(e2e: E2E) -> None:
    e2e.create("chat", spec(rollout=HELD))
    first_beat(e2e, "chat")

    e2e.cluster.annotate(e2e.namespace, "chat", {"optimizer.dev/pause": "true"})
    paused = e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: o.get("status", {}).get("paused") is True,
        timeout=WAKE_TIMEOUT,
        what="paused",
        on_timeout=e2e.diagnostics,
    )
    progressing = condition(paused, "Progressing")
    assert progressing is not None and progressing["reason"] == "Paused"

    e2e.cluster.annotate(e2e.namespace, "chat", {"optimizer.dev/pause": None})
    e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: o.get("status", {}).get("paused") is False,
        timeout=WAKE_TIMEOUT,
        what="resumed",
        on_timeout=e2e.diagnostics,
    )

    e2e.cluster.annotate(e2e.namespace, "chat", {"optimizer.dev/rollback": "true"})
    obj = e2e.wait_phase("chat", "RolledBack", timeout=WAKE_TIMEOUT)
    assert obj["status"]["history"][-1]["event"] == "ManualRollback", e2e.explain(obj)
