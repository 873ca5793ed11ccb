"""The rollout report in a real browser: nothing clipped or past the page at common widths."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from endpoint_optimizer.api import (
    HistoryEntry,
    LevelMeasurement,
    OptimizedEndpointStatus,
    Phase,
    SageMakerResources,
    VariantMeasurements,
)
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.report import render_report

from .layout import chromium, measure

pytestmark = pytest.mark.skipif(chromium() is None, reason="Chromium is not installed")

WIDTHS = (1280, 768)
LONG_NAME = "ml-llama-3-1-8b-instruct-support-chat-rollout-g12-b7a488c2d4e5f6a7b8c9"


def level(concurrency: int, scale: float, tokens: float) -> LevelMeasurement:
    return LevelMeasurement(
        concurrency=concurrency,
        requests=160,
        ttft_p50_ms=210.0 * scale,
        ttft_p90_ms=260.0 * scale,
        ttft_p99_ms=1330.0 * scale,
        itl_p50_ms=21.0 * scale,
        itl_p90_ms=24.0 * scale,
        itl_p99_ms=30.0 * scale,
        e2e_p50_ms=5600.0 * scale,
        e2e_p90_ms=5900.0 * scale,
        e2e_p99_ms=16400.0 * scale,
        output_tokens_per_second=tokens,
    )


def crowded_resource() -> dict[str, Any]:
    """Everything at its widest: long names and messages, values at the edges of the gauges."""
    start = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    long_message = (
        f"candidate {LONG_NAME} serves all traffic; baseline config {LONG_NAME}-baseline kept "
        "for rollback until 2026-11-29T13:02:00Z (rollout.baselineRetention 1h); "
        + "the canary finished its last step and the candidate was promoted "
        * 4
    )
    checks = [
        Check(
            name=f"{metric}_p99@c{c}",
            kind=CheckKind.BENCHMARK,
            verdict=verdict,
            baseline=1330.0,
            candidate=1010.123456,
            threshold=1.1,
            unit="ms",
            threshold_unit="ratio",
            interval_low=0.712345,
            interval_high=0.987654,
            samples=160,
            rule="two-sided 95 % percentile-bootstrap interval of the candidate/baseline p99 "
            "ratio; Pass when it lies below 1.100, Fail when entirely above",
            reason=f"{metric} p99 at concurrency {c}: {LONG_NAME} is 24.1 % lower "
            "(interval 0.712 to 0.988 of the baseline)",
        )
        for metric in ("ttft", "itl", "e2e")
        for c in (1, 16)
        for verdict in (Verdict.PASS, Verdict.INCONCLUSIVE)
    ]
    status = OptimizedEndpointStatus(
        phase=Phase.SUCCEEDED,
        message=long_message,
        objective_gain=0.2294,
        candidate_techniques=["quantization:fp8", "speculativeDecoding:ngram"],
        baseline=VariantMeasurements(
            levels=[level(1, 1.0, 114.7), level(16, 1.4, 1327.0)],
            eval_score=1.0,
            refusal_rate=0.0,
            eval_items=240,
        ),
        candidate=VariantMeasurements(
            levels=[level(1, 0.7, 160.2), level(16, 0.9, 2011.0)],
            acceptance_rate=0.99,
            acceptance_source="server counters (vLLM spec_decode metrics)",
            eval_score=0.995,
            refusal_rate=1.0,
            eval_items=240,
        ),
        checks=checks,
        sagemaker=SageMakerResources(endpoint_name=LONG_NAME, serving_endpoint_config=LONG_NAME),
        history=[
            HistoryEntry(
                time=start + timedelta(seconds=7 * i),
                phase=Phase.ANALYZING,
                event=f"CandidateCompared{i}",
                message=long_message[:1000],
            )
            for i in range(30)
        ],
    )
    return {
        "apiVersion": "optimizer.dev/v1alpha1",
        "kind": "OptimizedEndpoint",
        "metadata": {"name": LONG_NAME[:60], "namespace": "machine-learning-production"},
        "spec": {
            "endpointName": LONG_NAME,
            "objective": {"metric": "latency", "minImprovement": 0.1, "concurrency": 16},
            "benchmark": {"concurrency": [1, 16]},
            "optimizations": {
                "speculativeDecoding": {"method": "ngram", "minAcceptanceRate": 0.99}
            },
            "evaluation": {"maxAbsoluteDrop": 0.001},
            "rollout": {
                "steps": [{"weight": 10}, {"weight": 50}],
                "analysis": {"onNoData": "pass"},
            },
        },
        "status": status.dump(),
    }


@pytest.mark.parametrize("width", WIDTHS)
def test_nothing_is_clipped_or_past_the_page_at_common_widths(width: int) -> None:
    layout = measure(render_report(crowded_resource()), width)
    assert layout["width"] == width
    # Measured something: every picture's labels, every element of the page.
    assert layout["svgTexts"] > 50 and layout["elements"] > 200
    assert layout["problems"] == []


def test_the_measurement_finds_what_overflows() -> None:
    # The same probe on a page built to overflow: a wide picture and a label past its edge.
    broken = (
        "<!doctype html><html><body><div style='width:2000px'>wide</div>"
        "<svg viewBox='0 0 100 20' width='100' height='20'><text x='90' y='15'>clipped label"
        "</text></svg><table style='width:100px;table-layout:fixed'><tr><td>"
        "unbreakable_identifier_much_wider_than_its_cell</td></tr></table></body></html>"
    )
    problems = measure(broken, 768)["problems"]
    assert any("scrolls sideways" in p for p in problems)
    assert any("clipped by its picture" in p and "clipped label" in p for p in problems)
    assert any("wider than its box" in p for p in problems)


def test_figures_are_labelled_and_the_objective_is_in_words() -> None:
    page = render_report(crowded_resource())
    assert "at least 10% faster than the baseline, at concurrency 16" in page
    assert '{"metric"' not in page and "{&quot;metric" not in page
    # Which throughput is which: per concurrency, all requests together.
    assert "Throughput at concurrency 16: output tokens/s of 16 requests in flight together" in page
    assert "Throughput at concurrency 1: output tokens/s of 1 request at a time" in page
    assert "one request's own speed" in page
    # Inconclusive is never called passed.
    assert "6 passed, 6 inconclusive" in page
    assert "every check passed" not in page.split("<h2>")[0]
    assert "onNoData: pass let the rollout go on without them" in page
    assert "lowest allowed score 0.999" in page
