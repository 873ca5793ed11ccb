"""The CloudWatch reader: one endpoint's live per-variant metrics in one batched call.

Each analysis interval the operator asks for Invocations, InvocationsPerInstance,
ModelLatency (average and p99), OverheadLatency and Invocation5XXErrors (namespace
AWS/SageMaker) and GPUUtilization and GPUMemoryUtilization (namespace
/aws/sagemaker/Endpoints) for every variant, all in a single GetMetricData request. The
query list is a pure function (`build_queries`), the parsing is a pure function
(`parse_results`), and `CloudWatchReader.read` is the thin boto3 call between them. The
result is plain per-interval numbers in base units (seconds, counts, percent), typed in
`analysis.series`, that both the live judge and the exporter consume.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from endpoint_optimizer.analysis.series import IntervalPoint, LiveMetric, VariantRole, VariantSeries

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch.client import CloudWatchClient
    from mypy_boto3_cloudwatch.type_defs import MetricDataQueryTypeDef

    from endpoint_optimizer.aws.clients import AwsClients

INVOCATION_NAMESPACE = "AWS/SageMaker"
UTILIZATION_NAMESPACE = "/aws/sagemaker/Endpoints"
# GetMetricData takes at most 500 queries; 8 per variant leaves room for many variants.
MAX_QUERIES = 500


@dataclass(frozen=True)
class _Source:
    namespace: str
    metric_name: str
    stat: str
    scale: float  # multiply CloudWatch's value by this to get the base unit


# Invocation and 5XX counts are Sums; latencies are Averages in microseconds (reference
# sagemaker-api.md §4.1); utilizations are Averages in percent (0..100 x number of GPUs).
SOURCES: Mapping[LiveMetric, _Source] = {
    LiveMetric.INVOCATIONS: _Source(INVOCATION_NAMESPACE, "Invocations", "Sum", 1.0),
    # The load each instance carried (the bake compares latency only at a matched load).
    LiveMetric.INVOCATIONS_PER_INSTANCE: _Source(
        INVOCATION_NAMESPACE, "InvocationsPerInstance", "Sum", 1.0
    ),
    LiveMetric.MODEL_LATENCY: _Source(INVOCATION_NAMESPACE, "ModelLatency", "Average", 1e-6),
    # The live judge's tail statistic; CloudWatch computes percentiles of ModelLatency.
    LiveMetric.MODEL_LATENCY_P99: _Source(INVOCATION_NAMESPACE, "ModelLatency", "p99", 1e-6),
    LiveMetric.OVERHEAD_LATENCY: _Source(INVOCATION_NAMESPACE, "OverheadLatency", "Average", 1e-6),
    LiveMetric.ERRORS_5XX: _Source(INVOCATION_NAMESPACE, "Invocation5XXErrors", "Sum", 1.0),
    LiveMetric.GPU_UTILIZATION: _Source(UTILIZATION_NAMESPACE, "GPUUtilization", "Average", 1.0),
    LiveMetric.GPU_MEMORY_UTILIZATION: _Source(
        UTILIZATION_NAMESPACE, "GPUMemoryUtilization", "Average", 1.0
    ),
}


def query_id(role: VariantRole, metric: LiveMetric) -> str:
    """A GetMetricData query id: must start with a lowercase letter, then [a-zA-Z0-9_]."""
    return f"{role.value}_{metric.value}"


def build_queries(
    endpoint_name: str, variants: Mapping[VariantRole, str], period_seconds: int
) -> list[MetricDataQueryTypeDef]:
    """All live queries for one endpoint's variants, to send in one GetMetricData request."""
    if period_seconds < 1:
        raise ValueError(f"period_seconds must be positive, got {period_seconds}")
    if not endpoint_name:
        raise ValueError("endpoint_name is empty: pass the SageMaker EndpointName to read")
    queries: list[MetricDataQueryTypeDef] = []
    for role, variant_name in variants.items():
        for metric, source in SOURCES.items():
            queries.append(
                {
                    "Id": query_id(role, metric),
                    "MetricStat": {
                        "Metric": {
                            "Namespace": source.namespace,
                            "MetricName": source.metric_name,
                            "Dimensions": [
                                {"Name": "EndpointName", "Value": endpoint_name},
                                {"Name": "VariantName", "Value": variant_name},
                            ],
                        },
                        "Period": period_seconds,
                        "Stat": source.stat,
                        # No Unit: a Unit that does not match the stored one returns nothing.
                    },
                    "ReturnData": True,
                }
            )
    if len(queries) > MAX_QUERIES:
        raise ValueError(
            f"{len(variants)} variants need {len(queries)} queries; GetMetricData takes "
            f"at most {MAX_QUERIES}"
        )
    return queries


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return moment.timestamp()
    number: float = float(value)
    return number


def parse_results(
    results: Iterable[Mapping[str, Any]],
    variants: Mapping[VariantRole, str],
    period_seconds: int,
) -> dict[VariantRole, VariantSeries]:
    """Folds GetMetricData's MetricDataResults (all pages) into one series per variant."""
    by_id = {query_id(role, metric): (role, metric) for role in variants for metric in SOURCES}
    columns: dict[VariantRole, dict[float, dict[str, float]]] = {role: {} for role in variants}
    # Pages repeat an id while its data continues; the last page's status is the final word.
    final_status: dict[str, str] = {}
    for result in results:
        key = by_id.get(str(result.get("Id", "")))
        if key is None:
            continue
        role, metric = key
        final_status[str(result["Id"])] = str(result.get("StatusCode", "Complete"))
        timestamps: Sequence[Any] = result.get("Timestamps", ())
        values: Sequence[float] = result.get("Values", ())
        scale = SOURCES[metric].scale
        for timestamp, value in zip(timestamps, values, strict=False):
            row = columns[role].setdefault(_epoch(timestamp), {})
            row[metric.value] = float(value) * scale
    series: dict[VariantRole, VariantSeries] = {}
    for role, variant_name in variants.items():
        points = tuple(
            IntervalPoint(start=start, **fields) for start, fields in sorted(columns[role].items())
        )
        series[role] = VariantSeries(
            role=role,
            variant_name=variant_name,
            period_seconds=period_seconds,
            points=points,
            complete=all(
                final_status.get(query_id(role, metric), "Complete") == "Complete"
                for metric in SOURCES
            ),
        )
    return series


class CloudWatchReader:
    """Reads one endpoint's live variant metrics with a single batched GetMetricData."""

    def __init__(self, client: CloudWatchClient, period_seconds: int = 60) -> None:
        self._client = client
        self._period_seconds = period_seconds

    @property
    def period_seconds(self) -> int:
        return self._period_seconds

    def read(
        self,
        endpoint_name: str,
        variants: Mapping[VariantRole, str],
        start: datetime,
        end: datetime,
    ) -> dict[VariantRole, VariantSeries]:
        """Per-variant series for [start, end). Blocking: call it from a thread executor."""
        queries = build_queries(endpoint_name, variants, self._period_seconds)
        results: list[Mapping[str, Any]] = []
        next_token: str | None = None
        while True:
            # NextToken only appears past MaxDatapoints or on PartialData: still one batch.
            if next_token is None:
                page = self._client.get_metric_data(
                    MetricDataQueries=queries,
                    StartTime=start,
                    EndTime=end,
                    ScanBy="TimestampAscending",
                )
            else:
                page = self._client.get_metric_data(
                    MetricDataQueries=queries,
                    StartTime=start,
                    EndTime=end,
                    ScanBy="TimestampAscending",
                    NextToken=next_token,
                )
            results.extend(page.get("MetricDataResults", []))
            next_token = page.get("NextToken")
            if not next_token:
                break
        return parse_results(results, variants, self._period_seconds)


# -- scale to zero: one inference component's traffic ------------------------------------

_COMPONENT_INVOCATIONS_ID = "component_invocations"


def component_invocations_query(component: str) -> MetricDataQueryTypeDef:
    """Invocations per minute of one inference component: SageMaker publishes the
    invocation metrics of an endpoint that hosts components per component, under the one
    dimension InferenceComponentName (sagemaker/latest/dg/monitoring-cloudwatch.html)."""
    return {
        "Id": _COMPONENT_INVOCATIONS_ID,
        "MetricStat": {
            "Metric": {
                "Namespace": INVOCATION_NAMESPACE,
                "MetricName": "Invocations",
                "Dimensions": [{"Name": "InferenceComponentName", "Value": component}],
            },
            "Period": 60,
            "Stat": "Sum",
        },
        "ReturnData": True,
    }


def per_minute(
    timestamps: Sequence[Any], values: Sequence[float], start: datetime, end: datetime
) -> tuple[float, ...]:
    """One count per minute from `start`'s minute up to `end` (exclusive of a minute that
    has not begun), oldest first; a minute CloudWatch returned no datapoint for is 0."""
    first = int(start.timestamp() // 60)
    last = max(first, math.ceil(end.timestamp() / 60) - 1)
    counts = [0.0] * (last - first + 1)
    for moment, value in zip(timestamps, values, strict=False):
        index = int(_epoch(moment) // 60) - first
        if 0 <= index < len(counts):
            counts[index] += float(value)
    return tuple(counts)


async def component_invocations(
    aws: AwsClients, region: str, component: str, start: datetime, end: datetime
) -> tuple[float, ...]:
    """The component's Invocations per minute over [start, end), one GetMetricData call."""
    begin = datetime.fromtimestamp(start.timestamp() // 60 * 60, UTC)
    timestamps: list[Any] = []
    values: list[float] = []
    params: dict[str, Any] = {
        "MetricDataQueries": [component_invocations_query(component)],
        "StartTime": begin,
        "EndTime": end,
        "ScanBy": "TimestampAscending",
    }
    while True:
        out = await aws.call(
            "cloudwatch", region, "GetMetricData", f"inference component {component}", **params
        )
        for result in out.get("MetricDataResults", []):
            if result.get("Id") == _COMPONENT_INVOCATIONS_ID:
                timestamps.extend(result.get("Timestamps", []))
                values.extend(float(v) for v in result.get("Values", []))
        token = out.get("NextToken")
        if not token:
            break
        params["NextToken"] = token
    return per_minute(timestamps, values, start, end)


# -- a search candidate's peak GPU memory ------------------------------------------------

_PEAK_MEMORY_ID = "peak_gpu_memory"


async def peak_gpu_memory(
    aws: AwsClients, region: str, endpoint: str, variant: str, start: datetime, end: datetime
) -> float | None:
    """The highest one-minute Maximum of GPUMemoryUtilization of one variant over
    [start, end), or None when CloudWatch has no datapoint for it."""
    query: MetricDataQueryTypeDef = {
        "Id": _PEAK_MEMORY_ID,
        "MetricStat": {
            "Metric": {
                "Namespace": UTILIZATION_NAMESPACE,
                "MetricName": "GPUMemoryUtilization",
                "Dimensions": [
                    {"Name": "EndpointName", "Value": endpoint},
                    {"Name": "VariantName", "Value": variant},
                ],
            },
            "Period": 60,
            "Stat": "Maximum",
        },
        "ReturnData": True,
    }
    params: dict[str, Any] = {
        "MetricDataQueries": [query],
        "StartTime": datetime.fromtimestamp(start.timestamp() // 60 * 60, UTC),
        "EndTime": end,
        "ScanBy": "TimestampAscending",
    }
    peak: float | None = None
    while True:
        out = await aws.call(
            "cloudwatch", region, "GetMetricData", f"variant {variant} of {endpoint}", **params
        )
        for result in out.get("MetricDataResults", []):
            if result.get("Id") != _PEAK_MEMORY_ID:
                continue
            for value in result.get("Values", []):
                v = float(value)
                if math.isfinite(v) and v >= 0 and (peak is None or v > peak):
                    peak = v
        token = out.get("NextToken")
        if not token:
            break
        params["NextToken"] = token
    return peak
