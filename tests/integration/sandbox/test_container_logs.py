"""CloudWatch Logs over real boto3: the speculating container's "SpecDecoding metrics" lines.

The lines are written from the drafted and accepted tokens the engine simulated for the
requests it served; FilterLogEvents pages, filters by time and stream, and refuses an
unknown log group as botocore's model says (ResourceNotFoundException).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from endpoint_optimizer.analysis.series import VariantRole
from endpoint_optimizer.analysis.speclog import FILTER_PATTERN, parse_line
from endpoint_optimizer.aws import logs as log_reader
from endpoint_optimizer.aws.logs import ContainerLogReader
from endpoint_optimizer.sandbox.config import AcceptanceRegression, Faults
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox
from tests.integration.sandbox.conftest import deploy, fast_config

NGRAM = {"OPTION_SPECULATIVE_DRAFT_MODEL": "[ngram]", "OPTION_SPECULATIVE_LENGTH": "4"}
GROUP = "/aws/sagemaker/Endpoints/spec"


def _invoke(rt: Any, endpoint: str, n: int) -> None:
    body = json.dumps({"inputs": "summarize: the cat sat on the mat", "parameters": {}})
    for _ in range(n):
        rt.invoke_endpoint(EndpointName=endpoint, ContentType="application/json", Body=body)[
            "Body"
        ].read()


def _all_events(logs: Any, **params: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for page in logs.get_paginator("filter_log_events").paginate(logGroupName=GROUP, **params):
        events.extend(page["events"])
    return events


@pytest.fixture
def speculating() -> Any:
    # Lines every 50 ms of wall time, so a few dozen requests span several of them.
    with running_sandbox(fast_config(container_log_interval_s=0.05)) as handle:
        deploy(handle.client("sagemaker"), "spec", env={**NGRAM, "OPTION_MAX_NEW_TOKENS": "64"})
        _invoke(handle.client("sagemaker-runtime"), "spec", 40)
        yield handle


def _wait_lines(handle: SandboxHandle, fewest: int) -> list[dict[str, Any]]:
    """The lines once every request served so far is reported (a line appears when its
    interval ends), and at least `fewest` of them."""
    drafted = sum(r.draft_tokens for r in handle.admin.traffic_records("spec"))
    deadline = time.monotonic() + 30
    while True:
        events = _all_events(handle.client("logs"))
        parsed = [parse_line(e["logStreamName"], e["timestamp"], e["message"]) for e in events]
        reported = sum(p.drafted for p in parsed if p is not None)
        if (reported == drafted and len(events) >= fewest) or time.monotonic() > deadline:
            return events
        time.sleep(0.05)


def test_lines_carry_the_counts_the_engine_simulated(speculating: SandboxHandle) -> None:
    events = _wait_lines(speculating, 2)
    assert events, "no SpecDecoding lines"
    parsed = [parse_line(e["logStreamName"], e["timestamp"], e["message"]) for e in events]
    assert all(p is not None for p in parsed), events[:2]
    assert all(e["logStreamName"].startswith("AllTraffic/i-") for e in events)
    records = speculating.admin.traffic_records("spec")
    closed = max(e["timestamp"] for e in events) / 1000
    truth_accepted = truth_drafted = 0
    for r in records:
        assert r.t_end is not None
        if r.wall_time + (r.t_end - r.t_start) < closed:
            truth_accepted += r.accepted_tokens
            truth_drafted += r.draft_tokens
    assert sum(p.drafted for p in parsed if p) == truth_drafted
    assert sum(p.accepted for p in parsed if p) == truth_accepted
    assert 0 < truth_accepted < truth_drafted


def test_pages_time_window_and_pattern(speculating: SandboxHandle) -> None:
    events = _wait_lines(speculating, 3)
    assert len(events) >= 3
    logs = speculating.client("logs")
    first = logs.filter_log_events(logGroupName=GROUP, limit=1)
    assert len(first["events"]) == 1 and "nextToken" in first
    second = logs.filter_log_events(logGroupName=GROUP, limit=1, nextToken=first["nextToken"])
    assert second["events"][0]["eventId"] != first["events"][0]["eventId"]
    # endTime and startTime are inclusive, in epoch milliseconds.
    stamp = events[1]["timestamp"]
    only = logs.filter_log_events(logGroupName=GROUP, startTime=stamp, endTime=stamp)["events"]
    assert [e["timestamp"] for e in only] == [stamp] * len(only) and only
    later = _all_events(logs, startTime=stamp + 1)
    assert all(e["timestamp"] > stamp for e in later)
    assert len(_all_events(logs, filterPattern=FILTER_PATTERN)) == len(events)
    assert _all_events(logs, filterPattern='"no such phrase"') == []
    assert _all_events(logs, logStreamNamePrefix="OtherVariant/") == []
    streams = logs.describe_log_streams(logGroupName=GROUP)["logStreams"]
    assert {s["logStreamName"] for s in streams} == {e["logStreamName"] for e in events}


def test_unknown_group_and_bad_token_are_aws_errors(speculating: SandboxHandle) -> None:
    logs = speculating.client("logs")
    with pytest.raises(ClientError) as missing:
        logs.filter_log_events(logGroupName="/aws/sagemaker/Endpoints/none")
    assert missing.value.response["Error"]["Code"] == "ResourceNotFoundException"
    with pytest.raises(ClientError) as token:
        logs.filter_log_events(logGroupName=GROUP, nextToken="bm90IGEgdG9rZW4=")
    assert token.value.response["Error"]["Code"] == "InvalidParameterException"
    with pytest.raises(ClientError) as both:
        logs.filter_log_events(
            logGroupName=GROUP, logStreamNames=["AllTraffic/i-1"], logStreamNamePrefix="All"
        )
    assert both.value.response["Error"]["Code"] == "InvalidParameterException"


def test_acceptance_regression_lowers_the_logged_rate() -> None:
    with running_sandbox(fast_config(container_log_interval_s=0.05)) as handle:
        deploy(handle.client("sagemaker"), "spec", env=NGRAM)
        rt = handle.client("sagemaker-runtime")
        _invoke(rt, "spec", 30)
        before = handle.admin.traffic_records("spec")
        handle.admin.set_faults(Faults(acceptance_regressions=[AcceptanceRegression(factor=0.2)]))
        _invoke(rt, "spec", 30)
        after = handle.admin.traffic_records("spec")[len(before) :]

    def rate(records: list[Any]) -> float:
        return sum(r.accepted_tokens for r in records) / sum(r.draft_tokens for r in records)

    assert rate(after) < 0.5 * rate(before)


def test_reader_pages_through_the_window_and_bounds_its_pages(
    speculating: SandboxHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _wait_lines(speculating, 3)
    start = datetime.fromtimestamp(events[0]["timestamp"] / 1000, UTC)
    end = datetime.fromtimestamp(events[-1]["timestamp"] / 1000 + 1, UTC)
    reader = ContainerLogReader(speculating.client("logs"))
    variants = {VariantRole.CANDIDATE: "AllTraffic", VariantRole.BASELINE: "Other"}
    monkeypatch.setattr(log_reader, "PAGE_LIMIT", 1)
    monkeypatch.setattr(log_reader, "MAX_PAGES", len(events) + 1)
    whole = reader.read("spec", variants, start, end)
    assert not whole.truncated
    assert len(whole.lines[VariantRole.CANDIDATE]) == len(events)
    assert whole.lines[VariantRole.BASELINE] == ()
    # [start, end): a line stamped at the window's end belongs to the next window.
    last = datetime.fromtimestamp(events[-1]["timestamp"] / 1000, UTC)
    assert len(reader.read("spec", variants, start, last).lines[VariantRole.CANDIDATE]) == (
        len(events) - sum(e["timestamp"] == events[-1]["timestamp"] for e in events)
    )
    monkeypatch.setattr(log_reader, "MAX_PAGES", 2)
    bounded = reader.read("spec", variants, start, end)
    assert bounded.truncated and len(bounded.lines[VariantRole.CANDIDATE]) == 2
    missing = ContainerLogReader(speculating.client("logs")).read("none", variants, start, end)
    assert missing.lines == {VariantRole.CANDIDATE: (), VariantRole.BASELINE: ()}
