"""CloudWatch: the metrics SageMaker would publish, computed from the traffic the sandbox served.

Namespaces and units follow reference/sagemaker-api.md §4.1:
- AWS/SageMaker (dimensions EndpointName, VariantName): Invocations, InvocationsPerInstance,
  Invocation4XXErrors, Invocation5XXErrors, ModelLatency and OverheadLatency in microseconds.
  ModelLatency of a streamed response covers the whole response ([unverified] whether AWS
  stops at the first byte). Latencies are in model time (the engine's own clock, else wall
  time / serving_time_scale), so a fast test still reads realistic microseconds.
- /aws/sagemaker/Endpoints: GPUUtilization (busy share of the period) and
  GPUMemoryUtilization (what the memory model reserves), 0-100 x GPUs.
Shadow traffic is reported under the shadow variant's own VariantName ([unverified]).
As in CloudWatch, a query must name exactly the dimensions a metric was published with
(EndpointName and VariantName); any other set returns no datapoints.

Alarms: PutMetricAlarm/DescribeAlarms/DeleteAlarms/SetAlarmState; single-metric alarms are
evaluated on demand over the last EvaluationPeriods periods, so auto-rollback can read them.
"""

from __future__ import annotations

import math
import re
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from endpoint_optimizer.sandbox.control import AwsError, ControlPlane
from endpoint_optimizer.sandbox.runtime import Runtime, TrafficRecord
from endpoint_optimizer.sandbox.validation import RequestInvalid, validate

_INVOCATION_METRICS = {
    "Invocations",
    "InvocationsPerInstance",
    "Invocation4XXErrors",
    "Invocation5XXErrors",
    "ModelLatency",
    "OverheadLatency",
}
_UTILIZATION_METRICS = {
    "GPUUtilization",
    "GPUMemoryUtilization",
    "CPUUtilization",
    "MemoryUtilization",
    "DiskUtilization",
}
_VALID_PERIODS_BELOW_60 = {1, 5, 10, 20, 30}
_PERCENTILE = re.compile(r"^p(\d{1,2}(?:\.\d+)?)$")


def _seconds(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value)


@dataclass
class Alarm:
    request: dict[str, Any]
    forced_state: str | None = None
    forced_reason: str | None = None
    updated: float = 0.0


class CloudWatch:
    def __init__(self, control: ControlPlane, runtime: Runtime) -> None:
        self.control = control
        self.runtime = runtime
        self.lock = threading.Lock()
        self.alarms: dict[str, Alarm] = {}
        control.alarm_state = self.alarm_state

    def reset(self) -> None:
        with self.lock:
            self.alarms = {}

    def handle(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            validate("cloudwatch", operation, _jsonable(params))
        except RequestInvalid as exc:
            raise AwsError("ValidationError", str(exc)) from exc
        handler = getattr(self, f"op_{operation}", None)
        if handler is None:
            raise AwsError(
                "InvalidAction", f"The sandbox does not implement CloudWatch {operation}."
            )
        result: dict[str, Any] = handler(params)
        return result

    # -- metrics ----------------------------------------------------------------------------

    def series(
        self,
        namespace: str,
        metric: str,
        dimensions: dict[str, str],
        stat: str,
        period: int,
        start: float,
        end: float,
    ) -> list[tuple[float, float]]:
        """(bucket start, value) for each period in [start, end) that has data."""
        if (period < 60 and period not in _VALID_PERIODS_BELOW_60) or (period > 60 and period % 60):
            raise AwsError(
                "InvalidParameterValue",
                f"The parameter Period must be 1, 5, 10, 20, 30 or a multiple of 60; got {period}.",
            )
        if set(dimensions) == {"InferenceComponentName"} and namespace == "AWS/SageMaker":
            # Endpoints that host inference components publish the invocation metrics per
            # component under this one dimension (sagemaker/latest/dg/monitoring-cloudwatch.html).
            component = dimensions["InferenceComponentName"]
            if metric == "NoCapacityInvocationFailures":
                return self._no_capacity_series(component, stat, period, start, end)
            if metric in _INVOCATION_METRICS:
                return self._invocation_series(
                    metric, None, None, stat, period, start, end, component
                )
            return []
        if set(dimensions) != {"EndpointName", "VariantName"}:
            # CloudWatch matches the exact dimension set a metric was published with, and
            # SageMaker publishes these with both; anything else reads as no data.
            return []
        endpoint = dimensions.get("EndpointName")
        variant = dimensions.get("VariantName")
        if namespace == "AWS/SageMaker" and metric in _INVOCATION_METRICS:
            return self._invocation_series(metric, endpoint, variant, stat, period, start, end)
        if namespace == "/aws/sagemaker/Endpoints" and metric in _UTILIZATION_METRICS:
            return self._utilization_series(metric, endpoint, variant, stat, period, start, end)
        return []

    def _records(
        self, endpoint: str | None, variant: str | None, component: str | None = None
    ) -> list[TrafficRecord]:
        """Requests a model served (a no-capacity refusal never reached one)."""
        with self.runtime.lock:
            return [
                r
                for r in self.runtime.traffic
                if r.t_end is not None
                and r.error != "NoCapacity"
                and (endpoint is None or r.endpoint == endpoint)
                and (variant is None or r.variant == variant)
                and (component is None or r.inference_component == component)
            ]

    def _no_capacity_series(
        self, component: str, stat: str, period: int, start: float, end: float
    ) -> list[tuple[float, float]]:
        """NoCapacityInvocationFailures: requests refused because no copy ran."""
        with self.runtime.lock:
            times = [
                r.wall_time
                for r in self.runtime.traffic
                if r.error == "NoCapacity" and r.inference_component == component
            ]
        buckets: dict[float, list[float]] = {}
        for moment in times:
            if start <= moment < end:
                buckets.setdefault(math.floor(moment / period) * period, []).append(1.0)
        return [(b, _statistic(stat, values)) for b, values in sorted(buckets.items())]

    def _invocation_series(
        self,
        metric: str,
        endpoint: str | None,
        variant: str | None,
        stat: str,
        period: int,
        start: float,
        end: float,
        component: str | None = None,
    ) -> list[tuple[float, float]]:
        buckets: dict[float, list[float]] = {}
        for record in self._records(endpoint, variant, component):
            if not start <= record.wall_time < end:
                continue
            bucket = math.floor(record.wall_time / period) * period
            value = self._sample(metric, record)
            if value is not None:
                buckets.setdefault(bucket, []).append(value)
        return [(b, _statistic(stat, values)) for b, values in sorted(buckets.items())]

    def _sample(self, metric: str, record: TrafficRecord) -> float | None:
        if metric == "Invocations":
            return 1.0
        if metric == "InvocationsPerInstance":
            return 1.0 / max(1, self._instance_count(record))
        if metric == "Invocation4XXErrors":
            return 1.0 if 400 <= record.status < 500 else 0.0
        if metric == "Invocation5XXErrors":
            return 1.0 if record.status >= 500 else 0.0
        assert record.t_end is not None
        if metric == "ModelLatency":
            if record.model_latency_ms is not None:
                return record.model_latency_ms * 1e3
            return (record.t_end - record.t_start) / record.serving_time_scale * 1e6
        # OverheadLatency: SageMaker's routing and auth, a few ms, steady per request.
        return 2500.0 + (record.id * 7919) % 1500

    def _instance_count(self, record: TrafficRecord) -> int:
        endpoint = self.control.endpoints.get(record.endpoint)
        return endpoint.instance_counts.get(record.variant, 1) if endpoint else 1

    def _utilization_series(
        self,
        metric: str,
        endpoint: str | None,
        variant: str | None,
        stat: str,
        period: int,
        start: float,
        end: float,
    ) -> list[tuple[float, float]]:
        if endpoint is None or variant is None:
            return []
        with self.control.lock:
            ep = self.control.endpoints.get(endpoint)
            config = self.control.endpoint_configs.get(ep.config_name or "") if ep else None
            spec = next(
                (
                    v
                    for v in (config.variants() + config.shadow_variants() if config else [])
                    if v["VariantName"] == variant
                ),
                None,
            )
            profile = (
                self.control.variant_profile(endpoint, config, spec)
                if config is not None and spec is not None
                else None
            )
            deployed = ep.deployed_at.timestamp() if ep and ep.deployed_at else None
        if profile is None or deployed is None:
            return []
        gpus = max(1, profile.tensor_parallel_degree) * profile.replicas
        records = self._records(endpoint, variant)
        now = time.time()
        out: list[tuple[float, float]] = []
        bucket = math.floor(max(start, deployed) / period) * period
        while bucket < min(end, now):
            if metric == "GPUMemoryUtilization":
                value = profile.gpu_memory_utilization_percent()
            elif metric == "GPUUtilization":
                value = 100.0 * gpus * _busy_share(records, bucket, bucket + period)
            elif metric == "CPUUtilization":
                value = 12.0
            elif metric == "MemoryUtilization":
                value = 18.0
            else:
                value = 35.0
            out.append((bucket, value))
            bucket += period
        return out

    def op_GetMetricData(self, p: dict[str, Any]) -> dict[str, Any]:
        start, end = _seconds(p["StartTime"]), _seconds(p["EndTime"])
        descending = p.get("ScanBy", "TimestampDescending") == "TimestampDescending"
        results = []
        for query in p["MetricDataQueries"]:
            result: dict[str, Any] = {"Id": query["Id"], "Label": query.get("Label", query["Id"])}
            stat_spec = query.get("MetricStat")
            if stat_spec is None:
                result.update(
                    Timestamps=[],
                    Values=[],
                    StatusCode="Complete",
                    Messages=[
                        {
                            "Code": "Unsupported",
                            "Value": "The sandbox does not evaluate metric math expressions.",
                        }
                    ],
                )
                results.append(result)
                continue
            metric = stat_spec["Metric"]
            dims = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
            if "Label" not in query:
                result["Label"] = metric.get("MetricName", query["Id"])
            points = self.series(
                metric.get("Namespace", ""),
                metric.get("MetricName", ""),
                dims,
                stat_spec["Stat"],
                int(stat_spec["Period"]),
                start,
                end,
            )
            if descending:
                points.reverse()
            result.update(
                Timestamps=[datetime.fromtimestamp(t, UTC) for t, _ in points],
                Values=[v for _, v in points],
                StatusCode="Complete",
            )
            if query.get("ReturnData", True):
                results.append(result)
        return {"MetricDataResults": results, "Messages": []}

    def op_GetMetricStatistics(self, p: dict[str, Any]) -> dict[str, Any]:
        dims = {d["Name"]: d["Value"] for d in p.get("Dimensions", [])}
        stats = list(p.get("Statistics", [])) + list(p.get("ExtendedStatistics", []))
        buckets: dict[float, dict[str, Any]] = {}
        for stat in stats:
            for t, v in self.series(
                p["Namespace"],
                p["MetricName"],
                dims,
                stat,
                int(p["Period"]),
                _seconds(p["StartTime"]),
                _seconds(p["EndTime"]),
            ):
                point = buckets.setdefault(t, {"Timestamp": datetime.fromtimestamp(t, UTC)})
                if stat in p.get("ExtendedStatistics", []):
                    point.setdefault("ExtendedStatistics", {})[stat] = v
                else:
                    point[stat] = v
        return {"Label": p["MetricName"], "Datapoints": list(buckets.values())}

    # -- alarms -----------------------------------------------------------------------------

    def op_PutMetricAlarm(self, p: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.alarms[p["AlarmName"]] = Alarm(dict(p), updated=time.time())
        return {}

    def op_DeleteAlarms(self, p: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            for name in p["AlarmNames"]:
                self.alarms.pop(name, None)
        return {}

    def op_SetAlarmState(self, p: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            alarm = self.alarms.get(p["AlarmName"])
            if alarm is None:
                raise AwsError("ResourceNotFound", f"Alarm {p['AlarmName']} does not exist.", 404)
            alarm.forced_state = p["StateValue"]
            alarm.forced_reason = p["StateReason"]
            alarm.updated = time.time()
        return {}

    def op_DescribeAlarms(self, p: dict[str, Any]) -> dict[str, Any]:
        names = set(p.get("AlarmNames", []))
        prefix = p.get("AlarmNamePrefix")
        wanted_state = p.get("StateValue")
        out = []
        with self.lock:
            alarms = list(self.alarms.items())
        for name, alarm in alarms:
            if names and name not in names:
                continue
            if prefix and not name.startswith(prefix):
                continue
            state, reason = self._evaluate(alarm)
            if wanted_state and state != wanted_state:
                continue
            row = {
                k: v
                for k, v in alarm.request.items()
                if k not in ("Tags", "EvaluationCriteria", "EvaluationInterval")
            }
            row.update(
                AlarmName=name,
                AlarmArn=(
                    f"arn:aws:cloudwatch:{self.control.config.region}:"
                    f"{self.control.config.account_id}:alarm:{name}"
                ),
                StateValue=state,
                StateReason=reason,
                StateUpdatedTimestamp=datetime.fromtimestamp(alarm.updated, UTC),
                AlarmConfigurationUpdatedTimestamp=datetime.fromtimestamp(alarm.updated, UTC),
                ActionsEnabled=bool(alarm.request.get("ActionsEnabled", True)),
            )
            out.append(row)
        return {"MetricAlarms": out, "CompositeAlarms": []}

    def alarm_state(self, name: str) -> str:
        with self.lock:
            alarm = self.alarms.get(name)
        if alarm is None:
            return "INSUFFICIENT_DATA"
        return self._evaluate(alarm)[0]

    def _evaluate(self, alarm: Alarm) -> tuple[str, str]:
        if alarm.forced_state is not None:
            return alarm.forced_state, alarm.forced_reason or "Set by SetAlarmState"
        p = alarm.request
        if "MetricName" not in p or "Period" not in p:
            return "INSUFFICIENT_DATA", "The sandbox evaluates single-metric alarms only."
        period = int(p["Period"])
        periods = int(p.get("EvaluationPeriods", 1))
        needed = int(p.get("DatapointsToAlarm", periods))
        end = time.time()
        start = end - period * periods
        stat = p.get("Statistic") or p.get("ExtendedStatistic") or "Average"
        dims = {d["Name"]: d["Value"] for d in p.get("Dimensions", [])}
        points = self.series(
            p.get("Namespace", ""), p["MetricName"], dims, stat, period, start, end
        )
        threshold = float(p.get("Threshold", 0.0))
        comparison = p.get("ComparisonOperator", "GreaterThanThreshold")
        breaching = [v for _, v in points if _compare(comparison, v, threshold)]
        if len(breaching) >= needed:
            return "ALARM", f"{len(breaching)} datapoint(s) breached the threshold {threshold}."
        if not points:
            missing = p.get("TreatMissingData", "missing")
            if missing == "breaching":
                return "ALARM", "Missing data treated as breaching."
            if missing == "notBreaching":
                return "OK", "Missing data treated as not breaching."
            return "INSUFFICIENT_DATA", "No datapoints in the evaluation window."
        return "OK", "Threshold not breached."


def _compare(operator: str, value: float, threshold: float) -> bool:
    return {
        "GreaterThanOrEqualToThreshold": value >= threshold,
        "GreaterThanThreshold": value > threshold,
        "LessThanThreshold": value < threshold,
        "LessThanOrEqualToThreshold": value <= threshold,
    }.get(operator, False)


def _statistic(stat: str, values: list[float]) -> float:
    if stat == "Sum":
        return sum(values)
    if stat == "SampleCount":
        return float(len(values))
    if stat == "Minimum":
        return min(values)
    if stat == "Maximum":
        return max(values)
    match = _PERCENTILE.match(stat)
    if match:
        ordered = sorted(values)
        rank = float(match.group(1)) / 100.0 * (len(ordered) - 1)
        low = math.floor(rank)
        high = min(len(ordered) - 1, low + 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
    return sum(values) / len(values)


def _busy_share(records: list[TrafficRecord], start: float, end: float) -> float:
    """Share of [start, end) wall time during which at least one request was in flight."""
    spans = []
    for r in records:
        assert r.t_end is not None
        begin = r.wall_time
        finish = r.wall_time + (r.t_end - r.t_start)
        if finish > start and begin < end:
            spans.append((max(begin, start), min(finish, end)))
    spans.sort()
    busy, cursor = 0.0, start
    for begin, finish in spans:
        begin = max(begin, cursor)
        if finish > begin:
            busy += finish - begin
            cursor = finish
    return min(1.0, busy / max(1e-9, end - start))


def _jsonable(value: Any) -> Any:
    """CBOR decodes timestamps to datetimes; the validator wants the JSON shapes."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.timestamp()
    return value
