"""The reconcile hook: statuses in, rollbacks and promotions counted from phase transitions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import REGISTRY

from endpoint_optimizer.api import OptimizedEndpointStatus, Phase, SageMakerResources
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.metrics.exporter import OperatorMetrics, process_metrics
from tests.unit.metrics.scrape import scrape, value, values

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


class Rollout:
    """Walks one status through phases the way the pipeline does (phase, then history)."""

    def __init__(self) -> None:
        self.status = OptimizedEndpointStatus(
            sagemaker=SageMakerResources(endpoint_name="llama-8b-chat")
        )

    def goto(self, phase: Phase, event: str, checks: list[Check] | None = None) -> dict[str, Any]:
        self.status.phase = phase
        if checks is not None:
            self.status.checks = checks
        self.status.record(NOW, event)
        return self.status.dump()


def rollbacks(metrics: OperatorMetrics, **labels: str) -> float:
    return sum(values(scrape(metrics.registry), "endpoint_optimizer_rollbacks_total", **labels))


def test_a_failed_acceptance_check_rollback_is_counted_once_with_its_reason() -> None:
    metrics = OperatorMetrics()
    rollout = Rollout()
    failed = [
        Check(name="ttft_p99@c8", kind=CheckKind.BENCHMARK, verdict=Verdict.PASS),
        Check(name="acceptance", kind=CheckKind.ACCEPTANCE, verdict=Verdict.FAIL),
    ]
    for status in (
        rollout.goto(Phase.BASELINING, "Started"),
        rollout.goto(Phase.ANALYZING, "CandidateDeployed"),
        rollout.goto(Phase.ROLLING_BACK, "ChecksFailed", failed),
        rollout.status.dump(),  # still rolling back on the next wake-up
        rollout.goto(Phase.ROLLED_BACK, "RolledBack"),
    ):
        metrics.reconciled("ml", "chat", status)

    assert rollbacks(metrics) == 1
    assert rollbacks(metrics, name="chat", reason="acceptance") == 1
    samples = scrape(metrics.registry)
    assert value(samples, "endpoint_optimizer_phase", phase="RolledBack") == 1
    assert value(samples, "endpoint_optimizer_info", endpoint_name="llama-8b-chat") == 1
    assert value(samples, "endpoint_optimizer_last_reconcile_timestamp_seconds") > 0


def test_a_rollback_begun_and_finished_in_one_reconcile_keeps_the_reason_that_began_it() -> None:
    metrics = OperatorMetrics()
    rollout = Rollout()
    failed = [Check(name="live_canary", kind=CheckKind.LIVE, verdict=Verdict.FAIL)]
    metrics.reconciled("ml", "chat", rollout.goto(Phase.ANALYZING, "CandidateDeployed"))
    rollout.goto(Phase.ROLLING_BACK, "ChecksFailed", failed)
    metrics.reconciled("ml", "chat", rollout.goto(Phase.ROLLED_BACK, "RolledBack"))

    assert rollbacks(metrics, reason="live") == 1
    assert rollbacks(metrics) == 1


@pytest.mark.parametrize(
    ("from_phase", "event", "reason"),
    [
        (Phase.ANALYZING, "ManualRollback", "manual"),
        (Phase.ANALYZING, "NoImprovement", "noImprovement"),
        (Phase.ANALYZING, "ChecksInconclusive", "inconclusive"),
        (Phase.DEPLOYING, "UpdateFailed", "updateFailed"),
        (Phase.SUCCEEDED, "ManualRollback", "manual"),
        (Phase.DEPLOYING, "UpdateFailed", "updateFailed"),
        (Phase.PROMOTING, "PromotionRolledBack", "updateFailed"),
        (Phase.ANALYZING, "LiveCheckFailed", "live"),
        (Phase.ANALYZING, "CandidateGone", "other"),
        (Phase.ANALYZING, "NewGeneration", "other"),
    ],
)
def test_the_event_that_began_the_rollback_names_the_reason(
    from_phase: Phase, event: str, reason: str
) -> None:
    metrics = OperatorMetrics()
    rollout = Rollout()
    metrics.reconciled("ml", "chat", rollout.goto(from_phase, "Progress"))
    metrics.reconciled("ml", "chat", rollout.goto(Phase.ROLLED_BACK, event))

    assert rollbacks(metrics, reason=reason) == 1
    assert rollbacks(metrics) == 1


@pytest.mark.parametrize(
    ("recorded", "event", "reason"),
    [
        # The typed field names the reason; the history event is one this exporter never saw.
        ("eval", "SomeNewReason", "eval"),
        ("updateFailed", "PromotionRolledBack", "updateFailed"),
        ("deadline", "DeadlineExceeded", "deadline"),
        # A field holding the pipeline's event name is read like that event.
        ("ChecksFailed", "ChecksFailed", "acceptance"),
        # A value the exporter cannot read falls back to the history.
        ("notAReason", "ManualRollback", "manual"),
        ("", "NoImprovement", "noImprovement"),
    ],
)
def test_the_recorded_rollback_reason_is_read_before_the_history(
    recorded: str, event: str, reason: str
) -> None:
    metrics = OperatorMetrics()
    rollout = Rollout()
    failed = [Check(name="acceptance", kind=CheckKind.ACCEPTANCE, verdict=Verdict.FAIL)]
    metrics.reconciled("ml", "chat", rollout.goto(Phase.ANALYZING, "CandidateDeployed"))
    status = rollout.goto(Phase.ROLLING_BACK, event, failed)
    status.setdefault("rollout", {})["rollbackReason"] = recorded
    metrics.reconciled("ml", "chat", status)

    assert rollbacks(metrics, reason=reason) == 1
    assert rollbacks(metrics) == 1


def test_a_promotion_is_counted_on_entering_succeeded() -> None:
    metrics = OperatorMetrics()
    rollout = Rollout()
    metrics.reconciled("ml", "chat", rollout.goto(Phase.PROMOTING, "ChecksPassed"))
    metrics.reconciled("ml", "chat", rollout.goto(Phase.SUCCEEDED, "CandidatePromoted"))
    metrics.reconciled("ml", "chat", rollout.status.dump())

    assert value(scrape(metrics.registry), "endpoint_optimizer_promotions_total") == 1
    assert rollbacks(metrics) == 0


def test_a_restarted_operator_does_not_recount_what_it_finds_already_done() -> None:
    metrics = OperatorMetrics()
    rollout = Rollout()
    rollout.goto(Phase.ANALYZING, "CandidateDeployed")
    # First sight after a restart: the rollback happened before this process existed.
    metrics.reconciled("ml", "chat", rollout.goto(Phase.ROLLED_BACK, "ManualRollback"))
    metrics.reconciled("other", "done", rollout.goto(Phase.SUCCEEDED, "CandidatePromoted"))

    assert rollbacks(metrics) == 0
    assert sum(values(scrape(metrics.registry), "endpoint_optimizer_promotions_total")) == 0


def test_the_hook_never_raises_on_a_status_it_cannot_read() -> None:
    metrics = OperatorMetrics()
    metrics.reconciled("ml", "chat", {"phase": 7, "history": "no", "checks": [None]})
    metrics.reconciled("ml", "chat", None)

    assert values(scrape(metrics.registry), "endpoint_optimizer_info", name="chat") == [1.0]


def test_timed_reconcile_observes_duration_and_counts_a_raise_as_an_error() -> None:
    metrics = OperatorMetrics()
    with metrics.timed_reconcile():
        pass
    with pytest.raises(RuntimeError), metrics.timed_reconcile():
        raise RuntimeError("SageMaker said no")
    samples = scrape(metrics.registry)

    assert value(samples, "endpoint_optimizer_reconcile_duration_seconds_count") == 2
    assert value(samples, "endpoint_optimizer_reconcile_errors_total") == 1


def test_the_process_metrics_are_one_instance_on_the_default_registry() -> None:
    metrics = process_metrics()

    assert process_metrics() is metrics
    assert metrics.registry is REGISTRY
    assert REGISTRY.get_sample_value("endpoint_optimizer_resources") is not None
