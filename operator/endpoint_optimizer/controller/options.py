"""The operator process's options: what `endpoint-optimizer run` sets, passed to every part."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from endpoint_optimizer.bench.limits import BenchLimits


@dataclass(frozen=True)
class BenchJobs:
    """The shard pods of a level above the operator's own limits (controller/benchjobs.py):
    the operator's image and a ServiceAccount with its AWS identity, in each namespace it
    serves (the Job runs beside its OptimizedEndpoint)."""

    image: str
    service_account: str
    # Seconds from the Job's creation to the shards' start barrier: scheduling, image
    # pull and start-up of every pod must fit in it (a late shard makes the level
    # Inconclusive, named).
    start_margin_s: float = 60.0


@dataclass(frozen=True)
class OperatorOptions:
    """What the command line sets for the whole process."""

    # How often each resource is observed: the operator's reaction time to a SageMaker
    # state change, and its SageMaker call rate (a few Describe calls per wake-up).
    poll_interval: float = 30.0
    # Bounded thread pool for boto3 calls shared by all resources.
    aws_concurrency: int = 8
    # Benchmark/eval measurements running at once across all resources; the rest wait.
    # Bounds the operator's memory (each holds a client, stream threads and records).
    measure_concurrency: int = 4
    # Streams and client processes all benchmarks may hold at once (bench.limits): what
    # bounds the operator's processes and memory whatever the specs ask for.
    bench: BenchLimits = field(default_factory=BenchLimits)
    # Where a level needs more than `bench` holds (bench.max_shards > 0): its shard Job.
    bench_jobs: BenchJobs | None = None
    # Time scale applied to the spec's rollout pauses and analysis intervals; 1.0 in
    # production, small in tests together with the sandbox's own time scale.
    time_scale: float = 1.0
    metrics_port: int | None = None
    # While a job runs or after the pipeline ends, DescribeEndpoint runs once in this many
    # seconds (pipeline.cadence); None: ten polls, 300 s at the default poll.
    endpoint_recheck: float | None = None
    # A retryable failure (throttling, a 5xx, a reset, a missing ConfigMap) is retried after
    # a jittered wait between one poll and this many seconds (controller/retry.py).
    retry_max_delay: float = 300.0
    # Attempts in a row after which a failure is given up on while a candidate may hold
    # traffic: traffic goes back to the baseline rather than wait on a candidate unjudged.
    retry_limit: int = 5
    # spec.executionRoleArn values the operator may pass to SageMaker (empty: any); the
    # chart's aws.executionRoleArns, which docs/iam-policy.json's PassRole should match.
    execution_roles: tuple[str, ...] = ()
    # A running measurement's progress goes to status.measurement at most once in this
    # many seconds (wall clock, not scaled): a bound on the status writes it costs.
    progress_interval: float = 10.0
    # spec.search's cost per 1M tokens without the user's price: the chart's
    # pricing.usdPerInstanceHour (by `instance type` or `region/instance type`), then the
    # AWS Price List when `price_lookup` (pipeline/pricing.py).
    instance_prices: Mapping[str, float] = field(default_factory=dict)
    price_lookup: bool = True

    @property
    def endpoint_recheck_s(self) -> float:
        return (
            self.endpoint_recheck if self.endpoint_recheck is not None else 10 * self.poll_interval
        )
