"""Retryable failures between wake-ups: a bounded, jittered backoff, kept in status.retry.

botocore's `standard` retries absorb a short storm inside one call (4 attempts, full
jitter); what still fails is waited out here, between wake-ups. Attempt n waits a uniform
time between one poll interval and min(max_delay, poll * 2**n): never faster than the
heartbeat, spread so that resources failing together do not retry together, bounded by
--retry-max-delay. The wait lives in status, so a restart does not reset it; a lever
annotation, a new generation or a deletion wakes the resource at once all the same.

While a candidate may hold traffic the wait is bounded too: after --retry-limit attempts
in a row the failure is treated as permanent, which returns traffic to the baseline
(pipeline.record.record_error) instead of leaving users on a candidate nobody judges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from endpoint_optimizer.api import OptimizedEndpointStatus, Retry, parse_status
from endpoint_optimizer.pipeline import cadence
from endpoint_optimizer.pipeline.model import Event, Resource
from endpoint_optimizer.pipeline.record import record_error
from endpoint_optimizer.pipeline.wakeup import CANDIDATE_LIVE


@dataclass(frozen=True)
class Failure:
    """What went wrong in one wake-up, by what it is."""

    reason: str  # CamelCase: the Event reason, status.retry.reason
    message: str
    retryable: bool


@dataclass(frozen=True)
class Backoff:
    poll: float
    max_delay: float
    limit: int

    def delay(self, attempt: int, draw: float) -> float:
        """Seconds before attempt `attempt` + 1; `draw` is uniform in [0, 1)."""
        ceiling = max(self.poll, min(self.max_delay, self.poll * 2.0**attempt))
        return self.poll + (ceiling - self.poll) * draw


def holding(status: OptimizedEndpointStatus, res: Resource, now: datetime) -> Retry | None:
    """The retry this wake-up waits out (it calls nothing), or None to go ahead."""
    retry = status.retry
    if retry is None or now >= retry.next_attempt_at:
        return None
    renewed = status.observed_generation != 0 and res.generation > status.observed_generation
    if res.deleting or renewed:
        return None
    if cadence.levers_changed(status, res.annotations):
        return None
    return retry


def cleared(status_data: dict[str, Any]) -> dict[str, Any]:
    """The status after a wake-up that got through: no retry pending."""
    if status_data.get("retry") is None:
        return status_data
    return {k: v for k, v in status_data.items() if k != "retry"}


def failed(
    before: dict[str, Any],
    after: dict[str, Any],
    failure: Failure,
    backoff: Backoff,
    now: datetime,
    draw: Callable[[], float],
) -> tuple[dict[str, Any], list[Event]]:
    """The status after `failure`, and the Warning to post (once per distinct problem).

    `before`: the status the wake-up started from (its retry and lastError); `after`: the
    status the wake-up reached (a decision may have moved it before an action failed).
    """
    previous = parse_status(before)
    attempt = previous.retry.attempt + 1 if previous.retry is not None else 1
    phase = parse_status(after).phase
    message = failure.message
    give_up = failure.retryable and attempt > backoff.limit and phase in CANDIDATE_LIVE
    if give_up:
        message = (
            f"{message} (still failing after {attempt - 1} retries while a candidate may hold "
            "traffic: returning traffic to the baseline)"
        )
    permanent = give_up or not failure.retryable
    status = parse_status(record_error(after, message, permanent, now, failure.reason))
    status.retry = None
    if not permanent:
        wait = backoff.delay(attempt, draw())
        status.retry = Retry(
            reason=failure.reason[:128],
            attempt=attempt,
            next_attempt_at=now + timedelta(seconds=wait),
        )
        status.message = (
            f"retrying in {wait:.1f}s (attempt {attempt}, {failure.reason}): {message}"
        )[:1024]
    # One Warning per problem: the first failure of a streak, and each different message.
    new = previous.retry is None or previous.last_error != message[:4096]
    events = [Event("Warning", failure.reason, message)] if permanent or new else []
    return status.dump(), events
