"""`endpoint-optimizer sandbox`: the first-run demo, or `sandbox serve` for the stand-in alone.

`sandbox [FILE…]` and `sandbox demo [FILE…]` run the demo; `sandbox serve` serves the
local SageMaker; `sandbox deploy NAME` makes an InService endpoint in it, through the
SageMaker API as any client would, for `endpoint-optimizer bench`. A click group cannot
take variadic arguments next to subcommands, so the group reads anything that is not a
subcommand name as the demo's arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from pathlib import Path
from typing import Any

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


DEFAULT_URL = "http://127.0.0.1:4566"
# What `sandbox deploy` creates: an LMI container on an L40S, as examples/ do. The
# sandbox never pulls the image or reads the weights; it serves its calibrated model.
DEPLOY_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"
DEPLOY_ROLE = "arn:aws:iam::123456789012:role/sandbox-execution"
DEPLOY_MODEL_URI = "s3://sandbox-models/llama-3.1-8b-instruct/"


def sandbox_client(url: str) -> Any:
    """A real boto3 SageMaker client for the sandbox at `url` (any credentials will do)."""
    import boto3

    return boto3.session.Session(
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "sandbox"),
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "sandbox"),
        region_name="us-east-1",
    ).client("sagemaker", endpoint_url=url)


def deploy_endpoint(
    url: str, endpoint: str, instance_type: str, timeout: float, echo: Any = click.echo
) -> str:
    """CreateModel, CreateEndpointConfig, CreateEndpoint; wait until InService. Idempotent."""
    import botocore.exceptions

    sm = sandbox_client(url)
    model, config = f"{endpoint}-model", f"{endpoint}-config"
    try:
        status = sm.describe_endpoint(EndpointName=endpoint)["EndpointStatus"]
    except botocore.exceptions.ClientError:
        status = ""
    except botocore.exceptions.EndpointConnectionError:
        raise click.ClickException(
            f"no sandbox answers at {url}: start one with `endpoint-optimizer sandbox serve "
            "--time-scale 0.01` (endpoints then take seconds, not minutes) or pass --url"
        ) from None
    if not status:
        with contextlib.suppress(sm.exceptions.ClientError):
            sm.create_model(
                ModelName=model,
                ExecutionRoleArn=DEPLOY_ROLE,
                PrimaryContainer={
                    "Image": DEPLOY_IMAGE,
                    "ModelDataSource": {
                        "S3DataSource": {
                            "S3Uri": DEPLOY_MODEL_URI,
                            "S3DataType": "S3Prefix",
                            "CompressionType": "None",
                        }
                    },
                },
            )
        with contextlib.suppress(sm.exceptions.ClientError):
            sm.create_endpoint_config(
                EndpointConfigName=config,
                ProductionVariants=[
                    {
                        "VariantName": "AllTraffic",
                        "ModelName": model,
                        "InstanceType": instance_type,
                        "InitialInstanceCount": 1,
                        "InitialVariantWeight": 1.0,
                    }
                ],
            )
        sm.create_endpoint(EndpointName=endpoint, EndpointConfigName=config)
        echo(f"creating endpoint {endpoint} ({instance_type}) in the sandbox at {url}")
    deadline = time.monotonic() + timeout
    while True:
        described = sm.describe_endpoint(EndpointName=endpoint)
        status = described["EndpointStatus"]
        if status == "InService":
            return str(status)
        if status == "Failed":
            raise click.ClickException(
                f"endpoint {endpoint} failed: {described.get('FailureReason', 'no reason given')}"
            )
        if time.monotonic() > deadline:
            raise click.ClickException(
                f"endpoint {endpoint} is still {status} after {timeout:.0f} s: a sandbox started "
                "without --time-scale takes SageMaker's real 6 minutes; give --timeout more "
                "or restart it with `sandbox serve --time-scale 0.01`"
            )
        time.sleep(0.5)


@sandbox_command.command("deploy")
@click.argument("endpoint")
@click.option(
    "--url",
    default=None,
    help=f"The sandbox (default: AWS_ENDPOINT_URL, else {DEFAULT_URL}).",
)
@click.option("--instance-type", default="ml.g6e.2xlarge", show_default=True)
@click.option(
    "--timeout",
    type=float,
    default=900.0,
    show_default=True,
    help="Seconds to wait for InService.",
)
def deploy_command(endpoint: str, url: str | None, instance_type: str, timeout: float) -> None:
    """Create ENDPOINT in a running `sandbox serve`, InService, to benchmark it.

    \b
    endpoint-optimizer sandbox serve --time-scale 0.01 &     # a local SageMaker
    endpoint-optimizer sandbox deploy chat                   # this command
    endpoint-optimizer bench --endpoint chat --endpoint-url http://127.0.0.1:4566
    """
    target = url or os.environ.get("AWS_ENDPOINT_URL") or DEFAULT_URL
    deploy_endpoint(target, endpoint, instance_type, timeout)
    click.echo(
        f"endpoint {endpoint} is InService; benchmark it with:\n"
        f"  endpoint-optimizer bench --endpoint {endpoint} --endpoint-url {target} "
        "--concurrency 1,8 --requests 50"
    )
