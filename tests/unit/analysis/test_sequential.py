"""The sequential benchmark judge: decides, asks for more, stops at the budget, refuses."""

from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.analysis.benchmark import BenchmarkPolicy, LevelSamples
from endpoint_optimizer.analysis.sequential import (
    Outcome,
    SequentialDecision,
    SequentialJudgement,
    judge_sequential,
)
from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.api.spec import TailGating

LATENCY_ONLY = {"ttft_s": 0.10, "tpot_s": 0.10, "e2e_s": 0.10}


def level(
    rng: np.random.Generator,
    n: int,
    factor: float = 1.0,
    concurrency: int = 8,
    elapsed: float | None = None,
    itl: bool = False,
) -> LevelSamples:
    ttft = rng.lognormal(-2.0, 0.3, n) * factor
    tpot = rng.lognormal(-4.0, 0.1, n) * factor
    gaps = [t * rng.gamma(10.0, 0.1, 20) for t in tpot[:200]] if itl else []
    return LevelSamples(
        concurrency=concurrency,
        ttft_s=list(ttft),
        tpot_s=list(tpot),
        e2e_s=list(ttft + 100 * tpot),
        itl_s=[float(g) for request in gaps for g in request],
        itl_request_sizes=[len(request) for request in gaps],
        throughput_tok_s=[
            100.0 / float(np.mean((ttft + 100 * tpot)[i : i + 16])) for i in range(0, n - 15, 16)
        ],
        elapsed_s=elapsed,
    )


def by_name(judgement: SequentialJudgement) -> dict[str, Outcome]:
    return {r.check.name: r.outcome for r in judgement.results}


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.floats(min_value=1e-3, max_value=50.0), min_size=1, max_size=300),
    st.integers(min_value=0, max_value=2**31),
)
def test_identical_samples_never_fail(values: list[float], seed: int) -> None:
    sample = LevelSamples(
        concurrency=4, ttft_s=values, tpot_s=values, e2e_s=values, throughput_tok_s=values
    )
    judgement = judge_sequential([sample], [sample], BenchmarkPolicy(seed=seed), "latency", 0.0)
    assert all(r.outcome is not Outcome.FAIL for r in judgement.results)
    assert all(r.check.verdict is not Verdict.FAIL for r in judgement.results)


def test_a_clearly_faster_candidate_is_decided_and_promotable() -> None:
    rng = np.random.default_rng(1)
    judgement = judge_sequential(
        [level(rng, 2_000)], [level(rng, 2_000, 0.8)], BenchmarkPolicy(), "latency", 0.05
    )
    assert judgement.decision is SequentialDecision.DECIDED
    assert all(r.outcome is Outcome.PASS for r in judgement.results if r.gating)
    objective = next(c for c in judgement.checks if c.name == "objective_latency")
    assert objective.verdict is Verdict.PASS and "improves" in objective.reason
    # The gating list is what status.checks takes; every value there is valid JSON.
    json.dumps([c.dump() for c in judgement.checks], allow_nan=False)


def test_a_twice_as_slow_candidate_fails_and_stops() -> None:
    rng = np.random.default_rng(2)
    judgement = judge_sequential(
        [level(rng, 400)], [level(rng, 400, 2.0)], BenchmarkPolicy(thresholds=LATENCY_ONLY)
    )
    assert judgement.decision is SequentialDecision.DECIDED
    assert by_name(judgement)["ttft_p50@c8"] is Outcome.FAIL
    assert judgement.rounds == ()


def test_a_small_first_round_asks_for_more_within_the_budget() -> None:
    rng = np.random.default_rng(3)
    policy = BenchmarkPolicy(max_requests=500, round_requests=64)
    judgement = judge_sequential([level(rng, 64)], [level(rng, 64, 0.9)], policy, "latency", 0.05)
    assert judgement.decision is SequentialDecision.MEASURE_MORE
    (round_,) = judgement.rounds
    assert round_.concurrency == 8 and 64 <= round_.requests <= 500 - 64
    wanting = [r for r in judgement.results if r.outcome is Outcome.NEED_MORE]
    assert wanting and all(r.more_requests > 0 for r in wanting)
    assert all(
        "more requests" in r.check.reason or "measuring more" in r.check.reason for r in wanting
    )


def test_the_request_budget_ends_the_rounds_with_final_verdicts() -> None:
    rng = np.random.default_rng(4)
    policy = BenchmarkPolicy(max_requests=200, thresholds=LATENCY_ONLY)
    # 4 % slower against a 10 % limit: undecidable on 200 requests.
    judgement = judge_sequential([level(rng, 200)], [level(rng, 200, 1.04)], policy)
    assert judgement.decision is SequentialDecision.BUDGET_SPENT
    assert judgement.rounds == ()
    open_checks = [r for r in judgement.results if r.gating and r.outcome is not Outcome.PASS]
    assert open_checks and all(r.outcome is Outcome.FINAL for r in open_checks)
    assert all(r.check.verdict is Verdict.INCONCLUSIVE for r in open_checks)
    assert any("budget is spent" in r.check.reason for r in open_checks)


def test_the_time_budget_ends_the_rounds_too() -> None:
    rng = np.random.default_rng(5)
    policy = BenchmarkPolicy(max_duration_s=600.0, thresholds=LATENCY_ONLY)
    base = level(rng, 100, elapsed=600.0)
    cand = level(rng, 100, 1.04, elapsed=600.0)
    judgement = judge_sequential([base], [cand], policy)
    assert judgement.decision is SequentialDecision.BUDGET_SPENT
    assert any("time budget" in r.check.reason for r in judgement.results)
    # Half the time left at this pace fits about as many requests again.
    half = judge_sequential(
        [level(rng, 100, elapsed=300.0)], [level(rng, 100, 1.04, elapsed=300.0)], policy
    )
    assert half.rounds and all(r.requests <= 100 for r in half.rounds)


def test_a_tail_quantile_that_cannot_fit_the_budget_is_reported_and_does_not_gate() -> None:
    rng = np.random.default_rng(6)
    policy = BenchmarkPolicy(max_requests=300, thresholds=LATENCY_ONLY)
    judgement = judge_sequential([level(rng, 300)], [level(rng, 300, 0.8)], policy)
    tail = next(r for r in judgement.results if r.check.name == "ttft_p99@c8")
    assert not tail.gating and tail.outcome is Outcome.FINAL
    assert "does not gate" in tail.check.reason and "budget" in tail.check.reason
    assert tail.check.model_copy(update={"gating": False}) in judgement.advisory
    assert tail.check not in judgement.checks
    assert all(not c.gating for c in judgement.advisory)
    assert judgement.decision is SequentialDecision.DECIDED
    always = judge_sequential(
        [level(rng, 300)],
        [level(rng, 300, 0.8)],
        BenchmarkPolicy(max_requests=300, thresholds=LATENCY_ONLY, tail_gating=TailGating.ALWAYS),
    )
    assert next(r for r in always.results if r.check.name == "ttft_p99@c8").gating


def test_a_level_the_guard_marked_invalid_is_never_passed_or_failed() -> None:
    rng = np.random.default_rng(7)
    base = level(rng, 1_000).model_copy(
        update={"valid": False, "invalid_reasons": ["send lag p99 0.8 s exceeds 0.05 s"]}
    )
    judgement = judge_sequential([base], [level(rng, 1_000, 2.0)], BenchmarkPolicy())
    benchmark = [r for r in judgement.results if r.check.kind.value == "benchmark"]
    assert all(r.check.verdict is Verdict.INCONCLUSIVE for r in benchmark)
    assert all("send lag" in r.check.reason and "client" in r.check.reason for r in benchmark)
    assert judgement.decision is SequentialDecision.BUDGET_SPENT


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([math.nan, math.inf, -0.01, 0.0]), st.integers(min_value=0, max_value=99))
def test_broken_samples_are_refused_never_judged(bad: float, where: int) -> None:
    rng = np.random.default_rng(where)
    base = level(rng, 400)
    ttft = list(base.ttft_s)
    ttft[where] = bad
    broken = base.model_copy(update={"ttft_s": ttft})
    judgement = judge_sequential(
        [broken], [level(rng, 400, 3.0)], BenchmarkPolicy(thresholds=LATENCY_ONLY)
    )
    ttft_checks = [r for r in judgement.results if r.check.name.startswith("ttft_")]
    assert all(r.check.verdict is Verdict.INCONCLUSIVE for r in ttft_checks)
    assert all(r.outcome is Outcome.FINAL for r in ttft_checks)
    assert all("baseline ttft" in r.check.reason for r in ttft_checks)


def test_an_objective_shown_out_of_reach_stops_with_no_improvement() -> None:
    rng = np.random.default_rng(8)
    judgement = judge_sequential(
        [level(rng, 1_000)], [level(rng, 1_000)], BenchmarkPolicy(), "latency", 0.2
    )
    assert judgement.decision is SequentialDecision.DECIDED
    objective = next(c for c in judgement.checks if c.name == "objective_latency")
    assert objective.verdict is Verdict.NO_IMPROVEMENT and "cannot reach" in objective.reason


def test_itl_is_advisory_and_judged_on_requests_once_the_rest_is_decided() -> None:
    rng = np.random.default_rng(9)
    base, cand = level(rng, 1_500, itl=True), level(rng, 1_500, 0.8, itl=True)
    judgement = judge_sequential([base], [cand], BenchmarkPolicy(), "latency", 0.05)
    itl = [r for r in judgement.results if r.check.name.startswith("itl_")]
    assert itl and all(not r.gating for r in itl)
    assert all("cluster bootstrap" in r.check.rule for r in itl)
    assert all(r.check.verdict is Verdict.PASS for r in itl)
    early = judge_sequential(
        [level(rng, 64, itl=True)], [level(rng, 64, 0.9, itl=True)], BenchmarkPolicy(), "latency"
    )
    assert early.decision is SequentialDecision.MEASURE_MORE
    assert all(
        "when the gating checks are through" in r.check.reason
        for r in early.results
        if r.check.name.startswith("itl_")
    )


def test_a_level_measured_on_one_side_only_is_inconclusive() -> None:
    rng = np.random.default_rng(10)
    judgement = judge_sequential(
        [level(rng, 300), level(rng, 300, concurrency=16)], [level(rng, 300)], BenchmarkPolicy()
    )
    lonely = next(r for r in judgement.results if r.check.name == "level@c16")
    assert lonely.gating and lonely.check.verdict is Verdict.INCONCLUSIVE


def test_checks_at_the_limit_rarely_pass_or_fail_under_optional_stopping() -> None:
    """Looking after every round keeps each check's error at the margin within alpha / m."""
    wrong = 0
    policy = BenchmarkPolicy(thresholds={"ttft_s": 0.10}, max_requests=1_500)
    for seed in range(30):
        rng = np.random.default_rng(100 + seed)
        base = rng.lognormal(0.0, 0.5, 1_500)
        cand = rng.lognormal(0.0, 0.5, 1_500) * 1.10
        n = 64
        while True:
            judgement = judge_sequential(
                [LevelSamples(concurrency=1, ttft_s=list(base[:n]))],
                [LevelSamples(concurrency=1, ttft_s=list(cand[:n]))],
                policy,
            )
            if any(r.outcome in (Outcome.PASS, Outcome.FAIL) for r in judgement.results):
                wrong += 1
                break
            if judgement.decision is not SequentialDecision.MEASURE_MORE:
                break
            n = min(1_500, n + judgement.rounds[0].requests)
    assert wrong <= 1


def test_every_objective_metric_is_decided_on_its_statistic() -> None:
    # The candidate's tokens 25 % faster and its first token unchanged.
    rng = np.random.default_rng(7)
    base, cand = level(rng, 2_000), level(rng, 2_000)
    cand = cand.model_copy(update={"tpot_s": [t * 0.75 for t in cand.tpot_s]})
    cand = cand.model_copy(
        update={
            "e2e_s": [f + 100 * t for f, t in zip(cand.ttft_s, cand.tpot_s, strict=True)],
            "throughput_tok_s": [v / 0.78 for v in cand.throughput_tok_s],
        }
    )
    verdicts = {}
    for metric in ("itlP50", "e2eP50", "ttftP99", "throughput", "costPerMillionTokens"):
        judgement = judge_sequential([base], [cand], BenchmarkPolicy(), metric, 0.1)
        check = next(c for c in judgement.checks if c.name == f"objective_{metric}")
        verdicts[metric] = check.verdict
        if metric == "costPerMillionTokens":
            assert check.unit == "s/Mtok" and check.candidate < check.baseline
    assert verdicts["itlP50"] is Verdict.PASS
    assert verdicts["e2eP50"] is Verdict.PASS
    assert verdicts["throughput"] is Verdict.PASS
    assert verdicts["costPerMillionTokens"] is Verdict.PASS
    assert verdicts["ttftP99"] is not Verdict.PASS
