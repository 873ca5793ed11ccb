"""A running measurement's progress in status.measurement, written at a bounded rate.

A benchmark or an eval runs inside one wake-up, and the wake-up's status patch is applied
only when it ends (kopf applies the handler's patch), so for the minutes a measurement
takes `kubectl describe` would show nothing new. The reporter writes `status.measurement`
itself, as a merge patch through the status subresource: the first count at once, then
at most one write per --progress-interval, one write in flight at a time (a count that
comes sooner is held, and the next one carries newer numbers). The wake-up's own patch
removes the key when it ends (`measurement: null`, reconcile.py).

The first write also carries the wake-up's decided `message` and `conditions`: the
decision to measure was taken from an endpoint seen InService, and without them the
status would say "creating endpoint" and Ready=False "no endpoint yet" until the
measurement ends (minutes). Both are outputs the pipeline sets afresh each wake-up.

Never decision state: the freshness cache ignores these keys when it compares bodies (a
watch may deliver a progress write after the wake-up's patch), and the pipeline reads
none of them. A write that fails is logged and forgotten: progress is for people and is
never worth a retry or a failed wake-up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import kopf
from kopf._cogs.clients import api as kopf_api

from endpoint_optimizer import GROUP, PLURAL, VERSION
from endpoint_optimizer.api import MeasurementProgress
from endpoint_optimizer.aws.perform import Progress
from endpoint_optimizer.logs import get_logger

FIELD = "measurement"
# What a progress write may change besides FIELD: outputs of the decision, never inputs.
SHOWN_FIRST = ("message", "conditions")
IGNORED_BY_FRESHNESS = (FIELD, *SHOWN_FIRST)

_log = logging.getLogger(__name__)
log = get_logger("progress")


class StatusWriter(Protocol):
    async def __call__(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch `status` into the object's status subresource."""


async def no_status_writes(namespace: str, name: str, status: Mapping[str, Any]) -> None:
    """Where nothing may be written mid-wake-up (tests that drive wake() with a body)."""
    return None


@dataclass(frozen=True)
class KopfStatusWriter:
    """Through kopf's own authenticated client (the session it already logged in with)."""

    settings: kopf.OperatorSettings

    async def __call__(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        await kopf_api.patch(
            url=f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}/status",
            headers={"Content-Type": "application/merge-patch+json"},
            payload={"status": dict(status)},
            settings=self.settings,
            logger=_log,
        )


class ProgressReporter:
    """One measurement's progress: a callback for aws.perform, writes rate-bounded."""

    def __init__(
        self,
        write: StatusWriter,
        namespace: str,
        name: str,
        action: str,
        interval_s: float,
        *,
        first: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._write = write
        self._namespace = namespace
        self._name = name
        self._action = action
        self._interval_s = interval_s
        self._clock = clock
        self._now = now
        self._started_at = now()
        self._started = clock()
        self._last_write: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._first = {k: v for k, v in (first or {}).items() if k in SHOWN_FIRST}
        self.writes = 0

    def __call__(self, progress: Progress) -> None:
        at = self._clock()
        if self._task is not None and not self._task.done():
            return
        if self._last_write is not None and at - self._last_write < self._interval_s:
            return
        self._last_write = at
        shown = self.shown(progress, at)
        self._task = asyncio.get_running_loop().create_task(self._send(shown))

    def shown(self, progress: Progress, at: float) -> MeasurementProgress:
        """What status.measurement says of `progress`, seen at monotonic time `at`."""
        return MeasurementProgress(
            action=self._action,
            stage=progress.stage,
            concurrency=progress.concurrency,
            level=progress.level,
            levels=progress.levels,
            round=progress.round,
            requests_done=progress.done,
            requests_planned=progress.planned,
            started_at=self._started_at,
            elapsed=_elapsed(at - self._started),
        )

    async def close(self) -> bool:
        """Wait for the write in flight; True when anything was written (then the
        wake-up's own patch must remove the key)."""
        if self._task is not None:
            await self._task
        return self.writes > 0

    async def _send(self, shown: MeasurementProgress) -> None:
        patch: dict[str, Any] = {FIELD: shown.dump()}
        if self.writes == 0:
            patch.update(self._first)
        try:
            await self._write(self._namespace, self._name, patch)
        except Exception as exc:  # for people only: never a failed wake-up
            log.warning("measurement progress not written", error=type(exc).__name__)
            return
        self.writes += 1


def _elapsed(seconds: float) -> str:
    whole = timedelta(seconds=round(max(0.0, seconds)))
    minutes, secs = divmod(int(whole.total_seconds()), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
