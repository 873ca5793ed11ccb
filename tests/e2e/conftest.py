"""End-to-end fixtures: KMock + the sandbox + the real `endpoint-optimizer run` process.

`e2e` gives each test a fresh emulator, a fresh sandbox and an operator process
serving one namespace; `e2e.cluster` is a small kubectl, `e2e.sandbox` the
sandbox handle (admin: faults, traffic record, call log), `e2e.operator` the
process (log tail on failure, `kill()` for crash tests, `start()` to restart).

Deterministic under load: the sandbox runs in its own process (its streams never wait
for this process's GIL) and serves each variant at fixed timings from its own profile
(docs/sandbox.md, "Deterministic mode"), so a candidate's gain is exact and only the
host's scheduling can blur what the operator measures; tests wait on conditions, and
their deadlines are hang guards, not budgets a busy machine must meet.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from endpoint_optimizer.pipeline.plan import Names
from endpoint_optimizer.sagemaker.naming import Owner
from endpoint_optimizer.sandbox.config import DeterministicServing, SandboxConfig
from endpoint_optimizer.sandbox.engine import Engine
from endpoint_optimizer.sandbox.testing import (
    SandboxHandle,
    running_sandbox,
    running_sandbox_process,
)
from tests.e2e.harness import (
    Cluster,
    EmulatorThread,
    OperatorProcess,
    running_cluster,
    tempdir,
    write_kubeconfig,
)

NAMESPACE = "ml"
# Seconds between observations in tests; the sandbox's control plane runs at 1/1000 speed.
POLL_INTERVAL = "0.2"
# Spec pauses ("1s") shrink by this factor inside the operator.
TIME_SCALE = "0.5"
# Polls between the endpoint's re-describes while a job runs or after the end (the
# operator's default is 10). While a job runs, a wake-up at least this long after the last
# endpoint describe describes the endpoint instead of the job; a busy machine spacing
# wake-ups that far apart (under load ~1 s) starved the job's describe at 2 polls (0.4 s)
# and held a resource in Optimizing for minutes. 15 polls are 3 s.
ENDPOINT_RECHECK_POLLS = 15
# The client-saturation guard's bounds x this in the e2e operator (see the fixture).
LAG_TOLERANCE = "10"
# Least seconds between two writes of status.measurement (controller/progress.py).
PROGRESS_INTERVAL = "0.5"
# Seconds one wait may take before the test fails: a hang guard, not a budget. What takes
# seconds on quiet cores can take a minute while other processes keep both cores busy.
GUARD = 180.0


IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"


# The default spec's FP8 makes long-context and multi-step reasoning must-pass classes
# (evaluation/slices.py), which hold a rollout while undecided even under onNoData: pass.
# Tests whose eval set has neither class, and whose subject is something else, turn them
# off as a user would: explicitly.
NO_MUST_PASS: dict[str, Any] = {"mustPass": []}


def spec(**overrides: Any) -> dict[str, Any]:
    # A 70B on four L40S (tensor parallel 4): FP8 serves it ~1.75x faster per token in the
    # sandbox's calibrated model (an 8B gains ~1.37x), a margin that a busy host's noise
    # in the benchmark cannot close; sandbox_config() scales its serving time down.
    base: dict[str, Any] = {
        "endpointName": "chat-e2e",
        "region": "us-east-1",
        "executionRoleArn": "arn:aws:iam::123456789012:role/sagemaker-exec",
        "model": {"s3Uri": "s3://models/llama-3-1-70b/", "image": IMAGE},
        "instanceType": "ml.g6e.12xlarge",
        "optimizations": {"quantization": {"scheme": "fp8"}},
        "outputS3Uri": "s3://models/optimized/",
        "objective": {"metric": "latency", "minImprovement": 0.05},
        # FP8 changes numerics, so an eval or a waiver is required; control-flow tests
        # judge latency only, and the quality tests set their own evaluation.
        "evaluation": {"waiver": "e2e control-flow test: latency only"},
        "benchmark": {
            # Four streams: deterministic serving has no batch effect, so 32 requests take
            # 8 rounds of ~0.16 s instead of 16, with the same per-request times.
            "concurrency": [4],
            "requests": 32,
            "warmup": 2,
            "inputTokens": 64,
            "outputTokens": 8,
            # One round of 32, judged once: the e2e tests are about the control loop, and
            # their timings were set for this judge. The sequential judge's always-valid
            # intervals are about twice as wide; with four test processes on two cores,
            # host noise left a 15 % gain unproven within 256 requests (NoImprovement).
            # tests/e2e/test_sequential.py runs the sequential judge end to end.
            "judge": "fixed",
        },
        "rollout": {
            "strategy": "canary",
            "steps": [{"weight": 10, "pause": "1s"}, {"weight": 50, "pause": "1s"}],
            # Checks the sample count cannot decide do not block; the objective must pass.
            "analysis": {"onNoData": "pass"},
        },
    }
    base.update(overrides)
    return base


@dataclass
class E2E:
    cluster: Cluster
    emulator: EmulatorThread
    sandbox: SandboxHandle
    operator: OperatorProcess
    namespace: str = NAMESPACE
    sandbox_log: Path | None = None

    def create(self, name: str, body: dict[str, Any]) -> Names:
        """Create the resource; return the SageMaker names its first generation will use."""
        created = self.cluster.create(self.namespace, name, body)
        return self.names(name, str(created["metadata"]["uid"]))

    def names(self, name: str, uid: str, generation: int = 1) -> Names:
        return Names.of(Owner(self.namespace, name, uid), generation)

    def serving(self, endpoint: str) -> dict[str, Any]:
        described: dict[str, Any] = self.sandbox.client("sagemaker").describe_endpoint(
            EndpointName=endpoint
        )
        return described

    def wait_phase(
        self, name: str, phases: str | set[str], timeout: float = GUARD
    ) -> dict[str, Any]:
        return self.cluster.wait_for_phase(
            self.namespace, name, phases, timeout=timeout, on_timeout=self.diagnostics
        )

    def explain(self, obj: dict[str, Any]) -> str:
        """The status in a few lines: phase, message, checks, history; then diagnostics."""
        status = obj.get("status", {})
        lines = [f"phase={status.get('phase')} message={status.get('message')}"]
        lines += [
            f"  check {c['name']}: {c['verdict']} {c.get('reason', '')}"
            for c in status.get("checks", [])
        ]
        lines += [
            f"  history {h['event']}: {h.get('message', '')}" for h in status.get("history", [])
        ]
        return "\n".join(lines) + "\n" + self.diagnostics()

    def diagnostics(self) -> str:
        calls = [
            f"{c.get('operation')} {c.get('resource', '')} {c.get('errorCode') or ''}"
            for c in self.sandbox.admin.calls()[-30:]
        ]
        sandbox_log = (
            self.sandbox_log.read_text(errors="replace").splitlines()[-10:]
            if self.sandbox_log is not None and self.sandbox_log.exists()
            else []
        )
        return (
            "--- operator log (tail) ---\n"
            + self.operator.log_tail(40)
            + "\n--- sandbox calls (tail) ---\n"
            + "\n".join(calls)
            + ("\n--- sandbox log (tail) ---\n" + "\n".join(sandbox_log) if sandbox_log else "")
        )


def operator_env(poll_interval: str = POLL_INTERVAL, **overrides: str) -> dict[str, str]:
    """The environment every e2e operator process runs with (see the e2e fixture)."""
    return {
        "ENDPOINT_OPTIMIZER_POLL_INTERVAL": poll_interval,
        # A finished or waiting resource re-describes its endpoint every
        # ENDPOINT_RECHECK_POLLS polls (see there).
        "ENDPOINT_OPTIMIZER_ENDPOINT_RECHECK": str(ENDPOINT_RECHECK_POLLS * float(poll_interval)),
        "ENDPOINT_OPTIMIZER_TIME_SCALE": TIME_SCALE,
        # A measurement's progress in status at most twice a second (10 s in production):
        # every e2e measurement writes it, and the wake-up's patch removes it, so the whole
        # suite runs with mid-wake-up status writes.
        "ENDPOINT_OPTIMIZER_PROGRESS_INTERVAL": PROGRESS_INTERVAL,
        # The control loop is the subject, against deterministic serving: on a host whose
        # two cores other processes keep busy the client's event loop lags 60-150 ms, and
        # the strict guard (50 ms) voided every benchmark (a run under load: 61
        # MeasurementVoid). The guard has its own tests (tests/unit/bench).
        "ENDPOINT_OPTIMIZER_BENCH_LAG_TOLERANCE": LAG_TOLERANCE,
        **overrides,
    }


def sandbox_config(**overrides: Any) -> SandboxConfig:
    base: dict[str, Any] = {
        "time_scale": 0.001,
        # The 70B's ~64 ms per token (bf16, TP 4) served as 22 ms: a request of the spec's
        # 8 tokens takes ~0.16 s. Not less: the sandbox's ModelLatency is model time
        # (unscaled) while the blue/green alarm's ceiling is twice the baseline's measured
        # e2e p99 (scaled, never under its served time), so at a scale of 0.3 or more the
        # FP8 candidate's 0.57x of the baseline stays under it whatever the host does.
        "serving_time_scale": 0.35,
        "seed": 7,
        # Each variant at fixed timings from its own profile: FP8's gain is exactly its
        # modelled ~43 %, with no jitter, queueing or batch effect for load to tip over.
        "serving_mode": "deterministic",
        "deterministic": DeterministicServing(timings="profile"),
    }
    base.update(overrides)
    return SandboxConfig(**base)


@contextlib.contextmanager
def e2e_sandbox(
    config: SandboxConfig, engine: Engine | None, log_path: Path
) -> Iterator[SandboxHandle]:
    """The sandbox in its own process; in this one only for an engine object (real model)."""
    if engine is not None:
        with running_sandbox(config, engine=engine) as sandbox:
            yield sandbox
    else:
        with running_sandbox_process(config, log_path) as sandbox:
            yield sandbox


@contextlib.contextmanager
def production_traffic(
    sandbox: SandboxHandle,
    endpoint: str,
    threads: int = 3,
    prompt: str = "hello there",
    max_new_tokens: int = 8,
) -> Iterator[None]:
    """Unpinned requests (no TargetVariant: SageMaker's weights split them) until the block
    ends; errors before the endpoint serves are fine."""
    stop = threading.Event()
    client = sandbox.client("sagemaker-runtime")
    body = json.dumps({"inputs": prompt, "parameters": {"max_new_tokens": max_new_tokens}})

    def send() -> None:
        while not stop.is_set():
            try:
                client.invoke_endpoint(
                    EndpointName=endpoint, ContentType="application/json", Body=body
                )["Body"].read()
            except Exception:
                stop.wait(0.05)  # not serving yet

    workers = [threading.Thread(target=send, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    try:
        yield
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=10)


@pytest.fixture
def e2e_sandbox_config() -> SandboxConfig:
    """Override in a test module (or parametrize) to start the sandbox differently."""
    return sandbox_config()


@pytest.fixture
def e2e_sandbox_engine() -> Engine | None:
    """Override in a test module to serve with another engine (None: the synthetic one)."""
    return None


@pytest.fixture
def e2e_poll_interval() -> str:
    """Override in a test module to run the operator with another heartbeat (seconds)."""
    return POLL_INTERVAL


@pytest.fixture
def e2e(
    e2e_sandbox_config: SandboxConfig,
    e2e_sandbox_engine: Engine | None,
    e2e_poll_interval: str,
) -> Iterator[E2E]:
    directory: Path = tempdir()
    with (
        e2e_sandbox(e2e_sandbox_config, e2e_sandbox_engine, directory / "sandbox.log") as sandbox,
        running_cluster() as (emulator, cluster),
    ):
        cluster.create_namespace(NAMESPACE)
        operator = OperatorProcess(
            kubeconfig=write_kubeconfig(emulator.url, directory),
            namespace=NAMESPACE,
            aws_endpoint_url=sandbox.url,
            log_path=directory / "operator.log",
            extra_env=operator_env(e2e_poll_interval),
            extra_args=("--log-console",),
        )
        operator.start()
        try:
            yield E2E(cluster, emulator, sandbox, operator, sandbox_log=directory / "sandbox.log")
        finally:
            # The test is over: nothing to shut down gracefully, and SIGTERM lets kopf close
            # its watches and handlers first, seconds on a busy machine.
            operator.kill()
            shutil.rmtree(directory, ignore_errors=True)


def free_port() -> int:
    """A loopback port nothing listens on now (for the operator's metrics server)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
