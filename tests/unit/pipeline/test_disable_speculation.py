"""onAcceptanceDrift: disableSpeculation: the speculation-free twin, during the canary and
the bake (decide() and the live fold, with observations)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from endpoint_optimizer.analysis.live import LiveObservation, VariantInterval
from endpoint_optimizer.analysis.live_acceptance import CHECK_NAME
from endpoint_optimizer.analysis.speclog import CounterForm, SpecLine
from endpoint_optimizer.api import (
    ConditionStatus,
    ConditionType,
    LiveDecision,
    OptimizedEndpointStatus,
    RollbackReason,
    SpecError,
    SpeculationStage,
    parse_spec,
    parse_status,
)
from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.metrics.snapshot import snapshot_from_resource
from endpoint_optimizer.pipeline.decide import decide
from endpoint_optimizer.pipeline.model import (
    Action,
    ActionKind,
    EndpointView,
    JobView,
    Measurement,
    Observations,
    Resource,
    Timing,
)
from endpoint_optimizer.pipeline.record import record
from endpoint_optimizer.report import render_report
from tests.unit.api.admission import admit
from tests.unit.pipeline.test_bake import interval
from tests.unit.pipeline.test_decide import NAMES, NOW, OWNER, compared, serving, spec
from tests.unit.pipeline.test_retention import PROMOTED, PROMOTED_AT, promoting

SPECULATIVE = {
    "quantization": {"scheme": "fp8"},
    "speculativeDecoding": {"method": "ngram", "numSpeculativeTokens": 4, "minAcceptanceRate": 0.3},
}
DONE = {NAMES.job: JobView(NAMES.job, "COMPLETED", output_s3_uri="s3://models/out/x/")}
BASELINE = serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))
ROLLOUT = serving(
    NAMES.rollout_config, (NAMES.baseline_variant, 90.0), (NAMES.candidate_variant, 10.0)
)
TWIN = serving(
    NAMES.twin_rollout_config, (NAMES.baseline_variant, 90.0), (NAMES.candidate_variant, 10.0)
)
TWIN_PROMOTED = serving(NAMES.twin_promoted_config, (NAMES.candidate_variant, 1.0))


def drift_spec(**rollout: Any) -> dict[str, Any]:
    data = spec(optimizations=SPECULATIVE)
    data["rollout"] = {
        **data["rollout"],
        "onAcceptanceDrift": "disableSpeculation",
        "analysis": {"failureLimit": 2, "onNoData": "pass"},
        **rollout,
    }
    return data


def wake(
    status: OptimizedEndpointStatus,
    endpoint: EndpointView | None,
    data: dict[str, Any],
    now: datetime,
    annotations: dict[str, str] | None = None,
) -> tuple[OptimizedEndpointStatus, list[Action], list[str]]:
    decision = decide(
        data,
        status,
        Observations(endpoint=endpoint, jobs=DONE),
        Resource(OWNER, 1, annotations or {}),
        now,
        Timing(time_scale=1.0),
    )
    return (
        parse_status(decision.status),
        decision.actions,
        [e.reason for e in decision.events],
    )


def kinds(actions: list[Action]) -> list[ActionKind]:
    return [a.kind for a in actions]


def twin_made(actions: list[Action], config_name: str) -> tuple[Action, Action, Action]:
    """The switch's three calls: the twin's Model, its config `config_name`, the update."""
    assert kinds(actions) == [
        ActionKind.CREATE_MODEL,
        ActionKind.CREATE_ENDPOINT_CONFIG,
        ActionKind.UPDATE_ENDPOINT,
    ]
    model, config, update = actions
    assert model.resource == NAMES.twin_model and config.resource == config_name
    assert update.request["EndpointConfigName"] == config_name
    return model, config, update


def serves_the_twin_alone(config: Action) -> bool:
    return [v["ModelName"] for v in config.request["ProductionVariants"]] == [NAMES.twin_model]


def deployed(data: dict[str, Any]) -> OptimizedEndpointStatus:
    """The speculative candidate at the first step's 10 %, its comparison passed."""
    status, _, _ = wake(OptimizedEndpointStatus(), None, data, NOW)
    status, _, _ = wake(status, BASELINE, data, NOW)
    assert status.baseline is not None
    status.baseline.measured_at = NOW
    for _ in range(2):
        status, actions, _ = wake(status, BASELINE, data, NOW)
    assert status.phase.value == "Deploying" and ActionKind.UPDATE_ENDPOINT in kinds(actions)
    status, _, _ = wake(status, ROLLOUT, data, NOW)
    assert status.phase.value == "Analyzing"
    compared(status, Verdict.PASS)
    return status


def low_acceptance(ends: datetime) -> VariantInterval:
    """A candidate interval whose log lines say 40 of 400 drafted tokens were accepted."""
    stamp = int(ends.timestamp() * 1000) - 500
    lines = [SpecLine(f"v/i-{i}", stamp - 100 * i, 10, 100, CounterForm.INTERVAL) for i in range(4)]
    return interval().model_copy(update={"spec_lines": lines})


def drifted(
    status: OptimizedEndpointStatus, data: dict[str, Any], times: int = 2
) -> OptimizedEndpointStatus:
    """`times` live intervals of the canary, the candidate's acceptance far below 0.3."""
    for i in range(times):
        ends = NOW + timedelta(seconds=20 + 10 * i)
        observation = LiveObservation(
            interval_end=ends, baseline=interval(), candidate=low_acceptance(ends)
        )
        measured = Measurement(ActionKind.JUDGE_LIVE, 0, live=(observation,))
        status = parse_status(record(status.dump(), measured, parse_spec(data), ends))
    return status


def environment(action: Action) -> dict[str, str]:
    found: dict[str, str] = action.request["PrimaryContainer"].get("Environment", {})
    return found


# ------------------------------------------------------------------ the spec


@pytest.mark.parametrize(
    ("optimizations", "strategy", "said"),
    [
        ({"quantization": {"scheme": "fp8"}}, "canary", "speculativeDecoding"),
        ({"speculativeDecoding": {"method": "eagle"}}, "canary", "EAGLE"),
        (SPECULATIVE, "blueGreen", "strategy: canary"),
    ],
)
def test_disable_speculation_is_refused_where_there_is_no_twin_to_switch_to(
    optimizations: dict[str, Any], strategy: str, said: str
) -> None:
    data = drift_spec(strategy=strategy, steps=[{"weight": 100, "pause": "1m"}])
    data["optimizations"] = optimizations
    with pytest.raises(SpecError) as refused:
        parse_spec(data)
    assert "onAcceptanceDrift" in str(refused.value) and said in str(refused.value)
    resource = {
        "apiVersion": "optimizer.dev/v1alpha1",
        "kind": "OptimizedEndpoint",
        "metadata": {"name": "chat", "namespace": "ml"},
        "spec": data,
    }
    assert any("disableSpeculation" in p for p in admit(resource)[1])
    data["optimizations"] = SPECULATIVE
    data["rollout"]["strategy"] = "canary"
    parse_spec(data)
    assert admit({**resource, "spec": data})[1] == []


# ------------------------------------------------------------------ during the canary


def test_drift_under_the_policy_is_reported_not_gating_and_counted() -> None:
    data = drift_spec()
    status = drifted(deployed(data), data)
    judge = status.rollout.live_judge
    assert judge is not None and judge.acceptance_below_floor == 2
    assert judge.decision is LiveDecision.CONTINUE and judge.failures == 0
    check = next(c for c in status.checks if c.name == CHECK_NAME)
    assert check.verdict is Verdict.FAIL and not check.gating


def test_one_drifting_interval_is_not_enough_evidence_to_switch() -> None:
    data = drift_spec()
    status = drifted(deployed(data), data, times=1)
    status, actions, events = wake(status, ROLLOUT, data, NOW + timedelta(seconds=30))
    assert ActionKind.CREATE_MODEL not in kinds(actions)
    assert status.rollout.speculation_disabled is None and "AcceptanceDrift" in events


def test_confident_drift_makes_the_speculation_free_twin_and_moves_the_candidates_traffic() -> None:
    data = drift_spec()
    status = drifted(deployed(data), data)
    status, actions, events = wake(status, ROLLOUT, data, NOW + timedelta(seconds=40))
    model, config, _ = twin_made(actions, NAMES.twin_rollout_config)
    # The same weights (the job's output) and settings, no speculation.
    container = model.request["PrimaryContainer"]
    assert container["ModelDataSource"]["S3DataSource"]["S3Uri"] == "s3://models/out/x/"
    assert not [k for k in environment(model) if k.startswith("OPTION_SPECULATIVE")]
    variants = {v["VariantName"]: v for v in config.request["ProductionVariants"]}
    assert variants[NAMES.candidate_variant]["ModelName"] == NAMES.twin_model
    assert variants[NAMES.candidate_variant]["InitialVariantWeight"] == pytest.approx(10.0)
    assert variants[NAMES.baseline_variant]["ModelName"] == NAMES.baseline_model
    switch = status.rollout.speculation_disabled
    assert switch is not None and switch.during is SpeculationStage.CANARY
    assert switch.serving_at is None and "2 interval(s)" in switch.reason
    assert status.phase.value == "Analyzing" and "SpeculationDisabling" in events
    assert status.sagemaker.candidate_endpoint_config == NAMES.twin_rollout_config
    assert NAMES.twin_model in status.sagemaker.models
    assert status.history[-1].event == "SpeculationDisabling"
    drift = status.condition(ConditionType.ACCEPTANCE_DRIFT)
    assert drift is not None and drift.status is ConditionStatus.TRUE


def switched(data: dict[str, Any]) -> tuple[OptimizedEndpointStatus, OptimizedEndpointStatus]:
    """The status before the switch's wake-up, and the one it wrote."""
    before = drifted(deployed(data), data)
    after, _, _ = wake(before, ROLLOUT, data, NOW + timedelta(seconds=40))
    return before, after


def test_the_twin_serving_restarts_the_step_with_its_comparison_and_a_fresh_judge() -> None:
    data = drift_spec()
    _, status = switched(data)
    updating = serving(NAMES.twin_rollout_config, status="Updating")
    status, actions, _ = wake(status, updating, data, NOW + timedelta(seconds=45))
    assert actions == [] and status.phase.value == "Analyzing"
    status, actions, events = wake(status, TWIN, data, NOW + timedelta(seconds=60))
    assert "SpeculationDisabled" in events
    assert kinds(actions) == [ActionKind.COMPARE]  # the step's comparison, of the twin
    switch = status.rollout.speculation_disabled
    assert switch is not None and switch.serving_at == NOW + timedelta(seconds=60)
    assert status.rollout.step_started_at == NOW + timedelta(seconds=60)
    judge = status.rollout.live_judge
    assert judge is not None and judge.acceptance_below_floor == 0 and judge.intervals == 0
    assert not [c for c in status.checks if c.name == CHECK_NAME]
    drift = status.condition(ConditionType.ACCEPTANCE_DRIFT)
    assert drift is not None and drift.status is ConditionStatus.FALSE
    assert drift.reason == "SpeculationDisabled"


def test_the_twin_is_judged_without_an_acceptance_floor() -> None:
    data = drift_spec()
    _, status = switched(data)
    status, _, _ = wake(status, TWIN, data, NOW + timedelta(seconds=60))
    ends = NOW + timedelta(seconds=90)
    observation = LiveObservation(interval_end=ends, baseline=interval(), candidate=interval(0.8))
    measured = Measurement(ActionKind.JUDGE_LIVE, 0, live=(observation,))
    status = parse_status(record(status.dump(), measured, parse_spec(data), ends))
    assert status.rollout.live_judge is not None and status.rollout.live_judge.intervals == 1
    assert not [c for c in status.checks if c.name == CHECK_NAME]


def test_a_restart_before_the_status_write_asks_again_under_the_same_names() -> None:
    data = drift_spec()
    before, _ = switched(data)
    again, actions, _ = wake(before, ROLLOUT, data, NOW + timedelta(seconds=50))
    assert [(a.kind, a.resource) for a in actions] == [
        (ActionKind.CREATE_MODEL, NAMES.twin_model),
        (ActionKind.CREATE_ENDPOINT_CONFIG, NAMES.twin_rollout_config),
        (ActionKind.UPDATE_ENDPOINT, "chat"),
    ]
    assert again.rollout.speculation_disabled is not None


def test_a_twin_found_serving_after_a_lost_status_write_is_recorded_never_made_again() -> None:
    data = drift_spec()
    before, _ = switched(data)
    status, actions, events = wake(before, TWIN, data, NOW + timedelta(seconds=60))
    assert ActionKind.CREATE_MODEL not in kinds(actions)
    assert ActionKind.CREATE_ENDPOINT_CONFIG not in kinds(actions)
    assert status.phase.value == "Analyzing" and "SpeculationDisabled" in events
    switch = status.rollout.speculation_disabled
    assert switch is not None and switch.endpoint_config == NAMES.twin_rollout_config
    assert switch.serving_at is not None
    assert status.sagemaker.candidate_endpoint_config == NAMES.twin_rollout_config
    assert status.sagemaker.candidate_model == NAMES.twin_model
    # The next wake-up makes nothing either.
    status, actions, _ = wake(status, TWIN, data, NOW + timedelta(seconds=61))
    assert ActionKind.CREATE_MODEL not in kinds(actions)


def test_an_update_sagemaker_did_not_take_is_asked_again_and_one_it_refused_rolls_back() -> None:
    data = drift_spec()
    _, status = switched(data)
    # The UpdateEndpoint call failed before SageMaker took it: the same requests again.
    again, actions, _ = wake(status, ROLLOUT, data, NOW + timedelta(seconds=50))
    assert [a.resource for a in actions] == [NAMES.twin_model, NAMES.twin_rollout_config, "chat"]
    assert again.rollout.speculation_disabled == status.rollout.speculation_disabled
    refused = serving(
        NAMES.rollout_config,
        (NAMES.baseline_variant, 90.0),
        (NAMES.candidate_variant, 10.0),
        failure="Container failed health check",
    )
    status, actions, events = wake(status, refused, data, NOW + timedelta(seconds=60))
    assert status.phase.value == "RollingBack" and "SpeculationSwitchFailed" in events
    assert status.rollout.rollback_reason is RollbackReason.UPDATE_FAILED


def test_the_promotion_after_a_switch_promotes_the_twin() -> None:
    data = drift_spec()
    _, status = switched(data)
    status, _, _ = wake(status, TWIN, data, NOW + timedelta(seconds=60))
    status.phase = status.phase.PROMOTING
    status, actions, _ = wake(status, TWIN, data, NOW + timedelta(seconds=300))
    config = next(a for a in actions if a.kind is ActionKind.CREATE_ENDPOINT_CONFIG)
    assert config.resource == NAMES.promoted_config
    assert serves_the_twin_alone(config)


# ------------------------------------------------------------------ during the bake


def baking(data: dict[str, Any]) -> OptimizedEndpointStatus:
    status = promoting()
    ends = PROMOTED_AT - timedelta(seconds=30)
    observation = LiveObservation(interval_end=ends, baseline=interval(), candidate=interval())
    measured = Measurement(ActionKind.JUDGE_LIVE, 0, live=(observation,))
    status = parse_status(record(status.dump(), measured, parse_spec(data), ends))
    status, _, events = wake(status, PROMOTED, data, PROMOTED_AT)
    assert status.phase.value == "Succeeded" and "CandidatePromoted" in events
    assert status.rollout.bake is not None and status.rollout.bake.active
    return status


def test_drift_during_the_bake_serves_the_twin_alone_and_keeps_the_baseline_to_return_to() -> None:
    data = drift_spec(baselineRetention="1h")
    status = baking(data)
    bake = status.rollout.bake
    assert bake is not None
    bake.judge.acceptance_below_floor = 2
    status, actions, events = wake(status, PROMOTED, data, PROMOTED_AT + timedelta(seconds=120))
    _, config, update = twin_made(actions, NAMES.twin_promoted_config)
    assert serves_the_twin_alone(config)
    assert json.dumps(update.request).count(NAMES.twin_promoted_config) == 1
    assert status.phase.value == "Succeeded" and "SpeculationDisabling" in events
    switch = status.rollout.speculation_disabled
    assert switch is not None and switch.during is SpeculationStage.BAKE
    # Serving: the bake goes on (not Stopped), its judge afresh.
    status, actions, events = wake(
        status, TWIN_PROMOTED, data, PROMOTED_AT + timedelta(seconds=180)
    )
    assert "SpeculationDisabled" in events and "BakeStopped" not in events
    bake = status.rollout.bake
    assert bake is not None and bake.active and bake.judge.acceptance_below_floor == 0
    assert status.sagemaker.baseline_endpoint_config == NAMES.baseline_config
    # The retained baseline is still the way back.
    status, actions, events = wake(
        status,
        TWIN_PROMOTED,
        data,
        PROMOTED_AT + timedelta(seconds=200),
        annotations={"optimizer.dev/rollback": "true"},
    )
    assert status.phase.value == "RollingBack" and "ManualRollback" in events
    assert kinds(actions) == [ActionKind.UPDATE_ENDPOINT]
    assert actions[0].request["EndpointConfigName"] == NAMES.baseline_config


def test_the_alert_policy_never_makes_a_twin() -> None:
    data = drift_spec(onAcceptanceDrift="alert")
    status = drifted(deployed(data), data)
    status, actions, events = wake(status, ROLLOUT, data, NOW + timedelta(seconds=40))
    assert ActionKind.CREATE_MODEL not in kinds(actions)
    assert status.rollout.speculation_disabled is None and "AcceptanceDrift" in events


def test_the_switch_is_in_the_report_and_the_metrics() -> None:
    data = drift_spec()
    _, status = switched(data)
    status, _, _ = wake(status, TWIN, data, NOW + timedelta(seconds=60))
    body = {"metadata": {"name": "chat", "namespace": "ml"}, "spec": data, "status": status.dump()}
    html = render_report(body)
    assert "Speculation switched off" in html and NAMES.twin_model in html
    snapshot = snapshot_from_resource(data, status.dump())
    assert snapshot.speculation_disabled_at == (NOW + timedelta(seconds=40)).timestamp()
