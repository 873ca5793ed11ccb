"""`endpoint-optimizer sandbox`: help lists `serve`, and `serve` answers boto3."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import boto3
from click.testing import CliRunner

from endpoint_optimizer.demo.cli import sandbox_command


def test_help_lists_serve() -> None:
    # The no-subcommand path belongs to the demo (issue 10); --help is stable either way.
    result = CliRunner().invoke(sandbox_command, ["--help"])
    assert result.exit_code == 0
    assert "serve" in result.output


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_serve_answers_boto3_on_the_given_port() -> None:
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "endpoint_optimizer.cli",
            "sandbox",
            "serve",
            "--port",
            str(port),
            "--time-scale",
            "0.001",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        sm = boto3.client(
            "sagemaker",
            region_name="us-east-1",
            endpoint_url=f"http://127.0.0.1:{port}",
            aws_access_key_id="sandbox",
            aws_secret_access_key="sandbox",
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                assert sm.list_endpoints()["Endpoints"] == []
                break
            except Exception:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(timeout=10)
