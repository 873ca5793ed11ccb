"""The baseline after a promotion: kept for rollout.baselineRetention, then deleted (decide)."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

from endpoint_optimizer.api import (
    ConditionType,
    OptimizedEndpointStatus,
    SpecError,
    parse_spec,
    parse_status,
)
from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.aws.errors import SageMakerError, classify_code
from endpoint_optimizer.pipeline.decide import decide
from endpoint_optimizer.pipeline.model import (
    ActionKind,
    EndpointView,
    Observations,
    Resource,
    Timing,
    VariantView,
)
from endpoint_optimizer.pipeline.record import record_error
from tests.unit.api.admission import admit
from tests.unit.pipeline.test_decide import (
    NAMES,
    NOW,
    OWNER,
    compared,
    deployed,
    run,
    serving,
    spec,
)

ROLLBACK = {"optimizer.dev/rollback": "true"}
PROMOTED_AT = NOW + timedelta(seconds=210)
PROMOTED = serving(NAMES.promoted_config, (NAMES.candidate_variant, 1.0))
BASELINE = serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))


def retention(value: str) -> dict[str, Any]:
    data = spec()
    data["rollout"] = {**data["rollout"], "baselineRetention": value}
    return data


def promoting() -> OptimizedEndpointStatus:
    """A canary whose two steps passed: the promoted config was asked for."""
    status, rollout = deployed()
    compared(status, Verdict.PASS)
    status, _, _ = run(status, rollout, now=NOW + timedelta(seconds=61))
    half = serving(
        NAMES.rollout_config, (NAMES.baseline_variant, 50.0), (NAMES.candidate_variant, 50.0)
    )
    status, _, _ = run(status, half, now=NOW + timedelta(seconds=62))
    compared(status, Verdict.PASS, step=1)
    for _ in range(3):  # the live judge may ask for an interval first
        status, _, _ = run(status, half, now=NOW + timedelta(seconds=200))
        if status.phase.value == "Promoting":
            break
    assert status.phase.value == "Promoting"
    return status


def promote(
    status: OptimizedEndpointStatus, data: dict[str, Any]
) -> tuple[OptimizedEndpointStatus, list[ActionKind], list[str]]:
    return run(status, PROMOTED, now=PROMOTED_AT, spec_data=data)


def later(
    status: OptimizedEndpointStatus,
    seconds: float,
    data: dict[str, Any],
    endpoint: EndpointView = PROMOTED,
    annotations: dict[str, str] | None = None,
) -> tuple[OptimizedEndpointStatus, list[ActionKind], list[str]]:
    return run(
        status,
        endpoint,
        now=PROMOTED_AT + timedelta(seconds=seconds),
        spec_data=data,
        annotations=annotations,
    )


def test_promotion_keeps_the_baseline_for_the_window_and_says_until_when() -> None:
    data = retention("2h")
    status, actions, events = promote(promoting(), data)
    assert status.phase.value == "Succeeded" and "CandidatePromoted" in events
    assert actions == []
    assert status.sagemaker.baseline_retained_until == PROMOTED_AT + timedelta(hours=2)
    assert status.sagemaker.baseline_deleted_at is None
    assert "until" in status.message and NAMES.baseline_config in status.message
    # Within the window nothing is deleted.
    status, actions, _ = later(status, 7199, data)
    assert actions == [] and status.sagemaker.baseline_deleted_at is None


def test_rollback_within_the_window_returns_to_the_baseline_config() -> None:
    data = retention("1h")
    status, _, _ = promote(promoting(), data)
    status, actions, events = later(status, 60, data, annotations=ROLLBACK)
    assert status.phase.value == "RollingBack"
    assert "ManualRollback" in events
    assert actions == [ActionKind.UPDATE_ENDPOINT]
    # The same annotation value does not act twice; the update finishes.
    status, actions, _ = later(status, 61, data, BASELINE, annotations=ROLLBACK)
    assert status.phase.value == "RolledBack"
    assert status.sagemaker.baseline_retained_until is None
    # A rolled-back resource deletes nothing when the old window would have ended.
    status, actions, _ = later(status, 7200, data, BASELINE, annotations=ROLLBACK)
    assert actions == [] and status.phase.value == "RolledBack"


def test_after_the_window_the_operators_baseline_is_deleted_once_and_rollback_refused() -> None:
    data = retention("1h")
    status, _, _ = promote(promoting(), data)
    decision_time = 3600
    status, actions, events = later(status, decision_time, data)
    assert actions == [
        ActionKind.DELETE_ENDPOINT_CONFIG,
        ActionKind.DELETE_ENDPOINT_CONFIG,
        ActionKind.DELETE_MODEL,
    ]
    # Asked for, not yet done: the next wake-up reads how the deletes went.
    assert "BaselineDeleted" not in events and status.sagemaker.baseline_deleted_at is None
    assert "deleting" in status.message
    status, actions, events = later(status, decision_time + 1, data)
    assert actions == [] and events == ["BaselineDeleted"]
    assert status.sagemaker.baseline_deleted_at == PROMOTED_AT + timedelta(seconds=3600)
    assert status.history[-1].event == "BaselineDeleted"
    # Names stay listed: the finalizer deletes again whatever a failed delete left.
    assert NAMES.baseline_config in status.sagemaker.endpoint_configs
    _, actions, events = later(status, decision_time + 5, data)
    assert actions == [] and events == []
    refused, actions, events = later(status, decision_time + 10, data, annotations=ROLLBACK)
    assert refused.phase.value == "Succeeded"
    assert actions == [] and events == ["RollbackRefused"]
    assert "baseline expired at" in refused.message and "nothing to roll back" in refused.message
    progressing = refused.condition(ConditionType.PROGRESSING)
    assert progressing is not None and progressing.reason == "RollbackRefused"
    assert "baseline expired" in progressing.message


def test_the_deletes_name_exactly_the_baseline_rollout_config_and_model() -> None:
    data = retention("0s")
    status = promoting()
    decision_status, actions, _ = promote(status, data)
    assert ActionKind.DELETE_ENDPOINT_CONFIG in actions
    assert decision_status.sagemaker.baseline_deleted_at is None
    confirmed, _, _ = later(decision_status, 1, data)
    assert confirmed.sagemaker.baseline_deleted_at == PROMOTED_AT
    decision = decide(
        data, status, Observations(endpoint=PROMOTED), Resource(OWNER, 1), PROMOTED_AT, Timing()
    )
    deleted = [(a.kind, a.resource) for a in decision.actions]
    assert deleted == [
        (ActionKind.DELETE_ENDPOINT_CONFIG, NAMES.baseline_config),
        (ActionKind.DELETE_ENDPOINT_CONFIG, NAMES.rollout_config),
        (ActionKind.DELETE_MODEL, NAMES.baseline_model),
    ]
    assert NAMES.promoted_config not in {name for _, name in deleted}
    assert NAMES.candidate_model not in {name for _, name in deleted}


def test_a_window_that_ends_during_a_rollback_request_is_refused_and_deletes() -> None:
    data = retention("1h")
    status, _, _ = promote(promoting(), data)
    status, actions, events = later(status, 3601, data, annotations=ROLLBACK)
    assert status.phase.value == "Succeeded"
    assert "RollbackRefused" in events
    assert ActionKind.UPDATE_ENDPOINT not in actions
    assert ActionKind.DELETE_ENDPOINT_CONFIG in actions
    _, _, events = later(status, 3602, data, annotations=ROLLBACK)
    assert events == ["BaselineDeleted"]


def test_an_adopted_baseline_config_is_never_deleted_and_rollback_stays_open() -> None:
    status = promoting()
    # What adoption leaves: the user's config and model, not in the operator's lists.
    status.sagemaker.adopted = True
    status.sagemaker.endpoint_configs = [
        c for c in status.sagemaker.endpoint_configs if c != NAMES.baseline_config
    ]
    status.sagemaker.models = [m for m in status.sagemaker.models if m != NAMES.baseline_model]
    data = retention("0s")
    status, actions, _ = promote(status, data)
    assert status.phase.value == "Succeeded"
    assert status.sagemaker.baseline_retained_until is None
    assert "not the operator's" in status.message
    assert ActionKind.DELETE_ENDPOINT_CONFIG not in actions
    status, actions, _ = later(status, 10 * 3600, data)
    assert actions == []
    status, actions, _ = later(status, 10 * 3600 + 1, data, annotations=ROLLBACK)
    assert status.phase.value == "RollingBack" and actions == [ActionKind.UPDATE_ENDPOINT]


def test_rollback_without_a_promotion_is_refused_clearly() -> None:
    data = spec(optimizations={})
    status, _, _ = run(None, spec_data=data)
    status, _, _ = run(status, BASELINE, spec_data=data)
    assert status.baseline is not None
    status.baseline.measured_at = NOW
    status, _, _ = run(status, BASELINE, spec_data=data)
    assert status.phase.value == "Succeeded"
    status, actions, events = run(status, BASELINE, spec_data=data, annotations=ROLLBACK)
    assert actions == [] and events == ["RollbackRefused"]
    assert "no candidate was promoted" in status.message


def test_a_new_generation_deletes_the_previous_retained_baseline() -> None:
    data = retention("1h")
    status, _, _ = promote(promoting(), data)
    status, actions, events = run(
        status, PROMOTED, generation=2, now=PROMOTED_AT + timedelta(seconds=5), spec_data=data
    )
    assert actions[:3] == [
        ActionKind.DELETE_ENDPOINT_CONFIG,
        ActionKind.DELETE_ENDPOINT_CONFIG,
        ActionKind.DELETE_MODEL,
    ]
    # Released with the generation; a failed delete is left to the finalizer (names listed).
    assert "BaselineReleased" in events
    assert NAMES.baseline_config in status.sagemaker.endpoint_configs
    assert status.observed_generation == 2
    # Generation 2 measures the promoted config as its baseline.
    assert status.sagemaker.baseline_endpoint_config == NAMES.promoted_config


def test_the_spec_defaults_to_an_hour_and_bounds_the_window() -> None:
    assert parse_spec(spec()).rollout.baseline_retention == "1h"
    assert parse_spec(retention("0s")).rollout.baseline_retention == "0s"
    with pytest.raises(SpecError) as caught:
        parse_spec(retention("721h"))
    assert any("baselineRetention" in p.path for p in caught.value.problems)
    with pytest.raises(SpecError):
        parse_spec(retention("an hour"))


@pytest.mark.parametrize(("value", "admitted"), [("90m", True), ("721h", False), ("1 h", False)])
def test_the_crd_bounds_the_window_too(value: str, admitted: bool) -> None:
    resource = {
        "apiVersion": "optimizer.dev/v1alpha1",
        "kind": "OptimizedEndpoint",
        "metadata": {"name": "chat", "namespace": "ml"},
        "spec": copy.deepcopy(retention(value)),
    }
    _, problems = admit(resource)
    assert (problems == []) is admitted, problems
    if not admitted:
        assert any("baselineRetention" in p for p in problems), problems


def test_the_baseline_is_deleted_only_on_a_fresh_view_of_the_endpoint() -> None:
    data = retention("1h")
    status, _, _ = promote(promoting(), data)
    later_on = PROMOTED_AT + timedelta(hours=2)
    # The cadence reuses the last view of a finished resource's endpoint: not enough.
    reused = Observations(endpoint=PROMOTED, endpoint_described=False, complete=False)
    decision = decide(data, status, reused, Resource(OWNER, 1), later_on, Timing())
    assert decision.actions == []
    fresh = Observations(endpoint=PROMOTED)
    decision = decide(data, status, fresh, Resource(OWNER, 1), later_on, Timing())
    assert [a.kind for a in decision.actions] == [
        ActionKind.DELETE_ENDPOINT_CONFIG,
        ActionKind.DELETE_ENDPOINT_CONFIG,
        ActionKind.DELETE_MODEL,
    ]


def failed(status: OptimizedEndpointStatus, operation: str, resource: str, code: str) -> Any:
    """What the edge writes when an action fails: pipeline.record's record_error."""
    kind = classify_code(code, "Rate exceeded")
    error = SageMakerError(kind, code, "Rate exceeded", operation, resource)
    return record_error(status.dump(), error.describe(), not error.retryable, NOW, code)


def stale(
    status: OptimizedEndpointStatus, seconds: float, data: dict[str, Any]
) -> tuple[OptimizedEndpointStatus, list[ActionKind], list[str]]:
    """A finished resource's wake-up between endpoint rechecks: the last view, reused."""
    decision = decide(
        data,
        status,
        Observations(endpoint=PROMOTED, endpoint_described=False, complete=False),
        Resource(OWNER, 1),
        PROMOTED_AT + timedelta(seconds=seconds),
        Timing(),
    )
    return (
        parse_status(decision.status),
        [a.kind for a in decision.actions],
        [e.reason for e in decision.events],
    )


def test_a_failed_baseline_delete_is_reported_and_retried_until_sagemaker_confirms() -> None:
    data = retention("1h")
    status, _, _ = promote(promoting(), data)
    status, actions, _ = later(status, 3600, data)
    assert actions[0] is ActionKind.DELETE_ENDPOINT_CONFIG
    # The first DeleteEndpointConfig was throttled past botocore's retries; the edge
    # recorded it and stopped (the rest of the wake-up's deletes were not sent).
    status = parse_status(
        failed(status, "DeleteEndpointConfig", NAMES.baseline_config, "ThrottlingException")
    )
    # The next wake-up reuses the last view of the endpoint: it reports, and does not retry.
    status, actions, events = stale(status, 3601, data)
    assert actions == [] and events == ["BaselineDeleteFailed"]
    assert status.sagemaker.baseline_deleted_at is None
    entry = status.history[-1]
    assert entry.event == "BaselineDeleteFailed"
    assert NAMES.baseline_config in entry.message and "ThrottlingException" in entry.message
    assert "tries again" in status.message
    progressing = status.condition(ConditionType.PROGRESSING)
    assert progressing is not None and progressing.reason == "BaselineDeleteFailed"
    # Reported once, not at every wake-up of the same failure.
    status, actions, events = stale(status, 3602, data)
    assert actions == [] and events == []
    # A fresh view: the same deletes again (a delete of what is already gone is done).
    status, actions, events = later(status, 3660, data)
    assert actions == [
        ActionKind.DELETE_ENDPOINT_CONFIG,
        ActionKind.DELETE_ENDPOINT_CONFIG,
        ActionKind.DELETE_MODEL,
    ]
    assert events == [] and "attempt 2" in status.message and status.last_error == ""
    # The same error again is not reported again. The wake-up that reads a failure never
    # retries at once, even on a fresh view: a later one does.
    status = parse_status(
        failed(status, "DeleteEndpointConfig", NAMES.baseline_config, "ThrottlingException")
    )
    status, actions, events = later(status, 3661, data)
    assert actions == [] and events == []
    status, actions, events = later(status, 3720, data)
    assert events == [] and ActionKind.DELETE_ENDPOINT_CONFIG in actions
    # Nothing failed this time: confirmed, at the time of the attempt that did it.
    status, actions, events = stale(status, 3721, data)
    assert actions == [] and events == ["BaselineDeleted"]
    assert status.sagemaker.baseline_deleted_at == PROMOTED_AT + timedelta(seconds=3720)
    _, actions, events = later(status, 3800, data)
    assert actions == [] and events == []


def test_a_failed_model_delete_is_retried_and_names_the_model() -> None:
    data = retention("0s")
    status, actions, _ = promote(promoting(), data)
    assert actions[-1] is ActionKind.DELETE_MODEL
    status = parse_status(failed(status, "DeleteModel", NAMES.baseline_model, "InternalFailure"))
    status, actions, events = later(status, 1, data)
    assert events == ["BaselineDeleteFailed"] and NAMES.baseline_model in status.message
    assert actions == []
    status, actions, events = later(status, 2, data)
    assert events == [] and actions[-1] is ActionKind.DELETE_MODEL


def test_an_unrelated_failure_after_the_deletes_retries_them_without_blaming_them() -> None:
    data = retention("1h")
    status, _, _ = promote(promoting(), data)
    status, _, _ = later(status, 3600, data)
    # A later wake-up's DescribeEndpoint failed before any decision: unknown how the
    # deletes went, so they are asked for again (idempotent), and nothing is reported.
    status = parse_status(failed(status, "DescribeEndpoint", "endpoint chat", "Throttling"))
    status, actions, events = later(status, 3660, data)
    assert actions == [] and events == []
    status, actions, events = later(status, 3720, data)
    assert events == [] and ActionKind.DELETE_ENDPOINT_CONFIG in actions
    assert status.sagemaker.baseline_deleted_at is None


def test_a_retry_never_deletes_what_the_endpoint_serves_again() -> None:
    data = retention("1h")
    status, _, _ = promote(promoting(), data)
    status, _, _ = later(status, 3600, data)
    status = parse_status(
        failed(status, "DeleteEndpointConfig", NAMES.baseline_config, "ThrottlingException")
    )
    # Someone updated the endpoint back to the baseline config by hand meanwhile.
    status, actions, events = later(status, 3660, data, BASELINE)
    assert actions == [] and events == ["BaselineDeleteFailed"]
    status, actions, events = later(status, 3720, data, BASELINE)
    assert actions == [] and status.history[-1].event == "BaselineKept"
    assert status.sagemaker.baseline_retained_until is None
    assert status.sagemaker.baseline_deleted_at is None
    status, actions, _ = later(status, 7200, data, BASELINE)
    assert actions == []


def test_a_retry_spares_whatever_config_and_model_the_endpoint_serves_now() -> None:
    data = retention("1h")
    status, _, _ = promote(promoting(), data)
    status, _, _ = later(status, 3600, data)
    status = parse_status(
        failed(status, "DeleteEndpointConfig", NAMES.baseline_config, "ThrottlingException")
    )
    status, _, _ = later(status, 3601, data)
    # Meanwhile someone put the endpoint on the rollout config (baseline model included).
    rollout = serving(
        NAMES.rollout_config, (NAMES.baseline_variant, 50.0), (NAMES.candidate_variant, 50.0)
    )
    with_models = EndpointView(
        name="chat",
        status="InService",
        config_name=NAMES.rollout_config,
        variants=tuple(
            VariantView(v.name, NAMES.baseline_model if v.name == NAMES.baseline_variant else "")
            for v in rollout.variants
        ),
    )
    decision = decide(
        data,
        status,
        Observations(endpoint=with_models, config_variants={NAMES.rollout_config: ()}),
        Resource(OWNER, 1),
        PROMOTED_AT + timedelta(seconds=3660),
        Timing(),
    )
    deleted = [a.resource for a in decision.actions]
    assert deleted == [NAMES.baseline_config]


def test_a_refused_baseline_delete_degrades_but_never_fails_the_promoted_resource() -> None:
    data = retention("1h")
    status, _, _ = promote(promoting(), data)
    status, actions, _ = later(status, 3600, data)
    assert actions[0] is ActionKind.DELETE_ENDPOINT_CONFIG
    # IAM refuses the delete: a permanent error, but the candidate serves all traffic.
    status = parse_status(
        failed(status, "DeleteEndpointConfig", NAMES.baseline_config, "AccessDeniedException")
    )
    assert status.phase.value == "Succeeded"
    degraded = status.condition(ConditionType.DEGRADED)
    assert degraded is not None and degraded.status.value == "True"
    assert "AccessDenied" in degraded.message and "phase stays Succeeded" in degraded.message
    terminal = status.condition(ConditionType.TERMINAL)
    assert terminal is None or terminal.status.value == "False"
    # The next wake-up names the failed delete; the resource stays Degraded while it fails.
    status, actions, events = later(status, 3601, data)
    assert events == ["BaselineDeleteFailed"] and actions == []
    degraded = status.condition(ConditionType.DEGRADED)
    assert degraded is not None and degraded.status.value == "True"
    assert degraded.reason == "BaselineDeleteFailed"
    # Someone fixed the role: the retry goes through and the resource is healthy again.
    status, actions, _ = later(status, 3660, data)
    assert ActionKind.DELETE_ENDPOINT_CONFIG in actions
    status, _, events = later(status, 3661, data)
    assert events == ["BaselineDeleted"] and status.phase.value == "Succeeded"
    degraded = status.condition(ConditionType.DEGRADED)
    assert degraded is not None and degraded.status.value == "False"


def test_a_permanent_error_before_the_outcome_still_ends_the_pipeline() -> None:
    status, _ = deployed()
    status = parse_status(
        failed(status, "UpdateEndpoint", "endpoint chat", "AccessDeniedException")
    )
    # A candidate may hold traffic: the pipeline ends only once traffic is back.
    assert status.phase.value == "RollingBack"
    status, _, _ = run(status, serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0)))
    assert status.phase.value == "Failed"
    terminal = status.condition(ConditionType.TERMINAL)
    assert terminal is not None and terminal.status.value == "True"
    assert "AccessDenied" in terminal.message
