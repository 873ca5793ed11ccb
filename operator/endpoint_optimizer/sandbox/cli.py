"""`endpoint-optimizer sandbox`: the first-run demo, or `sandbox serve` for the stand-in alone.

`sandbox [FILE…]` and `sandbox demo [FILE…]` run the demo; `sandbox serve` serves the
local SageMaker. A click group cannot take variadic arguments next to subcommands, so
the group reads anything that is not a subcommand name as the demo's arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import click

from endpoint_optimizer.sandbox.config import SandboxConfig


class _DemoByDefault(click.Group):
    """Runs `demo` when the first argument is not a subcommand (files, options or nothing)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["demo", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_DemoByDefault)
def sandbox_command() -> None:
    """The first-run demo (default) or a local SageMaker for tests (`sandbox serve`).

    `endpoint-optimizer sandbox [FILE…]` starts the SageMaker sandbox, an emulated
    Kubernetes API and the operator on 127.0.0.1, applies the resources and shows their
    rollout; `endpoint-optimizer sandbox demo --help` lists its options and exit codes.
    """


@sandbox_command.command("demo")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--engine",
    type=click.Choice(["synthetic", "real"]),
    default="synthetic",
    show_default=True,
    help="The calibrated synthetic model, or SmolLM2-135M on the CPU (needs the `real` extra).",
)
@click.option(
    "--inject-regression",
    type=click.Choice(["latency", "eval", "acceptance"]),
    default=None,
    help="Make each candidate regress in the sandbox, to watch a rollback.",
)
@click.option("--keep-running", is_flag=True, help="Stay up after the outcome for more resources.")
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for the HTML rollout reports (default: the run's temporary directory).",
)
@click.option(
    "--timeout",
    type=float,
    default=600.0,
    show_default=True,
    help="Seconds before the demo gives up waiting for an outcome.",
)
@click.option(
    "--full-benchmark",
    is_flag=True,
    help="Apply the resources' benchmark as written (slower) instead of a demo-sized one.",
)
def demo_command(
    files: tuple[Path, ...],
    engine: str,
    inject_regression: str | None,
    keep_running: bool,
    report_dir: Path | None,
    timeout: float,
    full_benchmark: bool,
) -> None:
    """Watch the operator baseline, optimize, canary, judge and promote or roll back.

    FILE: OptimizedEndpoint resources (and ConfigMaps); default examples/fp8-chat-latency.yaml.

    Exit codes: 0 every resource promoted, 1 the demo could not run, 3 a resource rolled
    back, 4 a resource failed (Terminal), 5 timed out, 130 interrupted.
    """
    from typing import cast

    from endpoint_optimizer.demo.run import DemoOptions, EngineName, Regression, run_demo

    outcome = run_demo(
        DemoOptions(
            files=files,
            engine=cast(EngineName, engine),
            inject_regression=cast(Regression | None, inject_regression),
            keep_running=keep_running,
            report_dir=report_dir,
            timeout=timeout,
            trim_benchmark=not full_benchmark,
        )
    )
    raise SystemExit(int(outcome))


@sandbox_command.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=4566, show_default=True, type=int)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML or JSON SandboxConfig (time scales, durations, faults).",
)
@click.option("--time-scale", type=float, help="Multiply control-plane durations (0.01 = 100x).")
@click.option("--serving-time-scale", type=float, help="Multiply serving latencies (TTFT, ITL).")
@click.option(
    "--engine",
    type=click.Choice(["synthetic", "real"]),
    default="synthetic",
    show_default=True,
    help="Token generator: the calibrated synthetic model, or a small real model on CPU "
    "(a model's SANDBOX_ENGINE environment variable overrides it per endpoint).",
)
@click.option(
    "--listen-fd",
    type=int,
    default=None,
    help="Serve on this inherited, already listening socket instead of --host/--port "
    "(a parent that bound it knows the port at once and no other process can take it).",
)
def serve_command(
    host: str,
    port: int,
    config_file: Path | None,
    time_scale: float | None,
    serving_time_scale: float | None,
    engine: str,
    listen_fd: int | None,
) -> None:
    """Answer boto3 on one port: export AWS_ENDPOINT_URL=http://HOST:PORT."""
    from endpoint_optimizer.sandbox.engine import Engine, SyntheticEngine
    from endpoint_optimizer.sandbox.server import serve_forever

    chosen: Engine = SyntheticEngine()
    if engine == "real":
        # Imported only here: the real engine pulls in torch and model weights.
        from endpoint_optimizer.realmodel.sandbox_engine import RealSandboxEngine, SelectingEngine

        chosen = SelectingEngine(SyntheticEngine(), RealSandboxEngine(), default="real")

    config = SandboxConfig.from_file(config_file) if config_file else SandboxConfig()
    if time_scale is not None:
        config.time_scale = time_scale
    if serving_time_scale is not None:
        config.serving_time_scale = serving_time_scale
    listener = socket.socket(fileno=listen_fd) if listen_fd is not None else None
    if listener is not None:
        host, port = listener.getsockname()[:2]
    click.echo(f"sandbox listening on http://{host}:{port} (time scale {config.time_scale})")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_forever(config, host, port, chosen, listener))
