"""`endpoint-optimizer sandbox`: serve the local SageMaker stand-in (the demo comes later)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import click

from endpoint_optimizer.sandbox.config import SandboxConfig


@click.group(invoke_without_command=True)
@click.pass_context
def sandbox_command(ctx: click.Context) -> None:
    """A local SageMaker, SageMaker Runtime and CloudWatch for tests and demos."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


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
def serve_command(
    host: str,
    port: int,
    config_file: Path | None,
    time_scale: float | None,
    serving_time_scale: float | None,
    engine: str,
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
    click.echo(f"sandbox listening on http://{host}:{port} (time scale {config.time_scale})")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_forever(config, host, port, chosen))
