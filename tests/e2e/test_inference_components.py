"""An endpoint whose model is an inference component, optimized by the real operator: the
candidate is a second component judged by InferenceComponentName, promoted by a rolling
update of the adopted component, or rolled back by deleting the candidate component."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from endpoint_optimizer.sandbox.config import Faults, LatencyRegression, SandboxConfig
from endpoint_optimizer.sandbox.testing import wait_for
from tests.e2e.conftest import E2E, GUARD, IMAGE, sandbox_config, spec

ENDPOINT = "chat-e2e"
COMPONENT = "chat-ic"
BASE_MODEL = "chat-base-model"
ENDS = {"Succeeded", "Failed", "RolledBack"}
ROLLOUT = {
    "strategy": "canary",
    "steps": [{"weight": 50, "pause": "1s"}],
    "analysis": {"onNoData": "pass"},
}


@pytest.fixture
def e2e_sandbox_config() -> SandboxConfig:
    """Served at 0.6 of model time, not conftest's 0.35: the promotion's latency alarm sits
    on the adopted component, whose ModelLatency (model time, unscaled) in the alarm's
    period includes the baseline's own comparison requests, and its ceiling is twice the
    baseline's measured (scaled) p99. At 0.35 the baseline's own requests read 2.9x that
    p99 and fire it; at 0.6 they read 1.7x, as on SageMaker they would read about 1x."""
    return sandbox_config(serving_time_scale=0.6)


def _component_endpoint(e2e: E2E, instances: int = 2, **variant: Any) -> str:
    """The team's endpoint built for inference components, its model in one component of
    one copy on all four accelerators of an instance; a second instance is the room a
    second component needs. `variant`: more ProductionVariant members. Returns the
    EndpointArn (the adoption proof)."""
    base = spec()
    sm = e2e.sandbox.client("sagemaker")
    sm.create_model(
        ModelName=BASE_MODEL,
        ExecutionRoleArn=base["executionRoleArn"],
        PrimaryContainer={
            "Image": IMAGE,
            "ModelDataSource": {
                "S3DataSource": {
                    "S3Uri": base["model"]["s3Uri"],
                    "S3DataType": "S3Prefix",
                    "CompressionType": "None",
                }
            },
        },
    )
    sm.create_endpoint_config(
        EndpointConfigName=f"{ENDPOINT}-config",
        ExecutionRoleArn=base["executionRoleArn"],
        ProductionVariants=[
            {
                "VariantName": "AllTraffic",
                "InstanceType": base["instanceType"],
                "InitialInstanceCount": instances,
                **variant,
            }
        ],
    )
    sm.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName=f"{ENDPOINT}-config")
    wait_for(
        lambda: (
            sm.describe_endpoint(EndpointName=ENDPOINT)["EndpointStatus"] == "InService" or None
        ),
        timeout=30,
    )
    sm.create_inference_component(
        InferenceComponentName=COMPONENT,
        EndpointName=ENDPOINT,
        VariantName="AllTraffic",
        Specification={
            "ModelName": BASE_MODEL,
            "ComputeResourceRequirements": {
                "NumberOfAcceleratorDevicesRequired": 4,
                "MinMemoryRequiredInMb": 1024,
            },
        },
        RuntimeConfig={"CopyCount": 1},
    )
    wait_for(lambda: _described(e2e, COMPONENT)["InferenceComponentStatus"] == "InService" or None)
    return str(sm.describe_endpoint(EndpointName=ENDPOINT)["EndpointArn"])


def _described(e2e: E2E, name: str) -> dict[str, Any]:
    found: dict[str, Any] = e2e.sandbox.client("sagemaker").describe_inference_component(
        InferenceComponentName=name
    )
    return found


def _gone_or_deleting(e2e: E2E, name: str) -> bool:
    try:
        return bool(_described(e2e, name)["InferenceComponentStatus"] == "Deleting")
    except ClientError as exc:
        return "Could not find inference component" in exc.response["Error"]["Message"]


def _invoke(e2e: E2E, component: str) -> None:
    e2e.sandbox.client("sagemaker-runtime").invoke_endpoint(
        EndpointName=ENDPOINT,
        InferenceComponentName=component,
        ContentType="application/json",
        Body=json.dumps({"inputs": "hello", "parameters": {"max_new_tokens": 4}}).encode(),
    )


def _served_by(e2e: E2E, component: str) -> set[str]:
    """The Models whose copies answered requests to `component` (the traffic record)."""
    return {
        str(r.get("model"))
        for r in e2e.sandbox.admin.traffic(ENDPOINT)
        if r.get("inference_component") == component
    }


def _component_spec(arn: str) -> dict[str, Any]:
    return spec(
        rollout=ROLLOUT,
        adoptExisting=True,
        adoption={"endpointArn": arn},
        inferenceComponent={"name": COMPONENT},
    )


def test_a_component_endpoint_is_promoted_by_a_rolling_update(e2e: E2E) -> None:
    arn = _component_endpoint(e2e)
    names = e2e.create("chat", _component_spec(arn))
    obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "Succeeded", e2e.explain(obj)
    sm = status["sagemaker"]
    assert sm["baselineComponent"] == COMPONENT
    assert sm["candidateComponent"] == names.candidate_component
    assert sm["componentPromoted"] == names.candidate_model
    # Both components were benchmarked by name: the candidate's copies answered requests.
    assert _served_by(e2e, names.candidate_component) == {names.candidate_model}
    creates = [c for c in e2e.sandbox.admin.calls() if c["operation"] == "CreateInferenceComponent"]
    # The team's component (this test's setup), then the operator's candidate, once.
    assert [c["resource"] for c in creates] == [COMPONENT, names.candidate_component]
    # The adopted component holds the copies and serves the candidate's model; the
    # candidate component is gone, and the endpoint config never changed.
    described = _described(e2e, COMPONENT)
    assert described["InferenceComponentStatus"] == "InService"
    assert described["Specification"]["ModelName"] == names.candidate_model
    assert described["RuntimeConfig"]["CurrentCopyCount"] == 1
    assert (
        described["Specification"]["ComputeResourceRequirements"][
            "NumberOfAcceleratorDevicesRequired"
        ]
        == 4
    )
    deployment = described["LastDeploymentConfig"]
    alarms = [a["AlarmName"] for a in deployment["AutoRollbackConfiguration"]["Alarms"]]
    assert sorted(alarms) == sorted(sm["alarms"])
    assert wait_for(lambda: _gone_or_deleting(e2e, names.candidate_component) or None)
    assert e2e.serving(ENDPOINT)["EndpointConfigName"] == f"{ENDPOINT}-config"
    # Callers keep the name they invoke; it now reaches the candidate's model.
    before = len(e2e.sandbox.admin.traffic(ENDPOINT))
    _invoke(e2e, COMPONENT)
    latest = e2e.sandbox.admin.traffic(ENDPOINT)[before:]
    assert [(r["inference_component"], r["model"]) for r in latest] == [
        (COMPONENT, names.candidate_model)
    ]
    # The adopted model is never the operator's to delete: the way back stays open.
    e2e.sandbox.client("sagemaker").describe_model(ModelName=BASE_MODEL)


def test_a_slower_candidate_component_is_rolled_back(e2e: E2E) -> None:
    arn = _component_endpoint(e2e)
    names = e2e.create("chat", _component_spec(arn))
    # The candidate model serves three times slower than its configuration would.
    e2e.sandbox.admin.set_faults(
        Faults(latency_regressions=[LatencyRegression(model=names.candidate_model, factor=3.0)])
    )
    obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "RolledBack", e2e.explain(obj)
    assert [c["name"] for c in status["checks"] if c["verdict"] == "Fail"], e2e.explain(obj)
    assert status["sagemaker"]["componentPromoted"] == ""
    # The candidate component was measured, then deleted; the adopted one never changed.
    assert _served_by(e2e, names.candidate_component) == {names.candidate_model}
    assert wait_for(lambda: _gone_or_deleting(e2e, names.candidate_component) or None)
    described = _described(e2e, COMPONENT)
    assert described["InferenceComponentStatus"] == "InService"
    assert described["Specification"]["ModelName"] == BASE_MODEL
    assert described["RuntimeConfig"]["CurrentCopyCount"] == 1
    updates = [c for c in e2e.sandbox.admin.calls() if c["operation"] == "UpdateInferenceComponent"]
    assert updates == []
    before = len(e2e.sandbox.admin.traffic(ENDPOINT))
    _invoke(e2e, COMPONENT)
    latest = e2e.sandbox.admin.traffic(ENDPOINT)[before:]
    assert [(r["inference_component"], r["model"]) for r in latest] == [(COMPONENT, BASE_MODEL)]


def test_rollback_after_the_promotion_then_deletion_keep_the_team_component(e2e: E2E) -> None:
    arn = _component_endpoint(e2e)
    names = e2e.create("chat", _component_spec(arn))
    obj = e2e.wait_phase("chat", ENDS)
    assert obj["status"]["phase"] == "Succeeded", e2e.explain(obj)
    assert _described(e2e, COMPONENT)["Specification"]["ModelName"] == names.candidate_model
    # The adopted model is never deleted, so the way back has no expiry.
    e2e.cluster.annotate(e2e.namespace, "chat", {"optimizer.dev/rollback": "true"})
    obj = e2e.wait_phase("chat", {"RolledBack", "Failed"})
    assert obj["status"]["phase"] == "RolledBack", e2e.explain(obj)
    described = _described(e2e, COMPONENT)
    assert described["InferenceComponentStatus"] == "InService"
    assert described["Specification"]["ModelName"] == BASE_MODEL
    before = len(e2e.sandbox.admin.traffic(ENDPOINT))
    _invoke(e2e, COMPONENT)
    latest = e2e.sandbox.admin.traffic(ENDPOINT)[before:]
    assert [(r["inference_component"], r["model"]) for r in latest] == [(COMPONENT, BASE_MODEL)]
    # Deletion removes what the operator made, and only that.
    e2e.cluster.delete(e2e.namespace, "chat")
    e2e.cluster.wait_gone(e2e.namespace, "chat", timeout=GUARD, on_timeout=e2e.diagnostics)
    sm = e2e.sandbox.client("sagemaker")
    assert _described(e2e, COMPONENT)["Specification"]["ModelName"] == BASE_MODEL
    sm.describe_model(ModelName=BASE_MODEL)
    assert e2e.serving(ENDPOINT)["EndpointStatus"] == "InService"
    try:
        sm.describe_model(ModelName=names.candidate_model)
    except ClientError as exc:
        assert "Could not find model" in exc.response["Error"]["Message"]
    else:
        raise AssertionError(f"{names.candidate_model} was left behind")
    assert _gone_or_deleting(e2e, names.candidate_component)


def _kill_on_call(e2e: E2E, operation: str, resource: str, seen: int) -> int:
    """SIGKILL the operator the moment `operation` on `resource` succeeds (before it can
    write status), restart it; return how far the call log was read."""

    def hit() -> int | None:
        calls = e2e.sandbox.admin.calls(since=seen)
        for i, record in enumerate(calls):
            if (
                record["operation"] == operation
                and record["resource"] == resource
                and not record.get("errorCode")
            ):
                return seen + i + 1
        return None

    reached = wait_for(hit, timeout=GUARD)
    e2e.operator.kill()
    e2e.operator.start()
    return reached


def test_a_killed_operator_finds_its_component_and_its_rolling_update(e2e: E2E) -> None:
    arn = _component_endpoint(e2e)
    names = e2e.create("chat", _component_spec(arn))
    seen = _kill_on_call(e2e, "CreateInferenceComponent", names.candidate_component, 0)
    _kill_on_call(e2e, "UpdateInferenceComponent", COMPONENT, seen)
    obj = e2e.wait_phase("chat", ENDS)
    assert obj["status"]["phase"] == "Succeeded", e2e.explain(obj)
    # No twin: one candidate component was made (a repeated create found its own), and
    # one rolling update.
    calls = [c for c in e2e.sandbox.admin.calls() if not c.get("errorCode")]
    creates = [c["resource"] for c in calls if c["operation"] == "CreateInferenceComponent"]
    assert creates == [COMPONENT, names.candidate_component]
    updates = [c["resource"] for c in calls if c["operation"] == "UpdateInferenceComponent"]
    assert updates == [COMPONENT]
    described = _described(e2e, COMPONENT)
    assert described["Specification"]["ModelName"] == names.candidate_model
    assert obj["status"]["sagemaker"]["inferenceComponents"] == [names.candidate_component]
    assert wait_for(lambda: _gone_or_deleting(e2e, names.candidate_component) or None)


def _managed_component_endpoint(e2e: E2E) -> str:
    """As `_component_endpoint`, on a variant under managed instance scaling from one
    instance to two: the candidate's copy needs the second instance, so its start includes
    the instance provisioning a scale from zero needs too."""
    return _component_endpoint(
        e2e,
        instances=1,
        ManagedInstanceScaling={"Status": "ENABLED", "MinInstanceCount": 1, "MaxInstanceCount": 2},
    )


@contextmanager
def _production_traffic(e2e: E2E) -> Iterator[None]:
    """Callers invoking the adopted component back to back until the block ends."""
    stop = threading.Event()

    def send() -> None:
        runtime = e2e.sandbox.client("sagemaker-runtime")
        while not stop.is_set():
            # A refusal is not an invocation CloudWatch counts; keep calling.
            with suppress(ClientError):
                runtime.invoke_endpoint(
                    EndpointName=ENDPOINT,
                    InferenceComponentName=COMPONENT,
                    ContentType="application/json",
                    Body=json.dumps({"inputs": "hi", "parameters": {"max_new_tokens": 4}}).encode(),
                )

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        yield
    finally:
        stop.set()
        sender.join(timeout=GUARD)


# The sandbox's clock moves on the next control-plane call after a transition (its lazy
# clock), so LastModifiedTime lands up to one poll late; under a loaded CI host the
# operator's polls (0.2 s) stretch, hence the margin.
POLL_RESOLUTION_S = 2.0


def test_a_promoted_component_reports_scale_to_zero_with_its_measured_cold_start(
    e2e: E2E, e2e_sandbox_config: SandboxConfig
) -> None:
    arn = _managed_component_endpoint(e2e)
    with _production_traffic(e2e):
        e2e.create("chat", _component_spec(arn))
        obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "Succeeded", e2e.explain(obj)
    stz = status["scaleToZero"]
    # The candidate's copy needed the variant's second instance: its measured start is the
    # sandbox's instance provisioning plus its component start, scaled.
    durations = e2e_sandbox_config.durations
    modelled = (
        durations.instance_provision + durations.inference_component_create
    ) * e2e_sandbox_config.time_scale
    assert stz["coldStartMeasured"] == ["componentStart", "instanceProvision"]
    assert modelled - 0.01 <= stz["coldStartSeconds"] <= modelled + POLL_RESOLUTION_S, stz
    # One copy on all 4 accelerators of an ml.g6e.12xlarge: one instance always-on.
    assert stz["instances"] == 1
    assert stz["alwaysOnInstanceHoursPerDay"] == 24
    # Callers invoked it back to back through the window: no minute idle, so scaling to
    # zero would release nothing and start nothing cold.
    assert stz["windowMinutes"] >= 1
    assert stz["scaleToZeroInstanceHoursPerDay"] == 24
    assert stz["coldStartsPerDay"] == 0
    assert stz["requestsMeetingColdStartPerDay"] == 0
    # The count read from CloudWatch is the adopted component's served requests in the
    # window's minutes (arrival time), less those still in flight when it was read.
    start = datetime.fromisoformat(stz["windowStart"]).timestamp() // 60 * 60
    end = datetime.fromisoformat(stz["measuredAt"]).timestamp()
    served = [
        r
        for r in e2e.sandbox.admin.traffic(ENDPOINT)
        if r.get("inference_component") == COMPONENT
        and r.get("error") != "NoCapacity"
        and start <= float(r["wall_time"]) < end
    ]
    assert len(served) - 3 <= stz["requestsInWindow"] <= len(served), (len(served), stz)
    assert stz["requestsInWindow"] > 0
    posted = [e.get("reason") for e in e2e.cluster.events(e2e.namespace)]
    assert posted.count("ScaleToZeroCompared") == 1, posted
