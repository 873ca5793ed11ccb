"""Probes are judged when CloudWatch has too few invocations; no traffic never divides."""

from __future__ import annotations

from datetime import UTC, datetime

from endpoint_optimizer.analysis.live import (
    LiveObservation,
    LivePolicy,
    ProbeSamples,
    VariantInterval,
    judge_interval,
)
from endpoint_optimizer.api import LiveState

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def probes(ttft: float, n: int = 12) -> ProbeSamples:
    return ProbeSamples(
        requests=n,
        ttft_s=[ttft * (1 + 0.01 * i) for i in range(n)],
        tpot_s=[ttft / 10 * (1 + 0.01 * i) for i in range(n)],
        input_tokens=32,
        output_tokens=8,
    )


def test_probes_alone_are_judged_when_cloudwatch_has_no_invocations() -> None:
    observation = LiveObservation(
        interval_end=NOW,
        baseline=VariantInterval(invocations=0, probes=probes(0.1)),
        candidate=VariantInterval(invocations=0, probes=probes(0.4)),
    )
    judgement = judge_interval(LiveState(), observation, LivePolicy(min_invocations=5), NOW)
    names = {c.name: c for c in judgement.checks}
    assert "live_latency" in names, [c.name for c in judgement.checks]
    assert names["live_errors_5xx"].verdict.value == "Pass"


def test_too_few_invocations_without_probes_is_no_data() -> None:
    observation = LiveObservation(
        interval_end=NOW,
        baseline=VariantInterval(invocations=2, latency_mean_s=0.1),
        candidate=VariantInterval(invocations=2, latency_mean_s=0.4),
    )
    judgement = judge_interval(LiveState(), observation, LivePolicy(min_invocations=5), NOW)
    assert all(c.name != "live_latency" for c in judgement.checks)
