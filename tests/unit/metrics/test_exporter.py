"""The exporter derives every per-resource family from the latest snapshot; delete forgets."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from endpoint_optimizer.analysis.live import ProbeSamples
from endpoint_optimizer.analysis.series import IntervalPoint, LiveMetric, VariantRole, VariantSeries
from endpoint_optimizer.api import RollbackReason
from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.metrics.exporter import (
    FAMILIES,
    KNOWN_PHASES,
    PREFIX,
    RESOURCE_LABELS,
    OperatorMetrics,
)
from endpoint_optimizer.metrics.snapshot import (
    CheckState,
    EndpointSnapshot,
    LevelFigures,
    LiveAcceptance,
    Quantiles,
    SearchCandidate,
    VariantFigures,
)
from tests.unit.metrics.scrape import scrape, value, values


def rollout_snapshot(phase: str = "Analyzing") -> EndpointSnapshot:
    def level(concurrency: int, ttft_p99: float) -> LevelFigures:
        return LevelFigures(
            concurrency=concurrency,
            requests=80,
            ttft=Quantiles(p50=ttft_p99 / 2, p90=ttft_p99 * 0.8, p99=ttft_p99),
            itl=Quantiles(p50=0.011, p99=0.02),
            e2e=Quantiles(p50=2.5, p90=3.0, p99=3.5),
            output_tokens_per_second=900.0 * concurrency,
        )

    return EndpointSnapshot(
        endpoint_name="llama-8b-chat",
        phase=phase,
        phase_entered_at=1_700_000_000.0,
        phase_deadline_seconds=900.0,
        objective="latency",
        strategy="canary",
        rollout_step=1,
        canary_weight=0.5,
        variants={
            VariantRole.BASELINE: VariantFigures(
                levels=(level(1, 0.30), level(16, 0.90)), eval_score=0.81, refusal_rate=0.01
            ),
            VariantRole.CANDIDATE: VariantFigures(
                levels=(level(1, 0.21), level(16, 0.70)),
                acceptance_rate=0.63,
                eval_score=0.80,
                refusal_rate=0.02,
            ),
        },
        acceptance_floor=0.4,
        live_acceptance={
            VariantRole.CANDIDATE: LiveAcceptance(
                drafted=1000, accepted=550, rate=0.55, low=0.48, high=0.62
            )
        },
        acceptance_below_floor=0,
        speculation_disabled_at=1_700_000_000.0,
        eval_metric="exact_match",
        eval_max_drop=0.01,
        checks=(
            CheckState(name="ttft_p99@c16", kind="benchmark", verdict=Verdict.PASS),
            CheckState(name="eval_exact_match", kind="eval", verdict=Verdict.INCONCLUSIVE),
        ),
        search=(
            SearchCandidate(
                name="fp8",
                rung="quantization",
                verdict="Kept",
                gain=0.4,
                output_tokens_per_second=280.0,
                latency_seconds=0.4,
                in_service_seconds=420.0,
                instance_hours=0.2,
                peak_gpu_memory_percent=360.0,
                cost_per_million_tokens=9.3,
            ),
        ),
        search_instance_hours=0.2,
    )


# The families that are not rows of FAMILIES: events the control loop and botocore report.
OPERATOR_WIDE = {
    "resources", "build_info", "reconcile_duration_seconds", "reconcile_errors",
    "last_reconcile_timestamp_seconds", "optimization_job_duration_seconds", "aws_api_calls",
    "aws_api_throttled_attempts",
}  # fmt: skip


def test_the_families_table_is_exactly_what_a_scrape_returns() -> None:
    metrics = OperatorMetrics()
    metrics.endpoints.update("ml", "chat", rollout_snapshot())
    every_figure = IntervalPoint(start=1_700_000_000.0, **{m.value: 1.0 for m in LiveMetric})
    metrics.endpoints.observe_live(
        "ml",
        "chat",
        {VariantRole.CANDIDATE: VariantSeries(role=VariantRole.CANDIDATE, variant_name="c",
                                              period_seconds=60, points=(every_figure,))},
        {VariantRole.CANDIDATE: ProbeSamples(requests=2, ttft_s=[0.1, 0.2], tpot_s=[0.01])},
    )  # fmt: skip
    text = generate_latest(metrics.registry).decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    # The parser reads prometheus_client's `<counter>_created` samples as families of their own.
    scraped = {
        name: family
        for name, family in families.items()
        if name.removesuffix("_created") == name or name.removesuffix("_created") not in families
    }

    rows = {f"{PREFIX}_{row.name}": row for row in FAMILIES}
    assert len(rows) == len(FAMILIES)
    assert set(scraped) == set(rows) | {f"{PREFIX}_{name}" for name in OPERATOR_WIDE}
    for name, row in rows.items():
        family = scraped[name]
        assert (family.type, family.documentation) == (row.type, row.help), name
        # A resource with every figure measured has a sample in every row.
        assert family.samples, name
        for sample in family.samples:
            assert sample.name == name + ("_total" if row.type == "counter" else ""), sample
            assert set(sample.labels) == {*RESOURCE_LABELS, *row.labels}, sample
            assert sample.labels["name"] == "chat", sample


def test_benchmark_quantiles_are_exported_per_variant_concurrency_and_quantile() -> None:
    metrics = OperatorMetrics()
    metrics.endpoints.update("ml", "chat", rollout_snapshot())
    samples = scrape(metrics.registry)

    ttft = "endpoint_optimizer_ttft_seconds"
    common = {"namespace": "ml", "name": "chat"}
    assert value(
        samples, ttft, **common, variant="candidate", concurrency="16", quantile="0.99"
    ) == (0.70)
    assert (
        value(samples, ttft, **common, variant="baseline", concurrency="1", quantile="0.5") == 0.15
    )
    # ITL p90 was not measured, so it is absent rather than zero.
    assert values(samples, "endpoint_optimizer_itl_seconds", quantile="0.9") == []
    assert len(values(samples, "endpoint_optimizer_itl_seconds")) == 8
    assert value(
        samples, "endpoint_optimizer_output_tokens_per_second", variant="baseline", concurrency="16"
    ) == (14400.0)
    assert (
        value(
            samples, "endpoint_optimizer_benchmark_requests", variant="candidate", concurrency="1"
        )
        == 80
    )


def test_rollout_state_acceptance_and_eval_are_exported() -> None:
    metrics = OperatorMetrics()
    metrics.endpoints.update("ml", "chat", rollout_snapshot())
    samples = scrape(metrics.registry)

    assert value(samples, "endpoint_optimizer_canary_weight_ratio") == 0.5
    assert value(samples, "endpoint_optimizer_rollout_step") == 1
    assert value(samples, "endpoint_optimizer_phase_deadline_seconds") == 900
    assert value(samples, "endpoint_optimizer_phase_entered_timestamp_seconds") == 1_700_000_000
    assert value(samples, "endpoint_optimizer_acceptance_rate_ratio", variant="candidate") == 0.63
    assert values(samples, "endpoint_optimizer_acceptance_rate_ratio", variant="baseline") == []
    assert value(samples, "endpoint_optimizer_acceptance_rate_floor_ratio") == 0.4
    assert (
        value(samples, "endpoint_optimizer_eval_score", variant="baseline", metric="exact_match")
        == 0.81
    )
    assert value(samples, "endpoint_optimizer_eval_max_drop", metric="exact_match") == 0.01
    assert value(samples, "endpoint_optimizer_refusal_rate_ratio", variant="candidate") == 0.02
    info = value(
        samples,
        "endpoint_optimizer_info",
        endpoint_name="llama-8b-chat",
        objective="latency",
        strategy="canary",
    )
    assert info == 1


def test_phase_is_a_state_set_with_exactly_the_current_phase_at_one() -> None:
    metrics = OperatorMetrics()
    metrics.endpoints.update("ml", "chat", rollout_snapshot(phase="Analyzing"))
    metrics.endpoints.update("ml", "odd", rollout_snapshot(phase="SomethingNew"))
    samples = scrape(metrics.registry)

    chat = values(samples, "endpoint_optimizer_phase", name="chat")
    assert len(chat) == len(KNOWN_PHASES) and sum(chat) == 1
    assert value(samples, "endpoint_optimizer_phase", name="chat", phase="Analyzing") == 1
    # A phase the exporter does not know still shows up, as the one set to 1.
    assert value(samples, "endpoint_optimizer_phase", name="odd", phase="SomethingNew") == 1
    assert sum(values(samples, "endpoint_optimizer_phase", name="odd")) == 1


def test_check_verdicts_are_a_state_set_per_check() -> None:
    metrics = OperatorMetrics()
    metrics.endpoints.update("ml", "chat", rollout_snapshot())
    samples = scrape(metrics.registry)

    name = "endpoint_optimizer_check_verdict"
    assert value(samples, name, check="ttft_p99@c16", kind="benchmark", verdict="Pass") == 1
    assert value(samples, name, check="ttft_p99@c16", verdict="Fail") == 0
    assert value(samples, name, check="eval_exact_match", verdict="Inconclusive") == 1
    assert len(values(samples, name)) == 2 * len(Verdict)


def test_rollbacks_start_at_zero_for_every_reason_and_count_up() -> None:
    metrics = OperatorMetrics()
    metrics.endpoints.update("ml", "chat", rollout_snapshot())
    before = scrape(metrics.registry)
    assert values(before, "endpoint_optimizer_rollbacks_total", name="chat") == [0.0] * len(
        RollbackReason
    )

    metrics.endpoints.record_rollback("ml", "chat", RollbackReason.ACCEPTANCE)
    metrics.endpoints.record_rollback("ml", "chat", RollbackReason.ACCEPTANCE)
    metrics.endpoints.record_promotion("ml", "chat")
    after = scrape(metrics.registry)
    assert value(after, "endpoint_optimizer_rollbacks_total", name="chat", reason="acceptance") == 2
    assert value(after, "endpoint_optimizer_rollbacks_total", name="chat", reason="live") == 0
    assert value(after, "endpoint_optimizer_promotions_total", name="chat") == 1


def test_forget_removes_every_series_of_the_deleted_resource() -> None:
    metrics = OperatorMetrics()
    metrics.endpoints.update("ml", "chat", rollout_snapshot())
    metrics.endpoints.update("ml", "batch", rollout_snapshot())
    metrics.endpoints.record_rollback("ml", "chat", RollbackReason.MANUAL)
    metrics.observe_live("ml", "chat", {VariantRole.BASELINE: live_series(invocations=[10.0])})

    metrics.forget("ml", "chat")
    samples = scrape(metrics.registry)

    assert [s for s in samples if s.labels.get("name") == "chat"] == []
    assert values(samples, "endpoint_optimizer_info", name="batch") == [1.0]
    assert value(samples, "endpoint_optimizer_resources") == 1


def live_series(invocations: list[float | None]) -> VariantSeries:
    points = tuple(
        IntervalPoint(
            start=1_700_000_000.0 + 60 * index,
            invocations=count,
            model_latency_seconds=0.5 + index,
            errors_5xx=0.0 if count else None,
            gpu_utilization_percent=80.0,
            gpu_memory_utilization_percent=91.0 + index,
        )
        for index, count in enumerate(invocations)
    )
    return VariantSeries(
        role=VariantRole.BASELINE, variant_name="AllTraffic", period_seconds=60, points=points
    )


def test_live_metrics_export_the_newest_period_that_saw_traffic() -> None:
    metrics = OperatorMetrics()
    # The newest period is still empty (CloudWatch lags): the one before it is exported.
    metrics.observe_live("ml", "chat", {VariantRole.BASELINE: live_series([12.0, 30.0, None])})
    samples = scrape(metrics.registry)

    assert value(samples, "endpoint_optimizer_live_invocations", variant="baseline") == 30
    assert value(samples, "endpoint_optimizer_live_model_latency_seconds") == 1.5
    assert value(samples, "endpoint_optimizer_gpu_memory_utilization_percent") == 92
    assert value(samples, "endpoint_optimizer_live_5xx_errors") == 0
    assert value(samples, "endpoint_optimizer_live_period_end_timestamp_seconds") == (
        1_700_000_000 + 120
    )
    assert values(samples, "endpoint_optimizer_live_overhead_latency_seconds") == []


def test_reconcile_durations_are_a_histogram() -> None:
    metrics = OperatorMetrics()
    metrics.observe_reconcile(0.02, finished_at=1_700_000_100.0)
    metrics.observe_reconcile(3.0, failed=True, finished_at=1_700_000_200.0)
    samples = scrape(metrics.registry)

    assert value(samples, "endpoint_optimizer_reconcile_duration_seconds_count") == 2
    assert value(samples, "endpoint_optimizer_reconcile_duration_seconds_bucket", le="0.025") == 1
    assert value(samples, "endpoint_optimizer_reconcile_errors_total") == 1
    assert value(samples, "endpoint_optimizer_last_reconcile_timestamp_seconds") == 1_700_000_200
    assert value(samples, "endpoint_optimizer_build_info") == 1


def test_every_family_is_named_endpoint_optimizer_and_labels_are_bounded() -> None:
    metrics = OperatorMetrics()
    metrics.endpoints.update("ml", "chat", rollout_snapshot())
    metrics.observe_live("ml", "chat", {VariantRole.BASELINE: live_series([5.0])})
    metrics.observe_reconcile(0.1)
    samples = scrape(metrics.registry)

    allowed = {
        "namespace", "name", "endpoint_name", "objective", "strategy", "phase", "variant",
        "concurrency", "quantile", "check", "kind", "verdict", "metric", "reason", "le",
        "technique", "status", "service", "operation", "code", "version",
        # spec.search: at most 4 rungs x 8 alternatives per resource, names of 32 characters.
        "candidate", "rung",
    }  # fmt: skip
    assert samples
    for sample in samples:
        assert re.fullmatch(r"endpoint_optimizer_[a-z0-9_]+", sample.name), sample.name
        assert set(sample.labels) <= allowed, sample
        assert sample.labels.get("variant", "baseline") in {"baseline", "candidate"}


names = st.text(alphabet="abcdefghij", min_size=1, max_size=3)


@settings(max_examples=25, deadline=None)
@given(
    created=st.lists(st.tuples(names, names), max_size=6),
    deleted=st.lists(st.tuples(names, names), max_size=6),
)
def test_exported_resources_are_exactly_those_updated_and_not_forgotten(
    created: list[tuple[str, str]], deleted: list[tuple[str, str]]
) -> None:
    metrics = OperatorMetrics()
    for namespace, name in created:
        metrics.endpoints.update(namespace, name, rollout_snapshot())
        metrics.endpoints.record_promotion(namespace, name)
    for namespace, name in deleted:
        metrics.forget(namespace, name)
    samples = scrape(metrics.registry)

    expected = set(created) - set(deleted)
    exported = {
        (s.labels["namespace"], s.labels["name"]) for s in samples if "namespace" in s.labels
    }
    assert exported == expected
    assert value(samples, "endpoint_optimizer_resources") == len(expected)


def test_each_search_candidate_is_exported_with_its_verdict_and_figures() -> None:
    metrics = OperatorMetrics()
    metrics.endpoints.update("ml", "chat", rollout_snapshot("Searching"))
    samples = scrape(metrics.registry)
    labels = {"namespace": "ml", "name": "chat", "candidate": "fp8", "rung": "quantization"}
    assert value(samples, f"{PREFIX}_search_candidate_gain_ratio", **labels) == 0.4
    assert (
        value(samples, f"{PREFIX}_search_candidate_cost_per_million_tokens_dollars", **labels)
        == 9.3
    )
    memory = f"{PREFIX}_search_candidate_peak_gpu_memory_percent"
    assert value(samples, memory, **labels) == 360.0
    assert value(samples, f"{PREFIX}_search_candidate_verdict", verdict="Kept", **labels) == 1.0
    assert value(samples, f"{PREFIX}_search_candidate_verdict", verdict="NoGain", **labels) == 0.0
    assert value(samples, f"{PREFIX}_search_instance_hours", namespace="ml", name="chat") == 0.2
