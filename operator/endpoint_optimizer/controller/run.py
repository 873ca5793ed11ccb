"""`endpoint-optimizer run`: configure logging and the operator's options, then run kopf.

The same process runs against KMock + the sandbox in tests and against a real
cluster + AWS in production: Kubernetes access comes from in-cluster config or
KUBECONFIG (kopf's own login), AWS from the standard SDK chain (credentials,
region, AWS_ENDPOINT_URL and the service-specific endpoint variables).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import click

from endpoint_optimizer import logs


@dataclass(frozen=True)
class OperatorOptions:
    """What the command line sets for the whole process; handlers read it at import."""

    # How often each resource is observed: the operator's reaction time to a SageMaker
    # state change, and its SageMaker call rate (a few Describe calls per wake-up).
    poll_interval: float = 30.0
    # Bounded thread pool for boto3 calls shared by all resources.
    aws_concurrency: int = 8
    # Benchmark/eval measurements running at once across all resources; the rest wait.
    # Bounds the operator's memory (each holds a client, stream threads and records).
    measure_concurrency: int = 4
    # Time scale applied to the spec's rollout pauses and analysis intervals; 1.0 in
    # production, small in tests together with the sandbox's own time scale.
    time_scale: float = 1.0
    metrics_port: int | None = None
    # While a job runs or after the pipeline ends, DescribeEndpoint runs once in this many
    # seconds (pipeline.cadence); None: ten polls, 300 s at the default poll.
    endpoint_recheck: float | None = None

    @property
    def endpoint_recheck_s(self) -> float:
        return (
            self.endpoint_recheck if self.endpoint_recheck is not None else 10 * self.poll_interval
        )


_options = OperatorOptions()


def current_options() -> OperatorOptions:
    return _options


def set_options(options: OperatorOptions) -> None:
    global _options
    _options = options


@click.command("run")
@click.option(
    "--namespace",
    "-n",
    "namespaces",
    multiple=True,
    help="Namespace to serve (repeatable; globs as kopf accepts).",
)
@click.option("--all-namespaces", "-A", is_flag=True, help="Serve every namespace.")
@click.option("--metrics-port", type=int, default=None, help="Serve Prometheus /metrics here.")
@click.option(
    "--liveness",
    default=None,
    help="kopf liveness endpoint, e.g. http://0.0.0.0:8080/healthz.",
)
@click.option(
    "--poll-interval",
    type=float,
    default=30.0,
    show_default=True,
    envvar="ENDPOINT_OPTIMIZER_POLL_INTERVAL",
    help="Seconds between observations of each resource.",
)
@click.option(
    "--time-scale",
    type=float,
    default=1.0,
    show_default=True,
    envvar="ENDPOINT_OPTIMIZER_TIME_SCALE",
    help="Multiplier on the spec's pauses and intervals (tests use a small one).",
)
@click.option(
    "--endpoint-recheck",
    type=float,
    default=None,
    envvar="ENDPOINT_OPTIMIZER_ENDPOINT_RECHECK",
    help="Seconds between DescribeEndpoint calls while waiting on a job or after the "
    "pipeline ended (default: 10 poll intervals). Bounds how late an endpoint changed "
    "outside the operator shows in the Ready condition.",
)
@click.option(
    "--aws-concurrency",
    type=int,
    default=8,
    show_default=True,
    help="Most boto3 calls in flight at once.",
)
@click.option(
    "--measure-concurrency",
    type=int,
    default=4,
    show_default=True,
    envvar="ENDPOINT_OPTIMIZER_MEASURE_CONCURRENCY",
    help="Most benchmark/eval measurements running at once across all resources; the "
    "others wait their turn. Bounds the operator's memory when many resources measure.",
)
@click.option("--log-level", default="INFO", show_default=True)
@click.option("--log-json/--log-console", default=None, help="Default: JSON unless a terminal.")
def run_command(
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    metrics_port: int | None,
    liveness: str | None,
    poll_interval: float,
    time_scale: float,
    endpoint_recheck: float | None,
    aws_concurrency: int,
    measure_concurrency: int,
    log_level: str,
    log_json: bool | None,
) -> None:
    """Run the operator until it is stopped."""
    if not namespaces and not all_namespaces:
        raise click.UsageError("give --namespace NS (repeatable) or --all-namespaces")
    if namespaces and all_namespaces:
        raise click.UsageError("--namespace and --all-namespaces exclude each other")
    if poll_interval <= 0 or time_scale <= 0:
        raise click.UsageError("--poll-interval and --time-scale must be positive")
    if endpoint_recheck is not None and endpoint_recheck < poll_interval:
        raise click.UsageError("--endpoint-recheck must be at least --poll-interval")
    if measure_concurrency < 1:
        raise click.UsageError("--measure-concurrency must be at least 1")
    logs.configure(level=log_level, json=log_json)
    set_options(
        OperatorOptions(
            poll_interval=poll_interval,
            aws_concurrency=aws_concurrency,
            measure_concurrency=measure_concurrency,
            time_scale=time_scale,
            metrics_port=metrics_port,
            endpoint_recheck=endpoint_recheck,
        )
    )
    if metrics_port is not None:
        import prometheus_client

        prometheus_client.start_http_server(metrics_port)

    import kopf

    # Imported for its decorators: they register the handlers with kopf's default registry.
    from endpoint_optimizer.controller import handlers  # noqa: F401

    asyncio.run(
        kopf.operator(
            # One replica with Recreate (kopf has no leader election): no peering objects.
            standalone=True,
            clusterwide=all_namespaces,
            namespaces=list(namespaces),
            liveness_endpoint=liveness,
        )
    )
