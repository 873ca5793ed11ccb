"""A real Prometheus server (Debian's package) on 127.0.0.1, for tests, and its HTTP API."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml
from prometheus_client import CollectorRegistry, start_http_server

PROMETHEUS = shutil.which("prometheus")
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_until(check: Callable[[], T | None], timeout: float, what: str) -> T:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(0.1)


class MetricsEndpoint:
    """/metrics served the way `run --metrics-port` serves it (prometheus_client's
    start_http_server), for a private registry on a free loopback port; `close()` stops it."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._server, self._thread = start_http_server(0, addr="127.0.0.1", registry=registry)
        self.port = int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class Prometheus:
    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as error:
            body = json.load(error)
        assert body["status"] == "success", f"{path} {params}: {body}"
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (scalars come back as one unlabelled sample)."""
        data = self.api("/api/v1/query", query=expr)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = self.api("/api/v1/alerts")["alerts"]
        return alerts

    def rules(self) -> list[dict[str, Any]]:
        return [rule for group in self.api("/api/v1/rules")["groups"] for rule in group["rules"]]

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def running_prometheus(
    targets: dict[str, str], rule_files: list[Path], scrape_interval: str = "1s"
) -> Iterator[Prometheus]:
    """Start prometheus scraping `targets` (job: host:port); stop it and delete its data after."""
    assert PROMETHEUS is not None, "prometheus is not installed"
    with tempfile.TemporaryDirectory(prefix="prometheus-") as directory:
        root = Path(directory)
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [target]}]}
                for job, target in targets.items()
            ],
        }
        (root / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        log = root / "prometheus.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={root / 'prometheus.yml'}",
                    f"--storage.tsdb.path={root / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        server = Prometheus(f"http://127.0.0.1:{port}", process, log)
        try:

            def ready() -> bool:
                assert process.poll() is None, f"prometheus exited:\n{server.log_tail()}"
                try:
                    with urllib.request.urlopen(f"{server.url}/-/ready", timeout=1) as response:
                        return bool(response.status == 200)
                except OSError:
                    return False

            wait_until(ready, 30, "prometheus ready")
            yield server
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
