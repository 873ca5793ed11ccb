"""spec.search's state in status and back: status is the search's only memory.

`pipeline/search.py` decides on a frozen `State`; status keeps it as `SearchStatus`, with
what each candidate's comparison measured (gain, eval delta, acceptance, throughput)
beside the verdict. `served_stack` says which stack the pipeline serves and judges now:
the candidate in flight while the search runs, the winner once it is done.
"""

from __future__ import annotations

from endpoint_optimizer.api import OptimizedEndpointSpec
from endpoint_optimizer.api.status import OptimizedEndpointStatus, SearchRow, SearchStatus
from endpoint_optimizer.pipeline import pricing
from endpoint_optimizer.pipeline.search import (
    ORDER,
    Budget,
    Ladder,
    Outcome,
    Row,
    Rung,
    State,
    Verdict,
    shares,
)


def ladder(spec: OptimizedEndpointSpec) -> Ladder:
    assert spec.search is not None
    rungs = spec.search.rungs()
    return Ladder.of({rung: [a.name for a in rungs[rung.value]] for rung in ORDER})


def budget(spec: OptimizedEndpointSpec) -> Budget:
    assert spec.search is not None
    b = spec.search.budget
    return Budget(candidates=b.candidates, instance_hours=b.instance_hours)


def in_flight(search: SearchStatus) -> SearchRow | None:
    """The candidate being measured: no verdict and no comparison recorded yet (a measured
    candidate waits without a verdict until its rung's other alternatives are measured)."""
    return next((r for r in search.rows if not r.verdict and not r.measured), None)


def served_stack(status: OptimizedEndpointStatus) -> tuple[str, ...]:
    """The stack the pipeline builds, serves and judges now: the candidate in flight during
    the search, the kept stack otherwise (() before the search, or when nothing paid)."""
    search = status.search
    if search is None:
        return ()
    row = in_flight(search) if search.done is None else None
    if row is not None:
        return (*row.base, row.name)
    return tuple(search.best)


def searching(status: OptimizedEndpointStatus) -> bool:
    """A search candidate is being measured: it is judged as a step (against the current
    best, with search.minStepImprovement), not as the rollout's winner."""
    search = status.search
    return search is not None and search.done is None and in_flight(search) is not None


def served_spec(
    spec: OptimizedEndpointSpec, status: OptimizedEndpointStatus
) -> OptimizedEndpointSpec:
    """spec.search's candidate in flight, or its winner; the spec itself without a search."""
    if spec.search is None:
        return spec
    return spec.searched(served_stack(status), step=searching(status))


def judged_cost_ratio(spec: OptimizedEndpointSpec, status: OptimizedEndpointStatus) -> float | None:
    """The hourly cost of what is judged over its reference's (a cost objective compares
    cost per token across instance types): the candidate in flight against the current
    best, the winner against the baseline. 1.0 without a search or on the same instances;
    None where a price it needs is unknown."""
    if spec.search is None:
        return 1.0
    search = status.search
    row = in_flight(search) if searching(status) and search is not None else None
    if row is not None:
        reference = spec.searched(row.base)
        candidate = spec.searched([*row.base, row.name])
    else:
        reference, candidate = spec, spec.searched(served_stack(status))
    return pricing.cost_ratio(spec, search, reference, candidate)


def outcome(row: SearchRow) -> Outcome:
    return Outcome(
        gain=row.gain,
        improves=row.improves,
        gates=row.gates,
        objective_met=row.objective_met,
        binding=row.binding,
        instance_hours=row.instance_hours,
        why=row.why,
    )


# The rungs before instanceTypes existed: a status written then names its rung by index.
_ORDER_BEFORE_INSTANCES = (
    Rung.SETTINGS,
    Rung.QUANTIZATION,
    Rung.SPECULATION,
    Rung.COMPILATION,
)
_DONE = "done"


def _rung_index(search: SearchStatus) -> int:
    if search.rung_name == _DONE:
        return len(ORDER)
    if search.rung_name:
        return ORDER.index(Rung(search.rung_name))
    if search.rung >= len(_ORDER_BEFORE_INSTANCES):
        return len(ORDER)
    return ORDER.index(_ORDER_BEFORE_INSTANCES[search.rung])


def to_state(search: SearchStatus) -> State:
    rows = tuple(
        Row(
            name=r.name,
            rung=Rung(r.rung),
            base=tuple(r.base),
            verdict=Verdict(r.verdict) if r.verdict else None,
            # A measured candidate whose rung is still open keeps its outcome pending the
            # rung's close; one in flight has none.
            outcome=outcome(r) if r.measured else None,
            why=r.why,
        )
        for r in search.rows
    )
    return State(
        rung=_rung_index(search),
        best=tuple(search.best),
        met=search.met,
        binding=search.binding,
        rows=rows,
        candidates=search.candidates,
        instance_hours=search.instance_hours,
        done=search.done,
    )


def from_state(
    state: State, before: SearchStatus | None, lower_is_better: bool = False
) -> SearchStatus:
    """`state` as status, keeping what was measured of each row (the state holds verdicts).
    `lower_is_better`: the objective's direction, for the shares of compounded gains."""
    measured = {r.name: r for r in (before.rows if before is not None else [])}
    rows = []
    for r in state.rows:
        kept = measured.get(r.name)
        row = kept.model_copy() if kept is not None else SearchRow(name=r.name, rung=r.rung.value)
        row.base = list(r.base)
        row.verdict = r.verdict.value if r.verdict is not None else ""
        row.why = (r.why or row.why)[:512]
        rows.append(row)
    return SearchStatus(
        price=before.price if before is not None else None,
        price_problem=before.price_problem if before is not None else "",
        prices=list(before.prices) if before is not None else [],
        rung=state.rung,
        rung_name=ORDER[state.rung].value if state.rung < len(ORDER) else _DONE,
        best=list(state.best),
        met=state.met,
        binding=state.binding,
        rows=rows,
        candidates=state.candidates,
        instance_hours=round(state.instance_hours, 4),
        done=state.done[:512] if state.done is not None else None,
        shares={k: round(v, 4) for k, v in shares(state, lower_is_better).items()},
    )


def memory_unread(search: SearchStatus | None) -> SearchRow | None:
    """The measured candidate whose peak GPU memory is still to read: deployed (a variant,
    a start), measured, and not read yet. Read on the wake-up after its comparison, while
    its variant is still on the endpoint."""
    if search is None:
        return None
    return next(
        (
            r
            for r in search.rows
            if r.measured and r.variant and r.started_at is not None and not r.gpu_memory_read
        ),
        None,
    )
