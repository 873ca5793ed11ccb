"""`endpoint-optimizer run`: configure logging and the operator's options, then run kopf.

The same process runs against KMock + the sandbox in tests and against a real
cluster + AWS in production: Kubernetes access comes from in-cluster config or
KUBECONFIG (kopf's own login), AWS from the standard SDK chain (credentials,
region, AWS_ENDPOINT_URL and the service-specific endpoint variables).
"""

from __future__ import annotations

import asyncio

import click
import kopf

from endpoint_optimizer import logs
from endpoint_optimizer.api.spec import MAX_BENCH_CONCURRENCY
from endpoint_optimizer.bench import limits
from endpoint_optimizer.controller import handlers
from endpoint_optimizer.controller.options import BenchJobs, OperatorOptions
from endpoint_optimizer.pipeline import pricing


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
@click.option(
    "--bench-max-streams",
    type=click.IntRange(limits.SIDE_BY_SIDE, limits.SIDE_BY_SIDE * MAX_BENCH_CONCURRENCY),
    default=limits.BenchLimits.max_streams,
    show_default=True,
    envvar="ENDPOINT_OPTIMIZER_BENCH_MAX_STREAMS",
    help="Benchmark requests in flight at once over all resources. Half of it is the "
    "highest benchmark.concurrency a spec may ask for (baseline and candidate run side by "
    "side); a spec asking more is refused before any request.",
)
@click.option(
    "--bench-streams-per-worker",
    type=click.IntRange(1, MAX_BENCH_CONCURRENCY),
    default=limits.DEFAULT_STREAMS_PER_WORKER,
    show_default=True,
    envvar="ENDPOINT_OPTIMIZER_BENCH_STREAMS_PER_WORKER",
    help="Streams one benchmark client process carries; a level above it is sharded over "
    "spawned client processes.",
)
@click.option(
    "--bench-max-workers",
    type=click.IntRange(0, 64),
    default=limits.BenchLimits.max_workers,
    show_default=True,
    envvar="ENDPOINT_OPTIMIZER_BENCH_MAX_WORKERS",
    help="Benchmark client processes alive at once over all resources (about 50 MiB "
    "each); 0 keeps every level in the operator's process.",
)
@click.option(
    "--bench-max-shards",
    type=click.IntRange(0, 256),
    default=0,
    show_default=True,
    envvar="ENDPOINT_OPTIMIZER_BENCH_MAX_SHARDS",
    help="Shard pods (a Kubernetes Indexed Job) a benchmark level above the operator's own "
    "limits may run on, each of --bench-streams-per-worker streams per variant; 0 refuses "
    "such a level. Needs --bench-job-image and --bench-job-service-account.",
)
@click.option(
    "--bench-max-tokens-per-second",
    type=click.FloatRange(min=0.0),
    default=limits.DEFAULT_MAX_TOKENS_PER_S,
    show_default=True,
    envvar="ENDPOINT_OPTIMIZER_BENCH_MAX_TOKENS_PER_SECOND",
    help="Output tokens per second (baseline and candidate together) one client process "
    "may read: a level whose earlier rounds read this much runs its next rounds on shard "
    "pods (with --bench-max-shards), each reading less; 0: streams alone decide.",
)
@click.option(
    "--bench-job-image",
    default=None,
    envvar="ENDPOINT_OPTIMIZER_BENCH_JOB_IMAGE",
    help="The shard pods' image: the operator's own (the chart sets it).",
)
@click.option(
    "--bench-job-service-account",
    default=None,
    envvar="ENDPOINT_OPTIMIZER_BENCH_JOB_SERVICE_ACCOUNT",
    help="The shard pods' ServiceAccount, in each served namespace, with the operator's AWS "
    "identity (the chart sets the operator's own).",
)
@click.option(
    "--bench-job-start-margin",
    type=click.FloatRange(min=1.0),
    default=60.0,
    show_default=True,
    envvar="ENDPOINT_OPTIMIZER_BENCH_JOB_START_MARGIN",
    help="Seconds from a shard Job's creation to its start barrier (pod scheduling, image "
    "pull, start-up).",
)
@click.option(
    "--bench-lag-tolerance",
    type=click.FloatRange(min=1.0),
    default=1.0,
    show_default=True,
    envvar="ENDPOINT_OPTIMIZER_BENCH_LAG_TOLERANCE",
    help="Widen the benchmark client's saturation guard (event-loop, thread-wake and send "
    "lag bounds) by this factor. Leave it at 1 in production: a wider guard lets a "
    "starved client's timings count. For hosts the operator shares by design (CI).",
)
@click.option(
    "--retry-max-delay",
    type=float,
    default=300.0,
    show_default=True,
    envvar="ENDPOINT_OPTIMIZER_RETRY_MAX_DELAY",
    help="Longest wait, in seconds, before retrying a resource after a retryable failure "
    "(throttling, a 5xx, a connection reset, a missing ConfigMap); each wait is jittered "
    "between one poll interval and this bound.",
)
@click.option(
    "--retry-limit",
    type=int,
    default=5,
    show_default=True,
    envvar="ENDPOINT_OPTIMIZER_RETRY_LIMIT",
    help="Retries in a row after which a failure is given up on while a candidate may hold "
    "traffic: traffic returns to the baseline and the resource ends Failed.",
)
@click.option(
    "--execution-role",
    "execution_roles",
    multiple=True,
    envvar="ENDPOINT_OPTIMIZER_EXECUTION_ROLES",
    help="An IAM role ARN the operator may pass to SageMaker as spec.executionRoleArn "
    "(repeatable; the environment variable takes them space-separated). None given: any.",
)
@click.option(
    "--progress-interval",
    type=click.FloatRange(min=0.5),
    default=10.0,
    show_default=True,
    envvar="ENDPOINT_OPTIMIZER_PROGRESS_INTERVAL",
    help="Least seconds between two writes of a running measurement's progress to "
    "status.measurement (level, requests done of planned, elapsed).",
)
@click.option(
    "--instance-prices",
    default="",
    envvar="ENDPOINT_OPTIMIZER_INSTANCE_PRICES",
    help="JSON object of USD per instance-hour by instance type (or region/instance type), "
    "for spec.search's cost per 1M output tokens where the spec gives no price; the "
    'chart\'s pricing.usdPerInstanceHour, e.g. {"ml.p5en.48xlarge": 60}.',
)
@click.option(
    "--price-lookup/--no-price-lookup",
    default=True,
    show_default=True,
    envvar="ENDPOINT_OPTIMIZER_PRICE_LOOKUP",
    help="Read a price neither the spec nor --instance-prices gives from the AWS Price List "
    "(pricing:GetProducts), once a day per instance type and region.",
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
    bench_max_streams: int,
    bench_streams_per_worker: int,
    bench_max_workers: int,
    bench_lag_tolerance: float,
    bench_max_shards: int,
    bench_max_tokens_per_second: float,
    bench_job_image: str | None,
    bench_job_service_account: str | None,
    bench_job_start_margin: float,
    retry_max_delay: float,
    retry_limit: int,
    execution_roles: tuple[str, ...],
    progress_interval: float,
    instance_prices: str,
    price_lookup: bool,
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
    if retry_max_delay <= 0 or retry_limit < 1:
        raise click.UsageError("--retry-max-delay must be positive, --retry-limit at least 1")
    if bench_max_shards and not (bench_job_image and bench_job_service_account):
        raise click.UsageError(
            "--bench-max-shards needs --bench-job-image and --bench-job-service-account"
        )
    try:
        prices = pricing.parse_table(instance_prices)
    except ValueError as exc:
        raise click.UsageError(f"--instance-prices: {exc}") from exc
    logs.configure(level=log_level, json=log_json)
    options = OperatorOptions(
        poll_interval=poll_interval,
        aws_concurrency=aws_concurrency,
        measure_concurrency=measure_concurrency,
        time_scale=time_scale,
        metrics_port=metrics_port,
        endpoint_recheck=endpoint_recheck,
        bench=limits.BenchLimits(
            max_streams=bench_max_streams,
            streams_per_worker=bench_streams_per_worker,
            max_workers=bench_max_workers,
            lag_tolerance=bench_lag_tolerance,
            max_shards=bench_max_shards,
            max_tokens_per_s=bench_max_tokens_per_second,
        ),
        bench_jobs=BenchJobs(bench_job_image, bench_job_service_account, bench_job_start_margin)
        if bench_job_image and bench_job_service_account
        else None,
        retry_max_delay=retry_max_delay,
        retry_limit=retry_limit,
        execution_roles=tuple(execution_roles),
        progress_interval=progress_interval,
        instance_prices=prices,
        price_lookup=price_lookup,
    )
    limits.configure(options.bench)
    if metrics_port is not None:
        import prometheus_client

        prometheus_client.start_http_server(metrics_port)

    registry = kopf.OperatorRegistry()
    handlers.register(registry, options)
    asyncio.run(
        kopf.operator(
            registry=registry,
            # One replica with Recreate (kopf has no leader election): no peering objects.
            standalone=True,
            clusterwide=all_namespaces,
            namespaces=list(namespaces),
            liveness_endpoint=liveness,
        )
    )
