"""Retryable failures: a bounded, jittered backoff kept in status.retry, and what bypasses it.

The wake-ups run against the sandbox with real boto3 (botocore's own retries off, so each
wake-up is one attempt) and a clock the test moves; the sandbox's call log shows which
wake-ups reached AWS.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.config import Config

from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.controller import retry
from endpoint_optimizer.controller.options import OperatorOptions
from endpoint_optimizer.controller.reconcile import Dependencies, wake
from endpoint_optimizer.metrics.exporter import OperatorMetrics
from endpoint_optimizer.pipeline.model import REFRESH
from endpoint_optimizer.sandbox.config import Faults
from endpoint_optimizer.sandbox.testing import SandboxHandle
from tests.unit.controller.test_reconcile import make_body, merge

START = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
POLL = 2.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def deps(sandbox: SandboxHandle) -> AsyncIterator[Dependencies]:
    aws = AwsClients(
        max_concurrency=1, config=Config(retries={"mode": "standard", "total_max_attempts": 1})
    )
    options = OperatorOptions(poll_interval=POLL, retry_max_delay=10 * POLL, retry_limit=3)
    made = Dependencies(aws, OperatorMetrics(), options, clock=Clock(), draw=lambda: 0.5)
    yield made
    aws.close()


def describes(sandbox: SandboxHandle) -> int:
    return sum(c["operation"] == "DescribeEndpoint" for c in sandbox.admin.calls())


def test_each_wait_is_at_least_one_poll_at_most_the_bound_and_jittered() -> None:
    backoff = retry.Backoff(poll=30.0, max_delay=300.0, limit=5)
    for attempt in range(1, 12):
        assert backoff.delay(attempt, 0.0) == 30.0  # never faster than the heartbeat
        assert 30.0 <= backoff.delay(attempt, 0.999) <= 300.0
    assert backoff.delay(1, 0.999) < backoff.delay(2, 0.999) < backoff.delay(3, 0.999)
    assert backoff.delay(10, 0.999) == pytest.approx(300.0, rel=0.01)  # bounded
    spread = {round(backoff.delay(3, d / 10), 3) for d in range(10)}
    assert len(spread) == 10, "the jitter spreads resources that fail together"


async def test_a_throttled_resource_waits_in_status_and_calls_nothing_until_its_time(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    clock = deps.clock
    assert isinstance(clock, Clock)
    sandbox.admin.set_faults(
        Faults(throttle_fraction=1.0, throttle_operations=["DescribeEndpoint"])
    )
    body = make_body()
    first = await wake(deps, body, {})
    merge(body["status"], first.status_patch)
    waited = body["status"]["retry"]
    assert waited["attempt"] == 1 and waited["reason"] == "Throttled"
    next_at = datetime.fromisoformat(waited["nextAttemptAt"])
    # draw 0.5 of [poll, 2 poll]: 1.5 polls, never sooner than one
    assert next_at == START + timedelta(seconds=1.5 * POLL)
    assert "attempt 1" in body["status"]["message"]
    assert [e.reason for e in first.events] == ["Throttled"]

    # Heartbeats before that time do nothing at all: no AWS call, no status write.
    calls = describes(sandbox)
    for seconds in (0.5, 1.0, 2.9):
        clock.now = START + timedelta(seconds=seconds)
        held = await wake(deps, body, {})
        assert held.status_patch == {} and held.events == []
    assert describes(sandbox) == calls

    # At its time it tries again: attempt 2 waits longer, and the same problem is not
    # posted as a Warning twice.
    clock.now = next_at
    second = await wake(deps, body, {})
    merge(body["status"], second.status_patch)
    assert describes(sandbox) == calls + 1
    assert body["status"]["retry"]["attempt"] == 2
    second_at = datetime.fromisoformat(body["status"]["retry"]["nextAttemptAt"])
    assert second_at - clock.now == timedelta(seconds=2.5 * POLL)  # 0.5 of [poll, 4 poll]
    assert second.events == []

    # Once the call gets through, the retry is gone and the pipeline goes on.
    sandbox.admin.clear_faults()
    clock.now = second_at
    third = await wake(deps, body, {})
    merge(body["status"], third.status_patch)
    assert "retry" not in body["status"]
    assert body["status"]["phase"] == "Baselining"


async def test_a_lever_a_new_generation_and_a_deletion_do_not_wait_for_the_backoff(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    body = make_body()
    merge(body["status"], (await wake(deps, body, {})).status_patch)  # generation 1 decided
    sandbox.admin.set_faults(
        Faults(throttle_fraction=1.0, throttle_operations=["DescribeEndpoint"])
    )
    merge(body["status"], (await wake(deps, body, {})).status_patch)
    assert body["status"]["retry"]["attempt"] == 1
    calls = describes(sandbox)
    assert (await wake(deps, body, {})).status_patch == {}
    assert describes(sandbox) == calls, "held"
    lever = make_body(status=body["status"], annotations={REFRESH: "1"})
    await wake(deps, lever, {})
    assert describes(sandbox) == calls + 1, "a lever acts at once"
    renewed = make_body(status=body["status"])
    renewed["metadata"]["generation"] = 2
    await wake(deps, renewed, {})
    assert describes(sandbox) == calls + 2, "a new generation acts at once"
    deleting = make_body(status=body["status"])
    deleting["metadata"]["deletionTimestamp"] = "2025-06-01T12:00:01Z"
    await wake(deps, deleting, {})
    assert describes(sandbox) == calls + 3, "a deletion acts at once"


def _status(phase: str, attempt: int | None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "observedGeneration": 1}
    if attempt is not None:
        status["retry"] = {
            "reason": "Transient",
            "attempt": attempt,
            "nextAttemptAt": START.isoformat(),
        }
        status["lastError"] = "InvokeEndpoint endpoint e: ModelError: 503"
    return status


def test_a_candidate_holding_traffic_is_not_waited_on_forever() -> None:
    backoff = retry.Backoff(poll=POLL, max_delay=20.0, limit=3)
    failure = retry.Failure("Transient", "InvokeEndpoint endpoint e: ModelError: 503", True)
    # Within the limit: retried, the phase stays.
    after, _ = retry.failed(
        _status("Analyzing", 2), _status("Analyzing", 2), failure, backoff, START, lambda: 0.0
    )
    assert after["phase"] == "Analyzing" and after["retry"]["attempt"] == 3
    # Past it while a candidate may hold traffic: traffic goes back to the baseline.
    after, events = retry.failed(
        _status("Analyzing", 3), _status("Analyzing", 3), failure, backoff, START, lambda: 0.0
    )
    assert after["phase"] == "RollingBack"
    assert after.get("retry") is None
    assert after["rollout"]["rollbackReason"] == "error"
    assert "returning traffic to the baseline" in after["message"]
    assert [e.type for e in events] == ["Warning"]
    # No candidate anywhere (waiting on a job): it keeps retrying at the bound.
    after, _ = retry.failed(
        _status("Optimizing", 30), _status("Optimizing", 30), failure, backoff, START, lambda: 0.9
    )
    assert after["phase"] == "Optimizing" and after["retry"]["attempt"] == 31


def test_a_permanent_failure_never_waits() -> None:
    backoff = retry.Backoff(poll=POLL, max_delay=20.0, limit=3)
    refused = retry.Failure("QuotaExceeded", "CreateEndpoint: ResourceLimitExceeded", False)
    after, events = retry.failed(
        _status("Baselining", 1), _status("Baselining", 1), refused, backoff, START, lambda: 0.5
    )
    assert after["phase"] == "Failed" and after.get("retry") is None
    assert [e.reason for e in events] == ["QuotaExceeded"]


class ResettingServer:
    """Accepts TCP connections and resets each one (RST) once the request arrives."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.recv(65536)
            # Linger 0: close() sends RST, as a dropped connection or a middlebox does.
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    def close(self) -> None:
        self.sock.close()


async def test_a_connection_reset_is_a_transient_retry_in_status_not_a_stall(
    sandbox: SandboxHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = ResettingServer()
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER", server.url)
    aws = AwsClients(
        max_concurrency=1, config=Config(retries={"mode": "standard", "total_max_attempts": 1})
    )
    deps = Dependencies(aws, OperatorMetrics(), OperatorOptions(poll_interval=POLL))
    try:
        woken = await wake(deps, make_body(), {})
    finally:
        aws.close()
        server.close()
    assert server.accepted >= 1
    assert woken.status_patch["retry"]["reason"] == "Transient"
    assert "ConnectionClosedError" in woken.status_patch["lastError"]
    assert woken.status_patch["message"].startswith("retrying in ")
