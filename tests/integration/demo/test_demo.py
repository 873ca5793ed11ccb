"""`endpoint-optimizer sandbox`: the demo end to end, its exit codes, its cleanup, its dispatch.

Each run is the real command in its own session (process group), so a child it failed
to stop would still be in that group after it exits: `killpg(pgid, 0)` finds it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from endpoint_optimizer.demo.cli import sandbox_command
from endpoint_optimizer.demo.run import Outcome, fit_to_demo, outcome_of
from tests.e2e.conftest import IMAGE, spec


def resource(name: str = "chat") -> dict[str, Any]:
    """A small FP8 canary (the e2e spec on an 8B): one concurrency level, short answers, one
    step. The demo serves real-time milliseconds, which an 8B keeps short."""
    return {
        "apiVersion": "optimizer.dev/v1alpha1",
        "kind": "OptimizedEndpoint",
        "metadata": {"name": name, "namespace": "demo"},
        "spec": spec(
            endpointName=f"{name}-demo",
            model={"s3Uri": "s3://models/llama-3-1-8b/", "image": IMAGE},
            instanceType="ml.g6e.2xlarge",
            rollout={
                "strategy": "canary",
                "steps": [{"weight": 20, "pause": "100s"}],
                "analysis": {"onNoData": "pass"},
            },
        ),
    }


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def run_demo(tmp_path: Path, *args: str, timeout: float = 270) -> tuple[int, str]:
    """Run the demo on the small resource; return (exit code, output); assert no survivor."""
    spec_file = tmp_path / "chat.yaml"
    spec_file.write_text(yaml.safe_dump(resource()))
    process = subprocess.Popen(
        [sys.executable, "-m", "endpoint_optimizer.cli", "sandbox", str(spec_file), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    deadline = time.monotonic() + 30
    while group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_alive(process.pid), "a process the demo started outlived it"
    return process.returncode, output.decode(errors="replace")


def test_the_demo_promotes_writes_the_report_and_leaves_no_process(tmp_path: Path) -> None:
    # The demo's own deadline under the wait's: a busy machine takes minutes, not one.
    code, output = run_demo(tmp_path, "--report", str(tmp_path / "reports"), "--timeout", "240")
    assert code == Outcome.PROMOTED, output
    assert "phase Succeeded" in output and "verdict objective_latency Pass" in output, output
    assert "/metrics" in output
    report = (tmp_path / "reports" / "demo-chat.html").read_text()
    assert "objective_latency" in report and "Pass" in report


def test_an_injected_latency_regression_rolls_back_with_exit_3(tmp_path: Path) -> None:
    code, output = run_demo(
        tmp_path, "--inject-regression", "latency", "--report", str(tmp_path / "r")
    )
    assert code == Outcome.ROLLED_BACK, output
    assert "phase RolledBack" in output
    assert " Fail" in output
    assert (tmp_path / "r" / "demo-chat.html").exists()


# Execs the command with SIGINT ignored, as a shell without job control starts a background
# job; Python then keeps SIGINT ignored unless the program installs its own handler.
WITH_SIGINT_IGNORED = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def test_sigint_stops_every_process_the_demo_started(tmp_path: Path) -> None:
    spec_file = tmp_path / "chat.yaml"
    spec_file.write_text(yaml.safe_dump(resource()))
    log = tmp_path / "out.log"
    # Started with SIGINT ignored whatever pytest inherited (a suite run as `pytest &` from
    # a script passes that on): the demo must handle Ctrl-C itself, as its operator does.
    demo = [sys.executable, "-m", "endpoint_optimizer.cli", "sandbox", str(spec_file)]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", WITH_SIGINT_IGNORED, *demo],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        deadline = time.monotonic() + 180  # a hang guard: three processes start on a busy box
        while "phase " not in log.read_text(errors="replace"):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        # What a terminal's Ctrl-C does: SIGINT to the whole foreground group.
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(timeout=90) == Outcome.INTERRUPTED, log.read_text()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    deadline = time.monotonic() + 30
    while group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_alive(process.pid), "a process the demo started outlived Ctrl-C"


def test_serve_stays_a_subcommand_and_files_go_to_the_demo(tmp_path: Path) -> None:
    runner = CliRunner()
    serve = runner.invoke(sandbox_command, ["serve", "--help"])
    assert serve.exit_code == 0 and "--port" in serve.output
    group = runner.invoke(sandbox_command, ["--help"])
    assert group.exit_code == 0 and "serve" in group.output and "demo" in group.output
    demo = runner.invoke(sandbox_command, ["demo", "--help"])
    assert "--inject-regression" in demo.output and "Exit codes" in demo.output
    # A file argument is the demo's: click checks it exists before anything starts.
    missing = runner.invoke(sandbox_command, [str(tmp_path / "nope.yaml"), "--timeout", "5"])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    # A file without an OptimizedEndpoint is refused before any process starts.
    empty = tmp_path / "empty.yaml"
    empty.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n")
    refused = runner.invoke(sandbox_command, [str(empty)])
    assert refused.exit_code == Outcome.ERROR and "no OptimizedEndpoint" in refused.output


@pytest.mark.parametrize(
    ("phases", "expected"),
    [
        (["Succeeded", "Succeeded"], Outcome.PROMOTED),
        (["Succeeded", "RolledBack"], Outcome.ROLLED_BACK),
        (["RolledBack", "Failed"], Outcome.FAILED),
        (["Succeeded", "Analyzing"], Outcome.TIMED_OUT),
    ],
)
def test_the_exit_code_reflects_the_worst_outcome(phases: list[str], expected: Outcome) -> None:
    assert outcome_of([{"status": {"phase": p}} for p in phases]) == expected


def test_demo_size_trims_the_benchmark_and_says_so() -> None:
    big = resource()
    big["spec"]["benchmark"].update(requests=160, outputTokens=256)
    big["spec"]["rollout"]["analysis"] = {"onNoData": "pause"}
    trimmed, notes = fit_to_demo(big)
    assert trimmed["spec"]["benchmark"]["requests"] < 160
    assert trimmed["spec"]["rollout"]["analysis"]["onNoData"] == "pass"
    assert len(notes) == 3 and big["spec"]["benchmark"]["requests"] == 160


def test_an_unset_image_gets_an_lmi_uri_only_without_the_image_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from endpoint_optimizer.demo.run import fill_image
    from endpoint_optimizer.sagemaker import images

    bare = resource()
    del bare["spec"]["model"]["image"]

    def no_table(region: str, framework: str = images.LMI, version: str = "latest") -> str:
        raise images.ImageLookupError("no table")

    monkeypatch.setattr(images, "default_image", no_table)
    filled, notes = fill_image(bare)
    assert filled["spec"]["model"]["image"].startswith("763104351884.dkr.ecr.us-east-1.")
    assert notes and "image" not in bare["spec"]["model"]
    # A given image is never replaced.
    assert fill_image(resource())[0]["spec"]["model"]["image"] == IMAGE
