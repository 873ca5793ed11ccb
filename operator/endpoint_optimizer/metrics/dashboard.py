"""The Grafana dashboard, generated: `python -m endpoint_optimizer.metrics.dashboard > FILE`.

The chart ships the output as charts/endpoint-optimizer/dashboards/endpoint-optimizer.json;
a test fails when the file and this generator disagree, and the Prometheus integration
test evaluates every query below against a real Prometheus scraping the exporter.
Writing the panels as code keeps their selectors uniform (every per-resource query is
filtered by the `namespace` and `endpoint` variables) and their grid positions computed.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

UID = "endpoint-optimizer"
TITLE = "endpoint-optimizer: rollouts"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Per-resource selector; `endpoint` is the OptimizedEndpoint's name.
SEL = 'namespace=~"$namespace", name=~"$endpoint"'
OP = 'job=~"$job"'


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    kind: str  # Grafana panel type
    queries: tuple[Query, ...]
    unit: str = "short"
    description: str = ""
    width: int = 8
    height: int = 8
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


def _q(expr: str, legend: str = "", instant: bool = False) -> Query:
    return Query(expr=expr, legend=legend, instant=instant)


def _counted(function: str, metric: str, window: str) -> str:
    """How much a counter grew in `window`, including the series born inside it.

    `increase()` and `changes()` need a sample before the step: a resource whose first
    rollback came before Prometheus ever scraped its counter at 0 (a scrape interval
    longer than the rollout, a failed scrape, a restarted Prometheus) would read 0.
    `M unless M offset w` is the series that did not exist a window ago, and its value
    is exactly what happened since it appeared (our counters start at 0); the older
    series get `function()` (`or` keeps the left side's samples).
    """
    series = f"{metric}{{{SEL}}}"
    return f"(({series} unless {series} offset {window}) or {function}({series}[{window}]))"


def _per_variant(metric: str, extra: str = "") -> Query:
    return _q(
        f'{metric}{{{SEL}, quantile=~"$quantile"{extra}}}',
        "{{name}} {{variant}} c={{concurrency}} p{{quantile}}",
    )


ROWS: tuple[Row, ...] = (
    Row(
        "Rollout",
        (
            Panel(
                "Phase",
                "state-timeline",
                (_q(f"endpoint_optimizer_phase{{{SEL}}} == 1", "{{name}} {{phase}}"),),
                description="The pipeline phase over time (one series per phase).",
                width=12,
            ),
            Panel(
                "Canary weight",
                "timeseries",
                (_q(f"endpoint_optimizer_canary_weight_ratio{{{SEL}}}", "{{name}}"),),
                unit="percentunit",
                description="Share of production traffic sent to the candidate.",
                width=6,
            ),
            Panel(
                "Live acceptance vs floor",
                "timeseries",
                (
                    _q(
                        f"endpoint_optimizer_live_acceptance_rate_ratio{{{SEL}}}",
                        "{{name}} {{variant}}",
                    ),
                    _q(
                        f"endpoint_optimizer_live_acceptance_rate_upper_ratio{{{SEL}}}",
                        "{{name}} {{variant}} upper bound",
                    ),
                    _q(
                        f"endpoint_optimizer_acceptance_rate_floor_ratio{{{SEL}}}", "{{name}} floor"
                    ),
                ),
                unit="percentunit",
                description="Accepted/drafted draft tokens per analysis interval, from the serving "
                "container's SpecDecoding log lines; an upper bound under the floor is a "
                "confident drift (spec.rollout.onAcceptanceDrift).",
                width=6,
            ),
            Panel(
                "Rollout step",
                "stat",
                (_q(f"endpoint_optimizer_rollout_step{{{SEL}}}", "{{name}}"),),
                description="Index of the current rollout step (0-based).",
                width=6,
            ),
            Panel(
                "Time in phase vs deadline",
                "timeseries",
                (
                    _q(
                        f"time() - endpoint_optimizer_phase_entered_timestamp_seconds{{{SEL}}}",
                        "{{name}} in phase",
                    ),
                    _q(f"endpoint_optimizer_phase_deadline_seconds{{{SEL}}}", "{{name}} deadline"),
                ),
                unit="s",
                description="Past the deadline, EndpointOptimizerRolloutStuck fires.",
                width=12,
            ),
            Panel(
                "Check verdicts",
                "table",
                (
                    _q(
                        f"endpoint_optimizer_check_verdict{{{SEL}}} == 1",
                        "{{name}} {{check}} {{verdict}}",
                        instant=True,
                    ),
                ),
                description="The latest verdict of each check (status.checks).",
                width=12,
            ),
        ),
    ),
    Row(
        "Benchmark: baseline vs candidate",
        (
            Panel(
                "TTFT",
                "bargauge",
                (_per_variant("endpoint_optimizer_ttft_seconds"),),
                unit="s",
                description="Time to first token, from the paired benchmark.",
            ),
            Panel(
                "ITL",
                "bargauge",
                (_per_variant("endpoint_optimizer_itl_seconds"),),
                unit="s",
                description="Inter-token latency, per token (not per chunk).",
            ),
            Panel(
                "End-to-end latency",
                "bargauge",
                (_per_variant("endpoint_optimizer_e2e_latency_seconds"),),
                unit="s",
            ),
            Panel(
                "Candidate vs baseline TTFT and ITL",
                "bargauge",
                (
                    _q(
                        f'endpoint_optimizer_ttft_seconds{{{SEL}, variant="candidate", '
                        f'quantile=~"$quantile"}} / ignoring (variant) '
                        f'endpoint_optimizer_ttft_seconds{{{SEL}, variant="baseline", '
                        f'quantile=~"$quantile"}} - 1',
                        "TTFT {{name}} c={{concurrency}} p{{quantile}}",
                    ),
                    _q(
                        f'endpoint_optimizer_itl_seconds{{{SEL}, variant="candidate", '
                        f'quantile=~"$quantile"}} / ignoring (variant) '
                        f'endpoint_optimizer_itl_seconds{{{SEL}, variant="baseline", '
                        f'quantile=~"$quantile"}} - 1',
                        "ITL {{name}} c={{concurrency}} p{{quantile}}",
                    ),
                ),
                unit="percentunit",
                description="Relative change; below zero the candidate is faster.",
            ),
            Panel(
                "Output throughput",
                "bargauge",
                (
                    _q(
                        f"endpoint_optimizer_output_tokens_per_second{{{SEL}}}",
                        "{{name}} {{variant}} c={{concurrency}}",
                    ),
                ),
                unit="short",
                description="Output tokens per second at each concurrency level.",
            ),
            Panel(
                "Benchmark requests",
                "bargauge",
                (
                    _q(
                        f"endpoint_optimizer_benchmark_requests{{{SEL}}}",
                        "{{name}} {{variant}} c={{concurrency}}",
                    ),
                ),
                description="Successful requests each figure rests on.",
            ),
        ),
    ),
    Row(
        "Speculative decoding and quality",
        (
            Panel(
                "Acceptance rate and floor",
                "timeseries",
                (
                    _q(
                        f"endpoint_optimizer_acceptance_rate_ratio{{{SEL}}}", "{{name}} {{variant}}"
                    ),
                    _q(
                        f"endpoint_optimizer_acceptance_rate_floor_ratio{{{SEL}}}", "{{name}} floor"
                    ),
                ),
                unit="percentunit",
                description="Accepted / drafted tokens; below the floor speculation does not pay.",
                width=6,
            ),
            Panel(
                "Eval delta and allowed drop",
                "timeseries",
                (
                    _q(
                        f'endpoint_optimizer_eval_score{{{SEL}, variant="candidate"}} - ignoring '
                        f'(variant) endpoint_optimizer_eval_score{{{SEL}, variant="baseline"}}',
                        "{{name}} candidate - baseline ({{metric}})",
                    ),
                    _q(f"-endpoint_optimizer_eval_max_drop{{{SEL}}}", "{{name}} allowed drop"),
                ),
                description="Paired eval score difference; below the allowed drop fails the gate.",
                width=6,
            ),
            Panel(
                "Eval score",
                "bargauge",
                (
                    _q(
                        f"endpoint_optimizer_eval_score{{{SEL}}}",
                        "{{name}} {{variant}} ({{metric}})",
                    ),
                ),
                width=6,
            ),
            Panel(
                "Refusal rate",
                "bargauge",
                (_q(f"endpoint_optimizer_refusal_rate_ratio{{{SEL}}}", "{{name}} {{variant}}"),),
                unit="percentunit",
                width=6,
            ),
        ),
    ),
    Row(
        "Live (CloudWatch)",
        (
            Panel(
                "Invocations per interval",
                "timeseries",
                (_q(f"endpoint_optimizer_live_invocations{{{SEL}}}", "{{name}} {{variant}}"),),
            ),
            Panel(
                "Model and overhead latency",
                "timeseries",
                (
                    _q(
                        f"endpoint_optimizer_live_model_latency_seconds{{{SEL}}}",
                        "{{name}} {{variant}} model",
                    ),
                    _q(
                        f"endpoint_optimizer_live_model_latency_p99_seconds{{{SEL}}}",
                        "{{name}} {{variant}} model p99",
                    ),
                    _q(
                        f"endpoint_optimizer_live_overhead_latency_seconds{{{SEL}}}",
                        "{{name}} {{variant}} overhead",
                    ),
                ),
                unit="s",
                description="CloudWatch average and p99 over the last analysis interval.",
            ),
            Panel(
                "5XX errors per interval",
                "timeseries",
                (_q(f"endpoint_optimizer_live_5xx_errors{{{SEL}}}", "{{name}} {{variant}}"),),
            ),
            Panel(
                "Probe TTFT and ITL",
                "timeseries",
                (
                    _q(
                        f"endpoint_optimizer_live_probe_ttft_seconds{{{SEL}}}",
                        "{{name}} {{variant}} ttft",
                    ),
                    _q(
                        f"endpoint_optimizer_live_probe_itl_seconds{{{SEL}}}",
                        "{{name}} {{variant}} itl",
                    ),
                ),
                unit="s",
                description="Median of the probes pinned to each variant in the newest interval.",
            ),
            Panel(
                "Drafted and accepted tokens",
                "timeseries",
                (
                    _q(
                        f"endpoint_optimizer_live_acceptance_drafted_tokens{{{SEL}}}",
                        "{{name}} {{variant}} drafted",
                    ),
                    _q(
                        f"endpoint_optimizer_live_acceptance_accepted_tokens{{{SEL}}}",
                        "{{name}} {{variant}} accepted",
                    ),
                ),
                description="The counters the live acceptance rests on, per analysis interval.",
            ),
            Panel(
                "GPU utilization",
                "timeseries",
                (
                    _q(
                        f"endpoint_optimizer_gpu_utilization_percent{{{SEL}}}",
                        "{{name}} {{variant}}",
                    ),
                ),
                unit="percent",
                description="CloudWatch GPUUtilization: 0-100 x the number of GPUs.",
                width=12,
            ),
            Panel(
                "GPU memory utilization",
                "timeseries",
                (
                    _q(
                        f"endpoint_optimizer_gpu_memory_utilization_percent{{{SEL}}}",
                        "{{name}} {{variant}}",
                    ),
                ),
                unit="percent",
                description="CloudWatch GPUMemoryUtilization: compare across quantization schemes.",
                width=12,
            ),
        ),
    ),
    Row(
        "Search (spec.search)",
        (
            Panel(
                "Search: gain over the stack each candidate was built on",
                "bargauge",
                (
                    _q(
                        f"endpoint_optimizer_search_candidate_gain_ratio{{{SEL}}}",
                        "{{name}} {{candidate}} ({{rung}})",
                        instant=True,
                    ),
                ),
                unit="percentunit",
                description="Each candidate's objective gain over the current best it was "
                "measured against, in one paired run (status.search).",
                width=8,
            ),
            Panel(
                "Search: verdicts",
                "table",
                (
                    _q(
                        f"endpoint_optimizer_search_candidate_verdict{{{SEL}}} == 1",
                        "{{name}} {{candidate}}: {{verdict}}",
                        instant=True,
                    ),
                ),
                description="Kept, Beaten, NoGain, GateFailed, Skipped, NotRun, or Measuring.",
                width=8,
            ),
            Panel(
                "Search: throughput and instance-hours",
                "bargauge",
                (
                    _q(
                        f"endpoint_optimizer_search_candidate_output_tokens_per_second{{{SEL}}}",
                        "{{name}} {{candidate}} tok/s",
                        instant=True,
                    ),
                    _q(
                        f"endpoint_optimizer_search_instance_hours{{{SEL}}}",
                        "{{name}} instance-hours spent",
                        instant=True,
                    ),
                ),
                description="Output tokens/s at the judged concurrency per candidate; what "
                "the search's weight-0 variants ran so far.",
                width=8,
            ),
        ),
    ),
    Row(
        "Rollbacks and promotions",
        (
            Panel(
                "Rollbacks by reason",
                "bargauge",
                (
                    _q(
                        "sum by (name, reason) "
                        + _counted("increase", "endpoint_optimizer_rollbacks_total", "$__range")
                        + " > 0",
                        "{{name}} {{reason}}",
                        instant=True,
                    ),
                ),
                description="Rollbacks in the selected time range, by what caused them.",
                width=12,
            ),
            Panel(
                "Promotions",
                "bargauge",
                (
                    _q(
                        "sum by (name) "
                        + _counted("increase", "endpoint_optimizer_promotions_total", "$__range"),
                        "{{name}}",
                        instant=True,
                    ),
                ),
                width=12,
            ),
        ),
    ),
    Row(
        "Operator health",
        (
            Panel(
                "Up",
                "stat",
                (_q(f"up{{{OP}}}", "{{instance}}"),),
                width=4,
            ),
            Panel(
                "Tracked resources",
                "stat",
                (_q(f"sum(endpoint_optimizer_resources{{{OP}}})", "resources"),),
                width=4,
            ),
            Panel(
                "Since last reconcile",
                "stat",
                (
                    _q(
                        f"time() - endpoint_optimizer_last_reconcile_timestamp_seconds{{{OP}}}",
                        "{{instance}}",
                    ),
                ),
                unit="s",
                width=4,
            ),
            Panel(
                "Reconciles and errors",
                "timeseries",
                (
                    _q(
                        f"sum(rate(endpoint_optimizer_reconcile_duration_seconds_count{{{OP}}}"
                        f"[$__rate_interval]))",
                        "reconciles/s",
                    ),
                    _q(
                        f"sum(rate(endpoint_optimizer_reconcile_errors_total{{{OP}}}"
                        f"[$__rate_interval]))",
                        "errors/s",
                    ),
                ),
                unit="reqps",
                width=6,
            ),
            Panel(
                "Reconcile duration p95",
                "timeseries",
                (
                    _q(
                        f"histogram_quantile(0.95, sum by (le) (rate("
                        f"endpoint_optimizer_reconcile_duration_seconds_bucket{{{OP}}}"
                        f"[$__rate_interval])))",
                        "p95",
                    ),
                ),
                unit="s",
                width=6,
            ),
            Panel(
                "AWS API calls",
                "timeseries",
                (
                    _q(
                        f"sum by (service, operation, code) "
                        f"(rate(endpoint_optimizer_aws_api_calls_total{{{OP}}}[$__rate_interval]))",
                        "{{service}} {{operation}} {{code}}",
                    ),
                ),
                unit="reqps",
                width=12,
            ),
            Panel(
                "Throttled AWS attempts",
                "timeseries",
                (
                    _q(
                        f"sum by (service, operation) (rate("
                        f"endpoint_optimizer_aws_api_throttled_attempts_total{{{OP}}}"
                        f"[$__rate_interval]))",
                        "{{service}} {{operation}}",
                    ),
                ),
                unit="reqps",
                width=12,
            ),
            Panel(
                "Optimization job duration (mean since start)",
                "bargauge",
                (
                    _q(
                        f"sum by (technique, status) "
                        f"(endpoint_optimizer_optimization_job_duration_seconds_sum{{{OP}}}) / "
                        f"sum by (technique, status) "
                        f"(endpoint_optimizer_optimization_job_duration_seconds_count{{{OP}}})",
                        "{{technique}} {{status}}",
                    ),
                ),
                unit="s",
                width=12,
            ),
        ),
    ),
)

ANNOTATIONS = (
    {
        "name": "Rollbacks",
        "expr": _counted("changes", "endpoint_optimizer_rollbacks_total", "2m") + " > 0",
        "title": "Rollback: {{name}}",
        "text": "reason {{reason}}",
        "color": "red",
    },
    {
        "name": "Promotions",
        "expr": _counted("changes", "endpoint_optimizer_promotions_total", "2m") + " > 0",
        "title": "Promoted: {{name}}",
        "text": "",
        "color": "green",
    },
)


def _variable(name: str, label: str, query: str, *, multi: bool) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-values"},
        "definition": query,
        "refresh": 2,
        "includeAll": multi,
        "multi": multi,
        "allValue": ".*" if multi else None,
        "current": {},
        "sort": 1,
    }


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    targets = [
        {
            "datasource": DATASOURCE,
            "expr": query.expr,
            "legendFormat": query.legend,
            "instant": query.instant,
            "range": not query.instant,
            "format": "table" if panel.kind == "table" else "time_series",
            "refId": chr(ord("A") + index),
        }
        for index, query in enumerate(panel.queries)
    ]
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": panel.width, "h": panel.height},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": panel.options,
        "targets": targets,
    }


def build_dashboard() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (schemaVersion 39)."""
    panels: list[dict[str, Any]] = []
    panel_id = 1
    y = 0
    for row in ROWS:
        panels.append(
            {
                "id": panel_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
                "panels": [],
            }
        )
        panel_id += 1
        y += 1
        x = 0
        row_height = 0
        for panel in row.panels:
            if x + panel.width > 24:
                x = 0
                y += row_height
                row_height = 0
            panels.append(_panel_json(panel, panel_id, x, y))
            panel_id += 1
            x += panel.width
            row_height = max(row_height, panel.height)
        y += row_height
    quantile = {
        "name": "quantile",
        "label": "Quantile",
        "type": "custom",
        "query": "0.5,0.9,0.99",
        "options": [
            {"text": value, "value": value, "selected": value == "0.99"}
            for value in ("0.5", "0.9", "0.99")
        ],
        "current": {"text": ["0.99"], "value": ["0.99"]},
        "multi": True,
        "includeAll": False,
    }
    return {
        "uid": UID,
        "title": TITLE,
        "description": "OptimizedEndpoint rollouts: phase and weight, baseline vs candidate "
        "benchmark, acceptance rate, eval delta, live CloudWatch metrics, rollbacks, "
        "operator health.",
        "tags": ["endpoint-optimizer", "sagemaker", "llm"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                },
                _variable(
                    "namespace",
                    "Namespace",
                    "label_values(endpoint_optimizer_info, namespace)",
                    multi=True,
                ),
                _variable(
                    "endpoint",
                    "Endpoint",
                    'label_values(endpoint_optimizer_info{namespace=~"$namespace"}, name)',
                    multi=True,
                ),
                quantile,
                _variable(
                    "job",
                    "Operator job",
                    "label_values(endpoint_optimizer_build_info, job)",
                    multi=True,
                ),
            ]
        },
        "annotations": {
            "list": [
                {
                    "datasource": DATASOURCE,
                    "enable": True,
                    "name": annotation["name"],
                    "expr": annotation["expr"],
                    "titleFormat": annotation["title"],
                    "textFormat": annotation["text"],
                    "iconColor": annotation["color"],
                    "step": "30s",
                }
                for annotation in ANNOTATIONS
            ]
        },
        "panels": panels,
    }


def render() -> str:
    return json.dumps(build_dashboard(), indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
