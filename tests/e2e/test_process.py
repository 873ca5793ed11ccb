"""The `run` command itself: its options, and the liveness endpoint of a running operator."""

from __future__ import annotations

import shutil
import time
import urllib.error
import urllib.request

from click.testing import CliRunner

from endpoint_optimizer.controller.run import run_command
from tests.e2e.conftest import GUARD, NAMESPACE, free_port
from tests.e2e.harness import OperatorProcess, running_cluster, tempdir, write_kubeconfig


def test_run_needs_a_namespace_choice_and_refuses_both() -> None:
    runner = CliRunner()
    neither = runner.invoke(run_command, [])
    assert neither.exit_code == 2
    assert "--namespace" in neither.output
    both = runner.invoke(run_command, ["-n", "ml", "-A"])
    assert both.exit_code == 2
    assert "exclude each other" in both.output
    bad = runner.invoke(run_command, ["-n", "ml", "--poll-interval", "0"])
    assert bad.exit_code == 2


def test_a_running_operator_answers_its_liveness_probe() -> None:
    directory = tempdir()
    port = free_port()
    with running_cluster() as (emulator, cluster):
        cluster.create_namespace(NAMESPACE)
        operator = OperatorProcess(
            kubeconfig=write_kubeconfig(emulator.url, directory),
            namespace=NAMESPACE,
            aws_endpoint_url=None,
            log_path=directory / "operator.log",
            extra_args=("--liveness", f"http://127.0.0.1:{port}/healthz"),
        )
        operator.start()
        try:
            deadline = time.monotonic() + GUARD
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                        assert r.status == 200
                        break
                except (urllib.error.URLError, ConnectionError):
                    assert operator.running(), operator.log_tail()
                    assert time.monotonic() < deadline, operator.log_tail()
                    time.sleep(0.1)
        finally:
            operator.stop()
            shutil.rmtree(directory, ignore_errors=True)
