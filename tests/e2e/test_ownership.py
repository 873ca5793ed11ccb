"""Ownership proven, not assumed, by the real operator: adoption needs the spec's proof, and
deletionPolicy Delete never deletes what the operator did not create.

The user's endpoint is made in the sandbox before the resource; the sandbox's state, tags and
call log are the evidence.
"""

from __future__ import annotations

import time
from typing import Any

from tests.e2e.conftest import E2E, IMAGE, spec
from tests.e2e.harness import condition
from tests.e2e.test_crash import ENDPOINT, Prober

ENDS = {"Succeeded", "Failed", "RolledBack"}
ONE_STEP = {
    "strategy": "canary",
    "steps": [{"weight": 20, "pause": "1s"}],
    "analysis": {"onNoData": "pass"},
}
THEIRS = ("users-model", "users-config")


def users_endpoint(e2e: E2E, tags: list[dict[str, str]]) -> None:
    sm = e2e.sandbox.client("sagemaker")
    sm.create_model(
        ModelName=THEIRS[0],
        ExecutionRoleArn="arn:aws:iam::123456789012:role/sagemaker-exec",
        PrimaryContainer={"Image": IMAGE, "ModelDataUrl": "s3://models/llama-3-1-8b/"},
    )
    variant = {"VariantName": "AllTraffic", "ModelName": THEIRS[0]}
    sm.create_endpoint_config(
        EndpointConfigName=THEIRS[1],
        ProductionVariants=[
            variant | {"InstanceType": "ml.g6e.2xlarge", "InitialInstanceCount": 1}
        ],
    )
    sm.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName=THEIRS[1], Tags=tags)
    deadline = time.monotonic() + 30
    while sm.describe_endpoint(EndpointName=ENDPOINT)["EndpointStatus"] != "InService":
        assert time.monotonic() < deadline
        time.sleep(0.05)


def adopting(**extra: Any) -> dict[str, Any]:
    return spec(
        rollout=ONE_STEP,
        adoptExisting=True,
        adoption={"byTag": True},
        deletionPolicy="Delete",
        **extra,
    )


def deleted(e2e: E2E) -> list[str]:
    return [
        f"{c['operation']} {c['resource']}"
        for c in e2e.sandbox.admin.calls()
        if c["operation"].startswith("Delete") and not c.get("errorCode")
    ]


def test_an_adopted_endpoint_is_optimized_and_delete_removes_only_what_the_operator_made(
    e2e: E2E,
) -> None:
    users_endpoint(e2e, [{"Key": "optimizer.dev/adopt", "Value": f"{e2e.namespace}/chat"}])
    names = e2e.create("chat", adopting())
    with Prober(e2e) as prober:
        obj = e2e.wait_phase("chat", ENDS, timeout=90)
        # Promoted or rolled back (timings on a loaded host decide): either way the
        # operator made a candidate model and configs, and the endpoint is the user's.
        assert obj["status"]["phase"] in ("Succeeded", "RolledBack"), e2e.explain(obj)
        assert obj["status"]["sagemaker"]["adopted"] is True
        promoted = obj["status"]["phase"] == "Succeeded"
        e2e.cluster.delete(e2e.namespace, "chat")
        e2e.cluster.wait_gone(e2e.namespace, "chat", timeout=60, on_timeout=e2e.diagnostics)
    prober.assert_all_answered()
    state = e2e.sandbox.admin.state()
    # deletionPolicy Delete: the user's endpoint, config and model stay; it serves on.
    assert ENDPOINT in state["endpoints"], deleted(e2e)
    assert THEIRS[0] in state["models"] and THEIRS[1] in state["endpointConfigs"]
    assert not [d for d in deleted(e2e) if ENDPOINT in d or any(t in d for t in THEIRS)]
    served = e2e.serving(ENDPOINT)
    assert served["EndpointStatus"] == "InService"
    kept = names.promoted_config if promoted else THEIRS[1]
    assert served["EndpointConfigName"] == kept
    # What the operator made and nothing serves is gone.
    assert names.rollout_config not in state["endpointConfigs"]
    if not promoted:
        assert names.candidate_model not in state["models"]


def test_an_adoption_without_its_proof_touches_nothing(e2e: E2E) -> None:
    users_endpoint(e2e, [{"Key": "optimizer.dev/adopt", "Value": "another-team/chat"}])
    e2e.create("chat", adopting())
    obj = e2e.wait_phase("chat", ENDS, timeout=60)
    assert obj["status"]["phase"] == "Failed", e2e.explain(obj)
    terminal = condition(obj, "Terminal")
    assert terminal is not None and terminal["reason"] == "AdoptionNotProven"
    assert "spec.adoption.byTag" in terminal["message"]
    assert f"optimizer.dev/adopt={e2e.namespace}/chat" in terminal["message"]
    e2e.cluster.delete(e2e.namespace, "chat")
    e2e.cluster.wait_gone(e2e.namespace, "chat", timeout=60, on_timeout=e2e.diagnostics)
    assert e2e.sandbox.admin.traffic_records(ENDPOINT) == [], "not even benchmarked"
    changed = [
        c
        for c in e2e.sandbox.admin.calls()
        if c["operation"].startswith(("Update", "Delete", "Create"))
    ]
    assert [c["operation"] for c in changed if c["resource"] in (ENDPOINT, *THEIRS)] == [
        "CreateModel",
        "CreateEndpointConfig",
        "CreateEndpoint",
    ], "only the user's own creates"
