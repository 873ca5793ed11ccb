"""The observe cadence: which Describe calls a wake-up makes, from status alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from endpoint_optimizer.api import (
    ConditionStatus,
    ConditionType,
    OptimizedEndpointStatus,
    Phase,
    parse_status,
)
from endpoint_optimizer.pipeline.cadence import (
    REFRESH,
    EndpointCadence,
    ObservePlan,
    levers_changed,
    observe_plan,
    stamp,
)
from endpoint_optimizer.pipeline.decide import decide
from endpoint_optimizer.pipeline.model import (
    APPROVE,
    PAUSE,
    EndpointView,
    JobView,
    Observations,
    Resource,
)
from endpoint_optimizer.sagemaker.naming import Owner
from tests.unit.pipeline.test_decide import NAMES, OWNER, serving, spec

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
RECHECK = 300.0
POLL = 30.0


def waiting_on_job(seen_s_ago: float = 10.0, **overrides: Any) -> OptimizedEndpointStatus:
    status = OptimizedEndpointStatus(
        phase=Phase.OPTIMIZING,
        observed_generation=1,
        endpoint_observed_at=NOW - timedelta(seconds=seen_s_ago),
    )
    status.sagemaker.optimization_jobs = [NAMES.job]
    status.set_condition(ConditionType.READY, ConditionStatus.TRUE, "EndpointInService", "", NOW, 1)
    for key, value in overrides.items():
        setattr(status, key, value)
    return status


def resource(annotations: dict[str, str] | None = None, **kwargs: Any) -> Resource:
    return Resource(OWNER, kwargs.pop("generation", 1), annotations or {}, **kwargs)


def test_waiting_on_a_job_describes_the_job_and_the_endpoint_only_if_the_job_settled() -> None:
    plan = observe_plan(waiting_on_job(), resource(), NOW, RECHECK)
    assert plan == ObservePlan(EndpointCadence.IF_JOBS_SETTLED, jobs=True, reason=plan.reason)
    assert not plan.full


def test_the_endpoint_is_rechecked_instead_of_the_job_once_the_recheck_is_due() -> None:
    plan = observe_plan(waiting_on_job(seen_s_ago=RECHECK), resource(), NOW, RECHECK)
    assert plan.endpoint is EndpointCadence.DESCRIBE
    assert plan.jobs is False


@pytest.mark.parametrize("phase", [Phase.SUCCEEDED, Phase.ROLLED_BACK, Phase.FAILED])
def test_a_finished_resource_describes_its_endpoint_only_every_recheck(phase: Phase) -> None:
    fresh = observe_plan(waiting_on_job(phase=phase), resource(), NOW, RECHECK)
    assert fresh.endpoint is EndpointCadence.LAST_SEEN and not fresh.jobs
    due = observe_plan(waiting_on_job(RECHECK + 1, phase=phase), resource(), NOW, RECHECK)
    assert due.endpoint is EndpointCadence.DESCRIBE and not due.jobs


@pytest.mark.parametrize(
    ("status", "res"),
    [
        pytest.param(waiting_on_job(endpoint_observed_at=None), resource(), id="never-seen"),
        pytest.param(waiting_on_job(), resource(generation=2), id="new-generation"),
        pytest.param(waiting_on_job(), resource(deleting=True), id="deleting"),
        pytest.param(waiting_on_job(), resource({REFRESH: "1"}), id="refresh-set"),
        pytest.param(waiting_on_job(), resource({APPROVE: "true"}), id="approve-set"),
        pytest.param(
            waiting_on_job(observed_levers={PAUSE: "true"}), resource(), id="pause-removed"
        ),
        pytest.param(waiting_on_job(conditions=[]), resource(), id="endpoint-not-ready"),
        pytest.param(waiting_on_job(phase=Phase.BASELINING), resource(), id="baselining"),
        pytest.param(
            waiting_on_job(phase=Phase.ANALYZING), resource({PAUSE: "true"}), id="paused-now"
        ),
    ],
)
def test_anything_that_may_act_on_what_it_did_not_see_describes_everything(
    status: OptimizedEndpointStatus, res: Resource
) -> None:
    assert observe_plan(status, res, NOW, RECHECK).full


@pytest.mark.parametrize(
    "phase",
    [
        Phase.DEPLOYING,
        Phase.ANALYZING,
        Phase.AWAITING_APPROVAL,
        Phase.PROMOTING,
        Phase.ROLLING_BACK,
    ],
)
def test_once_the_job_completed_it_is_not_described_again(phase: Phase) -> None:
    for seen in (None, NOW):
        plan = observe_plan(
            waiting_on_job(phase=phase, endpoint_observed_at=seen), resource(), NOW, RECHECK
        )
        assert plan.endpoint is EndpointCadence.DESCRIBE
        assert plan.jobs is False


def test_no_job_recorded_yet_describes_everything() -> None:
    status = waiting_on_job()
    status.sagemaker.optimization_jobs = []
    assert observe_plan(status, resource(), NOW, RECHECK).full


def test_a_refresh_value_already_honoured_does_not_force_a_full_observe() -> None:
    status = waiting_on_job(observed_levers={REFRESH: "1"})
    assert not levers_changed(status, {REFRESH: "1", "unrelated/annotation": "x"})
    assert not observe_plan(status, resource({REFRESH: "1"}), NOW, RECHECK).full
    assert observe_plan(status, resource({REFRESH: "2"}), NOW, RECHECK).full


def test_stamp_records_the_describe_only_in_sparse_phases_and_levers_only_when_complete() -> None:
    endpoint = EndpointView("chat", "InService", NAMES.baseline_config)
    optimizing = waiting_on_job(seen_s_ago=100)
    stamp(optimizing, Observations(endpoint), resource({REFRESH: "7"}), NOW)
    assert optimizing.endpoint_observed_at == NOW
    assert optimizing.observed_levers == {REFRESH: "7"}

    sparse = Observations(endpoint, endpoint_described=False, complete=False)
    before = NOW - timedelta(seconds=100)
    kept = waiting_on_job(seen_s_ago=100)
    stamp(kept, sparse, resource({REFRESH: "8"}), NOW)
    assert kept.endpoint_observed_at == before
    assert kept.observed_levers is None

    baselining = OptimizedEndpointStatus(phase=Phase.BASELINING, observed_generation=1)
    stamp(baselining, Observations(endpoint), resource(), NOW)
    assert baselining.endpoint_observed_at is None  # described every poll there anyway
    assert baselining.observed_levers is None


def test_the_wakeup_that_starts_waiting_on_the_job_stamps_status_through_decide() -> None:
    status = parse_status(
        {
            "phase": "Optimizing",
            "observedGeneration": 1,
            "baseline": {"variantName": NAMES.baseline_variant, "measuredAt": NOW.isoformat()},
            "sagemaker": {
                "endpointName": "chat",
                "baselineEndpointConfig": NAMES.baseline_config,
                "optimizationJobs": [NAMES.job],
            },
        }
    )
    running = {NAMES.job: JobView(NAMES.job, "INPROGRESS")}
    endpoint = serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))
    decision = decide(
        spec(), status, Observations(endpoint, running), resource({REFRESH: "a"}), NOW
    )
    after = parse_status(decision.status)
    assert after.phase is Phase.OPTIMIZING
    assert after.endpoint_observed_at == NOW
    assert after.observed_levers == {REFRESH: "a"}
    # The next beat, 30 s on, needs only the job.
    later = NOW + timedelta(seconds=POLL)
    assert not observe_plan(after, resource({REFRESH: "a"}), later, RECHECK).full


def describes(plan: ObservePlan, job_settled: bool) -> tuple[int, bool]:
    """Describe calls a wake-up makes under `plan`, and whether the endpoint was one."""
    calls = int(plan.jobs)
    endpoint = plan.endpoint is EndpointCadence.DESCRIBE or (
        plan.endpoint is EndpointCadence.IF_JOBS_SETTLED and job_settled
    )
    return calls + int(endpoint), endpoint


@pytest.mark.parametrize("poll", [10.0, 30.0, 60.0])
def test_waiting_on_a_job_costs_one_describe_per_wakeup_and_rechecks_the_endpoint(
    poll: float,
) -> None:
    status = waiting_on_job(seen_s_ago=0.0)
    owner = Resource(Owner("ml", "chat", "uid-1"), 1)
    calls, last_endpoint, longest_gap = 0, NOW, 0.0
    hours = 2
    wakeups = int(hours * 3600 / poll)
    for i in range(1, wakeups + 1):
        now = NOW + timedelta(seconds=i * poll)
        plan = observe_plan(status, owner, now, 10 * poll)
        made, endpoint = describes(plan, job_settled=False)
        assert made == 1
        calls += made
        if endpoint:
            longest_gap = max(longest_gap, (now - last_endpoint).total_seconds())
            last_endpoint = now
        stamp(
            status, Observations(None, endpoint_described=endpoint, complete=plan.full), owner, now
        )
    assert calls / (hours * 60) <= 60 / poll
    assert longest_gap <= 10 * poll + poll
