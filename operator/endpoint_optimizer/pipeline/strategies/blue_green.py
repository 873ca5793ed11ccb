"""blueGreen: the candidate is judged on pinned requests at weight 0, then switched at once,
with SageMaker's own blue/green deployment and auto-rollback alarms on the candidate."""

from __future__ import annotations

from endpoint_optimizer.api import RolloutStrategy, duration_seconds
from endpoint_optimizer.pipeline.model import ActionKind
from endpoint_optimizer.pipeline.strategies.base import Strategy
from endpoint_optimizer.pipeline.wakeup import Planned, added
from endpoint_optimizer.sagemaker import requests as rq


class BlueGreen(Strategy):
    kind = RolloutStrategy.BLUE_GREEN
    # The candidate has no live traffic before the switch.
    judges_live = False

    def promotion_deployment(self, w: Planned) -> dict[str, object] | None:
        """CloudWatch alarms on the candidate variant, and the blue/green policy using them."""
        sm = w.status.sagemaker
        slo = w.spec.benchmark.slo
        max_error_rate = slo.max_error_rate if slo and slo.max_error_rate is not None else 0.05
        baseline = (
            w.status.baseline.level(w.spec.judged_concurrency()) if w.status.baseline else None
        )
        # ModelLatency is per request: alarm well above the baseline's slowest requests.
        ceiling = (baseline.e2e_p99_ms or 0.0) * 2.0 if baseline else 0.0
        alarms = rq.rollback_alarms(
            w.endpoint_name,
            w.names.candidate_variant,
            w.names.alarm_prefix,
            max_error_rate,
            ceiling or 60_000.0,
            w.owner_tag,
        )
        for alarm in alarms:
            w.act(ActionKind.PUT_ALARM, str(alarm["AlarmName"]), alarm)
            sm.alarms = added(sm.alarms, str(alarm["AlarmName"]))
        bake = int(w.scaled(duration_seconds(w.spec.rollout.steps[-1].pause)))
        return rq.blue_green_deployment(
            [str(a["AlarmName"]) for a in alarms], wait_s=bake, termination_wait_s=bake
        )
