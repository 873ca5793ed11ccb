"""The operator restarted while SageMaker is still working: an update, a job, a deletion.

`slow_transitions` stretches the operation past the restart, so the new process really
finds it in flight (Updating, INPROGRESS, Deleting) and must wait for it rather than start
it again. (A restart during a canary step is tests/e2e/test_restart.py.)
"""

from __future__ import annotations

import pytest

from endpoint_optimizer.sandbox.config import Faults
from tests.e2e.conftest import E2E, GUARD, spec
from tests.e2e.test_crash import (
    DELETION_POINTS,
    ENDPOINT,
    Killer,
    KillPoint,
    Prober,
    assert_nothing_left,
    assert_promoted_without_twins,
    call,
    ok_calls,
    wait_in_service,
)

ENDS = {"Succeeded", "Failed", "RolledBack"}
ONE_STEP = {
    "strategy": "canary",
    "steps": [{"weight": 20, "pause": "1s"}],
    "analysis": {"onNoData": "pass"},
}


@pytest.mark.slow
def test_restart_while_an_endpoint_update_is_in_flight_waits_for_it(e2e: E2E) -> None:
    names = e2e.create("chat", spec(rollout=ONE_STEP))
    e2e.cluster.wait_for_phase(
        e2e.namespace, "chat", "Optimizing", timeout=GUARD, on_timeout=e2e.diagnostics
    )
    # Updates planned from now on take 40x longer (16 s): longer than a restart, even on a
    # busy host (at 10x, 4 s, a loaded run's restart outlasted the update).
    e2e.sandbox.admin.set_faults(Faults(slow_transitions=40))
    with Prober(e2e) as prober:
        Killer(e2e, names).wait_and_kill(KillPoint("after UpdateEndpoint", call("UpdateEndpoint")))
        assert e2e.serving(ENDPOINT)["EndpointStatus"] == "Updating"
        e2e.cluster.wait_for(
            e2e.namespace,
            "chat",
            lambda o: "Updating" in o.get("status", {}).get("message", ""),
            timeout=GUARD,
            what="the restarted operator waiting on the update",
            on_timeout=e2e.diagnostics,
        )
        assert len(ok_calls(e2e, "UpdateEndpoint")) == 1, "the update in flight was repeated"
        e2e.wait_phase("chat", ENDS)
    prober.assert_all_answered()
    assert_promoted_without_twins(e2e, names)


@pytest.mark.slow
def test_restart_while_the_optimization_job_runs_waits_for_the_same_job(e2e: E2E) -> None:
    # The job takes 7.5 s instead of 1.5 s.
    e2e.sandbox.admin.set_faults(Faults(slow_transitions=5))
    names = e2e.create("chat", spec(rollout=ONE_STEP))
    wait_in_service(e2e)
    e2e.sandbox.admin.clear_faults()  # only the job, already planned, stays slow
    Killer(e2e, names).wait_and_kill(
        KillPoint("after CreateOptimizationJob", call("CreateOptimizationJob"))
    )
    job = e2e.sandbox.admin.state()["optimizationJobs"][names.job]
    assert job["OptimizationJobStatus"] == "INPROGRESS"
    obj = e2e.wait_phase("chat", ENDS)
    assert obj["status"]["phase"] == "Succeeded", e2e.explain(obj)
    assert len(ok_calls(e2e, "CreateOptimizationJob")) == 1
    assert obj["status"]["sagemaker"]["optimizationJobs"] == [names.job]
    assert_promoted_without_twins(e2e, names)


@pytest.mark.slow
def test_restart_during_deletion_finishes_the_cleanup(e2e: E2E) -> None:
    names = e2e.create("chat", spec(rollout=ONE_STEP, deletionPolicy="Delete"))
    e2e.wait_phase("chat", ENDS)
    # DeleteEndpoint takes 3 s instead of 0.06 s: the restart finds it Deleting.
    e2e.sandbox.admin.set_faults(Faults(slow_transitions=50))
    e2e.cluster.delete(e2e.namespace, "chat")
    Killer(e2e, names).wait_and_kill(DELETION_POINTS[0])
    assert e2e.serving(ENDPOINT)["EndpointStatus"] == "Deleting"
    e2e.cluster.wait_gone(e2e.namespace, "chat", timeout=GUARD, on_timeout=e2e.diagnostics)
    assert_nothing_left(e2e)
    assert len(ok_calls(e2e, "DeleteEndpoint")) >= 1
