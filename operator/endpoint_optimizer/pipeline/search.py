"""The optimization order as a search: rungs, alternatives, the current best, the budget.

design.md, "The optimization order as a search": settings → quantization → a smaller
instance type (only after a kept quantization) → speculative decoding (only while latency
still binds) → compilation (last, on the frozen winner). Each
rung's alternatives are candidates measured against the current best; a rung's winner is
kept only if it improves the objective and passes every gate; a budget bounds the search;
only the final winner is rolled out.

This module is the search's pure core. It holds no clients and reads no clock: given the
ladder, the budget, what the search has found so far and, for the candidate last measured,
what the judges said against the current best, `advance` returns the new state and what to
do next (measure one candidate, or stop with the winning stack). The state is frozen and
plain, so a controller can keep it in status (its only memory) and resume after a restart
from exactly where it was. Measuring is not done here: a candidate is a pinned weight-0
variant judged by the analyze phase, paired with the current best in the same run.

spec.search declares the ladder; pipeline/phases/searching.py walks it against SageMaker.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum


class Rung(StrEnum):
    """The seed's order. A ladder's rungs are always walked in this order."""

    SETTINGS = "settings"
    QUANTIZATION = "quantization"
    # A smaller instance type: only after a kept quantization freed the memory (issue 21).
    INSTANCE = "instanceTypes"
    SPECULATION = "speculativeDecoding"
    COMPILATION = "compilation"


ORDER: tuple[Rung, ...] = (
    Rung.SETTINGS,
    Rung.QUANTIZATION,
    Rung.INSTANCE,
    Rung.SPECULATION,
    Rung.COMPILATION,
)

# The metrics that keep speculative decoding worth trying once the objective is met (issue
# 21: "while TTFT/ITL is the binding metric"): it shortens each decode step (ITL) and, by
# draining the batch sooner, the queue a new request's first token waits in (TTFT); at high
# concurrency it costs throughput (h200-calibration.md).
SPECULATION_HELPS: frozenset[str] = frozenset({"ttft", "itl"})


class Verdict(StrEnum):
    KEPT = "Kept"  # improved the objective, passed every gate, best of its rung
    BEATEN = "Beaten"  # improved and passed, but another alternative of its rung did more
    NO_GAIN = "NoGain"  # passed the gates, did not improve the objective with confidence
    GATE_FAILED = "GateFailed"  # a gate failed or could not be decided
    SKIPPED = "Skipped"  # its rung was not tried (the reason says why)
    NOT_RUN = "NotRun"  # the budget ran out before it


@dataclass(frozen=True)
class Alternative:
    """One technique a rung may add to the current best. `name` is unique in the ladder."""

    rung: Rung
    name: str


@dataclass(frozen=True)
class Budget:
    """Stops the search with the best so far. None: no bound."""

    candidates: int | None = None
    instance_hours: float | None = None


@dataclass(frozen=True)
class Outcome:
    """What the judges found for one candidate against the current best, in one run.

    gain: the objective's relative gain at objective.concurrency (0.12 = 12 % better),
    None when it could not be measured. improves: the objective check passed (the gain's
    confidence bound clears minImprovement). gates: every other check passed (eval and its
    slices, SLOs, errors, the other levels as guards). objective_met: with this candidate
    the stack meets the objective against the *baseline* (and every SLO at the objective's
    concurrency). binding: the metric furthest from its target at that concurrency
    ("ttft", "itl", "e2e" or "throughput"). instance_hours: what measuring it cost.
    """

    gain: float | None
    improves: bool
    gates: bool
    objective_met: bool
    binding: str
    instance_hours: float
    why: str = ""


@dataclass(frozen=True)
class Row:
    """One line of the search's table: a candidate, the stack it was built on, and why it
    ended as it did."""

    name: str
    rung: Rung
    base: tuple[str, ...]
    verdict: Verdict | None = None  # None while its rung is still being measured
    outcome: Outcome | None = None
    why: str = ""


@dataclass(frozen=True)
class State:
    """Everything the search knows. `best` is the kept stack (alternative names in rung
    order); () is the baseline's own settings. `met` and `binding` describe the best."""

    rung: int = 0
    best: tuple[str, ...] = ()
    met: bool = False
    binding: str = ""
    rows: tuple[Row, ...] = ()
    candidates: int = 0
    instance_hours: float = 0.0
    done: str | None = None


@dataclass(frozen=True)
class Measure:
    """Measure `name` built on `base` (the current best) against the current best."""

    name: str
    base: tuple[str, ...]


@dataclass(frozen=True)
class Done:
    """The search is over: roll `stack` out (() keeps the baseline; nothing paid)."""

    stack: tuple[str, ...]
    why: str


Action = Measure | Done


@dataclass(frozen=True)
class Ladder:
    """The rungs' alternatives, in the seed's order whatever order they were written in."""

    alternatives: tuple[Alternative, ...] = field(default_factory=tuple)

    @classmethod
    def of(cls, rungs: Mapping[Rung, Sequence[str]]) -> Ladder:
        names = [n for alts in rungs.values() for n in alts]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"search: alternative names must be unique; repeated: {repeated}")
        return cls(tuple(Alternative(r, n) for r in ORDER for n in rungs.get(r, ())))

    def rung(self, index: int) -> tuple[Alternative, ...]:
        return tuple(a for a in self.alternatives if a.rung is ORDER[index])


def stack_key(stack: Sequence[str]) -> str:
    """A short deterministic name for a stack (a candidate's resources are named from it,
    so a restart finds what it made instead of making it twice)."""
    return hashlib.sha256("\x1f".join(stack).encode()).hexdigest()[:10]


def advance(
    ladder: Ladder, budget: Budget, state: State, outcome: Outcome | None = None
) -> tuple[State, Action]:
    """Record `outcome` for the candidate in flight (if any), then say what comes next.

    Idempotent on its own output: advancing a state with no outcome returns the same
    action again, so a restart that lost the action (not the state) measures the same
    candidate, not the next.
    """
    if outcome is not None:
        state = _record(state, outcome)
    if state.done is not None:
        return state, Done(state.best, state.done)
    while state.rung < len(ORDER):
        rung = ORDER[state.rung]
        alternatives = ladder.rung(state.rung)
        skip = _skip(rung, state, ladder) if alternatives else None
        if skip is not None:
            rows = tuple(
                Row(a.name, rung, state.best, Verdict.SKIPPED, why=skip) for a in alternatives
            )
            state = replace(state, rung=state.rung + 1, rows=state.rows + rows)
            continue
        seen = {r.name for r in state.rows}
        pending = [a for a in alternatives if a.name not in seen]
        in_flight = [
            r for r in state.rows if r.rung is rung and r.outcome is None and r.verdict is None
        ]
        if in_flight:
            return state, Measure(in_flight[0].name, in_flight[0].base)
        if pending:
            spent = _spent(budget, state)
            if spent is not None:
                # The best so far: what this rung measured before the budget ran out counts.
                return _finish(_close_rung(state, rung), ladder, spent)
            row = Row(pending[0].name, rung, state.best)
            state = replace(state, rows=(*state.rows, row), candidates=state.candidates + 1)
            return state, Measure(row.name, row.base)
        state = _close_rung(replace(state, rung=state.rung + 1), rung)
    return _finish(state, ladder, _ended(state))


def _record(state: State, outcome: Outcome) -> State:
    in_flight = [i for i, r in enumerate(state.rows) if r.outcome is None and r.verdict is None]
    if not in_flight:
        raise ValueError("search: an outcome with no candidate in flight")
    i = in_flight[0]
    rows = list(state.rows)
    rows[i] = replace(rows[i], outcome=outcome)
    return replace(
        state,
        rows=tuple(rows),
        instance_hours=state.instance_hours + max(0.0, outcome.instance_hours),
    )


def _eligible(row: Row) -> bool:
    o = row.outcome
    return o is not None and o.improves and o.gates and o.gain is not None and math.isfinite(o.gain)


def _gain(row: Row) -> float:
    return (row.outcome.gain or 0.0) if row.outcome is not None else 0.0


def _close_rung(state: State, rung: Rung) -> State:
    """Every alternative of `rung` is measured: keep the one that did most, if any paid."""
    mine = [r for r in state.rows if r.rung is rung and r.verdict is None]
    eligible = [r for r in mine if _eligible(r)]
    # The largest gain wins; a tie goes to the alternative written first (stable max).
    winner = max(eligible, key=_gain, default=None)
    closed: dict[str, Row] = {}
    for r in mine:
        o = r.outcome
        assert o is not None
        if r is winner:
            closed[r.name] = replace(
                r, verdict=Verdict.KEPT, why=f"kept: {_pct(o.gain)} on the objective"
            )
        elif not o.gates:
            closed[r.name] = replace(
                r, verdict=Verdict.GATE_FAILED, why=o.why or "a gate did not pass"
            )
        elif not _eligible(r):
            closed[r.name] = replace(
                r, verdict=Verdict.NO_GAIN, why=o.why or "no gain with confidence"
            )
        else:
            assert winner is not None
            closed[r.name] = replace(
                r,
                verdict=Verdict.BEATEN,
                why=f"{_pct(o.gain)}, below {winner.name}'s {_pct(_gain(winner))}",
            )
    rows = tuple(closed.get(r.name, r) if r.verdict is None else r for r in state.rows)
    if winner is None or winner.outcome is None:
        return replace(state, rows=rows)
    return replace(
        state,
        rows=rows,
        best=(*state.best, winner.name),
        met=winner.outcome.objective_met,
        binding=winner.outcome.binding,
    )


def _skip(rung: Rung, state: State, ladder: Ladder) -> str | None:
    if rung is Rung.INSTANCE:
        quantized = {a.name for a in ladder.rung(ORDER.index(Rung.QUANTIZATION))}
        if not quantized & set(state.best):
            return (
                "no quantization was kept: a smaller instance is tried only after a 4-bit or "
                "8-bit win frees the memory"
            )
    if rung is Rung.SPECULATION and state.met and state.binding not in SPECULATION_HELPS:
        return (
            f"the objective is met and {state.binding or 'throughput'} binds, which "
            "speculative decoding does not improve"
        )
    if rung is Rung.COMPILATION:
        spec = {a.name for a in ladder.rung(ORDER.index(Rung.SPECULATION))}
        if spec & set(state.best):
            return "SageMaker does not compile a model with speculative decoding"
    return None


def _spent(budget: Budget, state: State) -> str | None:
    if budget.candidates is not None and state.candidates >= budget.candidates:
        return f"budget: {state.candidates} of {budget.candidates} candidates measured"
    if budget.instance_hours is not None and state.instance_hours >= budget.instance_hours:
        return (
            f"budget: {state.instance_hours:.2f} of {budget.instance_hours:g} instance-hours spent"
        )
    return None


def _ended(state: State) -> str:
    if not state.best:
        return "no candidate improved the objective and passed every gate: the baseline stays"
    return f"every rung tried; the winner is {' + '.join(state.best)}"


def _finish(state: State, ladder: Ladder, why: str) -> tuple[State, Done]:
    seen = {r.name for r in state.rows}
    rest = tuple(
        Row(a.name, a.rung, state.best, Verdict.NOT_RUN, why=why)
        for a in ladder.alternatives
        if a.name not in seen
    )
    state = replace(state, rows=state.rows + rest, done=why)
    return state, Done(state.best, why)


def step_log(gain: float, lower_is_better: bool) -> float:
    """One kept step's factor on the metric, as a log: the ratio candidate/base is 1 - gain
    for a lower-is-better objective (latency, cost), 1 + gain for throughput."""
    if lower_is_better:
        return -math.log(max(1.0 - gain, 1e-12))
    return math.log1p(max(gain, -1.0 + 1e-12))


def compounded(gains: Sequence[float], lower_is_better: bool) -> float:
    """The whole stack's gain over the baseline from its steps' gains (each measured against
    the stack before it): 1 - Π(1 - g) when lower is better, Π(1 + g) - 1 otherwise."""
    total = sum(step_log(g, lower_is_better) for g in gains)
    return (1.0 - math.exp(-total)) if lower_is_better else math.expm1(total)


def shares(state: State, lower_is_better: bool = False) -> dict[str, float]:
    """Each kept technique's share of the winning stack's gain. Gains compound (each was
    measured against the stack before it), so shares are of each step's log factor."""
    kept = [r for r in state.rows if r.verdict is Verdict.KEPT and r.outcome is not None]
    logs = {
        r.name: step_log(max(r.outcome.gain or 0.0, 0.0), lower_is_better)
        for r in kept
        if r.outcome
    }
    total = sum(logs.values())
    return {n: (v / total if total > 0 else 0.0) for n, v in logs.items()}


def cost_per_million_tokens(tokens_per_second: float, usd_per_hour: float) -> float | None:
    """Dollars per 1M output tokens at a measured throughput, on one instance's price."""
    if tokens_per_second <= 0 or not math.isfinite(tokens_per_second) or usd_per_hour < 0:
        return None
    return usd_per_hour / (tokens_per_second * 3600.0) * 1e6


@dataclass(frozen=True)
class Point:
    """Where one measured stack sits: latency (lower is better), throughput (higher is
    better), and cost per 1M output tokens (lower is better; None where no price is known)."""

    latency_ms: float
    tokens_per_second: float
    cost: float | None = None


def pareto_front(points: Mapping[str, Point]) -> frozenset[str]:
    """The stacks no other stack beats on every axis: the ones the report marks.

    A point is dominated when another is at least as good on latency, throughput and cost,
    and strictly better on one of them. Cost is an axis only when every point has one (a
    price missing for one instance type would otherwise make the order intransitive).
    Points with a non-finite latency or throughput were not measured and are never on it.
    """
    valid = {
        name: p
        for name, p in points.items()
        if math.isfinite(p.latency_ms) and math.isfinite(p.tokens_per_second)
    }
    priced = all(p.cost is not None and math.isfinite(p.cost) for p in valid.values())
    axes = {name: _axes(p, priced) for name, p in valid.items()}
    return frozenset(
        name
        for name, mine in axes.items()
        if not any(_dominates(theirs, mine) for other, theirs in axes.items() if other != name)
    )


def _axes(p: Point, priced: bool) -> tuple[float, ...]:
    # Every axis as "lower is better".
    cost = (p.cost or 0.0,) if priced else ()
    return (p.latency_ms, -p.tokens_per_second, *cost)


def _dominates(q: tuple[float, ...], p: tuple[float, ...]) -> bool:
    return all(a <= b for a, b in zip(q, p, strict=True)) and q != p


def _pct(gain: float | None) -> str:
    return "unmeasured" if gain is None else f"{gain * 100:+.1f} %"
