"""Scale to zero, compared: the pure instance-hours model, the per-minute series from
CloudWatch's answer, and the decide() path that measures the cold start and the traffic."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from endpoint_optimizer.api import ColdStartPart, OptimizedEndpointStatus, Phase, parse_status
from endpoint_optimizer.aws.cloudwatch import component_invocations_query, per_minute
from endpoint_optimizer.pipeline.decide import decide
from endpoint_optimizer.pipeline.model import (
    ComponentView,
    EndpointView,
    Observations,
    Resource,
    Timing,
    VariantView,
)
from endpoint_optimizer.pipeline.scale_to_zero import compare, instances_held, traffic_window
from tests.unit.pipeline.test_decide import NAMES, NOW, OWNER
from tests.unit.pipeline.test_inference_components import ENDPOINT, JOBS, component, ic_spec

traffic = st.lists(st.integers(min_value=0, max_value=500), min_size=1, max_size=300)
idle = st.integers(min_value=1, max_value=60)
cold = st.floats(min_value=0, max_value=900)


@given(traffic, st.integers(min_value=0, max_value=8), idle, cold)
def test_scaled_to_zero_never_costs_more_than_always_on(
    minutes: list[int], instances: int, release: int, cold_start: float
) -> None:
    out = compare(minutes, instances, release, cold_start)
    assert 0 <= out.scale_to_zero_instance_hours_per_day <= out.always_on_instance_hours_per_day
    assert out.always_on_instance_hours_per_day == instances * 24
    assert out.requests_meeting_cold_start_per_day <= sum(minutes) * 1440 / len(minutes) + 1e-6


@given(st.integers(min_value=1, max_value=500), st.integers(min_value=1, max_value=300), idle)
def test_constant_traffic_holds_the_instances_all_day_without_a_cold_start(
    rate: int, window: int, release: int
) -> None:
    out = compare([rate] * window, 2, release, 300.0)
    assert out.scale_to_zero_instance_hours_per_day == pytest.approx(48.0)
    assert out.cold_starts_per_day == 0
    assert out.requests_meeting_cold_start_per_day == 0


@given(st.integers(min_value=1, max_value=300), idle, cold)
def test_no_traffic_holds_nothing_and_starts_nothing(window: int, release: int, c: float) -> None:
    out = compare([0] * window, 3, release, c)
    assert out.scale_to_zero_instance_hours_per_day == 0
    assert out.cold_starts_per_day == 0 and out.requests_meeting_cold_start_per_day == 0


@given(traffic, idle, cold)
def test_gaps_no_longer_than_the_release_cost_nothing_extra(
    minutes: list[int], release: int, c: float
) -> None:
    """Below the threshold nothing is released: equal hours, no cold start."""
    out = compare(minutes, 1, max(release, len(minutes)), c)
    if any(minutes):
        assert out.scale_to_zero_instance_hours_per_day == pytest.approx(24.0)
        assert out.cold_starts_per_day == 0


def test_an_hour_with_one_busy_minute_releases_once_and_meets_a_cold_start() -> None:
    # 60 minutes: requests in minute 0 only; released after 15 idle minutes; cyclic, so
    # the 59-minute gap ends at the next window's minute 0, which meets the cold start.
    minutes = [12] + [0] * 59
    out = compare(minutes, 2, 15, 90.0)
    assert out.window_minutes == 60
    # Held 1 + 15 minutes of each hour, 24 hours: 2 instances x 16/60 x 24.
    assert out.scale_to_zero_instance_hours_per_day == pytest.approx(2 * 16 / 60 * 24)
    assert out.cold_starts_per_day == pytest.approx(24)
    # A 90 s cold start spans 2 minutes from the busy one: its 12 requests (minute 1 has 0).
    assert out.requests_meeting_cold_start_per_day == pytest.approx(12 * 24)


def test_the_wrapping_gap_is_one_gap() -> None:
    # Idle 10 at the end and 10 at the start: one 20-minute gap over a 15-minute release.
    minutes = [0] * 10 + [5] * 10 + [0] * 10
    out = compare(minutes, 1, 15, 30.0)
    assert out.cold_starts_per_day == pytest.approx(1440 / 30)
    held = 10 + 15
    assert out.scale_to_zero_instance_hours_per_day == pytest.approx(held / 60 * 48)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        compare([], 1, 15, 0)
    with pytest.raises(ValueError, match="idle_release_minutes"):
        compare([1], 1, 0, 0)


def test_instances_held_counts_whole_instances_of_the_copies_devices() -> None:
    assert instances_held(3, 2, 4, fallback=9) == 2
    assert instances_held(1, 4, 4, fallback=9) == 1
    assert instances_held(2, 0, 4, fallback=9) == 9  # no accelerators named: the variant's
    assert instances_held(2, 1, None, fallback=5) == 5
    assert instances_held(0, 1, 4, fallback=5) == 0


def test_per_minute_fills_minutes_cloudwatch_left_out_with_zero() -> None:
    start = datetime(2026, 12, 1, 10, 0, 30, tzinfo=UTC)
    end = datetime(2026, 12, 1, 10, 3, 10, tzinfo=UTC)
    stamps = [datetime(2026, 12, 1, 10, 0, tzinfo=UTC), datetime(2026, 12, 1, 10, 2, tzinfo=UTC)]
    assert per_minute(stamps, [4.0, 7.0], start, end) == (4.0, 0.0, 7.0, 0.0)
    # A datapoint outside the window is not counted.
    early = [datetime(2026, 12, 1, 9, 59, tzinfo=UTC)]
    assert per_minute(early, [3.0], start, end) == (0.0, 0.0, 0.0, 0.0)


def test_the_query_reads_invocations_per_component_per_minute() -> None:
    query = component_invocations_query("team-ic")
    stat = query["MetricStat"]
    assert stat["Metric"]["Namespace"] == "AWS/SageMaker"
    assert stat["Metric"]["MetricName"] == "Invocations"
    assert stat["Metric"]["Dimensions"] == [{"Name": "InferenceComponentName", "Value": "team-ic"}]
    assert (stat["Period"], stat["Stat"]) == (60, "Sum")


# -- through decide() -------------------------------------------------------------------


def _endpoint(instances: int) -> EndpointView:
    return dataclasses.replace(
        ENDPOINT, variants=(VariantView("AllTraffic", "", 1.0, current_instance_count=instances),)
    )


def _run(
    status: OptimizedEndpointStatus,
    *components: ComponentView,
    instances: int = 1,
    invocations: tuple[float, ...] | None = None,
    now: datetime = NOW,
) -> tuple[OptimizedEndpointStatus, list[tuple[str, str, str]]]:
    decision = decide(
        ic_spec(),
        status,
        Observations(
            endpoint=_endpoint(instances),
            jobs=JOBS,
            components={c.name: c for c in components},
            component_invocations=invocations,
        ),
        Resource(OWNER, 1, {}),
        now,
        Timing(time_scale=1.0),
    )
    return parse_status(decision.status), [(e.type, e.reason, e.message) for e in decision.events]


def _deploying() -> OptimizedEndpointStatus:
    status, _ = _run(parse_status({}), component())
    assert status.baseline is not None
    status.baseline.measured_at = NOW
    status.phase = Phase.DEPLOYING
    return status


def _candidate(created: datetime, modified: datetime, status: str = "InService") -> ComponentView:
    return dataclasses.replace(
        component(NAMES.candidate_component, NAMES.candidate_model, status=status),
        created_at=created,
        modified_at=modified,
    )


def test_the_candidate_s_start_is_timed_and_a_new_instance_says_provisioning_was_in_it() -> None:
    status, _ = _run(_deploying(), component(), instances=1)
    assert status.scale_to_zero is not None
    assert status.scale_to_zero.instances_at_candidate_create == 1
    created = NOW - timedelta(seconds=400)
    # SageMaker's LastModifiedTime at the transition: 360 s after the create.
    seen, _ = _run(
        status, component(), _candidate(created, created + timedelta(seconds=360)), instances=2
    )
    stz = seen.scale_to_zero
    assert seen.phase is Phase.ANALYZING and stz is not None
    assert stz.cold_start_seconds == 360
    assert stz.cold_start_measured == [
        ColdStartPart.COMPONENT_START,
        ColdStartPart.INSTANCE_PROVISION,
    ]
    assert stz.window_start == NOW


def test_a_transition_after_the_wakeup_began_is_timed_by_sagemaker_s_clock_alone() -> None:
    # The wakeup's `now` is read before the describe that sees InService: a LastModifiedTime
    # a little after it is still the start's end, not capped at `now`.
    status, _ = _run(_deploying(), component(), instances=1)
    created = NOW - timedelta(seconds=0.5)
    seen, _ = _run(
        status, component(), _candidate(created, NOW + timedelta(seconds=0.1)), instances=2
    )
    stz = seen.scale_to_zero
    assert stz is not None and stz.cold_start_seconds == 0.6


def test_on_an_instance_already_up_provisioning_is_not_claimed_measured() -> None:
    status, _ = _run(_deploying(), component(), instances=2)
    created = NOW - timedelta(seconds=30)
    # LastModifiedTime not past CreationTime: the first look that saw InService ends it.
    seen, _ = _run(status, component(), _candidate(created, created), instances=2)
    stz = seen.scale_to_zero
    assert stz is not None and stz.cold_start_seconds == 30
    assert stz.cold_start_measured == [ColdStartPart.COMPONENT_START]


def test_the_promotion_compares_always_on_with_scale_to_zero_at_the_read_traffic() -> None:
    status, _ = _run(_deploying(), component(), instances=1)
    created = NOW - timedelta(seconds=300)
    status, _ = _run(status, component(), _candidate(created, NOW), instances=1)
    status.phase = Phase.PROMOTING
    status.rollout.promotion_requested = f"component:team-ic:{NAMES.candidate_model}"
    promoted = component(model=NAMES.candidate_model)
    # The read is asked for only on the wake-up that sees the promotion done.
    assert traffic_window(status, {"team-ic": component()}) is None
    assert traffic_window(status, {"team-ic": promoted}) == ("team-ic", NOW)
    later = NOW + timedelta(minutes=60)
    done, events = _run(status, promoted, invocations=(30.0,) + (0.0,) * 59, now=later)
    assert done.phase is Phase.SUCCEEDED
    stz = done.scale_to_zero
    assert stz is not None and stz.measured_at == later
    # 2 copies of 4 devices on ml.g6.12xlarge (4 GPUs): 2 instances.
    assert stz.instances == 2 and stz.idle_release_minutes == 15
    assert stz.always_on_instance_hours_per_day == 48
    assert stz.scale_to_zero_instance_hours_per_day == pytest.approx(2 * 16 / 60 * 24, abs=1e-3)
    assert stz.cold_starts_per_day == 24 and stz.requests_in_window == 30
    assert stz.requests_meeting_cold_start_per_day == 30 * 24
    assert [e[1] for e in events if e[1] == "ScaleToZeroCompared"] == ["ScaleToZeroCompared"]
    assert traffic_window(done, {"team-ic": promoted}) is None


def test_a_window_held_every_minute_costs_exactly_always_on() -> None:
    """Found by the property above: a 23-minute window whose idle gaps are no longer than
    the release time (all held) gave 24.000000000000004 hours against 24.0 always-on
    (held / 60 * 1440 / 23 in floating point)."""
    minutes = [1] + [0] * 8 + [1] * 14
    assert len(minutes) == 23
    out = compare(minutes, 1, 8, 0.0)
    assert out.scale_to_zero_instance_hours_per_day == out.always_on_instance_hours_per_day
