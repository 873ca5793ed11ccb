"""`endpoint-optimizer bench` as a person runs it: sandbox deploy, failures, region, progress."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from rich.progress import Progress

from endpoint_optimizer.bench.cli import EXIT_ERRORS, EtaColumn, RateColumn, bench_command
from endpoint_optimizer.demo.cli import sandbox_command
from endpoint_optimizer.sandbox.config import (
    DeterministicServing,
    Faults,
    InvocationErrors,
    SandboxConfig,
)
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox

SMALL = ("--concurrency", "1", "--requests", "6", "--input-tokens", "8", "--output-tokens", "3")


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxHandle]:
    config = SandboxConfig(
        time_scale=0.0002,
        deterministic_endpoints={"chat": DeterministicServing(ttft_ms=5.0, itl_ms=1.0)},
    )
    with running_sandbox(config) as handle:
        # What a person types: the sandbox runs, `sandbox deploy` makes the endpoint.
        deployed = CliRunner().invoke(sandbox_command, ["deploy", "chat", "--url", handle.url])
        assert deployed.exit_code == 0, deployed.output
        assert "endpoint chat is InService" in deployed.output
        assert f"endpoint-optimizer bench --endpoint chat --endpoint-url {handle.url}" in (
            deployed.output
        )
        yield handle


@pytest.fixture(autouse=True)
def no_aws_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No region, profile or endpoint from the machine running the tests."""
    for name in (
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def bench(*args: str) -> Result:
    return CliRunner().invoke(bench_command, list(args))


def test_a_deployed_sandbox_endpoint_is_benchmarked_without_errors(sandbox: SandboxHandle) -> None:
    result = bench("--endpoint", "chat", "--endpoint-url", sandbox.url, *SMALL)
    assert result.exit_code in (0, 3), result.output  # 3: the saturation guard on a busy host
    assert "TTFT" in result.stdout
    assert "failed" not in result.stderr


def test_every_request_failing_exits_non_zero_and_says_why(sandbox: SandboxHandle) -> None:
    result = bench("--endpoint", "nothing-here", "--endpoint-url", sandbox.url, *SMALL)
    assert result.exit_code == EXIT_ERRORS, result.output
    assert "error: concurrency 1: 6 of 6 requests failed (100.0%; ValidationError: 6)" in (
        result.stderr
    )
    assert "every request failed" in result.stderr


def test_some_failures_are_reported_and_max_error_rate_decides(sandbox: SandboxHandle) -> None:
    sandbox.admin.set_faults(
        Faults(invocation_errors=[InvocationErrors(endpoint="chat", fraction=0.5)])
    )
    try:
        args = ("--endpoint", "chat", "--endpoint-url", sandbox.url, "--concurrency", "1",
                "--requests", "20", "--input-tokens", "8", "--output-tokens", "3")  # fmt: skip
        lenient = bench(*args)
        assert lenient.exit_code in (0, 3), lenient.output
        assert "warning: concurrency 1: " in lenient.stderr
        assert "of 20 requests failed" in lenient.stderr and "ModelError" in lenient.stderr
        strict = bench(*args, "--max-error-rate", "0.1")
        assert strict.exit_code == EXIT_ERRORS, strict.output
        assert "above --max-error-rate 0.1" in strict.stderr
    finally:
        sandbox.admin.clear_faults()


def test_the_region_defaults_for_an_endpoint_url_and_is_asked_for_otherwise(
    sandbox: SandboxHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = bench("--endpoint", "chat", *SMALL)
    assert missing.exit_code == 2
    assert "no AWS region: pass --region REGION" in missing.output
    assert "Traceback" not in missing.output
    # Only AWS_ENDPOINT_URL exported, as docs/sandbox.md says: us-east-1, and it runs.
    monkeypatch.setenv("AWS_ENDPOINT_URL", sandbox.url)
    result = bench("--endpoint", "chat", *SMALL)
    assert result.exit_code in (0, 3), result.output
    assert "TTFT" in result.stdout


def test_progress_shows_rate_and_eta_and_no_clock_before_a_level_starts() -> None:
    progress = Progress(RateColumn(), EtaColumn())
    waiting = progress.add_task("bench", total=10, start=False)
    task = progress.tasks[waiting]
    assert str(EtaColumn().render(task)) == "waiting"
    assert str(RateColumn().render(task)) == ""
    progress.start_task(waiting)
    progress.update(waiting, completed=4)
    assert str(EtaColumn().render(task)).startswith("ETA ")
    progress.update(waiting, completed=10)
    assert str(EtaColumn().render(task)) == "done"
