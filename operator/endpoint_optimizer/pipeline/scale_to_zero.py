"""Scale to zero, compared: what a component's instances cost always-on and scaled to zero.

Pure: a per-minute series of the component's Invocations (CloudWatch Sum, period 60; a
minute CloudWatch returned no datapoint for counts 0), the instances the promoted
configuration holds, the idle time after which managed instance scaling would release
them, and the measured cold start, in; instance-hours per day, cold starts per day and
the requests that would meet one, out.

The model, stated so it can be checked:
- the measured window is taken as representative and repeats to fill the day, so the
  series is cyclic: the idle minutes at its end and at its start are one gap;
- a minute with at least one request is busy, and the instances are held through it;
- an idle gap of at most `idle_release_minutes` keeps the instances (scale-in has not
  happened yet); a longer one holds them for `idle_release_minutes`, then releases them,
  and the next busy minute meets a cold start;
- the requests that meet a cold start are those in the minutes it spans from the first
  busy minute after the gap (ceil(cold start / 60), at least one minute).
Always-on holds the instances all day. Provisioning time during a cold start is not
counted as held (billing starts when the instance is InService): a lower bound on the
scale-to-zero side, by at most cold starts x cold start x instances.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from endpoint_optimizer.api import OptimizedEndpointStatus, Phase
from endpoint_optimizer.pipeline.model import ComponentView

MINUTES_PER_DAY = 1440


@dataclass(frozen=True)
class Comparison:
    window_minutes: int
    always_on_instance_hours_per_day: float
    scale_to_zero_instance_hours_per_day: float
    cold_starts_per_day: float
    requests_meeting_cold_start_per_day: float


def compare(
    per_minute: Sequence[float],
    instances: int,
    idle_release_minutes: int,
    cold_start_seconds: float,
) -> Comparison:
    """The day's instance-hours always-on and scaled to zero at this traffic."""
    if instances < 0:
        raise ValueError(f"instances must be >= 0, got {instances}")
    if idle_release_minutes < 1:
        raise ValueError(f"idle_release_minutes must be >= 1, got {idle_release_minutes}")
    counts = [max(0.0, float(v)) for v in per_minute]
    window = len(counts)
    if window == 0:
        raise ValueError("per_minute is empty: no minute of traffic was read")
    per_day = MINUTES_PER_DAY / window
    always_on = instances * 24.0
    busy = [i for i, v in enumerate(counts) if v > 0]
    if not busy:
        return Comparison(window, always_on, 0.0, 0.0, 0.0)
    # Rotate so the series starts on a busy minute: every gap is then whole.
    first = busy[0]
    cycle = counts[first:] + counts[:first]
    span = max(1, math.ceil(cold_start_seconds / 60))
    held = 0
    cold_starts = 0
    meeting = 0.0
    i = 0
    while i < window:
        if cycle[i] > 0:
            held += 1
            i += 1
            continue
        gap = 0
        while i + gap < window and cycle[i + gap] == 0:
            gap += 1
        held += min(gap, idle_release_minutes)
        if gap > idle_release_minutes:
            cold_starts += 1
            after = i + gap  # the next busy minute, cyclically (index 0 is busy)
            meeting += sum(cycle[(after + k) % window] for k in range(min(span, window)))
        i += gap
    return Comparison(
        window_minutes=window,
        always_on_instance_hours_per_day=always_on,
        # always_on * held / window: exact when every minute is held (held == window).
        scale_to_zero_instance_hours_per_day=always_on * held / window,
        cold_starts_per_day=cold_starts * per_day,
        requests_meeting_cold_start_per_day=meeting * per_day,
    )


def instances_held(
    copies: int, devices_per_copy: float, devices_per_instance: int | None, fallback: int
) -> int:
    """Instances the component's copies occupy (whole instances), or `fallback` (the
    variant's CurrentInstanceCount) when the accelerator counts are not known."""
    if copies <= 0:
        return 0
    if devices_per_copy <= 0 or not devices_per_instance:
        return fallback
    return math.ceil(copies * math.ceil(devices_per_copy) / devices_per_instance)


def traffic_window(
    status: OptimizedEndpointStatus, components: Mapping[str, ComponentView]
) -> tuple[str, datetime] | None:
    """(component, window start) when this wake-up should read the adopted component's
    traffic: while Promoting, once it serves the candidate's model InService (the wake-up
    that records the promotion), and only once. None otherwise: no CloudWatch call."""
    found = status.scale_to_zero
    sm = status.sagemaker
    if (
        status.phase is not Phase.PROMOTING
        or found is None
        or found.window_start is None
        or found.measured_at is not None
        or not sm.baseline_component
        or not sm.candidate_model
    ):
        return None
    base = components.get(sm.baseline_component)
    if base is None or not base.in_service or base.model_name != sm.candidate_model:
        return None
    return sm.baseline_component, found.window_start
