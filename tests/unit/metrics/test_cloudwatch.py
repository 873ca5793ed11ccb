"""The CloudWatch reader: one valid batched GetMetricData, parsed into per-variant base units."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.stub import Stubber
from botocore.validate import validate_parameters

from endpoint_optimizer.analysis.series import LiveMetric, VariantRole
from endpoint_optimizer.aws.cloudwatch import (
    CloudWatchReader,
    build_queries,
    parse_results,
    query_id,
)

VARIANTS = {VariantRole.BASELINE: "AllTraffic", VariantRole.CANDIDATE: "candidate-fp8"}
START = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def cloudwatch() -> object:
    return boto3.client(
        "cloudwatch",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def test_queries_pass_botocore_validation_and_cover_every_metric_of_every_variant() -> None:
    queries = build_queries("llama-8b-chat", VARIANTS, period_seconds=60)
    model = cloudwatch().meta.service_model.operation_model("GetMetricData")  # type: ignore[attr-defined]
    # Raises ParamValidationError on anything the real service model refuses.
    validate_parameters(
        {"MetricDataQueries": queries, "StartTime": START, "EndTime": START + timedelta(minutes=5)},
        model.input_shape,
    )

    assert len(queries) == 2 * len(LiveMetric)
    assert len({q["Id"] for q in queries}) == len(queries)
    by_id = {q["Id"]: q["MetricStat"] for q in queries}
    latency = by_id["candidate_model_latency_seconds"]
    assert latency["Metric"]["Namespace"] == "AWS/SageMaker"
    assert latency["Stat"] == "Average"
    assert latency["Metric"]["Dimensions"] == [
        {"Name": "EndpointName", "Value": "llama-8b-chat"},
        {"Name": "VariantName", "Value": "candidate-fp8"},
    ]
    gpu = by_id["baseline_gpu_memory_utilization_percent"]
    assert gpu["Metric"]["Namespace"] == "/aws/sagemaker/Endpoints"
    assert gpu["Metric"]["MetricName"] == "GPUMemoryUtilization"
    assert by_id["baseline_invocations"]["Stat"] == "Sum"
    assert all("Unit" not in stat for stat in by_id.values())


@pytest.mark.parametrize(
    ("endpoint", "period", "message"),
    [("", 60, "endpoint_name"), ("llama", 0, "period_seconds")],
)
def test_bad_arguments_are_refused_with_the_field_named(
    endpoint: str, period: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        build_queries(endpoint, VARIANTS, period)


def test_results_become_per_period_points_in_seconds_oldest_first() -> None:
    t0, t1 = START, START + timedelta(minutes=1)
    results = [
        # CloudWatch's default order is newest first; points come out oldest first.
        {"Id": "baseline_invocations", "Timestamps": [t1, t0], "Values": [120.0, 100.0]},
        {"Id": "baseline_model_latency_seconds", "Timestamps": [t1], "Values": [250_000.0]},
        {"Id": "baseline_errors_5xx", "Timestamps": [t0, t1], "Values": [0.0, 6.0]},
        {"Id": "candidate_invocations", "Timestamps": [t1], "Values": [12.0],
         "StatusCode": "PartialData"},
        {"Id": "someone_elses_query", "Timestamps": [t0], "Values": [1.0]},
    ]  # fmt: skip
    series = parse_results(results, VARIANTS, period_seconds=60)

    baseline = series[VariantRole.BASELINE]
    assert [p.start for p in baseline.points] == [t0.timestamp(), t1.timestamp()]
    assert baseline.values(LiveMetric.INVOCATIONS) == [100.0, 120.0]
    assert baseline.values(LiveMetric.MODEL_LATENCY) == [None, 0.25]
    assert baseline.points[1].error_rate == 0.05
    assert baseline.complete
    candidate = series[VariantRole.CANDIDATE]
    assert candidate.variant_name == "candidate-fp8"
    assert candidate.values(LiveMetric.INVOCATIONS) == [12.0]
    assert not candidate.complete


def test_reader_sends_one_request_and_follows_next_token() -> None:
    client = cloudwatch()
    end = START + timedelta(minutes=2)
    queries = build_queries("llama-8b-chat", VARIANTS, period_seconds=60)
    stubber = Stubber(client)
    common = {
        "MetricDataQueries": queries,
        "StartTime": START,
        "EndTime": end,
        "ScanBy": "TimestampAscending",
    }
    stubber.add_response(
        "get_metric_data",
        {
            "MetricDataResults": [
                {"Id": query_id(VariantRole.CANDIDATE, LiveMetric.GPU_UTILIZATION),
                 "Timestamps": [START], "Values": [85.0], "StatusCode": "PartialData"},
            ],
            "NextToken": "page-2",
        },
        common,
    )  # fmt: skip
    stubber.add_response(
        "get_metric_data",
        {
            "MetricDataResults": [
                {"Id": query_id(VariantRole.CANDIDATE, LiveMetric.GPU_UTILIZATION),
                 "Timestamps": [START + timedelta(minutes=1)], "Values": [95.0],
                 "StatusCode": "Complete"},
            ],
        },
        {**common, "NextToken": "page-2"},
    )  # fmt: skip

    with stubber:
        series = CloudWatchReader(client, period_seconds=60).read(  # type: ignore[arg-type]
            "llama-8b-chat", VARIANTS, START, end
        )
    stubber.assert_no_pending_responses()

    candidate = series[VariantRole.CANDIDATE]
    assert candidate.values(LiveMetric.GPU_UTILIZATION) == [85.0, 95.0]
    assert candidate.complete
    assert series[VariantRole.BASELINE].points == ()
    assert series[VariantRole.BASELINE].latest() is None


def test_one_read_becomes_the_live_judges_observation() -> None:
    from endpoint_optimizer.analysis.live import LivePolicy, judge_interval
    from endpoint_optimizer.analysis.series import live_observation
    from endpoint_optimizer.api.live import LiveState

    t0, t1 = START, START + timedelta(minutes=1)
    results = [
        {"Id": "baseline_invocations", "Timestamps": [t0, t1], "Values": [90.0, 100.0]},
        {"Id": "baseline_errors_5xx", "Timestamps": [t1], "Values": [1.0]},
        {"Id": "baseline_model_latency_p99_seconds", "Timestamps": [t1], "Values": [800_000.0]},
        {"Id": "candidate_invocations", "Timestamps": [t1], "Values": [25.0]},
        {"Id": "candidate_errors_5xx", "Timestamps": [t1], "Values": [0.0]},
        {"Id": "candidate_model_latency_p99_seconds", "Timestamps": [t1], "Values": [600_000.0]},
    ]
    series = parse_results(results, VARIANTS, period_seconds=60)
    observation = live_observation(series, interval_end=t1 + timedelta(minutes=1))

    assert (observation.baseline.invocations, observation.baseline.errors_5xx) == (100, 1)
    assert observation.baseline.latency_s == pytest.approx(0.8)
    assert observation.candidate.invocations == 25
    assert observation.candidate.latency_s == pytest.approx(0.6)
    judgement = judge_interval(LiveState(), observation, LivePolicy(), t1 + timedelta(minutes=1))
    assert judgement.state.last_interval_end == observation.interval_end


def test_a_variant_without_data_is_an_empty_interval() -> None:
    from endpoint_optimizer.analysis.series import live_observation

    observation = live_observation(parse_results([], VARIANTS, 60), interval_end=START)

    assert observation.candidate.invocations == 0
    assert observation.candidate.latency_s is None
