"""The observe cadence: which Describe calls a wake-up makes, decided from status alone.

Issue 7's budget is at most 2 SageMaker calls per resource per minute while waiting: one
Describe per wake-up at the default 30 s poll. While an optimization or training job
runs, the endpoint is InService and nothing of the operator's is changing it, so a
wake-up describes only the job, and once every `endpoint_recheck` seconds the endpoint
instead of the job: an endpoint deleted or changed outside the operator shows in the
Ready condition within endpoint_recheck plus one poll. A wake-up that sees a job settled
(no longer in progress) describes the endpoint too before deciding, so nothing is ever
done to the endpoint on an old view of it. Finished resources (Succeeded, RolledBack,
Failed) describe the endpoint once every endpoint_recheck, for the Ready condition, and
their jobs never; a Succeeded resource still baking (phases/bake.py) describes it every
wake-up, since the bake may roll back, and so does one watching its acceptance after a
clean bake (phases/watch.py) or switching speculation off after it. From Deploying on
(Deploying, Analyzing, AwaitingApproval, Promoting, RollingBack) the job has COMPLETED,
and a finished job never changes: those wake-ups describe the endpoint only, and reuse
the job's last view (Deploying reads its output).

Everything is described when the wake-up may act on what it did not see: a new spec
generation, a deletion, a changed lever annotation (a new optimizer.dev/refresh value asks
for exactly that), or no record of when the endpoint was last described.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from endpoint_optimizer.api import (
    TERMINAL_PHASES,
    ConditionStatus,
    ConditionType,
    OptimizedEndpointStatus,
    Phase,
    SpeculationStage,
)
from endpoint_optimizer.pipeline.model import (
    APPROVE,
    PAUSE,
    REFRESH,
    ROLLBACK,
    Observations,
    Resource,
    Timing,
)

LEVERS = (APPROVE, ROLLBACK, PAUSE, REFRESH)
# status.observedLevers values are capped at this length (the CRD's bound).
_MAX_VALUE = 253
# The phases in which the endpoint is described sparsely, so status keeps when it last was.
SPARSE_PHASES = TERMINAL_PHASES | {Phase.OPTIMIZING}
# Phases reached only after the job COMPLETED: the endpoint changes, the job cannot.
_PAST_JOBS = frozenset(
    {
        Phase.DEPLOYING,
        Phase.ANALYZING,
        Phase.AWAITING_APPROVAL,
        Phase.PROMOTING,
        Phase.ROLLING_BACK,
    }
)


class EndpointCadence(StrEnum):
    DESCRIBE = "Describe"  # DescribeEndpoint this wake-up
    IF_JOBS_SETTLED = "IfJobsSettled"  # only if a job described now is no longer in progress
    LAST_SEEN = "LastSeen"  # reuse the last view of it


@dataclass(frozen=True)
class ObservePlan:
    """What one wake-up describes; what it does not is taken from the last observation."""

    endpoint: EndpointCadence = EndpointCadence.DESCRIBE
    jobs: bool = True
    reason: str = "full"

    @property
    def full(self) -> bool:
        return self.endpoint is EndpointCadence.DESCRIBE and self.jobs


FULL = ObservePlan()


def lever_annotations(annotations: Mapping[str, str]) -> dict[str, str]:
    """The lever annotations present, as status.observedLevers records them."""
    return {key: str(annotations[key])[:_MAX_VALUE] for key in LEVERS if key in annotations}


def levers_changed(status: OptimizedEndpointStatus, annotations: Mapping[str, str]) -> bool:
    """True when a lever annotation was set, changed or removed since the last wake-up."""
    return lever_annotations(annotations) != (status.observed_levers or {})


def _endpoint_ready(status: OptimizedEndpointStatus) -> bool:
    ready = status.condition(ConditionType.READY)
    return ready is not None and ready.status is ConditionStatus.TRUE


def observe_plan(
    status: OptimizedEndpointStatus, res: Resource, now: datetime, endpoint_recheck_s: float
) -> ObservePlan:
    """The Describe calls this wake-up needs (see the module docstring)."""
    if res.deleting:
        return ObservePlan(reason="deleting")
    if status.observed_generation == 0 or res.generation > status.observed_generation:
        return ObservePlan(reason="new generation")
    if levers_changed(status, res.annotations):
        return ObservePlan(reason="lever annotation changed")
    if status.phase in _PAST_JOBS:
        return ObservePlan(EndpointCadence.DESCRIBE, jobs=False, reason="job finished")
    bake = status.rollout.bake
    if status.phase is Phase.SUCCEEDED and bake is not None and bake.active:
        # The bake may roll back: it decides on what the endpoint serves now.
        return ObservePlan(EndpointCadence.DESCRIBE, jobs=False, reason="baking")
    watch = status.rollout.acceptance_watch
    switch = status.rollout.speculation_disabled
    if status.phase is Phase.SUCCEEDED and (
        (watch is not None and watch.active)
        or (
            switch is not None
            and switch.during is SpeculationStage.RETENTION
            and switch.serving_at is None
            and status.sagemaker.baseline_deleted_at is None
        )
    ):
        # The acceptance watch may roll back or switch (phases/watch.py): a fresh view.
        return ObservePlan(EndpointCadence.DESCRIBE, jobs=False, reason="watching acceptance")
    seen = status.endpoint_observed_at
    if seen is None or status.phase not in SPARSE_PHASES:
        return FULL
    due = (now - seen).total_seconds() >= endpoint_recheck_s
    if status.phase in TERMINAL_PHASES:
        if due:
            return ObservePlan(EndpointCadence.DESCRIBE, jobs=False, reason="recheck endpoint")
        return ObservePlan(EndpointCadence.LAST_SEEN, jobs=False, reason="finished")
    sm = status.sagemaker
    if not (sm.optimization_jobs or sm.training_jobs) or not _endpoint_ready(status):
        # No job to wait on yet (this wake-up may start one), or the endpoint is not
        # known InService: look at everything.
        return FULL
    if due:
        return ObservePlan(EndpointCadence.DESCRIBE, jobs=False, reason="recheck endpoint")
    return ObservePlan(EndpointCadence.IF_JOBS_SETTLED, jobs=True, reason="waiting on a job")


def stamp(status: OptimizedEndpointStatus, obs: Observations, res: Resource, now: datetime) -> None:
    """Record in status what the next wake-up's plan reads: levers seen, endpoint described."""
    if obs.endpoint_described and status.phase in SPARSE_PHASES:
        status.endpoint_observed_at = now
    if obs.complete:
        # Only a complete observe honours a refresh; a changed lever always gets one.
        status.observed_levers = lever_annotations(res.annotations) or None


def retry_delay(attempts: int, timing: Timing, key: str) -> float:
    """Seconds before a void measurement is tried again: doubling from ten scaled seconds
    (or the poll interval, if longer) up to thirty scaled minutes, with a +-20 % jitter
    drawn from `key` (deterministic: the decision stays a pure function), and never
    sooner than the next wake-up."""
    base = max(timing.poll_interval, 10.0 * timing.time_scale)
    ceiling = max(timing.poll_interval, 1800.0 * timing.time_scale)
    delay = min(ceiling, base * 2.0 ** max(0, attempts - 1))
    digest = hashlib.sha256(f"{key}/{attempts}".encode()).digest()
    jitter = 0.8 + 0.4 * (digest[0] / 255.0)
    return max(timing.poll_interval, delay * jitter)
