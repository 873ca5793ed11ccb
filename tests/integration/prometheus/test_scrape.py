"""A real Prometheus scrapes a live exporter; every dashboard query and alert is evaluated.

The exporter is fed the way the operator feeds it: status objects built with the api
models, live figures read from the sandbox's CloudWatch by the CloudWatchReader,
boto3 calls counted by the botocore hook (with throttling injected by the sandbox),
and rollout events. Prometheus loads the shipped alert rules; the test then runs
every panel query and annotation of the shipped dashboard through /api/v1/query and
requires data from each, and requires each alert whose condition the run produced
to be pending or firing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from endpoint_optimizer.analysis.live import (
    LiveObservation,
    LivePolicy,
    ProbeSamples,
    VariantInterval,
    judge_interval,
)
from endpoint_optimizer.analysis.series import LiveMetric, VariantRole
from endpoint_optimizer.api import (
    LevelMeasurement,
    OptimizedEndpointStatus,
    Phase,
    RollbackReason,
    RolloutStatus,
    SearchRow,
    SearchStatus,
    VariantMeasurements,
    parse_spec,
)
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.api.live import LiveState
from endpoint_optimizer.aws.cloudwatch import CloudWatchReader
from endpoint_optimizer.aws.logs import ContainerLogReader
from endpoint_optimizer.metrics.exporter import OperatorMetrics
from endpoint_optimizer.metrics.snapshot import snapshot_from_resource
from endpoint_optimizer.sandbox.config import Faults, SandboxConfig
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox
from tests.integration.prometheus.server import (
    PROMETHEUS,
    MetricsEndpoint,
    Prometheus,
    running_prometheus,
    wait_until,
)

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus not installed (.ci/run installs Debian's prometheus)"
)

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "charts" / "endpoint-optimizer" / "dashboards" / "endpoint-optimizer.json"
RULES = REPO / "charts" / "endpoint-optimizer" / "rules" / "alerts.yaml"
JOB = "endpoint-optimizer"
NAMESPACE = "ml"
ROLE = "arn:aws:iam::123456789012:role/sagemaker-exec"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"
# Grafana's variables, as a person looking at this namespace would have them.
VARIABLES = {
    "$__rate_interval": "30s",
    "$__range": "5m",
    "$namespace": NAMESPACE,
    "$endpoint": ".*",
    "$quantile": "0.5|0.9|0.99",
    "$job": JOB,
}
# Alerts the run below makes true; the others cannot within seconds (promtool tests them).
EXPECTED_ACTIVE = {
    "EndpointOptimizerRollback",
    "EndpointOptimizerRolloutStuck",
    "EndpointOptimizerAcceptanceBelowFloor",
    "EndpointOptimizerSageMakerThrottling",
    "EndpointOptimizerReconcileFailing",
    "EndpointOptimizerDown",
}


def substitute(expr: str) -> str:
    for variable, value in VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"unsubstituted variable in {expr!r}"
    return expr


def spec(name: str, floor: float, pause: str) -> dict[str, Any]:
    return parse_spec(
        {
            "endpointName": name,
            "region": "us-east-1",
            "executionRoleArn": ROLE,
            "model": {"s3Uri": "s3://models/llama-3.1-8b/"},
            "instanceType": "ml.g6e.2xlarge",
            "optimizations": {
                "speculativeDecoding": {"method": "ngram", "minAcceptanceRate": floor}
            },
            "benchmark": {"concurrency": [1, 8], "requests": 64},
            "evaluation": {
                "dataset": {"configMapRef": {"name": "evals", "key": "items.jsonl"}},
                "maxAbsoluteDrop": 0.02,
            },
            "rollout": {"strategy": "canary", "steps": [{"weight": 10, "pause": pause}]},
        }
    ).dump()


def measured(scale: float, acceptance: float | None, score: float) -> VariantMeasurements:
    return VariantMeasurements(
        levels=[
            LevelMeasurement(
                concurrency=c,
                requests=64,
                ttft_p50_ms=100 * scale * c**0.3,
                ttft_p90_ms=150 * scale * c**0.3,
                ttft_p99_ms=220 * scale * c**0.3,
                itl_p50_ms=11 * scale,
                itl_p90_ms=13 * scale,
                itl_p99_ms=19 * scale,
                e2e_p50_ms=2900 * scale,
                e2e_p90_ms=3300 * scale,
                e2e_p99_ms=3900 * scale,
                output_tokens_per_second=90 * c / scale,
            )
            for c in (1, 8)
        ],
        acceptance_rate=acceptance,
        eval_score=score,
        refusal_rate=0.01,
    )


def status(
    step_started: datetime, acceptance: float, live_judge: LiveState | None = None
) -> dict[str, Any]:
    return OptimizedEndpointStatus(
        phase=Phase.ANALYZING,
        baseline=measured(1.0, None, 0.81),
        candidate=measured(0.8, acceptance, 0.80),
        checks=[
            Check(name="ttft_p99@c8", kind=CheckKind.BENCHMARK, verdict=Verdict.PASS),
            Check(name="acceptance", kind=CheckKind.ACCEPTANCE, verdict=Verdict.INCONCLUSIVE),
        ],
        rollout=RolloutStatus(
            step_index=0, canary_weight=10, step_started_at=step_started, live_judge=live_judge
        ),
        # A search that kept FP8 over AWQ before this rollout (its winner is the candidate).
        search=SearchStatus(
            best=["fp8"],
            candidates=2,
            instance_hours=0.4,
            done="every rung tried; the winner is fp8",
            rows=[
                SearchRow(
                    name="fp8",
                    rung="quantization",
                    verdict="Kept",
                    measured=True,
                    gain=0.31,
                    tokens_per_second=820.0,
                    latency_ms=2100.0,
                    peak_gpu_memory_percent=360.0,
                    gpu_memory_read=True,
                ),
                SearchRow(
                    name="awq",
                    rung="quantization",
                    verdict="GateFailed",
                    measured=True,
                    gain=0.35,
                    tokens_per_second=860.0,
                    latency_ms=2000.0,
                ),
            ],
        ),
    ).dump()


def deploy_two_variants(sandbox: SandboxHandle, endpoint: str, metrics: OperatorMetrics) -> None:
    sm = sandbox.client("sagemaker")
    metrics.instrument(sm)
    for model in ("base", "cand"):
        sm.create_model(
            ModelName=f"{endpoint}-{model}",
            ExecutionRoleArn=ROLE,
            PrimaryContainer={
                "Image": IMAGE,
                "ModelDataUrl": "s3://models/llama-3.1-8b/",
                # The candidate speculates (n-gram), so its container logs SpecDecoding lines.
                "Environment": {"OPTION_SPECULATIVE_DRAFT_MODEL": "[ngram]"}
                if model == "cand"
                else {},
            },
        )
    sm.create_endpoint_config(
        EndpointConfigName=f"{endpoint}-config",
        ProductionVariants=[
            {"VariantName": name, "ModelName": f"{endpoint}-{model}",
             "InstanceType": "ml.g6e.2xlarge", "InitialInstanceCount": 1,
             "InitialVariantWeight": 0.5}
            for name, model in (("AllTraffic", "base"), ("candidate", "cand"))
        ],
    )  # fmt: skip
    sm.create_endpoint(EndpointName=endpoint, EndpointConfigName=f"{endpoint}-config")
    sm.get_waiter("endpoint_in_service").wait(
        EndpointName=endpoint, WaiterConfig={"Delay": 0.02, "MaxAttempts": 500}
    )


def finish_optimization_job(sandbox: SandboxHandle, metrics: OperatorMetrics) -> None:
    """An FP8 job run to completion, polled with DescribeOptimizationJob as the operator does."""
    sm = sandbox.client("sagemaker")
    metrics.instrument(sm)
    sm.create_optimization_job(
        OptimizationJobName="chat-fp8",
        RoleArn=ROLE,
        ModelSource={"S3": {"S3Uri": "s3://models/llama-3.1-8b/"}},
        DeploymentInstanceType="ml.g6e.2xlarge",
        OptimizationConfigs=[
            {"ModelQuantizationConfig": {"OverrideEnvironment": {"OPTION_QUANTIZE": "fp8"}}}
        ],
        OutputConfig={"S3OutputLocation": "s3://out/chat-fp8/"},
        StoppingCondition={"MaxRuntimeInSeconds": 36000},
    )

    def completed() -> bool:
        job = sm.describe_optimization_job(OptimizationJobName="chat-fp8")
        return bool(job["OptimizationJobStatus"] == "COMPLETED")

    wait_until(completed, 30, "optimization job COMPLETED")


@pytest.fixture
def sandbox() -> Iterator[SandboxHandle]:
    config = SandboxConfig(
        time_scale=0.0002, serving_time_scale=0.005, container_log_interval_s=0.05
    )
    with running_sandbox(config) as handle:
        yield handle


def has_value(prometheus: Prometheus, expr: str, value: float) -> bool:
    return any(float(sample["value"][1]) == value for sample in prometheus.query(expr))


def test_prometheus_evaluates_every_dashboard_query_and_alert_against_the_exporter(
    sandbox: SandboxHandle,
) -> None:
    metrics = OperatorMetrics()
    server = MetricsEndpoint(metrics.registry)
    try:
        with running_prometheus({JOB: f"127.0.0.1:{server.port}"}, [RULES]) as prometheus:
            run_rollout_and_check(sandbox, metrics, server, prometheus)
    finally:
        server.close()


def run_rollout_and_check(
    sandbox: SandboxHandle,
    metrics: OperatorMetrics,
    server: MetricsEndpoint,
    prometheus: Prometheus,
) -> None:
    now = datetime.now(UTC)
    # Live traffic on both variants, read back through the batched CloudWatch reader.
    deploy_two_variants(sandbox, "chat", metrics)
    runtime = sandbox.client("sagemaker-runtime")
    metrics.instrument(runtime)
    body = json.dumps({"inputs": "Summarize: the cat sat.", "parameters": {"max_new_tokens": 4}})
    for role_variant in ("AllTraffic", "candidate") * 6:
        runtime.invoke_endpoint(EndpointName="chat", Body=body, TargetVariant=role_variant)
    cloudwatch = sandbox.client("cloudwatch")
    metrics.instrument(cloudwatch)
    variants = {VariantRole.BASELINE: "AllTraffic", VariantRole.CANDIDATE: "candidate"}
    # The sandbox serves 1-second periods (high resolution); SageMaker itself needs 60.
    series = CloudWatchReader(cloudwatch, period_seconds=1).read(
        "chat", variants, now - timedelta(minutes=1), datetime.now(UTC) + timedelta(seconds=1)
    )
    assert sum(v or 0 for v in series[VariantRole.CANDIDATE].values(LiveMetric.INVOCATIONS)) == 6
    probes = {
        role: ProbeSamples(requests=3, ttft_s=[0.05, 0.06, 0.07], tpot_s=[0.01, 0.011, 0.012])
        for role in VariantRole
    }
    metrics.observe_live(NAMESPACE, "chat", series, probes)

    # The candidate container's SpecDecoding lines, read through CloudWatch Logs and folded
    # by the live judge, as the operator does each interval.
    logs = sandbox.client("logs")
    metrics.instrument(logs)
    reader = ContainerLogReader(logs)
    window_end = wait_until(
        lambda: (lambda end: end if reader.read("chat", variants, now, end).lines[
            VariantRole.CANDIDATE] else None)(datetime.now(UTC)),
        30,
        "the candidate's SpecDecoding lines",
    )  # fmt: skip
    lines = reader.read("chat", variants, now - timedelta(minutes=1), window_end).lines
    judged = judge_interval(
        LiveState(),
        LiveObservation(
            interval_end=window_end,
            baseline=VariantInterval(invocations=0),
            candidate=VariantInterval(invocations=0, spec_lines=list(lines[VariantRole.CANDIDATE])),
        ),
        LivePolicy(acceptance_floor=0.4, min_drafted_tokens=1),
        window_end,
    )
    found = judged.state.candidate_acceptance
    assert found is not None and found.drafted > 0

    # Two resources: "chat" is healthy; "stuck" has been in its step for two hours and its
    # candidate's acceptance rate is under the floor.
    metrics.endpoints.update(NAMESPACE, "chat", snapshot_from_resource(spec("chat", 0.4, "5m"),
                                                 status(now, 0.63, judged.state)))  # fmt: skip
    metrics.endpoints.update(
        NAMESPACE,
        "stuck",
        snapshot_from_resource(spec("stuck", 0.5, "1m"), status(now - timedelta(hours=2), 0.3)),
    )
    metrics.observe_reconcile(0.02)
    finish_optimization_job(sandbox, metrics)

    # Throttling: the series appears with the first throttle; the rest must raise its rate.
    sandbox.admin.set_faults(
        Faults(throttle_fraction=1.0, throttle_operations=["DescribeEndpoint"])
    )
    impatient = sandbox.client("sagemaker", retries={"mode": "standard", "total_max_attempts": 1})
    metrics.instrument(impatient)

    def throttle(times: int) -> None:
        for _ in range(times):
            with pytest.raises(ClientError):
                impatient.describe_endpoint(EndpointName="chat")

    throttle(1)
    scraped = f'endpoint_optimizer_aws_api_throttled_attempts_total{{job="{JOB}"}}'
    wait_until(lambda: has_value(prometheus, scraped, 1), 30, "first scrape of the counters")
    # Counters that started at 0 in Prometheus, so increase() and changes() see the events.
    metrics.endpoints.record_rollback(NAMESPACE, "stuck", RollbackReason.ACCEPTANCE)
    metrics.endpoints.record_promotion(NAMESPACE, "chat")
    for failed in (False, True, True, True):
        metrics.observe_reconcile(0.02, failed=failed)
    throttle(40)
    wait_until(lambda: has_value(prometheus, scraped, 41), 30, "throttles scraped")
    wait_until(
        lambda: has_value(prometheus, 'endpoint_optimizer_promotions_total{name="chat"}', 1),
        30,
        "promotion scraped",
    )

    # Every panel query and annotation of the shipped dashboard returns data.
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ] + [(f"annotation {a['name']}", a["expr"]) for a in dashboard["annotations"]["list"]]
    empty = [(title, expr) for title, expr in queries if not prometheus.query(substitute(expr))]
    assert empty == [], f"dashboard queries without data: {empty}"

    # The figures are the ones the exporter was given, not just present.
    ttft = prometheus.query(
        'endpoint_optimizer_ttft_seconds{name="chat",variant="candidate",concurrency="1",'
        'quantile="0.99"}'
    )
    assert [round(float(s["value"][1]), 6) for s in ttft] == [0.176]
    # The newest 1-second period with traffic, which may hold only some of the 6 requests.
    assert has_value(
        prometheus,
        'endpoint_optimizer_live_acceptance_drafted_tokens{name="chat",variant="candidate"}',
        found.drafted,
    )
    assert has_value(
        prometheus,
        'endpoint_optimizer_live_acceptance_accepted_tokens{name="chat",variant="candidate"}',
        found.accepted,
    )
    newest = series[VariantRole.CANDIDATE].latest()
    assert newest is not None and newest.invocations
    assert has_value(
        prometheus, 'endpoint_optimizer_live_invocations{variant="candidate"}', newest.invocations
    )

    # Every rule evaluates cleanly; the alerts this run provoked are pending or firing.
    rules = prometheus.rules()
    assert [r["name"] for r in rules if r["health"] != "ok"] == []
    # The one alert that needs 15 quiet minutes cannot fire here, but it reads live data.
    assert prometheus.query("time() - endpoint_optimizer_last_reconcile_timestamp_seconds")

    def active(expected: set[str]) -> set[str] | None:
        names = {a["labels"]["alertname"] for a in prometheus.alerts()
                 if a["state"] in {"pending", "firing"}}  # fmt: skip
        return names if expected <= names else None

    wait_until(lambda: active(EXPECTED_ACTIVE - {"EndpointOptimizerDown"}), 30, "alerts active")
    by_name = {a["labels"]["alertname"]: a["labels"] for a in prometheus.alerts()}
    assert "EndpointOptimizerNotReconciling" not in by_name
    assert "EndpointOptimizerDown" not in by_name
    assert by_name["EndpointOptimizerRollback"]["reason"] == "acceptance"
    assert by_name["EndpointOptimizerRollback"]["name"] == "stuck"
    assert by_name["EndpointOptimizerRolloutStuck"]["name"] == "stuck"
    assert by_name["EndpointOptimizerAcceptanceBelowFloor"]["name"] == "stuck"
    assert by_name["EndpointOptimizerSageMakerThrottling"]["operation"] == "DescribeEndpoint"

    # The operator goes away: its series go stale and EndpointOptimizerDown becomes pending.
    server.close()
    wait_until(lambda: active({"EndpointOptimizerDown"}), 30, "EndpointOptimizerDown active")
