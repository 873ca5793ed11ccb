"""Prometheus scrapes the real operator process while it drives two rollouts on the sandbox.

`endpoint-optimizer run --metrics-port` runs against KMock and the sandbox (the e2e
harness). One resource is promoted through a canary; the other's candidate update
fails in SageMaker and is rolled back. Prometheus scrapes the operator every second
with the shipped rules loaded; every dashboard query must return data unless this
run cannot produce it (listed below with the reason), the rollback alert must name
the rolled-back resource and its reason, and deleting that resource removes its series.

The operator is unmodified: handlers.py registers the exporter's reconcile hook (with
the spec), times reconciles, instruments every boto3 client and forgets on finalize.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from endpoint_optimizer.sandbox.config import Faults
from endpoint_optimizer.sandbox.testing import running_sandbox_process
from tests.e2e.conftest import (
    GUARD,
    NAMESPACE,
    POLL_INTERVAL,
    operator_env,
    sandbox_config,
    spec,
)
from tests.e2e.harness import OperatorProcess, running_cluster, tempdir, write_kubeconfig
from tests.integration.prometheus.server import (
    PROMETHEUS,
    Prometheus,
    free_port,
    running_prometheus,
    wait_until,
)
from tests.integration.prometheus.test_scrape import DASHBOARD, JOB, RULES, substitute

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus not installed (.ci/run installs Debian's prometheus)"
)

# (panel title, refId) -> why this run leaves the query empty.
EXPECTED_EMPTY = {
    ("Time in phase vs deadline", "B"): "both rollouts end in a terminal phase, which has none",
    ("Acceptance rate and floor", "A"): "no speculative decoding in these specs",
    ("Acceptance rate and floor", "B"): "no speculative decoding in these specs",
    # The specs waive their evaluation: no delta, score or refusal rate (the allowed drop,
    # from spec.evaluation, is exported).
    ("Eval delta and allowed drop", "A"): "evaluation waived in these specs",
    ("Eval score", "A"): "evaluation waived in these specs",
    ("Refusal rate", "A"): "evaluation waived in these specs",
    ("Throttled AWS attempts", "A"): "no throttling injected",
    **{
        (panel, ref): "no spec.search in these specs (tests/integration/prometheus/"
        "test_scrape.py scrapes a search)"
        for panel, ref in (
            ("Search: gain over the stack each candidate was built on", "A"),
            ("Search: verdicts", "A"),
            ("Search: throughput and instance-hours", "A"),
            ("Search: throughput and instance-hours", "B"),
        )
    },
    **{
        (panel, ref): "no speculative decoding in these specs: no container acceptance lines "
        "(tests/integration/prometheus/test_scrape.py scrapes them)"
        for panel, ref in (
            ("Live acceptance vs floor", "A"),
            ("Live acceptance vs floor", "B"),
            ("Live acceptance vs floor", "C"),
            ("Drafted and accepted tokens", "A"),
            ("Drafted and accepted tokens", "B"),
        )
    },
    **{
        (panel, ref): "the e2e spec's 1 s steps end before a live interval is due, and probes "
        "are sent per judged interval (tests/e2e/test_live_judge.py judges them)"
        for panel, ref in (("Probe TTFT and ITL", "A"), ("Probe TTFT and ITL", "B"))
    },
    **{
        (panel, ref): "the control loop does not read CloudWatch through the metrics reader yet"
        for panel, ref in (
            ("Invocations per interval", "A"),
            ("Model and overhead latency", "A"),
            ("Model and overhead latency", "B"),
            ("Model and overhead latency", "C"),
            ("5XX errors per interval", "A"),
            ("GPU utilization", "A"),
            ("GPU memory utilization", "A"),
        )
    },
}


def scraped(prometheus: Prometheus, expr: str, value: float) -> bool:
    return any(float(sample["value"][1]) == value for sample in prometheus.query(expr))


def test_prometheus_scrapes_a_real_operator_through_a_promotion_and_a_rollback() -> None:
    directory: Path = tempdir()
    port = free_port()
    sandbox_settings = sandbox_config(faults=Faults(fail_endpoint_updates=["broken-e2e"]))
    try:
        with (
            running_cluster() as (emulator, cluster),
            running_sandbox_process(sandbox_settings, directory / "sandbox.log") as sandbox,
            running_prometheus({JOB: f"127.0.0.1:{port}"}, [RULES]) as prometheus,
        ):
            cluster.create_namespace(NAMESPACE)
            operator = OperatorProcess(
                kubeconfig=write_kubeconfig(emulator.url, directory),
                namespace=NAMESPACE,
                aws_endpoint_url=sandbox.url,
                log_path=directory / "operator.log",
                extra_env=operator_env(POLL_INTERVAL),
                extra_args=("--log-console", "--metrics-port", str(port)),
            )
            operator.start()
            try:
                cluster.create(NAMESPACE, "chat", spec())
                cluster.create(NAMESPACE, "broken", spec(endpointName="broken-e2e"))
                final = {}
                for name, phase in (("chat", "Succeeded"), ("broken", "RolledBack")):
                    obj = cluster.wait_for_phase(
                        NAMESPACE,
                        name,
                        {"Succeeded", "RolledBack", "Failed"},
                        timeout=GUARD,
                        on_timeout=lambda: operator.log_tail(40),
                    )
                    assert obj["status"]["phase"] == phase, operator.log_tail(40)
                    final[name] = obj["status"]
                check_scrapes(prometheus, final["chat"])
                # Deleting a resource removes its series: the finalizer calls forget().
                cluster.delete(NAMESPACE, "broken")
                cluster.wait_gone(
                    NAMESPACE, "broken", timeout=GUARD, on_timeout=lambda: operator.log_tail(40)
                )
                wait_until(
                    lambda: (
                        not prometheus.query('{__name__=~"endpoint_optimizer_.+",name="broken"}')
                        and scraped(prometheus, "endpoint_optimizer_resources", 1)
                    ),
                    GUARD,
                    "the deleted resource's series gone",
                )
                assert scraped(prometheus, 'endpoint_optimizer_info{name="chat"}', 1)
            finally:
                operator.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def check_scrapes(prometheus: Prometheus, chat_status: dict[str, Any]) -> None:
    wait_until(
        lambda: (
            scraped(prometheus, 'endpoint_optimizer_phase{name="chat",phase="Succeeded"}', 1)
            and scraped(prometheus, 'endpoint_optimizer_phase{name="broken",phase="RolledBack"}', 1)
        ),
        GUARD,
        "final phases scraped",
    )
    promotions = prometheus.query('endpoint_optimizer_promotions_total{name="chat"}')
    assert [float(s["value"][1]) for s in promotions] == [1.0]
    rollbacks = prometheus.query("endpoint_optimizer_rollbacks_total > 0")
    assert [(s["metric"]["name"], s["metric"]["reason"], s["value"][1]) for s in rollbacks] == [
        ("broken", "updateFailed", "1")
    ]

    # What handlers.py wires besides the hook: the spec's labels, timed reconciles, the
    # botocore hook (calls, and the optimization jobs' durations from their Describes).
    assert scraped(
        prometheus, 'endpoint_optimizer_info{name="chat",objective="latency",strategy="canary"}', 1
    )
    assert (
        float(
            prometheus.query("endpoint_optimizer_reconcile_duration_seconds_count")[0]["value"][1]
        )
        > 0
    )
    jobs = prometheus.query("endpoint_optimizer_optimization_job_duration_seconds_count")
    assert [(s["metric"]["technique"], s["metric"]["status"], s["value"][1]) for s in jobs] == [
        ("quantization", "COMPLETED", "2")
    ]
    assert prometheus.query(
        'endpoint_optimizer_aws_api_calls_total{service="sagemaker",operation="UpdateEndpoint"}'
    )

    dashboard = json.loads(DASHBOARD.read_text())
    empty: list[tuple[str, str, str]] = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            if not prometheus.query(substitute(target["expr"])):
                empty.append((panel["title"], target["refId"], target["expr"]))
    unexpected = [e for e in empty if (e[0], e[1]) not in EXPECTED_EMPTY]
    assert unexpected == [], f"dashboard queries without data: {unexpected}"
    stale = [key for key in EXPECTED_EMPTY if key not in {(e[0], e[1]) for e in empty}]
    assert stale == [], f"listed as empty but returned data (update EXPECTED_EMPTY): {stale}"
    for annotation in dashboard["annotations"]["list"]:
        assert prometheus.query(substitute(annotation["expr"])), annotation["name"]

    # The exported figures are the status' own, converted to seconds.
    level = chat_status["candidate"]["levels"][0]
    ttft = prometheus.query(
        'endpoint_optimizer_ttft_seconds{name="chat",variant="candidate",quantile="0.5",'
        f'concurrency="{level["concurrency"]}"}}'
    )
    assert [float(s["value"][1]) for s in ttft] == [pytest.approx(level["ttftP50Ms"] / 1000)]

    assert [r["name"] for r in prometheus.rules() if r["health"] != "ok"] == []

    def rollback_alert() -> dict[str, str] | None:
        for alert in prometheus.alerts():
            if alert["labels"]["alertname"] == "EndpointOptimizerRollback":
                labels: dict[str, str] = alert["labels"]
                return labels
        return None

    labels = wait_until(rollback_alert, GUARD, "EndpointOptimizerRollback pending or firing")
    assert (labels["name"], labels["reason"]) == ("broken", "updateFailed")
