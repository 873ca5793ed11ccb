"""The acceptance-rate gate."""

from __future__ import annotations

import pytest

from endpoint_optimizer.analysis.acceptance import AcceptanceSource, acceptance_check
from endpoint_optimizer.api.checks import Verdict


def test_below_floor_fails_with_value_and_source_in_the_reason() -> None:
    check = acceptance_check(0.2, "black-box estimate")
    assert check.verdict is Verdict.FAIL
    assert "0.20" in check.reason and "black-box estimate" in check.reason
    assert check.threshold == 0.4 and check.source == "black-box estimate"


def test_at_or_above_floor_passes() -> None:
    assert acceptance_check(0.4, AcceptanceSource.SERVER_COUNTERS).verdict is Verdict.PASS
    assert acceptance_check(0.63, "server counters", floor=0.5).verdict is Verdict.PASS


def test_unknown_rate_is_inconclusive() -> None:
    assert acceptance_check(None, "server counters").verdict is Verdict.INCONCLUSIVE


@pytest.mark.parametrize("value", [1.5, -0.1, float("inf"), float("-inf")])
def test_a_rate_that_is_not_a_rate_is_refused_not_judged(value: float) -> None:
    check = acceptance_check(value, "server counters")
    assert check.verdict is Verdict.INCONCLUSIVE
    assert "not in [0, 1]" in check.reason and "re-measure" in check.reason


def test_an_unknown_source_is_rejected() -> None:
    with pytest.raises(ValueError):
        acceptance_check(0.5, "guess")
