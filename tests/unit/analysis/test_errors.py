"""Errors judged as evidence: exact tests against scipy, and the verdicts they give."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from endpoint_optimizer.analysis.errors import (
    error_rate_check,
    fisher_greater,
    lower_bound,
    unmeasured,
)
from endpoint_optimizer.api import Verdict


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 60), st.integers(1, 60), st.integers(0, 60), st.integers(1, 60))
def test_fisher_matches_scipy(a_err: int, a_ok: int, b_err: int, b_ok: int) -> None:
    ours = fisher_greater(a_err, a_err + a_ok, b_err, b_err + b_ok)
    _, theirs = stats.fisher_exact([[a_err, a_ok], [b_err, b_ok]], alternative="greater")
    assert abs(ours - theirs) < 1e-9


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 200), st.data())
def test_the_lower_bound_is_clopper_pearson(total: int, data: st.DataObject) -> None:
    errors = data.draw(st.integers(1, total))
    expected = stats.beta.ppf(0.05, errors, total - errors + 1)
    assert abs(lower_bound(errors, total, 0.05) - expected) < 1e-6


def test_a_candidate_failing_every_request_fails() -> None:
    check = error_rate_check("errors@c4", 0, 32, 32, 32)
    assert check.verdict is Verdict.FAIL
    assert "32/32" in check.reason


def test_no_errors_anywhere_is_a_pass_never_inconclusive() -> None:
    assert error_rate_check("errors@c4", 0, 32, 0, 32).verdict is Verdict.PASS


def test_one_more_error_in_a_few_hundred_is_not_held_against_the_candidate() -> None:
    assert error_rate_check("errors@c8", 1, 300, 2, 300).verdict is Verdict.PASS


def test_the_slo_fails_a_candidate_above_it_with_confidence() -> None:
    # 8 % failed on both sides: no worse than the baseline, but above a 2 % SLO.
    check = error_rate_check("errors@c8", 40, 500, 40, 500, max_error_rate=0.02)
    assert check.verdict is Verdict.FAIL and check.threshold == 0.02
    # 3 % observed on 100 requests is not above 2 % with confidence.
    assert error_rate_check("errors@c8", 3, 100, 3, 100, 0.02).verdict is Verdict.PASS


def test_a_candidate_with_no_request_completed_fails() -> None:
    assert error_rate_check("errors@c8", 0, 32, 0, 0).verdict is Verdict.FAIL


def test_a_level_made_mostly_of_errors_measured_nothing() -> None:
    assert unmeasured(32, 32)
    assert unmeasured(20, 32)
    assert unmeasured(0, 0)
    assert unmeasured(1, 32) == ""
