"""benchmark.slo's latency limits gate a comparison (pipeline/assess.py `slo_gates`), and a
cost objective judges them instead of relative speed."""

from __future__ import annotations

import copy
from typing import Any

from endpoint_optimizer.analysis.benchmark import THROUGHPUT_METRIC
from endpoint_optimizer.api import parse_spec
from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.pipeline.assess import (
    live_policy,
    next_rounds,
    sequential_policy,
    slo_gates,
)
from tests.property.world import BASELINE_LATENCY_S, bench_report
from tests.unit.pipeline.test_search_status import BASE


def _spec(
    metric: str = "latency", e2e_ms: float = 10_000.0, judge: str = "sequential", **analysis: Any
) -> Any:
    body = copy.deepcopy(BASE)
    body["objective"] = {"metric": metric, "minImprovement": 0.1}
    body["benchmark"] = {"concurrency": [4], "slo": {"e2eP99Ms": e2e_ms}, "judge": judge}
    if analysis:
        body["rollout"] = {"analysis": analysis}
    return parse_spec(body)


def test_a_decided_limit_gates_and_an_undecided_one_only_informs() -> None:
    few = bench_report("cand", [4], 100, failed=False)
    (undecided,) = slo_gates(_spec(), few)
    assert undecided.verdict is Verdict.INCONCLUSIVE and undecided.gating is False
    # The sequential judge's rounds: bounds valid at every n need more requests than a
    # fixed-n bound (429 against 299 at alpha 0.05).
    assert "at least 429 requests (100 measured)" in undecided.reason
    assert "confidence-sequence" in undecided.rule
    (fixed,) = slo_gates(_spec(judge="fixed"), few)
    assert "at least 299 requests (100 measured)" in fixed.reason
    assert "order-statistic" in fixed.rule
    (between,) = slo_gates(_spec(), bench_report("cand", [4], 400, failed=False))
    assert between.verdict is Verdict.INCONCLUSIVE
    (between_fixed,) = slo_gates(_spec(judge="fixed"), bench_report("cand", [4], 400, failed=False))
    assert between_fixed.verdict is Verdict.PASS
    many = bench_report("cand", [4], 600, failed=False)
    (passed,) = slo_gates(_spec(), many)
    assert passed.verdict is Verdict.PASS and passed.gating is True
    # Every request takes about BASELINE_LATENCY_S: a limit below it fails, and gates.
    (failed,) = slo_gates(_spec(e2e_ms=BASELINE_LATENCY_S * 500), many)
    assert failed.verdict is Verdict.FAIL and failed.gating is True


def test_a_cost_objective_gates_on_its_limits_and_not_on_relative_speed() -> None:
    few = bench_report("cand", [4], 100, failed=False)
    (undecided,) = slo_gates(_spec("costPerMillionTokens"), few)
    assert undecided.verdict is Verdict.INCONCLUSIVE and undecided.gating is True
    assert sequential_policy(_spec("costPerMillionTokens")).thresholds == {}
    assert THROUGHPUT_METRIC in sequential_policy(_spec()).thresholds


def test_the_live_judge_takes_the_latency_margin_the_spec_allows() -> None:
    assert live_policy(_spec()).latency_margin == 0.0
    assert live_policy(_spec(latencyMargin=0.5)).latency_margin == 0.5


def test_a_cost_objective_measures_on_until_its_limits_are_decided() -> None:
    """The sequential judge is through (cost halves on an instance half the price), but a
    p99 bound valid at every n needs 429 requests: more rounds, not a person."""
    cost = _spec("costPerMillionTokens")
    base, few = bench_report("base", [4], 100, False), bench_report("cand", [4], 100, False)
    (more,) = next_rounds(cost, [base], [few], cost_ratio=0.5)
    assert more.concurrency == 4 and more.requests >= 100, more
    assert "slo_e2e_p99@c4 undecided" in more.reason
    # Decided limits, or a latency objective (whose limits only inform undecided): none.
    many = bench_report("cand", [4], 600, False)
    assert next_rounds(cost, [bench_report("base", [4], 600, False)], [many], cost_ratio=0.5) == ()
    assert next_rounds(_spec(), [base], [few]) == ()
    # No gain to pay for: the limits would not change the outcome.
    assert next_rounds(cost, [base], [few], cost_ratio=1.0) == ()
