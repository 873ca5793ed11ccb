"""Lever annotations wake the operator at once: a poll interval (600 s) no test waits for.

With such a poll the heartbeat fires once, when the resource appears; every later step
in these tests happens only because an annotation changed. `refresh` re-observes (the
sandbox's call log shows the Describe calls, status.observedLevers the value honoured);
approve, pause, resume and rollback act on the same wake-up.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from endpoint_optimizer.sandbox.config import SandboxConfig
from endpoint_optimizer.sandbox.testing import running_sandbox
from tests.e2e.conftest import E2E, NAMESPACE, TIME_SCALE, sandbox_config, spec
from tests.e2e.harness import (
    OperatorProcess,
    condition,
    running_cluster,
    tempdir,
    write_kubeconfig,
)

POLL_INTERVAL = "600"
# Far under the poll: an answer within this came from the annotation, not the heartbeat.
WAKE_TIMEOUT = 30.0
REFRESH = "optimizer.dev/refresh"
HELD = {
    "strategy": "canary",
    "steps": [{"weight": 20, "pause": "1s"}],
    "analysis": {"onNoData": "pass"},
    "approval": "beforePromotion",
}


@pytest.fixture
def slow_poll() -> Iterator[E2E]:
    """The e2e fixture's emulator, sandbox and operator, with a 600 s heartbeat."""
    config: SandboxConfig = sandbox_config()
    directory: Path = tempdir()
    with running_cluster() as (emulator, cluster), running_sandbox(config) as sandbox:
        cluster.create_namespace(NAMESPACE)
        operator = OperatorProcess(
            kubeconfig=write_kubeconfig(emulator.url, directory),
            namespace=NAMESPACE,
            aws_endpoint_url=sandbox.url,
            log_path=directory / "operator.log",
            extra_env={
                "ENDPOINT_OPTIMIZER_POLL_INTERVAL": POLL_INTERVAL,
                "ENDPOINT_OPTIMIZER_TIME_SCALE": TIME_SCALE,
            },
            extra_args=("--log-console",),
        )
        operator.start()
        try:
            yield E2E(cluster, emulator, sandbox, operator)
        finally:
            operator.stop()
            shutil.rmtree(directory, ignore_errors=True)


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
        timeout=60,
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
    slow_poll: E2E,
) -> None:
    e2e = slow_poll
    e2e.create("chat", spec(rollout=HELD))
    first_beat(e2e, "chat")

    # One refresh: the endpoint (InService by now in the sandbox) is described again and the
    # baseline is measured, although the next heartbeat is ten minutes away.
    since = time.time()
    obj = refresh(e2e, "chat", "1")
    assert describes_after(e2e, since, "DescribeEndpoint"), e2e.explain(obj)
    assert obj["status"]["observedLevers"] == {REFRESH: "1"}

    # Each honoured refresh is one wake-up: refresh until the promotion waits for approval.
    deadline = time.monotonic() + 120
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


def test_pause_resume_and_rollback_act_without_waiting_for_the_heartbeat(slow_poll: E2E) -> None:
    e2e = slow_poll
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
