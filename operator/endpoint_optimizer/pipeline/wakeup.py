"""The small context of one wake-up: what it reads, and goto / wait / act / fail / levers.

A phase function takes the context and returns an `Outcome`: the phase to run next in
this same wake-up (after `goto` moved the status there), or `DONE` when the wake-up
ends here (it waits, or it asked for actions). A step inside a phase returns
`Outcome | None`, None meaning "nothing to decide here, go on", so a phase reads as the
order of its decisions (Flagger's scheduler):

    if (out := w.strategy.traffic(w, endpoint)) is not None:
        return out
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any

from endpoint_optimizer.api import (
    Failure,
    OptimizedEndpointSpec,
    OptimizedEndpointStatus,
    Phase,
    RollbackReason,
    VariantMeasurements,
)
from endpoint_optimizer.pipeline import plan
from endpoint_optimizer.pipeline.model import (
    Action,
    ActionKind,
    Event,
    Observations,
    Resource,
    Timing,
)
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.search_status import judged_cost_ratio, searching, served_stack

if TYPE_CHECKING:
    from endpoint_optimizer.pipeline.strategies.base import Strategy


# Phases in which a candidate may be receiving traffic (so leaving them routes back).
# Searching: a search candidate serves at weight 0 beside the baseline; no user reaches it,
# but the way back (to the baseline's config) is the same.
CANDIDATE_LIVE = frozenset(
    {Phase.SEARCHING, Phase.DEPLOYING, Phase.ANALYZING, Phase.AWAITING_APPROVAL, Phase.PROMOTING}
)
# Endpoint states SageMaker takes no update from: there is no way back to route.
_NO_WAY_BACK = frozenset({"Failed", "UpdateRollbackFailed"})


class Done(Enum):
    DONE = "done"


DONE = Done.DONE
# What a phase ends with: the next phase to run in this wake-up, or DONE.
Outcome = Phase | Done


def truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in ("", "false", "0", "no")


def added(items: list[str], name: str) -> list[str]:
    """The list with `name` at the end, once."""
    return items if name in items else [*items, name]


class Wakeup:
    """One wake-up, whether or not the spec parses: the status (a copy, changed in place),
    what was observed, the resource's identity and levers, and what to do."""

    def __init__(
        self,
        status: OptimizedEndpointStatus,
        obs: Observations,
        res: Resource,
        now: datetime,
        timing: Timing,
    ) -> None:
        self.status = status
        self.obs = obs
        self.res = res
        self.now = now
        self.timing = timing
        self.actions: list[Action] = []
        self.events: list[Event] = []
        self.names = plan.Names.of(res.owner, self.generation)
        self.owner_tag = res.owner.tag_value()

    @property
    def generation(self) -> int:
        """The pipeline generation its names are derived from."""
        return self.status.observed_generation or self.res.generation

    # ----------------------------------------------------------------- status

    def goto(
        self, phase: Phase, reason: Reason | str, message: str, warning: bool = False
    ) -> Phase:
        """Move to `phase` (an Event when it changes), say why; return it to run next."""
        if self.status.phase is not phase:
            self.event("Warning" if warning else "Normal", reason, f"{phase.value}: {message}")
        self.status.phase = phase
        self.status.message = message[:1024]
        self.record(reason, message)
        return phase

    def wait(self, message: str) -> Done:
        """End the wake-up here, saying what it waits for."""
        self.status.message = message[:1024]
        return DONE

    def fail(self, reason: Reason | str, message: str) -> Outcome:
        """Terminal: the operator cannot go on without a person.

        Failed at once while no candidate can hold traffic; otherwise traffic goes back
        to the baseline first (RollingBack), and the rollback ends in Failed with this
        reason: no error leaves users on a candidate that is not winning.
        """
        self.status.last_error = message[:4096]
        if not self.candidate_may_hold_traffic():
            self.goto(Phase.FAILED, reason, message, warning=True)
            return DONE
        rollout = self.status.rollout
        rollout.failing = Failure(reason=str(reason)[:128], message=message[:4096])
        rollout.rollback_reason = RollbackReason.ERROR
        return self.goto(
            Phase.ROLLING_BACK,
            reason,
            f"{message}; returning traffic to the baseline first, then stopping",
            warning=True,
        )

    def candidate_may_hold_traffic(self) -> bool:
        """A candidate variant may serve users now or once an update in flight ends."""
        endpoint = self.obs.endpoint
        return (
            self.status.phase in CANDIDATE_LIVE
            and endpoint is not None
            and endpoint.status not in _NO_WAY_BACK
        )

    def record(self, reason: Reason | str, message: str = "") -> None:
        self.status.record(self.now, str(reason), message)

    def event(self, type_: str, reason: Reason | str, message: str) -> None:
        self.events.append(Event(type_, str(reason), message))

    # ----------------------------------------------------------------- actions

    def act(self, kind: ActionKind, resource: str, request: dict[str, object]) -> None:
        self.actions.append(Action(kind, resource, dict(request)))

    def measure(self, kind: ActionKind, resource: str, **fields: Any) -> None:
        """A measurement action (benchmark, comparison, live interval). A comparison
        carries what the baseline's benchmark read per level, to place its first round."""
        baseline = self.status.baseline
        if kind is ActionKind.COMPARE and baseline is not None:
            fields.setdefault(
                "baseline_tokens_per_s",
                {
                    level.concurrency: level.output_tokens_per_second
                    for level in baseline.levels
                    if level.output_tokens_per_second
                },
            )
        self.actions.append(Action(kind, resource, **fields))

    # ----------------------------------------------------------------- levers

    def lever_pending(self, key: str) -> bool:
        """A lever counts once per annotation value: a stale approve does not approve again."""
        value = self.res.annotations.get(key)
        return truthy(value) and self.status.rollout.levers_handled.get(key) != value

    def consume_lever(self, key: str) -> None:
        handled = dict(self.status.rollout.levers_handled)
        handled[key] = self.res.annotations.get(key, "")
        self.status.rollout.levers_handled = handled

    def retry_pending(self, kind: ActionKind) -> Done | None:
        """DONE while a void measurement of `kind` waits for its next attempt."""
        retry = self.status.measurement_retry
        if retry is None or retry.action != kind.value or self.now >= retry.next_at:
            return None
        what = "baseline benchmark" if kind is ActionKind.MEASURE_BASELINE else "comparison"
        return self.wait(
            f"the last {what} was no measurement ({retry.reason}); attempt {retry.attempts + 1} at "
            f"{retry.next_at:%H:%M:%S}"
        )

    # ----------------------------------------------------------------- reading

    def made_here(self, config: str) -> bool:
        """An endpoint config of this resource's: named in status, or one of this
        generation's deterministic names (made, then the status write was lost)."""
        n = self.names
        if self.search_config(config):
            return True
        return config in self.status.sagemaker.endpoint_configs or config in (
            n.baseline_config,
            n.rollout_config,
            n.pinned_config,
            n.promoted_config,
            n.twin_rollout_config,
            n.twin_promoted_config,
            n.cutoff_rollout_config,
        )

    def search_config(self, config: str) -> bool:
        """One of spec.search's candidate configs of this generation (pipeline/phases/
        searching.py), made or about to be."""
        search = self.status.search
        return search is not None and any(
            config == plan.search_config(self.res.owner, self.generation, (*r.base, r.name))
            for r in search.rows
        )

    @property
    def baseline_variant(self) -> str:
        return (self.status.baseline or VariantMeasurements()).variant_name


class Planned(Wakeup):
    """A wake-up with a valid spec to plan from: every phase but the way back runs on one."""

    def __init__(
        self,
        spec: OptimizedEndpointSpec,
        strategy: Strategy,
        status: OptimizedEndpointStatus,
        obs: Observations,
        res: Resource,
        now: datetime,
        timing: Timing,
    ) -> None:
        super().__init__(status, obs, res, now, timing)
        self.declared = spec
        self._served: tuple[tuple[str, ...], bool, bool, OptimizedEndpointSpec] | None = None
        self.strategy = strategy
        self.searched()

    def searched(self) -> None:
        """spec.search: the names follow the stack served now (search_status.served_stack);
        called again whenever the search moves on within the wake-up."""
        if self.declared.search is not None:
            stack = served_stack(self.status)
            self.names = plan.search_names(
                plan.Names.of(self.res.owner, self.generation),
                self.res.owner,
                self.generation,
                stack,
            )

    def measure(self, kind: ActionKind, resource: str, **fields: Any) -> None:
        """A comparison also carries the cost ratio a cost objective judges by."""
        if kind is ActionKind.COMPARE:
            fields.setdefault("cost_ratio", judged_cost_ratio(self.declared, self.status))
        super().measure(kind, resource, **fields)

    @property
    def spec(self) -> OptimizedEndpointSpec:
        """The spec the pipeline serves: the declared one, or spec.search's candidate in
        flight (its winner once the search is done); without speculativeDecoding once
        onAcceptanceDrift: disableSpeculation switched speculation off (status says so),
        so every judge sees the twin for what it is."""
        stack = served_stack(self.status) if self.declared.search is not None else ()
        step = searching(self.status)
        disabled = self.status.rollout.speculation_disabled is not None
        if self._served is None or self._served[:3] != (stack, step, disabled):
            spec = self.declared.searched(stack, step=step)
            served = plan.without_speculation(spec) if disabled else spec
            self._served = (stack, step, disabled, served)
        return self._served[3]

    @property
    def endpoint_name(self) -> str:
        return self.spec.endpoint_name

    def step_weight(self, index: int) -> int:
        weight = self.spec.rollout.steps[index].weight
        return weight if weight is not None else 0

    def scaled(self, seconds: float) -> float:
        """A duration of the spec in this process's time (tests run them scaled down)."""
        return seconds * self.timing.time_scale
