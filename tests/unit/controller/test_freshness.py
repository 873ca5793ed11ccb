"""Freshness: a timer that fires before the watch delivers our last write decides from it."""

from __future__ import annotations

import itertools

from endpoint_optimizer.controller.freshness import Freshness

UID = "uid-1"


def test_a_stale_body_is_replaced_by_the_status_this_process_wrote() -> None:
    fresh = Freshness()
    first = {"phase": "Pending"}
    second = {"phase": "Baselining", "sagemaker": {"endpointName": "chat"}}
    assert fresh.status(UID, first) == first
    fresh.wrote(UID, first, second)
    # The watch has not caught up: the body still shows what we replaced.
    assert fresh.status(UID, first) == second
    # It has caught up, or someone else wrote status: the body wins.
    assert fresh.status(UID, second) == second
    other = {"phase": "Failed"}
    assert fresh.status(UID, other) == other


def test_an_older_superseded_status_is_stale_too() -> None:
    fresh = Freshness()
    a, b, c = {"phase": "Pending"}, {"phase": "Baselining"}, {"phase": "Optimizing"}
    fresh.wrote(UID, a, b)
    fresh.wrote(UID, b, c)
    assert fresh.status(UID, a) == c
    assert fresh.status(UID, b) == c


def test_what_one_resource_wrote_never_replaces_another_resources_status() -> None:
    fresh = Freshness()
    pending, baselining = {"phase": "Pending"}, {"phase": "Baselining"}
    fresh.wrote(UID, pending, baselining)
    assert fresh.status("uid-2", pending) == pending
    assert fresh.latest("uid-2") is None
    assert fresh.latest(UID) == baselining


def test_a_status_replaced_long_ago_is_no_longer_taken_for_stale() -> None:
    fresh = Freshness()
    statuses = [{"phase": "Analyzing", "step": n} for n in range(12)]
    for before, after in itertools.pairwise(statuses):
        fresh.wrote(UID, before, after)
    # The watch runs a few writes late at most: the newest replaced ones still count...
    assert fresh.status(UID, statuses[-2]) == statuses[-1]
    # ...the oldest are long delivered, so a body equal to one is someone else's write.
    assert fresh.status(UID, statuses[0]) == statuses[0]


def test_the_status_returned_is_a_copy_that_a_decision_may_change() -> None:
    fresh = Freshness()
    body = {"phase": "Pending", "history": [{"event": "Created"}]}
    written = {"phase": "Baselining", "history": [{"event": "Created"}, {"event": "B"}]}
    fresh.wrote(UID, body, written)
    written["history"].append({"event": "changed after writing"})
    decided_from = fresh.status(UID, body)
    assert len(decided_from["history"]) == 2
    decided_from["history"].clear()
    assert len(fresh.status(UID, body)["history"]) == 2
    assert body["history"] == [{"event": "Created"}]


def test_a_forgotten_resource_decides_from_its_body_again() -> None:
    fresh = Freshness()
    pending, baselining = {"phase": "Pending"}, {"phase": "Baselining"}
    fresh.wrote(UID, pending, baselining)
    fresh.forget(UID)
    assert fresh.status(UID, pending) == pending
    assert fresh.latest(UID) is None


def test_a_progress_write_delivered_late_still_reads_as_the_stale_body_it_is() -> None:
    """status.measurement is written mid-wake-up (controller/progress.py): a watch that
    delivers it after the wake-up's own patch must not make the old phase the truth."""
    fresh = Freshness()
    before = {"phase": "Baselining"}
    after = {"phase": "Optimizing", "baseline": {"variant": "AllTraffic"}}
    fresh.wrote(UID, before, after)
    late = {
        **before,
        "measurement": {"action": "MeasureBaseline", "requestsDone": 12},
        # The first progress write carries the decided message and conditions too.
        "message": "benchmarking the baseline variant AllTraffic",
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    assert fresh.status(UID, late) == after
    # Read fresh, the progress never becomes decision state.
    assert "measurement" not in fresh.status("uid-2", late)
