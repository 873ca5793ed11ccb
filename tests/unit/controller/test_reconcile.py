"""One wake-up without kopf: a plain body, real boto3 against the sandbox, our own clock.

What the handlers do with a Woken (patch status, post events) is kopf's part; here the
wake-up's own behaviour: what it asks SageMaker, the patch and events it returns, what
it remembers between wake-ups, and the finalizer's attempts.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.config import Config

from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.controller.finalize import finalize
from endpoint_optimizer.controller.options import OperatorOptions
from endpoint_optimizer.controller.reconcile import (
    Dependencies,
    Woken,
    claim,
    levers_moved,
    resource,
    wake,
)
from endpoint_optimizer.metrics.exporter import OperatorMetrics
from endpoint_optimizer.pipeline.model import APPROVE, PAUSE
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker.naming import Owner
from endpoint_optimizer.sandbox.config import Faults
from endpoint_optimizer.sandbox.testing import SandboxHandle, wait_for
from tests.e2e.conftest import spec as e2e_spec

UID = "uid-1"
ENDPOINT = "reconcile-test"
CREATES = ("CreateModel", "CreateEndpointConfig", "CreateEndpoint")


def make_body(
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    uid: str = UID,
) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ml",
            "name": "chat",
            "uid": uid,
            "generation": 1,
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "annotations": annotations or {},
        },
        "spec": spec if spec is not None else e2e_spec(endpointName=ENDPOINT),
        "status": status or {},
    }


def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """What the API server does with a status merge patch (RFC 7386)."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


async def finalize_until_done(deps: Dependencies, body: dict[str, Any]) -> None:
    """kopf's finalizer retries: attempt after attempt until the cleanup reports done."""
    deadline = time.monotonic() + 30
    while (waiting := await finalize(deps, body)) is not None:
        assert time.monotonic() < deadline, waiting
        await asyncio.sleep(0.02)


async def wake_until(
    deps: Dependencies, body: dict[str, Any], done: Callable[[dict[str, Any]], bool]
) -> list[Woken]:
    """Wake up as the heartbeat would, applying each patch, until `done(status)`."""
    woken: list[Woken] = []
    deadline = time.monotonic() + 60
    while not done(body["status"]):
        assert time.monotonic() < deadline, body["status"].get("message")
        woken.append(await wake(deps, body, {}))
        merge(body["status"], woken[-1].status_patch)
        await asyncio.sleep(0.02)
    return woken


async def wake_throttled(sandbox: SandboxHandle, operation: str) -> tuple[Woken, Dependencies]:
    """One wake-up while SageMaker throttles every `operation` call, botocore's retries off."""
    sandbox.admin.set_faults(Faults(throttle_fraction=1.0, throttle_operations=[operation]))
    aws = AwsClients(
        max_concurrency=1, config=Config(retries={"mode": "standard", "total_max_attempts": 1})
    )
    deps = Dependencies(aws, OperatorMetrics(), OperatorOptions())
    try:
        return await wake(deps, make_body(), {}), deps
    finally:
        aws.close()


def calls(sandbox: SandboxHandle, *operations: str) -> list[str]:
    return [c["operation"] for c in sandbox.admin.calls() if c["operation"] in operations]


async def test_a_wake_up_creates_the_baseline_and_returns_the_patch_and_its_events(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    moment = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
    deps.clock = lambda: moment
    body = make_body()
    woken = await wake(deps, body, {})
    assert woken.status_patch["phase"] == "Baselining"
    # The e2e spec waives its evaluation: that Warning comes first, once per generation.
    assert [(e.type, e.reason) for e in woken.events] == [
        ("Warning", "EvaluationWaived"),
        ("Normal", "BaselineStarted"),
    ]
    assert calls(sandbox, *CREATES) == list(CREATES)
    assert ENDPOINT in sandbox.admin.state()["endpoints"]
    # The status is stamped with the injected clock, and remembered as this process's write.
    assert woken.status_patch["history"][-1]["time"].startswith("2025-06-01T12:00:00")
    assert deps.freshness.latest(UID) == woken.status_patch
    # The metrics export the status the wake-up wrote.
    phase = deps.metrics.registry.get_sample_value(
        "endpoint_optimizer_phase", {"namespace": "ml", "name": "chat", "phase": "Baselining"}
    )
    assert phase == 1.0


async def test_a_stale_body_is_decided_from_the_status_this_process_wrote(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    stale = make_body()
    first = await wake(deps, stale, {})
    # The watch has not delivered the first patch yet: the body still has no status.
    second = await wake(deps, stale, {})
    assert calls(sandbox, *CREATES) == list(CREATES), "the creates were not repeated"
    assert "BaselineStarted" not in [e.reason for e in second.events]
    assert "phase" not in second.status_patch  # relative to the status written, not the body's
    assert first.status_patch["phase"] == "Baselining"


async def test_the_baseline_measurement_is_judged_and_recorded_by_the_pipeline(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    body = make_body()
    await wake_until(deps, body, lambda status: bool((status.get("baseline") or {}).get("levels")))
    baseline = body["status"]["baseline"]
    (level,) = baseline["levels"]
    assert level["concurrency"] == 4 and level["requests"] == 32 and level["errors"] == 0
    assert level["ttftP50Ms"] > 0 and baseline["measuredAt"]
    assert "BaselineBenchmarked" in [h["event"] for h in body["status"]["history"]]
    pinned = {r.variant for r in sandbox.admin.traffic_records(ENDPOINT)}
    assert pinned == {baseline["variantName"]}


async def test_an_observe_that_fails_is_a_retry_in_status_not_an_exception(
    sandbox: SandboxHandle,
) -> None:
    woken, deps = await wake_throttled(sandbox, "DescribeEndpoint")
    assert woken.status_patch["message"].startswith("retrying in ")
    assert "DescribeEndpoint" in woken.status_patch["lastError"]
    assert woken.status_patch["retry"]["attempt"] == 1
    assert woken.status_patch["retry"]["reason"] == "Throttled"
    assert [(e.type, e.reason) for e in woken.events if e.reason != "EvaluationWaived"] == [
        ("Warning", "Throttled")
    ]
    assert calls(sandbox, *CREATES) == []
    # What was written is what the next wake-up decides from, even before the watch has it.
    assert deps.freshness.latest(UID) == woken.status_patch


async def test_a_failed_action_is_a_warning_and_the_actions_after_it_are_not_tried(
    sandbox: SandboxHandle,
) -> None:
    woken, _ = await wake_throttled(sandbox, "CreateEndpointConfig")
    assert calls(sandbox, *CREATES) == ["CreateModel", "CreateEndpointConfig"]
    warnings = [e for e in woken.events if e.type == "Warning" and e.reason != "EvaluationWaived"]
    assert [e.reason for e in warnings] == ["Throttled"]
    assert "CreateEndpointConfig" in warnings[0].message
    # Throttling is retried by a later wake-up; the Warning comes before the decision's events.
    assert woken.status_patch["message"].startswith("retrying in ")
    assert woken.events[0] is warnings[0]


async def test_a_permanent_action_failure_is_terminal(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    sandbox.admin.set_faults(Faults(quota_exceeded=["CreateEndpoint"]))
    woken = await wake(deps, make_body(), {})
    warned = [e.reason for e in woken.events if e.type == "Warning"]
    assert [r for r in warned if r != "EvaluationWaived"] == ["QuotaExceeded"]
    assert woken.status_patch["phase"] == "Failed"
    terminal = [c for c in woken.status_patch["conditions"] if c["type"] == "Terminal"]
    assert terminal[0]["status"] == "True" and terminal[0]["reason"] == "QuotaExceeded"


async def test_a_spec_the_matrix_refuses_is_terminal_without_any_aws_call(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    # FP8 needs FP8 tensor cores; an A10G (ml.g5) has none.
    body = make_body(e2e_spec(endpointName=ENDPOINT, instanceType="ml.g5.2xlarge"))
    woken = await wake(deps, body, {})
    assert woken.status_patch["phase"] == "Failed"
    assert "fp8" in woken.status_patch["message"].lower()
    assert sandbox.admin.calls() == []


async def test_the_finalizer_waits_until_what_the_operator_made_is_gone(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    body = make_body(e2e_spec(endpointName=ENDPOINT, deletionPolicy="Delete"))
    await wake_until(deps, body, lambda status: bool(status.get("sagemaker", {}).get("models")))
    body["metadata"]["deletionTimestamp"] = "2025-01-02T00:00:00Z"
    await finalize_until_done(deps, body)
    state = sandbox.admin.state()
    assert ENDPOINT not in state["endpoints"] and not state["models"]
    assert deps.freshness.latest(UID) is None and UID not in deps.observed


async def test_the_finalizer_cleans_up_what_status_names_where_status_says(
    sandbox: SandboxHandle,
) -> None:
    regions: list[str] = []
    aws = AwsClients(max_concurrency=2, on_new_client=lambda c: regions.append(c.meta.region_name))
    options = OperatorOptions(poll_interval=0.05, time_scale=0.5, endpoint_recheck=0.1)
    deps = Dependencies(aws, OperatorMetrics(), options)
    try:
        body = make_body(e2e_spec(endpointName=ENDPOINT, deletionPolicy="Delete"))
        await wake_until(deps, body, lambda status: bool(status.get("sagemaker", {}).get("models")))
        assert body["status"]["sagemaker"]["region"] == "us-east-1"
        # The spec now names another endpoint and region (and does not parse either): the
        # cleanup still goes where status says the operator made things.
        body["spec"] = {
            "endpointName": "someone-else",
            "region": "eu-west-1",
            "deletionPolicy": "Delete",
        }
        body["metadata"]["deletionTimestamp"] = "2025-01-02T00:00:00Z"
        regions.clear()
        await finalize_until_done(deps, body)
    finally:
        aws.close()
    state = sandbox.admin.state()
    assert ENDPOINT not in state["endpoints"] and not state["models"]
    assert "eu-west-1" not in regions
    touched = {c["resource"] for c in sandbox.admin.calls() if c["operation"].startswith("De")}
    assert "someone-else" not in touched


@pytest.mark.parametrize("policy", ["Delete", "Retain"])
async def test_the_finalizer_removes_what_a_lost_status_write_left_unnamed_and_nothing_else(
    deps: Dependencies, sandbox: SandboxHandle, policy: str
) -> None:
    """The first wake-up creates the model, config and endpoint; its status write is lost
    (a crash) and the resource is deleted before another wake-up records them. Another
    resource of the same namespace/name (an earlier uid) keeps everything it made."""
    other = make_body(e2e_spec(endpointName="other-uid"), uid="uid-0")
    await wake_until(deps, other, lambda status: bool(status.get("sagemaker", {}).get("models")))
    theirs = sandbox.admin.state()
    body = make_body(e2e_spec(endpointName=ENDPOINT, deletionPolicy=policy))
    await wake_until(deps, body, lambda status: bool(status.get("sagemaker", {}).get("models")))
    mine = set(sandbox.admin.state()["models"]) - set(theirs["models"])
    assert mine, "the first wake-up made a model"
    body["status"] = {}
    body["metadata"]["deletionTimestamp"] = "2025-01-02T00:00:00Z"
    await finalize_until_done(deps, body)
    state = sandbox.admin.state()
    assert set(theirs["models"]) <= set(state["models"])
    assert set(theirs["endpointConfigs"]) <= set(state["endpointConfigs"])
    assert "other-uid" in state["endpoints"]
    if policy == "Delete":
        assert ENDPOINT not in state["endpoints"]
        assert not mine & set(state["models"])
        assert set(state["endpointConfigs"]) == set(theirs["endpointConfigs"])
    else:
        # Retained: the endpoint keeps serving the config and model it serves.
        assert ENDPOINT in state["endpoints"]
        assert mine <= set(state["models"])


async def test_the_finalizer_deletes_a_candidate_component_a_lost_write_left_unnamed(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    """spec.inferenceComponent: the candidate component holds accelerators while it lives.
    Its CreateInferenceComponent's status write is lost and the resource deleted: the
    finalizer's sweep finds it by name and deletes it; the team's component stays."""
    sm = sandbox.client("sagemaker")
    base = e2e_spec()
    source = {
        "S3DataSource": {
            "S3Uri": base["model"]["s3Uri"],
            "S3DataType": "S3Prefix",
            "CompressionType": "None",
        }
    }
    sm.create_model(
        ModelName="team-model",
        ExecutionRoleArn=base["executionRoleArn"],
        PrimaryContainer={"Image": base["model"]["image"], "ModelDataSource": source},
    )
    variant = {"VariantName": "AllTraffic", "InstanceType": base["instanceType"]}
    sm.create_endpoint_config(
        EndpointConfigName="team-config",
        ExecutionRoleArn=base["executionRoleArn"],
        ProductionVariants=[variant | {"InitialInstanceCount": 2}],
    )
    sm.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName="team-config")
    wait_for(lambda: sm.describe_endpoint(EndpointName=ENDPOINT)["EndpointStatus"] == "InService")
    sm.create_inference_component(
        InferenceComponentName="team-ic",
        EndpointName=ENDPOINT,
        VariantName="AllTraffic",
        Specification={
            "ModelName": "team-model",
            "ComputeResourceRequirements": {
                # The spec's model is a 70B: all four GPUs of an instance; the second
                # instance is the room the candidate component needs.
                "NumberOfAcceleratorDevicesRequired": 4,
                "MinMemoryRequiredInMb": 1024,
            },
        },
        RuntimeConfig={"CopyCount": 1},
    )
    wait_for(
        lambda: (
            sm.describe_inference_component(InferenceComponentName="team-ic")[
                "InferenceComponentStatus"
            ]
            == "InService"
        )
    )
    arn = sm.describe_endpoint(EndpointName=ENDPOINT)["EndpointArn"]
    body = make_body(
        e2e_spec(
            endpointName=ENDPOINT,
            adoptExisting=True,
            adoption={"endpointArn": arn},
            inferenceComponent={"name": "team-ic"},
        )
    )
    await wake_until(
        deps, body, lambda status: bool(status.get("sagemaker", {}).get("inferenceComponents"))
    )
    (candidate,) = body["status"]["sagemaker"]["inferenceComponents"]
    body["status"]["sagemaker"]["inferenceComponents"] = []  # the write that was lost
    body["metadata"]["deletionTimestamp"] = "2025-01-02T00:00:00Z"
    await finalize_until_done(deps, body)
    listed = sm.list_inference_components(EndpointNameEquals=ENDPOINT)["InferenceComponents"]
    left = {c["InferenceComponentName"]: c["InferenceComponentStatus"] for c in listed}
    assert left.get(candidate, "Deleting") == "Deleting", left
    assert left["team-ic"] == "InService"
    deleted = [c["resource"] for c in sandbox.admin.calls() if c["operation"].startswith("Delete")]
    assert candidate in deleted and "team-ic" not in deleted


async def test_the_finalizer_deletes_rollback_alarms_a_lost_write_left_unnamed(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    """A blue/green bake's rollback alarms were put, their status write lost, and the
    resource deleted: the sweep finds them by prefix and deletes them; the same alarms of
    another uid (a resource of the same namespace/name made before) and a person's
    lookalike stay."""
    cloudwatch = sandbox.client("cloudwatch")
    mine, before = Owner("ml", "chat", UID), Owner("ml", "chat", "uid-0")
    ours = [
        request["AlarmName"]
        for request in rq.rollback_alarms(ENDPOINT, "v", mine.resource_name("alarm", 1), 0.01, 900)
    ]
    kept = [
        *(
            request["AlarmName"]
            for request in rq.rollback_alarms(
                ENDPOINT, "v", before.resource_name("alarm", 1), 0.01, 900
            )
        ),
        "ml-chat-alarm-g1-00000000-errors",
    ]
    for name in [*ours, *kept]:
        cloudwatch.put_metric_alarm(
            AlarmName=name,
            Namespace="AWS/SageMaker",
            MetricName="Invocation5XXErrors",
            Statistic="Average",
            Period=60,
            EvaluationPeriods=1,
            Threshold=0.01,
            ComparisonOperator="GreaterThanThreshold",
        )
    body = make_body(e2e_spec(endpointName=ENDPOINT))
    body["metadata"]["deletionTimestamp"] = "2025-01-02T00:00:00Z"
    await finalize_until_done(deps, body)
    left = {a["AlarmName"] for a in cloudwatch.describe_alarms()["MetricAlarms"]}
    assert left == set(kept)


async def test_a_spec_that_never_parsed_is_finalized_without_any_aws_call(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    assert await finalize(deps, make_body({"endpointName": ENDPOINT})) is None
    assert sandbox.admin.calls() == []


def test_a_lever_wakes_once_and_only_while_it_differs_from_what_status_acted_on() -> None:
    deps = Dependencies(AwsClients(max_concurrency=1), OperatorMetrics(), OperatorOptions())
    try:
        approve = {APPROVE: "true"}
        body = make_body(annotations=approve)
        assert levers_moved(deps, "MODIFIED", body, None) == approve
        assert levers_moved(deps, "MODIFIED", body, approve) is None, "each set wakes once"
        acted = make_body(annotations=approve, status={"observedLevers": approve})
        assert levers_moved(deps, "MODIFIED", acted, None) is None
        # Removed since the last wake-up acted on it: that is a change too.
        removed = make_body(status={"observedLevers": approve})
        assert levers_moved(deps, "MODIFIED", removed, None) == {}
        assert levers_moved(deps, "MODIFIED", make_body(annotations={PAUSE: "true"}), None)
        assert levers_moved(deps, "DELETED", body, None) is None
        deleting = make_body(annotations=approve)
        deleting["metadata"]["deletionTimestamp"] = "2025-01-02T00:00:00Z"
        assert levers_moved(deps, "MODIFIED", deleting, None) is None
        assert levers_moved(deps, "MODIFIED", make_body(), None) is None
    finally:
        deps.aws.close()


def test_a_lever_acted_on_by_a_write_the_watch_has_not_delivered_does_not_wake_again() -> None:
    deps = Dependencies(AwsClients(max_concurrency=1), OperatorMetrics(), OperatorOptions())
    try:
        approve = {APPROVE: "true"}
        stale = make_body(annotations=approve, status={"phase": "AwaitingApproval"})
        acted = {"phase": "Promoting", "observedLevers": approve}
        deps.freshness.wrote(UID, stale["status"], acted)
        assert levers_moved(deps, "MODIFIED", stale, None) is None
    finally:
        deps.aws.close()


def test_rivals_are_the_other_resources_that_claim_the_same_endpoint() -> None:
    mine, theirs = make_body(), make_body(uid="uid-2")
    theirs["metadata"]["name"] = "older"
    theirs["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    index: dict[Any, list[Any]] = {}
    for body in (mine, theirs):
        for key, entry in claim(body).items():
            index.setdefault(key, []).append(entry)
    assert resource(mine, index).rivals == (("2024-01-01T00:00:00Z", "ml/older"),)
    assert resource(mine).rivals == ()
    assert resource(mine, index).owner.uid == UID


async def test_a_new_generation_stops_every_job_of_ours_still_running(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    """Not only the one the last generation waited on: a search also builds ahead."""
    body = make_body()
    await wake_until(deps, body, lambda status: bool(status.get("sagemaker", {}).get("models")))
    sm = sandbox.client("sagemaker")
    sandbox.admin.configure({"timeScale": 1.0})  # it runs for the rest of the test
    sm.create_optimization_job(
        OptimizationJobName="ml-chat-ahead-g1-0",
        RoleArn=body["spec"]["executionRoleArn"],
        ModelSource={"S3": {"S3Uri": "s3://models/llama-3.1-8b/"}},
        DeploymentInstanceType="ml.g6e.2xlarge",
        OptimizationConfigs=[
            {"ModelQuantizationConfig": {"OverrideEnvironment": {"OPTION_QUANTIZE": "awq"}}}
        ],
        OutputConfig={"S3OutputLocation": "s3://out/q/"},
        StoppingCondition={"MaxRuntimeInSeconds": 36000},
    )
    sandbox.admin.configure({"timeScale": 0.001})
    body["status"]["sagemaker"]["optimizationJobs"] = ["ml-chat-ahead-g1-0"]
    body["metadata"]["generation"] = 2
    body["spec"] = {**body["spec"], "instanceCount": 2}
    await wake(deps, body, {})
    stops = [
        c["resource"] for c in sandbox.admin.calls() if c["operation"] == "StopOptimizationJob"
    ]
    assert stops == ["ml-chat-ahead-g1-0"]
    status = sm.describe_optimization_job(OptimizationJobName="ml-chat-ahead-g1-0")
    assert status["OptimizationJobStatus"] in ("STOPPING", "STOPPED")
