"""Ownership proven, not assumed: tags on what the operator makes, proofs for what it adopts.

Wake-ups and the finalizer against the sandbox with real boto3; the sandbox's state, tags
(ListTags) and call log are the evidence.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from botocore.config import Config

from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.errors import ErrorKind, SageMakerError
from endpoint_optimizer.aws.perform import perform_call
from endpoint_optimizer.controller.finalize import finalize
from endpoint_optimizer.controller.options import OperatorOptions
from endpoint_optimizer.controller.reconcile import Dependencies, wake
from endpoint_optimizer.metrics.exporter import OperatorMetrics
from endpoint_optimizer.pipeline.model import Action, ActionKind
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sandbox.config import Faults
from endpoint_optimizer.sandbox.testing import SandboxHandle
from tests.e2e.conftest import IMAGE
from tests.e2e.conftest import spec as e2e_spec
from tests.unit.controller.test_reconcile import ENDPOINT, UID, make_body, merge, wake_until

OWNER = f"ml/chat/{UID}"
ROLE = "arn:aws:iam::123456789012:role/sagemaker-exec"


def foreign_endpoint(sandbox: SandboxHandle, tags: list[dict[str, str]] | None = None) -> str:
    """Another team's endpoint named ENDPOINT, InService; returns its config's name."""
    sm = sandbox.client("sagemaker")
    sm.create_model(
        ModelName="theirs",
        ExecutionRoleArn=ROLE,
        PrimaryContainer={"Image": IMAGE, "ModelDataUrl": "s3://models/theirs/"},
    )
    variant = {"VariantName": "AllTraffic", "ModelName": "theirs"}
    sm.create_endpoint_config(
        EndpointConfigName="theirs-config",
        ProductionVariants=[
            variant | {"InstanceType": "ml.g6e.2xlarge", "InitialInstanceCount": 1}
        ],
    )
    sm.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName="theirs-config", Tags=tags or [])
    deadline = time.monotonic() + 30
    while sm.describe_endpoint(EndpointName=ENDPOINT)["EndpointStatus"] != "InService":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return "theirs-config"


def touched(sandbox: SandboxHandle, *names: str) -> list[str]:
    """Calls that change or delete one of `names`."""
    changing = ("Update", "Delete", "Stop", "AddTags")
    return [
        f"{c['operation']} {c['resource']}"
        for c in sandbox.admin.calls()
        if c["operation"].startswith(changing) and c["resource"] in names
    ]


async def test_everything_the_operator_makes_carries_its_owner_tag(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    rollout = {"strategy": "blueGreen", "steps": [{"weight": 100, "pause": "1s"}]}
    body = make_body(e2e_spec(endpointName=ENDPOINT, rollout=rollout))
    await wake_until(deps, body, lambda s: s.get("phase") in ("Succeeded", "Failed", "RolledBack"))
    # The outcome does not matter here (deterministic serving: no gain), what was made does.
    assert body["status"]["phase"] != "Failed", body["status"].get("message")
    sm = sandbox.client("sagemaker")
    state = sandbox.admin.state()
    arns = [sm.describe_endpoint(EndpointName=ENDPOINT)["EndpointArn"]]
    arns += [sm.describe_model(ModelName=m)["ModelArn"] for m in state["models"]]
    arns += [
        sm.describe_endpoint_config(EndpointConfigName=c)["EndpointConfigArn"]
        for c in state["endpointConfigs"]
    ]
    arns += [
        sm.describe_optimization_job(OptimizationJobName=j)["OptimizationJobArn"]
        for j in state["optimizationJobs"]
    ]
    assert len(arns) >= 5
    for arn in arns:
        tags = {t["Key"]: t["Value"] for t in sm.list_tags(ResourceArn=arn)["Tags"]}
        assert tags.get("optimizer.dev/owner") == OWNER, arn
    for alarm in rq.rollback_alarms("e", "v", "a", 0.01, 500, OWNER):
        assert alarm["Tags"] == [{"Key": "optimizer.dev/owner", "Value": OWNER}]


def create_endpoint(config: str) -> Action:
    request = rq.create_endpoint(ENDPOINT, config, OWNER)
    return Action(ActionKind.CREATE_ENDPOINT, ENDPOINT, request)


async def test_an_endpoint_that_already_exists_is_adopted_only_when_it_proves_ours(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    foreign_endpoint(sandbox)
    with pytest.raises(SageMakerError) as raised:
        await perform_call(deps.aws, "us-east-1", create_endpoint("ml-chat-base-g1-x"))
    assert raised.value.kind is ErrorKind.NOT_OURS and not raised.value.retryable
    assert "spec.endpointName" in str(raised.value) and "theirs-config" in str(raised.value)
    assert touched(sandbox, ENDPOINT, "theirs-config", "theirs") == []
    # Our own create seen again (a lost answer, a crash): it serves the config it named.
    await perform_call(deps.aws, "us-east-1", create_endpoint("theirs-config"))
    # Or it carries this resource's owner tag, whatever it serves now.
    sm = sandbox.client("sagemaker")
    arn = sm.describe_endpoint(EndpointName=ENDPOINT)["EndpointArn"]
    sm.add_tags(ResourceArn=arn, Tags=[{"Key": "optimizer.dev/owner", "Value": OWNER}])
    await perform_call(deps.aws, "us-east-1", create_endpoint("ml-chat-base-g1-x"))


async def test_an_endpoint_made_by_someone_else_while_our_create_failed_is_never_ours(
    sandbox: SandboxHandle,
) -> None:
    aws = AwsClients(
        max_concurrency=2, config=Config(retries={"mode": "standard", "total_max_attempts": 1})
    )
    deps = Dependencies(aws, OperatorMetrics(), OperatorOptions(poll_interval=0.05))
    try:
        body = make_body(e2e_spec(endpointName=ENDPOINT, deletionPolicy="Delete"))
        sandbox.admin.set_faults(
            Faults(throttle_fraction=1.0, throttle_operations=["CreateEndpoint"])
        )
        first = await wake(deps, body, {})
        merge(body["status"], first.status_patch)
        # The create failed: status names no endpoint as the operator's.
        assert body["status"]["sagemaker"].get("endpointName", "") == ""
        assert body["status"]["retry"]["reason"] == "Throttled"
        sandbox.admin.clear_faults()
        foreign_endpoint(sandbox)  # another team's, made meanwhile under the same name
        body["status"]["retry"]["nextAttemptAt"] = "2000-01-01T00:00:00Z"
        second = await wake(deps, body, {})
        merge(body["status"], second.status_patch)
        assert body["status"]["phase"] == "Failed"
        assert "EndpointExists" in [e.reason for e in second.events]
        body["metadata"]["deletionTimestamp"] = "2025-01-02T00:00:00Z"
        deadline = time.monotonic() + 30
        while await finalize(deps, body) is not None:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
    finally:
        aws.close()
    assert ENDPOINT in sandbox.admin.state()["endpoints"]
    assert touched(sandbox, ENDPOINT, "theirs-config", "theirs") == []
    assert not any(c["operation"] == "InvokeEndpoint" for c in sandbox.admin.calls())
    assert sandbox.admin.traffic_records(ENDPOINT) == []


def adopting(adoption: dict[str, Any]) -> dict[str, Any]:
    return e2e_spec(
        endpointName=ENDPOINT, adoptExisting=True, adoption=adoption, deletionPolicy="Delete"
    )


@pytest.mark.parametrize(
    ("adoption", "tags", "proven"),
    [
        ({"byTag": True}, [], False),
        ({"byTag": True}, [{"Key": "optimizer.dev/adopt", "Value": "ml/other"}], False),
        ({"byTag": True}, [{"Key": "optimizer.dev/adopt", "Value": "ml/chat"}], True),
        ({"endpointArn": "arn:aws:sagemaker:us-east-1:999999999999:endpoint/x"}, [], False),
        (
            {"endpointArn": f"arn:aws:sagemaker:us-east-1:123456789012:endpoint/{ENDPOINT}"},
            [],
            True,
        ),
    ],
)
async def test_adopting_an_endpoint_needs_the_proof_the_spec_states(
    deps: Dependencies,
    sandbox: SandboxHandle,
    adoption: dict[str, Any],
    tags: list[dict[str, str]],
    proven: bool,
) -> None:
    foreign_endpoint(sandbox, tags)
    body = make_body(adopting(adoption))
    ended = ("Failed", "Succeeded", "RolledBack", "Optimizing")
    woken = await wake_until(deps, body, lambda s: s.get("phase") in ended)
    status = body["status"]
    if not proven:
        assert status["phase"] == "Failed"
        assert "AdoptionNotProven" in [e.reason for w in woken for e in w.events]
        assert "spec.adoption" in status["message"]
        assert status["sagemaker"].get("endpointName", "") == ""
        assert sandbox.admin.traffic_records(ENDPOINT) == [], "not even benchmarked"
    else:
        assert status["phase"] == "Optimizing", status.get("message")
        assert status["sagemaker"]["adopted"] is True
    # deletionPolicy Delete on an adopted (or refused) endpoint deletes nothing of theirs.
    body["metadata"]["deletionTimestamp"] = "2025-01-02T00:00:00Z"
    deadline = time.monotonic() + 30
    while await finalize(deps, body) is not None:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    state = sandbox.admin.state()
    assert ENDPOINT in state["endpoints"]
    assert "theirs-config" in state["endpointConfigs"] and "theirs" in state["models"]
    assert [t for t in touched(sandbox, ENDPOINT, "theirs-config", "theirs") if "Delete" in t] == []


async def test_an_execution_role_the_operator_was_not_given_is_refused_before_any_create(
    sandbox: SandboxHandle,
) -> None:
    options = OperatorOptions(
        poll_interval=0.05, execution_roles=("arn:aws:iam::123456789012:role/allowed",)
    )
    deps = Dependencies(AwsClients(max_concurrency=1), OperatorMetrics(), options)
    try:
        woken = await wake(deps, make_body(), {})
    finally:
        deps.aws.close()
    assert woken.status_patch["phase"] == "Failed"
    assert "spec.executionRoleArn" in woken.status_patch["message"]
    assert "aws.executionRoleArns" in woken.status_patch["message"]
    assert [
        c["operation"] for c in sandbox.admin.calls() if c["operation"].startswith("Create")
    ] == []
