"""Live acceptance: vLLM's log lines as counters, the per-interval estimate, the check."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.analysis.live import (
    LiveObservation,
    LivePolicy,
    VariantInterval,
    judge_interval,
)
from endpoint_optimizer.analysis.live_acceptance import (
    CHECK_NAME,
    acceptance_live_check,
    estimate,
    wilson,
)
from endpoint_optimizer.analysis.speclog import (
    CounterForm,
    SpecCounts,
    SpecLine,
    interval_counts,
    parse_line,
)
from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.api.live import LiveDecision, LiveState

# Verbatim lines as vLLM prints them (V1: vllm/v1/spec_decode/metrics.py; V0:
# vllm/engine/metrics.py), with the prefixes a CloudWatch stream keeps.
V1 = (
    "(APIServer pid=347228) INFO 08-04 20:51:08 [metrics.py:120] SpecDecoding metrics: "
    "Mean acceptance length: 3.49, Accepted throughput: 0.12 tokens/s, Drafted throughput: "
    "0.34 tokens/s, Accepted: 92 tokens, Drafted: 259 tokens, Per-position acceptance rate: "
    "0.757, 0.622, 0.432, 0.324, 0.189, 0.108, 0.054, Avg Draft acceptance rate: 35.5%"
)
V1_EARLY = (
    "INFO 05-12 10:00:00 [metrics.py:88] SpecDecoding metrics: Draft acceptance rate: 62.5%, "
    "Mean acceptance length: 2.88, Accepted: 150 tokens, Drafted: 240 tokens, "
    "Per-position acceptance rate: 0.800, 0.650, 0.425"
)
V0 = (
    "INFO 11-04 09:12:01 metrics.py:455] Speculative metrics: Draft acceptance rate: 0.512, "
    "System efficiency: 0.433, Number of speculative tokens: 5, Number of accepted tokens: "
    "1234, Number of draft tokens: 2410, Number of emitted tokens: 2000."
)
LMI = "INFO  PyProcess W-195-model-stdout: " + V1.split(") ", 1)[1]
START = datetime(2026, 1, 1, tzinfo=UTC)


def test_v1_line_gives_its_counters_not_its_ratios() -> None:
    line = parse_line("AllTraffic/i-0abc", 1000, V1)
    assert line == SpecLine("AllTraffic/i-0abc", 1000, 92, 259, CounterForm.INTERVAL)
    early = parse_line("s", 1, V1_EARLY)
    assert early is not None and (early.accepted, early.drafted) == (150, 240)
    lmi = parse_line("s", 1, LMI)
    assert lmi is not None and (lmi.accepted, lmi.drafted) == (92, 259)


def test_v0_line_is_a_running_total_differenced_per_stream() -> None:
    line = parse_line("s", 1, V0)
    assert line is not None and line.form is CounterForm.CUMULATIVE
    assert (line.accepted, line.drafted, line.speculative_tokens) == (1234, 2410, 5)
    later = SpecLine("s", 2, 1300, 2510, CounterForm.CUMULATIVE, 5)
    counts, totals = interval_counts([line, later], {})
    assert [(c.accepted, c.drafted) for c in counts] == [(66, 100)]
    # The next read starts from the stored total; a total that drops is a restarted engine.
    restarted = SpecLine("s", 3, 10, 40, CounterForm.CUMULATIVE, 5)
    counts, _ = interval_counts([restarted], totals)
    assert [(c.accepted, c.drafted) for c in counts] == [(10, 40)]


def test_other_lines_are_not_speculative_metrics() -> None:
    assert parse_line("s", 1, "INFO Avg prompt throughput: 93.9 tokens/s") is None
    assert parse_line("s", 1, "SpecDecoding metrics: Mean acceptance length: 2.1") is None


def test_estimate_counts_drafts_not_tokens() -> None:
    counts = [SpecCounts("s", 1, 300, 500)]
    found = estimate(counts, tokens_per_step=5, alpha=0.01)
    assert found.rate == 0.6 and found.effective_samples == 100
    token_level = wilson(0.6, 500, 2.326)
    assert found.low is not None and found.high is not None
    assert found.high - found.low > 1.9 * (token_level[1] - token_level[0])


def test_lines_that_disagree_widen_the_interval() -> None:
    steady = [SpecCounts("s", i, 60, 100) for i in range(6)]
    swinging = [SpecCounts("s", i, 10 if i % 2 else 110, 100 if i % 2 else 140) for i in range(6)]
    a = estimate(steady, 1, 0.01)
    b = estimate(swinging, 1, 0.01)
    assert a.low is not None and a.high is not None and b.low is not None and b.high is not None
    assert (b.high - b.low) > 2 * (a.high - a.low)


def test_check_fails_only_when_the_upper_bound_is_below_the_floor() -> None:
    low = estimate([SpecCounts("s", 1, 200, 1000)], 5, 0.01)
    near = estimate([SpecCounts("s", 1, 37, 100)], 5, 0.01)
    fine = estimate([SpecCounts("s", 1, 700, 1000)], 5, 0.01)
    assert acceptance_live_check(low, 0.4, 50, True, 0.01).verdict is Verdict.FAIL
    # 0.37 over 20 drafts: below the floor, but not confidently.
    assert acceptance_live_check(near, 0.4, 50, True, 0.01).verdict is Verdict.PASS
    assert acceptance_live_check(fine, 0.4, 50, True, 0.01).verdict is Verdict.PASS
    few = acceptance_live_check(near, 0.4, 200, True, 0.01)
    assert few.verdict is Verdict.INCONCLUSIVE and not few.gating
    alert = acceptance_live_check(low, 0.4, 50, False, 0.01)
    assert alert.verdict is Verdict.FAIL and not alert.gating


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 2000), st.floats(0.0, 1.0)).map(
            lambda t: (round(t[0] * t[1]), t[0])
        ),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 8),
)
def test_bounds_hold_the_rate_within_zero_and_one(
    lines: list[tuple[int, int]], tokens_per_step: int
) -> None:
    counts = [SpecCounts("s", i, a, d) for i, (a, d) in enumerate(lines)]
    found = estimate(counts, tokens_per_step, 0.01)
    assert found.rate is not None and found.low is not None and found.high is not None
    assert 0.0 <= found.low <= found.rate <= found.high <= 1.0
    assert found.drafted == sum(d for _, d in lines)
    assert found.accepted == sum(a for a, _ in lines)


def _interval(minute: int, accepted: int, drafted: int, lines: int = 4) -> LiveObservation:
    per_a, per_d = accepted // lines, drafted // lines
    stamp = int((START + timedelta(minutes=minute)).timestamp() * 1000)
    spec = [
        SpecLine(f"v/i-{i}", stamp - 1000 * i, per_a, per_d, CounterForm.INTERVAL)
        for i in range(lines)
    ]
    return LiveObservation(
        interval_end=START + timedelta(minutes=minute),
        baseline=VariantInterval(invocations=0),
        candidate=VariantInterval(invocations=0, spec_lines=spec),
    )


POLICY = LivePolicy(acceptance_floor=0.4, speculative_tokens=5, failure_limit=2)


def test_judge_rolls_back_after_failure_limit_intervals_below_the_floor() -> None:
    state = LiveState()
    decisions = []
    for minute in (1, 2):
        judged = judge_interval(state, _interval(minute, 400, 2000), POLICY, START)
        state = judged.state
        decisions.append(judged.decision)
        check = next(c for c in judged.checks if c.name == CHECK_NAME)
        assert check.verdict is Verdict.FAIL
    assert decisions[-1] is LiveDecision.ROLLBACK
    assert state.candidate_acceptance is not None and state.candidate_acceptance.rate == 0.2
    assert state.acceptance_below_floor == 2


def test_judge_alert_policy_reports_without_failing() -> None:
    policy = POLICY.model_copy(update={"acceptance_gates": False})
    state = LiveState()
    for minute in (1, 2, 3):
        judged = judge_interval(state, _interval(minute, 400, 2000), policy, START)
        state = judged.state
    assert state.failures == 0 and state.acceptance_below_floor == 3
    assert judged.decision is not LiveDecision.ROLLBACK


def test_healthy_acceptance_never_fails_across_many_intervals() -> None:
    rng = np.random.default_rng(3)
    state = LiveState()
    for minute in range(1, 200):
        drafted = 2000
        accepted = int(rng.binomial(drafted // 5, 0.45)) * 5
        state = judge_interval(state, _interval(minute, accepted, drafted), POLICY, START).state
    assert state.acceptance_below_floor <= 2
