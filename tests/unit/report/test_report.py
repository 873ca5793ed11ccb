"""The rollout report is self-contained HTML that shows what the status holds."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from endpoint_optimizer.api import (
    ColdStartPart,
    EvalNoise,
    HistoryEntry,
    LevelMeasurement,
    OptimizedEndpointStatus,
    Phase,
    ScaleToZero,
    VariantMeasurements,
)
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.report import render_report, report_command


def _resource(message: str = "Rolled back: acceptance below floor") -> dict[str, Any]:
    start = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    status = OptimizedEndpointStatus(
        phase=Phase.ROLLED_BACK,
        message=message,
        baseline=VariantMeasurements(
            variant_name="baseline",
            levels=[
                LevelMeasurement(
                    concurrency=16,
                    requests=160,
                    ttft_p50_ms=210.0,
                    ttft_p90_ms=260.0,
                    ttft_p99_ms=330.0,
                    itl_p50_ms=21.0,
                    itl_p90_ms=24.0,
                    itl_p99_ms=30.0,
                    e2e_p50_ms=5600.0,
                    e2e_p90_ms=5900.0,
                    e2e_p99_ms=6400.0,
                    output_tokens_per_second=690.0,
                )
            ],
            eval_score=0.82,
            refusal_rate=0.01,
            eval_items=240,
        ),
        candidate=VariantMeasurements(
            variant_name="candidate",
            levels=[
                LevelMeasurement(
                    concurrency=16,
                    requests=160,
                    ttft_p50_ms=190.0,
                    ttft_p90_ms=240.0,
                    ttft_p99_ms=300.0,
                    itl_p50_ms=25.0,
                    itl_p90_ms=29.0,
                    itl_p99_ms=36.0,
                    output_tokens_per_second=610.0,
                )
            ],
            acceptance_rate=0.21,
            acceptance_source="server counters",
            eval_score=0.81,
            refusal_rate=0.01,
            eval_items=240,
        ),
        checks=[
            Check(
                name="acceptance_rate",
                kind=CheckKind.ACCEPTANCE,
                verdict=Verdict.FAIL,
                candidate=0.21,
                threshold=0.4,
                unit="ratio",
                samples=160,
                rule="acceptance rate >= minAcceptanceRate",
                reason="acceptance 0.21 (server counters) is below the floor 0.40",
            ),
            Check(
                name="ttft_p99@c16",
                kind=CheckKind.BENCHMARK,
                verdict=Verdict.PASS,
                baseline=330.0,
                candidate=300.0,
                threshold=1.1,
                unit="ms",
                interval_low=0.85,
                interval_high=0.97,
                samples=160,
                rule="bootstrap 95% CI of the p99 ratio below 1.10",
                reason="p99 TTFT 9% lower",
            ),
        ],
        history=[
            HistoryEntry(time=start, phase=Phase.BASELINING, event="Baselined", message="ok"),
            HistoryEntry(
                time=start + timedelta(seconds=90),
                phase=Phase.ROLLED_BACK,
                event="RolledBack",
                message=message,
            ),
        ],
    )
    return {
        "apiVersion": "optimizer.dev/v1alpha1",
        "kind": "OptimizedEndpoint",
        "metadata": {"name": "chat", "namespace": "ml"},
        "spec": {
            "optimizations": {"speculativeDecoding": {"method": "ngram", "minAcceptanceRate": 0.4}},
            "evaluation": {"maxAbsoluteDrop": 0.01},
        },
        "status": status.dump(),
    }


def test_report_shows_each_check_its_verdict_and_the_pictures() -> None:
    page = render_report(_resource())
    assert page.startswith("<!doctype html>")
    for text in ("acceptance_rate", "below the floor 0.40", "ttft_p99@c16", "RolledBack"):
        assert text in page
    assert page.count("<svg") >= 5  # 3 latency panels + throughput + acceptance + eval + timeline
    assert "floor 0.40" in page
    assert "-1.00 points on 240 paired items" in page


def test_report_shows_the_eval_sets_a_a_noise_next_to_the_margin() -> None:
    resource = _resource()
    assert "A/A noise" not in render_report(resource)
    resource["status"]["evalNoise"] = EvalNoise(
        items=200,
        eval_items=240,
        discordant=6,
        discordance_high=0.058,
        difference=0.0,
        interval_low=-0.021,
        interval_high=0.021,
        unchanged_bound=-0.024,
    ).dump()
    page = render_report(resource)
    assert "A/A noise (baseline asked 200 items twice): 6 scored differently" in page
    assert "bound at -2.40 points over 240 items against the margin -1.0" in page
    assert "the margin is inside the noise, add items" in page


def test_report_is_self_contained_and_escapes_what_it_shows() -> None:
    page = render_report(_resource(message="<script>alert(1)</script>"))
    assert "<script>" not in page
    assert "&lt;script&gt;" in page
    urls = set(re.findall(r"(?:src|href)=['\"]([^'\"]+)", page))
    assert urls == set(), f"external references: {urls}"


def test_report_of_a_fresh_resource_says_nothing_is_measured_yet() -> None:
    page = render_report({"kind": "OptimizedEndpoint", "metadata": {"name": "new"}, "spec": {}})
    assert "Not measured yet" in page
    assert "No checks yet" in page


def test_cli_writes_the_report_from_a_file(tmp_path: Path) -> None:
    source = tmp_path / "chat.json"
    source.write_text(json.dumps(_resource()))
    target = tmp_path / "out.html"
    result = CliRunner().invoke(report_command, ["-f", str(source), "-o", str(target)])
    assert result.exit_code == 0, result.output
    assert "acceptance_rate" in target.read_text()


def test_cli_refuses_something_that_is_not_an_optimized_endpoint(tmp_path: Path) -> None:
    source = tmp_path / "cm.json"
    source.write_text(json.dumps({"kind": "ConfigMap", "metadata": {"name": "x"}}))
    result = CliRunner().invoke(report_command, ["-f", str(source)])
    assert result.exit_code != 0
    assert "not an OptimizedEndpoint" in result.output


def test_report_shows_the_chosen_cutoff_its_levels_and_the_switch() -> None:
    from endpoint_optimizer.api import CutoffLevel, CutoffOutcome, SpeculationCutoff

    resource = _resource()
    status = OptimizedEndpointStatus.model_validate(resource["status"])
    status.rollout.speculation_cutoff = SpeculationCutoff(
        at=datetime(2026, 11, 29, 12, 5, tzinfo=UTC),
        metric="tpot_p50",
        concurrency=4,
        batch_size=4,
        levels=[
            CutoffLevel(concurrency=4, outcome=CutoffOutcome.WINS, ratio_low=0.6, ratio_high=0.8),
            CutoffLevel(concurrency=48, outcome=CutoffOutcome.LOSES, ratio_low=1.1, ratio_high=1.3),
        ],
        reason="speculation wins up to c4 and loses from c48",
        switch="OPTION_SPECULATIVE_CONFIG num_speculative_tokens_per_batch_size: no drafts above 4",
        model="ml-chat-cutoff-g1-abc",
        endpoint_config="ml-chat-cutoff-rollout-g1-abc",
    )
    resource["status"] = status.dump()
    html = render_report(resource)
    assert "Where speculation pays" in html
    assert "c4 (4 running requests per instance)" in html
    assert "c4 Wins [0.6, 0.8], c48 Loses [1.1, 1.3]" in html
    assert "num_speculative_tokens_per_batch_size" in html
    assert "ml-chat-cutoff-g1-abc on ml-chat-cutoff-rollout-g1-abc (update under way)" in html


def test_report_compares_always_on_with_scale_to_zero_and_says_what_was_measured() -> None:
    at = datetime(2026, 12, 3, 2, 0, tzinfo=UTC)
    resource = {
        "apiVersion": "optimizer.dev/v1alpha1",
        "kind": "OptimizedEndpoint",
        "metadata": {"name": "chat", "namespace": "ml"},
        "spec": {"endpointName": "chat", "inferenceComponent": {"name": "chat-ic"}},
        "status": OptimizedEndpointStatus(
            phase=Phase.SUCCEEDED,
            scale_to_zero=ScaleToZero(
                cold_start_seconds=312.5,
                cold_start_measured=[ColdStartPart.COMPONENT_START],
                window_start=at,
                window_minutes=60,
                requests_in_window=30,
                instances=2,
                idle_release_minutes=15,
                always_on_instance_hours_per_day=48,
                scale_to_zero_instance_hours_per_day=12.8,
                cold_starts_per_day=24,
                requests_meeting_cold_start_per_day=720,
                measured_at=at + timedelta(hours=1),
            ),
        ).model_dump(mode="json", by_alias=True, exclude_none=True),
    }
    page = render_report(resource)
    assert "Scale to zero, compared" in page
    assert "48 instance-hours/day" in page and "12.8 instance-hours/day" in page
    assert "24/day, meeting 720 requests/day" in page
    # Only the component's start was measured: the report says the figure is a lower bound.
    assert "componentStart" in page and "lower bound" in page


def _search_resource() -> dict[str, Any]:
    resource = _resource()
    rows = [
        {"name": "fp8", "rung": "quantization", "verdict": "Beaten", "measured": True,
         "gates": True, "improves": True,
         "gain": 0.42, "gainLow": 0.41, "tokensPerSecond": 262.0, "latencyMs": 432.0,
         "instanceHours": 0.004, "costPerMillionTokens": 10.5, "why": "+42.1 %, below awq's"},
        {"name": "awq", "rung": "quantization", "verdict": "Kept", "measured": True,
         "gates": True, "improves": True,
         "gain": 0.47, "gainLow": 0.46, "tokensPerSecond": 284.0, "latencyMs": 398.0,
         "instanceHours": 0.004, "costPerMillionTokens": 9.7, "why": "kept: +46.8 %",
         "peakGpuMemoryPercent": 360.0},
        {"name": "ngram", "rung": "speculativeDecoding", "base": ["awq"],
         "verdict": "GateFailed", "measured": True, "gain": 0.26, "tokensPerSecond": 381.0,
         "latencyMs": 299.0, "acceptanceRate": 0.12, "costPerMillionTokens": 7.2,
         "why": "not passed: acceptance_rate", "failedChecks": ["acceptance_rate"]},
        {"name": "compiled", "rung": "compilation", "verdict": "NotRun", "why": "budget"},
    ]  # fmt: skip
    resource["status"]["search"] = {
        "best": ["awq"],
        "rows": rows,
        "candidates": 3,
        "instanceHours": 0.01,
        "done": "budget: 3 of 3 candidates measured",
        "shares": {"awq": 1.0},
        "price": {"usdPerHour": 13.0, "instanceType": "ml.g6e.12xlarge", "region": "us-east-1",
                  "source": "AWS Price List", "effective": "2026-11-01T00:00:00Z"},
    }  # fmt: skip
    return resource


def test_report_shows_the_search_table_the_winning_path_and_the_pareto_front() -> None:
    page = render_report(_search_resource())
    assert "<h2>Search</h2>" in page
    assert "the winner is awq (share of the gain: awq 100 %)" in page
    # Every candidate is a row, with what it was built on and why it ended as it did.
    for name in ("fp8", "awq", "ngram", "compiled"):
        assert f"<td>{name}</td>" in page
    assert "<td>awq</td><td>quantization</td><td>baseline</td><td class='verdict'>Kept" in page
    assert "<td>awq</td><td class='verdict'>GateFailed</td>" in page  # ngram, built on awq
    assert "not passed: acceptance_rate" in page
    # ngram is fastest and cheapest but failed a gate: no option. Among those that passed,
    # awq beats fp8 on latency, throughput and cost: the front is awq alone, the winner.
    plot = page[page.index("Candidates: latency against throughput") :]
    assert plot.count("r='9'") == 1
    ring = plot.index("r='9'")
    assert plot.index("awq (Kept)") > ring > plot.index("fp8 (Beaten)")
    assert "awq (winner)" in plot
    assert render_report(_resource()).count("<h2>Search</h2>") == 0
    # Where the costs' price came from, and each candidate's peak GPU memory.
    assert "Costs at $13 per ml.g6e.12xlarge-hour (AWS Price List, effective 2026-11-01)" in page
    assert "<td>360 %</td>" in page
    unpriced = _search_resource()
    del unpriced["status"]["search"]["price"]
    unpriced["status"]["search"]["priceProblem"] = "the AWS Price List could not be read"
    assert "No cost: the AWS Price List could not be read." in render_report(unpriced)
