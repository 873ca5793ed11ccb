"""Run the sandbox in tests: `running_sandbox()` and a typed client for its admin routes.

with running_sandbox(SandboxConfig(time_scale=0.001, serving_time_scale=0.01)) as sandbox:
    sm = sandbox.client("sagemaker")           # real boto3, endpoint_url=sandbox.url
    ...
    sandbox.admin.set_faults(Faults(throttle_fraction=0.5))
    records = sandbox.admin.traffic()

`running_sandbox_process()` gives the same handle on a sandbox in its own process.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import boto3
import yaml
from botocore.config import Config

from endpoint_optimizer.sandbox.config import ConfigPatch, Faults, SandboxConfig
from endpoint_optimizer.sandbox.engine import Engine
from endpoint_optimizer.sandbox.runtime import TrafficRecord
from endpoint_optimizer.sandbox.server import SandboxServer

T = TypeVar("T")


class AdminClient:
    """The /_sandbox/ routes, over HTTP."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _call(self, method: str, path: str, body: object | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.url}/_sandbox/{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def state(self) -> dict[str, Any]:
        """Every resource: models, endpointConfigs, endpoints, optimizationJobs, trainingJobs."""
        result: dict[str, Any] = self._call("GET", "state")
        return result

    def set_faults(self, faults: Faults | dict[str, Any]) -> dict[str, Any]:
        """Replace the fault switches (Faults() clears them)."""
        body = faults.dump() if isinstance(faults, Faults) else faults
        result: dict[str, Any] = self._call("POST", "faults", body)
        return result

    def clear_faults(self) -> dict[str, Any]:
        return self.set_faults(Faults())

    def traffic(self, endpoint: str | None = None) -> list[dict[str, Any]]:
        """The traffic record: one dict per request (see runtime.TrafficRecord)."""
        path = "traffic" + (f"?endpoint={endpoint}" if endpoint else "")
        result: list[dict[str, Any]] = self._call("GET", path)
        return result

    def traffic_records(self, endpoint: str | None = None) -> list[TrafficRecord]:
        """The traffic record as typed `TrafficRecord`s."""
        return [TrafficRecord(**raw) for raw in self.traffic(endpoint)]

    def calls(self, since: int = 0) -> list[dict[str, Any]]:
        """The control-plane call log: operation, resource, wallTime, errorCode.

        `since`: skip the first `since` calls (a poller asks only for what is new).
        """
        result: list[dict[str, Any]] = self._call("GET", f"calls?since={since}")
        return result

    def peak_calls_per_minute(
        self, resource: str | None = None, operation: str | None = None
    ) -> int:
        """The most control-plane calls (on a resource, of an operation) in any 60 s window."""
        times = sorted(
            c["wallTime"]
            for c in self.calls()
            if (resource is None or c["resource"] == resource)
            and (operation is None or c["operation"] == operation)
        )
        peak, first = 0, 0
        for last, moment in enumerate(times):
            while moment - times[first] >= 60.0:
                first += 1
            peak = max(peak, last - first + 1)
        return peak

    def reset(self) -> None:
        """Forget every resource, record and fault switch (config stays)."""
        self._call("POST", "reset", {})

    def configure(self, patch: ConfigPatch | dict[str, Any]) -> dict[str, Any]:
        body = (
            patch.model_dump(mode="json", by_alias=True, exclude_unset=True)
            if isinstance(patch, ConfigPatch)
            else patch
        )
        result: dict[str, Any] = self._call("POST", "config", body)
        return result


@dataclass
class SandboxHandle:
    url: str
    admin: AdminClient
    # The in-process server (running_sandbox); None when the sandbox runs in a child process.
    server: SandboxServer | None
    region: str = "us-east-1"

    def client(self, service_name: str, **config: Any) -> Any:
        """A real boto3 client for "sagemaker", "sagemaker-runtime", "cloudwatch" or "logs"."""
        return boto3.client(
            service_name,  # type: ignore[call-overload]
            region_name=self.region,
            endpoint_url=self.url,
            aws_access_key_id="sandbox",
            aws_secret_access_key="sandbox",
            config=Config(**config) if config else None,
        )

    @property
    def environment(self) -> dict[str, str]:
        """Environment variables that point any AWS SDK at this sandbox."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": "sandbox",
            "AWS_SECRET_ACCESS_KEY": "sandbox",
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
        }


@contextlib.contextmanager
def running_sandbox(
    config: SandboxConfig | None = None, engine: Engine | None = None
) -> Iterator[SandboxHandle]:
    """Start a sandbox on a free 127.0.0.1 port in a background thread; stop it on exit."""
    config = config or SandboxConfig()
    server = SandboxServer(config, engine=engine)
    server.start()
    try:
        yield SandboxHandle(server.url, AdminClient(server.url), server, config.region)
    finally:
        server.stop()


@contextlib.contextmanager
def running_sandbox_process(
    config: SandboxConfig | None = None, log_path: Path | None = None
) -> Iterator[SandboxHandle]:
    """`endpoint-optimizer sandbox serve` as a child process, on a socket bound here.

    Its serving latencies then never wait for this process's GIL (test threads, the KMock
    emulator), which on a busy machine is most of a stream's lateness. The socket listens
    before the child starts, so the URL works at once: connections wait in the backlog
    until the child accepts them, and no other process can take the port meanwhile. Only
    the synthetic engine (an engine object cannot cross to another process).
    """
    config = config or SandboxConfig()
    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    with tempfile.TemporaryDirectory(prefix="eo-sandbox-") as work:
        config_file = Path(work) / "sandbox.yaml"
        config_file.write_text(yaml.safe_dump(config.dump()), encoding="utf-8")
        command = [sys.executable, "-m", "endpoint_optimizer.cli", "sandbox", "serve"]
        command += ["--config", str(config_file), "--listen-fd", str(listener.fileno())]
        with listener, open(log_path or os.devnull, "ab") as log:
            process = subprocess.Popen(
                command, pass_fds=(listener.fileno(),), stdout=log, stderr=subprocess.STDOUT
            )
        try:
            yield SandboxHandle(url, AdminClient(url), None, config.region)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def wait_for(check: Callable[[], T | None], timeout: float = 10.0, interval: float = 0.01) -> T:
    """Poll `check` until it returns something truthy, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        time.sleep(interval)
