"""handlers: a timer that fires before the watch delivers our last write decides from that write."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from endpoint_optimizer.controller.handlers import _fresh_status, _remember


def test_a_stale_body_is_replaced_by_the_status_this_process_wrote() -> None:
    memo: Any = SimpleNamespace()
    first = {"phase": "Pending"}
    second = {"phase": "Baselining", "sagemaker": {"endpointName": "chat"}}
    assert _fresh_status(first, memo) == first  # type: ignore[arg-type]
    _remember(memo, first, second)
    # The watch has not caught up: the body still shows what we replaced.
    assert _fresh_status(first, memo) == second  # type: ignore[arg-type]
    # It has caught up, or someone else wrote status: the body wins.
    assert _fresh_status(second, memo) == second  # type: ignore[arg-type]
    other = {"phase": "Failed"}
    assert _fresh_status(other, memo) == other  # type: ignore[arg-type]


def test_an_older_superseded_status_is_stale_too() -> None:
    memo: Any = SimpleNamespace()
    a, b, c = {"phase": "Pending"}, {"phase": "Baselining"}, {"phase": "Optimizing"}
    _remember(memo, a, b)
    _remember(memo, b, c)
    assert _fresh_status(a, memo) == c  # type: ignore[arg-type]
    assert _fresh_status(b, memo) == c  # type: ignore[arg-type]
