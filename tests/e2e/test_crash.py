"""SIGKILL the operator at many points of one resource's life, restart it, and check the end.

Kill points are chosen by watching the sandbox's call log (no hook in the operator): the
moment a call appears, the process dies before it can write what it did into status, the
worst place for a level-triggered loop. After each restart the operator must pick up from
SageMaker and status alone: the same end state, no twin and no leaked resource (the
sandbox's state and call log), and the baseline answering every probe throughout (a
background prober and the sandbox's traffic record).

The default suite runs all points in sequence within one lifecycle; the exhaustive matrix
(one fresh run per point) is `@pytest.mark.slow`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from endpoint_optimizer.pipeline.plan import Names
from tests.e2e.conftest import E2E, GUARD, spec

ENDS = {"Succeeded", "Failed", "RolledBack"}
ENDPOINT = "chat-e2e"
# A probe asks for this many tokens without streaming; nothing else the operator sends
# (streamed benchmarks) looks like it in the traffic record.
PROBE_TOKENS = 2

CallPredicate = Callable[[dict[str, Any], Names], bool]


def call(operation: str, resource: Callable[[Names], str] | None = None) -> CallPredicate:
    """A successful control-plane call of `operation` (on the named resource)."""

    def matches(record: dict[str, Any], names: Names) -> bool:
        return (
            record["operation"] == operation
            and not record.get("errorCode")
            and (resource is None or record["resource"] == resource(names))
        )

    return matches


@dataclass(frozen=True)
class KillPoint:
    label: str
    # Kill when this call appears in the log, or (status points) when the object matches.
    on_call: CallPredicate | None = None
    on_status: Callable[[dict[str, Any]], bool] | None = None


def _history(event: str) -> Callable[[dict[str, Any]], bool]:
    return lambda obj: any(
        h.get("event") == event for h in obj.get("status", {}).get("history", [])
    )


# In pipeline order: each must come after the previous one in a single lifecycle.
LIFECYCLE_POINTS = [
    KillPoint("after CreateModel of the baseline", call("CreateModel", lambda n: n.baseline_model)),
    KillPoint("after CreateEndpoint", call("CreateEndpoint")),
    KillPoint("while the baseline is benchmarked", on_status=_history("BaselineStarted")),
    KillPoint("after CreateOptimizationJob", call("CreateOptimizationJob")),
    KillPoint("while the optimization job runs", call("DescribeOptimizationJob")),
    KillPoint(
        "after CreateModel of the candidate", call("CreateModel", lambda n: n.candidate_model)
    ),
    KillPoint(
        "after CreateEndpointConfig of the rollout",
        call("CreateEndpointConfig", lambda n: n.rollout_config),
    ),
    KillPoint("after UpdateEndpoint to the candidate", call("UpdateEndpoint")),
    KillPoint(
        "after the first UpdateEndpointWeightsAndCapacities",
        call("UpdateEndpointWeightsAndCapacities"),
    ),
    KillPoint("during a canary pause", on_status=_history("CandidateCompared")),
    KillPoint(
        "after CreateEndpointConfig of the promotion",
        call("CreateEndpointConfig", lambda n: n.promoted_config),
    ),
]
DELETION_POINTS = [
    KillPoint("after DeleteEndpoint", call("DeleteEndpoint")),
    KillPoint("after the first DeleteEndpointConfig", call("DeleteEndpointConfig")),
    KillPoint("after the first DeleteModel", call("DeleteModel")),
]


@dataclass
class Prober:
    """Invokes the endpoint every `interval` seconds from a thread; records every outcome."""

    e2e: E2E
    endpoint: str = ENDPOINT
    interval: float = 0.1
    answered: int = 0
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Prober:
        # One attempt per probe: a retry inside botocore would hide a dropped request.
        client = self.e2e.sandbox.client(
            "sagemaker-runtime", retries={"mode": "standard", "total_max_attempts": 1}
        )
        self._thread = threading.Thread(target=self._run, args=(client,), daemon=True)
        self._thread.start()
        return self

    def _run(self, client: Any) -> None:
        body = b'{"inputs": "probe: are you there?", "parameters": {"max_new_tokens": 2}}'
        while not self._stop.is_set():
            try:
                client.invoke_endpoint(
                    EndpointName=self.endpoint, Body=body, ContentType="application/json"
                )
                self.answered += 1
            except Exception as exc:  # every failure is a finding, whatever its type
                self.failures.append(f"{time.strftime('%X')} {type(exc).__name__}: {exc}")
            self._stop.wait(self.interval)

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=GUARD)

    def assert_all_answered(self) -> None:
        assert self.answered > 0, "the prober never ran"
        assert not self.failures, f"{len(self.failures)} probes failed: {self.failures[:5]}"
        # The server's side of it: every probe it saw was answered with 200.
        probes = [
            r
            for r in self.e2e.sandbox.admin.traffic(self.endpoint)
            if not r["stream"] and not r["shadow"] and r["output_tokens"] <= PROBE_TOKENS
        ]
        assert len(probes) >= self.answered
        assert [r for r in probes if r["status"] != 200] == []


class Killer:
    """Waits for kill points in the call log or status, SIGKILLs and restarts the operator."""

    def __init__(self, e2e: E2E, names: Names, name: str = "chat") -> None:
        self.e2e = e2e
        self.names = names
        self.name = name
        self.seen = 0  # calls before this index were already matched against
        self.killed: list[str] = []

    def wait_and_kill(self, point: KillPoint, timeout: float = GUARD) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if point.on_call is not None:
                # Only the calls not yet looked at: polling the whole log every 10 ms would
                # load the sandbox while it serves the benchmark.
                fresh = self.e2e.sandbox.admin.calls(since=self.seen)
                hit = next(
                    (i for i, record in enumerate(fresh) if point.on_call(record, self.names)),
                    None,
                )
                if hit is not None:
                    self._kill_and_restart(point)
                    self.seen += hit + 1
                    return
                self.seen += len(fresh)
                time.sleep(0.01)
            else:
                assert point.on_status is not None
                obj = self.e2e.cluster.get(self.e2e.namespace, self.name)
                if point.on_status(obj):
                    # The calls so far, counted before the kill: counting after the restart
                    # would also skip what the restarted operator did at once (it made
                    # CreateOptimizationJob before the count, and that point was missed).
                    made = len(self.e2e.sandbox.admin.calls(since=self.seen))
                    self._kill_and_restart(point)
                    self.seen += made
                    return
                # A status point lasts a benchmark or a pause: no need to poll it as fast.
                time.sleep(0.05)
        obj = self.e2e.cluster.get(self.e2e.namespace, self.name)
        raise AssertionError(
            f"kill point {point.label!r} not reached in {timeout}s (killed so far: "
            f"{self.killed})\n{self.e2e.explain(obj)}"
        )

    def _kill_and_restart(self, point: KillPoint) -> None:
        self.e2e.operator.kill()
        self.killed.append(point.label)
        self.e2e.operator.start()


def ok_calls(e2e: E2E, operation: str) -> list[dict[str, Any]]:
    return [
        c
        for c in e2e.sandbox.admin.calls()
        if c["operation"] == operation and not c.get("errorCode")
    ]


def assert_promoted_without_twins(e2e: E2E, names: Names) -> None:
    obj = e2e.cluster.get(e2e.namespace, "chat")
    assert obj["status"]["phase"] == "Succeeded", e2e.explain(obj)
    state = e2e.sandbox.admin.state()
    assert sorted(state["models"]) == sorted([names.baseline_model, names.candidate_model])
    assert sorted(state["endpointConfigs"]) == sorted(
        [names.baseline_config, names.rollout_config, names.promoted_config]
    )
    assert list(state["optimizationJobs"]) == [names.job]
    assert len(ok_calls(e2e, "CreateEndpoint")) == 1
    assert len(ok_calls(e2e, "CreateOptimizationJob")) == 1
    # One update to the rollout config, one to the promoted config: none repeated.
    assert len(ok_calls(e2e, "UpdateEndpoint")) == 2
    served = e2e.serving(ENDPOINT)
    assert served["EndpointStatus"] == "InService"
    assert served["EndpointConfigName"] == names.promoted_config
    assert obj["status"]["sagemaker"]["servingEndpointConfig"] == names.promoted_config


def assert_nothing_left(e2e: E2E) -> None:
    state = e2e.sandbox.admin.state()
    assert not state.get("endpoints"), state.get("endpoints")
    assert not state.get("models"), state.get("models")
    assert not state.get("endpointConfigs"), state.get("endpointConfigs")


def wait_in_service(e2e: E2E, timeout: float = GUARD) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        endpoints = e2e.sandbox.admin.state().get("endpoints") or {}
        found = endpoints.get(ENDPOINT) if isinstance(endpoints, dict) else None
        if found and found.get("EndpointStatus") == "InService":
            return
        time.sleep(0.02)
    raise AssertionError(f"{ENDPOINT} never InService\n{e2e.diagnostics()}")


# Fourteen kills and restarts in one lifecycle: on busy cores each restart alone takes
# seconds, so the file-wide 300 s hang guard is too tight for the whole sequence.
@pytest.mark.timeout(900)
def test_sigkill_at_every_point_of_a_lifecycle_reaches_the_same_end_without_twins(
    e2e: E2E,
) -> None:
    names = e2e.create("chat", spec(deletionPolicy="Delete"))
    killer = Killer(e2e, names)
    for point in LIFECYCLE_POINTS[:2]:
        killer.wait_and_kill(point)
    wait_in_service(e2e)
    with Prober(e2e) as prober:
        for point in LIFECYCLE_POINTS[2:]:
            killer.wait_and_kill(point)
        e2e.wait_phase("chat", ENDS)
    prober.assert_all_answered()
    assert_promoted_without_twins(e2e, names)

    e2e.cluster.delete(e2e.namespace, "chat")
    for point in DELETION_POINTS:
        killer.wait_and_kill(point)
    e2e.cluster.wait_gone(e2e.namespace, "chat", timeout=GUARD, on_timeout=e2e.diagnostics)
    assert_nothing_left(e2e)
    assert len(killer.killed) == len(LIFECYCLE_POINTS) + len(DELETION_POINTS) >= 10


@pytest.mark.slow
@pytest.mark.parametrize("point", LIFECYCLE_POINTS, ids=lambda p: p.label.replace(" ", "-"))
def test_sigkill_at_one_point_then_restart_promotes_without_twins(
    e2e: E2E, point: KillPoint
) -> None:
    names = e2e.create("chat", spec())
    wait_in_service(e2e)
    with Prober(e2e) as prober:
        Killer(e2e, names).wait_and_kill(point)
        e2e.wait_phase("chat", ENDS)
    prober.assert_all_answered()
    assert_promoted_without_twins(e2e, names)


@pytest.mark.slow
@pytest.mark.parametrize("point", DELETION_POINTS, ids=lambda p: p.label.replace(" ", "-"))
def test_sigkill_at_one_point_of_deletion_then_restart_leaves_nothing(
    e2e: E2E, point: KillPoint
) -> None:
    names = e2e.create("chat", spec(deletionPolicy="Delete"))
    e2e.wait_phase("chat", ENDS)
    e2e.cluster.delete(e2e.namespace, "chat")
    Killer(e2e, names).wait_and_kill(point)
    e2e.cluster.wait_gone(e2e.namespace, "chat", timeout=GUARD, on_timeout=e2e.diagnostics)
    assert_nothing_left(e2e)
