"""The status to decide from: a watched body can be older than the status this process wrote.

A timer can fire before the watch delivers the status it patched last time; deciding
from that older status would repeat a phase (and e.g. mistake our own new endpoint for
a foreign one). Status is written only by this process, so a body equal to a status it
replaced is stale, and the status it wrote since is the truth.

A measurement's progress (status.measurement, and the decided message and conditions with
its first write; controller/progress.py) is written mid-wake-up and is never decision
state: the comparison ignores those keys, so a watch delivering a progress write late is
still seen as the stale body it is, and the progress itself is dropped from the body.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from endpoint_optimizer.controller.progress import FIELD as PROGRESS
from endpoint_optimizer.controller.progress import IGNORED_BY_FRESHNESS

# Statuses replaced per resource that still count as stale: a watch runs a few writes late
# at most; older ones are long delivered.
_KEEP_SUPERSEDED = 8


class Freshness:
    """Per resource (by uid): the status this process wrote last, and those it replaced."""

    def __init__(self) -> None:
        self._latest: dict[str, dict[str, Any]] = {}
        self._superseded: dict[str, list[dict[str, Any]]] = {}

    def status(self, uid: str, observed: Mapping[str, Any]) -> dict[str, Any]:
        """The body's status, unless it is one this process already replaced (then the newer)."""
        body: dict[str, Any] = json.loads(json.dumps(dict(observed)))
        body.pop(PROGRESS, None)
        latest = self._latest.get(uid)
        if latest is None:
            return body
        seen = _decisive(body)
        superseded = [_decisive(s) for s in self._superseded.get(uid, [])]
        if seen != _decisive(latest) and seen in superseded:
            return copy.deepcopy(latest)
        return body

    def wrote(self, uid: str, before: dict[str, Any], after: dict[str, Any]) -> None:
        """This process replaced `before` with `after` (a status patch was sent)."""
        self._superseded[uid] = [*self._superseded.get(uid, []), before][-_KEEP_SUPERSEDED:]
        self._latest[uid] = copy.deepcopy(after)

    def latest(self, uid: str) -> dict[str, Any] | None:
        """The status this process wrote last for the resource, if any."""
        return self._latest.get(uid)

    def forget(self, uid: str) -> None:
        """The resource is gone."""
        self._latest.pop(uid, None)
        self._superseded.pop(uid, None)


def _decisive(status: Mapping[str, Any]) -> dict[str, Any]:
    """The status without what a progress write may change (never decision state)."""
    return {k: v for k, v in status.items() if k not in IGNORED_BY_FRESHNESS}
