"""spec.inferenceComponent through the pure decide(): the candidate component, its
crash-safe creation, the promotion by rolling update, the way back, and the finalizer."""

from __future__ import annotations

from typing import Any

from endpoint_optimizer.api import (
    DeletionPolicy,
    OptimizedEndpointStatus,
    Phase,
    parse_status,
)
from endpoint_optimizer.pipeline.cleanup import cleanup
from endpoint_optimizer.pipeline.decide import decide
from endpoint_optimizer.pipeline.model import (
    Action,
    ActionKind,
    ComponentView,
    EndpointView,
    JobView,
    Observations,
    Resource,
    Timing,
    VariantView,
)
from endpoint_optimizer.sagemaker import requests as rq
from tests.unit.pipeline.test_decide import NAMES, NOW, OWNER, spec

ARN = "arn:aws:sagemaker:us-east-1:123456789012:endpoint/chat"
BASE_SPEC = {
    "ModelName": "team-model",
    "Container": {"DeployedImage": {"SpecifiedImage": "x"}},
    "ComputeResourceRequirements": {
        "NumberOfAcceleratorDevicesRequired": 4,
        "MinMemoryRequiredInMb": 1024,
    },
    "StartupParameters": {"ModelDataDownloadTimeoutInSeconds": 600},
}
ENDPOINT = EndpointView(
    name="chat",
    status="InService",
    config_name="team-config",
    variants=(VariantView("AllTraffic", "", 1.0),),
    arn=ARN,
)
JOBS = {NAMES.job: JobView(NAMES.job, "COMPLETED", output_s3_uri="s3://models/out/x/")}


def ic_spec(**rollout: Any) -> dict[str, Any]:
    return spec(
        adoptExisting=True,
        adoption={"endpointArn": ARN},
        inferenceComponent={"name": "team-ic"},
        rollout=rollout or {"strategy": "canary", "steps": [{"weight": 50, "pause": "1m"}]},
    )


def component(
    name: str = "team-ic", model: str = "team-model", status: str = "InService", copies: int = 2
) -> ComponentView:
    return ComponentView(
        name=name,
        status=status,
        endpoint_name="chat",
        variant_name="AllTraffic",
        model_name=model,
        desired_copies=copies,
        current_copies=copies,
        specification={**BASE_SPEC, "ModelName": model},
    )


def run(
    status: OptimizedEndpointStatus | None,
    *components: ComponentView,
    spec_data: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    generation: int = 1,
) -> tuple[OptimizedEndpointStatus, list[Action]]:
    decision = decide(
        spec_data if spec_data is not None else ic_spec(),
        status or parse_status({}),
        Observations(endpoint=ENDPOINT, jobs=JOBS, components={c.name: c for c in components}),
        Resource(OWNER, generation, annotations or {}),
        NOW,
        Timing(time_scale=1.0),
    )
    return parse_status(decision.status), decision.actions


def baselined() -> OptimizedEndpointStatus:
    status, actions = run(None, component())
    assert [a.kind for a in actions] == [ActionKind.MEASURE_BASELINE]
    # Measurements name the component where they otherwise name a variant.
    assert actions[0].baseline_variant == "team-ic"
    sm = status.sagemaker
    assert (sm.baseline_component, sm.baseline_component_model) == ("team-ic", "team-model")
    assert status.baseline is not None
    status.baseline.measured_at = NOW
    status.phase = Phase.DEPLOYING
    return status


def test_a_missing_component_fails_naming_the_field_before_any_action() -> None:
    status, actions = run(None)
    assert status.phase is Phase.FAILED
    assert "spec.inferenceComponent.name" in status.message
    assert actions == []


def test_the_candidate_component_copies_the_baseline_copies_and_compute() -> None:
    status, actions = run(baselined(), component())
    assert [a.kind for a in actions] == [
        ActionKind.CREATE_MODEL,
        ActionKind.CREATE_INFERENCE_COMPONENT,
    ]
    create = actions[1].request
    assert create["InferenceComponentName"] == NAMES.candidate_component
    assert create["VariantName"] == "AllTraffic"
    assert create["RuntimeConfig"] == {"CopyCount": 2}
    assert create["Specification"] == {
        "ModelName": NAMES.candidate_model,
        "ComputeResourceRequirements": BASE_SPEC["ComputeResourceRequirements"],
        "StartupParameters": BASE_SPEC["StartupParameters"],
    }
    assert create["Tags"] == rq.tags(OWNER.tag_value())
    assert status.sagemaker.inference_components == [NAMES.candidate_component]


def test_a_lost_status_write_finds_the_candidate_component_instead_of_a_twin() -> None:
    # The create went through, the status write did not: the next wake-up sees the
    # deterministic name, records it, and creates nothing.
    lost = baselined()
    candidate = component(NAMES.candidate_component, NAMES.candidate_model)
    status, actions = run(lost, component(), candidate)
    assert not [a for a in actions if a.kind is ActionKind.CREATE_INFERENCE_COMPONENT]
    assert status.sagemaker.inference_components == [NAMES.candidate_component]
    assert status.phase is Phase.ANALYZING
    compare = [a for a in actions if a.kind is ActionKind.COMPARE]
    assert [(a.baseline_variant, a.candidate_variant) for a in compare] == [
        ("team-ic", NAMES.candidate_component)
    ]


def promoting() -> OptimizedEndpointStatus:
    status, _ = run(
        baselined(), component(), component(NAMES.candidate_component, NAMES.candidate_model)
    )
    status.phase = Phase.PROMOTING
    return status


def test_the_promotion_deletes_the_candidate_then_rolls_the_adopted_component() -> None:
    candidate = component(NAMES.candidate_component, NAMES.candidate_model)
    status, actions = run(promoting(), component(), candidate)
    assert [a.kind for a in actions] == [ActionKind.DELETE_INFERENCE_COMPONENT]
    status, actions = run(status, component())
    kinds = [a.kind for a in actions]
    assert kinds == [
        ActionKind.PUT_ALARM,
        ActionKind.PUT_ALARM,
        ActionKind.UPDATE_INFERENCE_COMPONENT,
    ]
    update = actions[-1].request
    assert update["InferenceComponentName"] == "team-ic"
    assert update["Specification"]["ModelName"] == NAMES.candidate_model
    policy = update["DeploymentConfig"]["RollingUpdatePolicy"]
    # The canary's first step is the batch, its pause the bake.
    assert policy == {
        "MaximumBatchSize": {"Type": "CAPACITY_PERCENT", "Value": 50},
        "WaitIntervalInSeconds": 60,
    }
    alarms = update["DeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"]
    assert [a["AlarmName"] for a in alarms] == status.sagemaker.alarms
    assert actions[0].request["Dimensions"] == [
        {"Name": "InferenceComponentName", "Value": "team-ic"}
    ]
    # Rolling: wait. Done: promoted.
    status, actions = run(status, component(status="Updating"))
    assert actions == [] and status.phase is Phase.PROMOTING
    done, _ = run(status, component(model=NAMES.candidate_model))
    assert done.phase is Phase.SUCCEEDED
    assert done.sagemaker.component_promoted == NAMES.candidate_model
    # SageMaker's auto-rollback kept the old model: never success.
    back, actions = run(status, component())
    assert back.phase is Phase.ROLLED_BACK
    assert any(h.event == "PromotionRolledBack" for h in back.history)


def test_the_rollback_lever_after_a_promotion_updates_the_component_back() -> None:
    status, _ = run(promoting(), component(model=NAMES.candidate_model))
    assert status.phase is Phase.SUCCEEDED
    lever = {"optimizer.dev/rollback": "true"}
    status, actions = run(status, component(model=NAMES.candidate_model), annotations=lever)
    assert status.phase is Phase.ROLLING_BACK
    (update,) = actions
    assert update.kind is ActionKind.UPDATE_INFERENCE_COMPONENT
    assert update.request["Specification"]["ModelName"] == "team-model"
    status, actions = run(status, component(), annotations=lever)
    assert status.phase is Phase.ROLLED_BACK and actions == []


def test_an_unparseable_spec_still_finds_the_way_back_from_status() -> None:
    candidate = component(NAMES.candidate_component, NAMES.candidate_model)
    status, _ = run(baselined(), component(), candidate)
    assert status.phase is Phase.ANALYZING
    status, actions = run(status, component(), candidate, spec_data={"endpointName": 3})
    assert status.phase is Phase.ROLLING_BACK
    assert [a.kind for a in actions] == [ActionKind.DELETE_INFERENCE_COMPONENT]
    status, actions = run(
        status,
        component(),
        component(NAMES.candidate_component, status="Deleting"),
        spec_data={"endpointName": 3},
    )
    assert status.phase is Phase.FAILED and actions == []


def test_the_finalizer_deletes_only_the_operator_s_components_and_keeps_the_served_model() -> None:
    status, _ = run(promoting(), component(model=NAMES.candidate_model))
    candidate = component(NAMES.candidate_component, NAMES.candidate_model)
    observed = Observations(
        endpoint=ENDPOINT,
        components={"team-ic": component(model=NAMES.candidate_model), candidate.name: candidate},
    )
    result = cleanup(status, observed, DeletionPolicy.DELETE)
    deleted = [(a.kind, a.resource) for a in result.actions]
    assert (ActionKind.DELETE_INFERENCE_COMPONENT, NAMES.candidate_component) in deleted
    assert not [r for k, r in deleted if r == "team-ic"]
    # The adopted component serves the promoted model: it stays.
    assert (ActionKind.DELETE_MODEL, NAMES.candidate_model) not in deleted
    assert not result.done
    gone = Observations(endpoint=ENDPOINT, components={"team-ic": component()})
    result = cleanup(status, gone, DeletionPolicy.DELETE)
    assert result.done
    assert (ActionKind.DELETE_MODEL, NAMES.candidate_model) in [
        (a.kind, a.resource) for a in result.actions
    ]


def test_a_new_generation_after_a_promotion_takes_what_serves_now_as_its_baseline() -> None:
    promoted = component(model=NAMES.candidate_model)
    status, _ = run(promoting(), promoted)
    assert status.phase is Phase.SUCCEEDED
    status, actions = run(status, promoted, generation=2)
    sm = status.sagemaker
    # Kept across generations: the component made, and the adopted one as the baseline.
    assert sm.inference_components == [NAMES.candidate_component]
    assert sm.baseline_component == "team-ic"
    assert sm.baseline_component_model == NAMES.candidate_model
    assert [a.kind for a in actions] == [ActionKind.MEASURE_BASELINE]
    # Nothing to undo: the generation-1 promotion is what generation 2 improves on.
    assert not [a for a in actions if a.kind is ActionKind.UPDATE_INFERENCE_COMPONENT]


def test_a_new_generation_mid_analysis_deletes_the_candidate_component_first() -> None:
    candidate = component(NAMES.candidate_component, NAMES.candidate_model)
    status, _ = run(baselined(), component(), candidate)
    assert status.phase is Phase.ANALYZING
    status, actions = run(status, component(), candidate, generation=2)
    assert status.phase is Phase.ROLLING_BACK
    assert [(a.kind, a.resource) for a in actions] == [
        (ActionKind.DELETE_INFERENCE_COMPONENT, NAMES.candidate_component)
    ]
    deleting = component(NAMES.candidate_component, NAMES.candidate_model, status="Deleting")
    status, actions = run(status, component(), deleting, generation=2)
    assert status.observed_generation == 2
    assert [a.kind for a in actions] == [ActionKind.MEASURE_BASELINE]
    assert status.sagemaker.baseline_component_model == "team-model"
