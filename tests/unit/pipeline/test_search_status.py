"""spec.search's memory in status: what the controller keeps between wake-ups.

The search decides on a frozen State (pipeline/search.py); the controller keeps it as
status.search and reads it back each wake-up, with each candidate's measured figures in
its row. The property: a search driven through status (every wake-up a round trip, the
outcome written into the row as pipeline/record.py does) ends exactly where the pure
search ends when handed the same outcomes directly.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.api import OptimizedEndpointStatus, SearchRow, SearchStatus, parse_spec
from endpoint_optimizer.api.status import Phase
from endpoint_optimizer.pipeline.search import (
    ORDER,
    Budget,
    Done,
    Ladder,
    Measure,
    Outcome,
    Rung,
    advance,
)
from endpoint_optimizer.pipeline.search_status import (
    from_state,
    in_flight,
    searching,
    served_spec,
    served_stack,
    to_state,
)

BASE: dict[str, Any] = {
    "endpointName": "chat",
    "region": "us-east-1",
    "executionRoleArn": "arn:aws:iam::123456789012:role/sagemaker-exec",
    "model": {"s3Uri": "s3://models/llama/"},
    "instanceType": "ml.g6e.12xlarge",
    "outputS3Uri": "s3://models/optimized/",
    "objective": {"metric": "latency", "minImprovement": 0.3},
    "evaluation": {"waiver": "unit test"},
    "search": {
        "settings": [{"name": "batch64", "maxRollingBatchSize": 64}],
        "quantization": [{"name": "fp8", "scheme": "fp8"}, {"name": "awq", "scheme": "awq"}],
        "speculativeDecoding": [{"name": "ngram", "method": "ngram", "numSpeculativeTokens": 3}],
        "minStepImprovement": 0.04,
    },
}


def _status(rows: list[SearchRow], **fields: Any) -> OptimizedEndpointStatus:
    return OptimizedEndpointStatus(phase=Phase.SEARCHING, search=SearchStatus(rows=rows, **fields))


def test_the_served_stack_is_the_candidate_in_flight_then_the_winner() -> None:
    assert served_stack(OptimizedEndpointStatus()) == ()
    measured = SearchRow(name="fp8", rung="quantization", measured=True, gain=0.3)
    flying = SearchRow(name="awq", rung="quantization")
    status = _status([measured, flying])
    # fp8 waits for its rung to close (no verdict yet) but is no longer in flight.
    assert in_flight(status.search) is flying  # type: ignore[arg-type]
    assert served_stack(status) == ("awq",)
    assert searching(status)
    on_best = _status(
        [
            SearchRow(name="fp8", rung="quantization", verdict="Kept", measured=True),
            SearchRow(name="ngram", rung="speculativeDecoding", base=["fp8"]),
        ],
        best=["fp8"],
    )
    assert served_stack(on_best) == ("fp8", "ngram")
    done = _status(
        [SearchRow(name="fp8", rung="quantization", verdict="Kept", measured=True)],
        best=["fp8"],
        done="every rung tried",
    )
    assert served_stack(done) == ("fp8",)
    assert not searching(done)


def test_a_candidate_is_served_and_judged_as_its_stack() -> None:
    spec = parse_spec(BASE)
    status = _status(
        [
            SearchRow(name="batch64", rung="settings", verdict="Kept", measured=True),
            SearchRow(name="awq", rung="quantization", base=["batch64"]),
        ],
        best=["batch64"],
        rung=1,
    )
    trial = served_spec(spec, status)
    assert trial.container.max_rolling_batch_size == 64
    assert trial.optimizations.quantization is not None
    assert trial.optimizations.quantization.scheme.value == "awq"
    assert trial.optimizations.speculative_decoding is None
    # A step is held to the step's bar, against the current best.
    assert trial.objective.min_improvement == 0.04
    status.search.done = "every rung tried"  # type: ignore[union-attr]
    status.search.rows[1].verdict = "NoGain"  # type: ignore[union-attr]
    winner = served_spec(spec, status)
    # The winner's rollout: its stack, judged against the baseline at the spec's own bar.
    assert winner.container.max_rolling_batch_size == 64
    assert winner.optimizations.quantization is None
    assert winner.objective.min_improvement == 0.3
    # Without a search, the spec as declared.
    plain = dict(BASE, optimizations={"quantization": {"scheme": "fp8"}})
    del plain["search"]
    assert served_spec(parse_spec(plain), status) == parse_spec(plain)


LADDER_NAMES = {
    Rung.SETTINGS: ["s1", "s2"],
    Rung.QUANTIZATION: ["q1", "q2", "q3"],
    Rung.INSTANCE: ["i1", "i2"],
    Rung.SPECULATION: ["p1", "p2"],
    Rung.COMPILATION: ["c1"],
}

outcomes = st.builds(
    Outcome,
    gain=st.one_of(st.none(), st.floats(-0.5, 1.0, allow_nan=False)),
    improves=st.booleans(),
    gates=st.booleans(),
    objective_met=st.booleans(),
    binding=st.sampled_from(["e2e", "ttft", "itl", "throughput"]),
    instance_hours=st.floats(0.0, 2.0, allow_nan=False),
    why=st.sampled_from(["", "below the step's bar", "not passed: ttft_p50@c4"]),
)


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.tuples(*(st.integers(0, len(LADDER_NAMES[r])) for r in ORDER)),
    answers=st.lists(outcomes, min_size=10, max_size=10),
    candidates=st.one_of(st.none(), st.integers(1, 6)),
    hours=st.one_of(st.none(), st.floats(0.5, 6.0)),
)
def test_a_search_kept_in_status_ends_where_the_pure_search_ends(
    sizes: tuple[int, ...],
    answers: list[Outcome],
    candidates: int | None,
    hours: float | None,
) -> None:
    ladder = Ladder.of({r: LADDER_NAMES[r][:n] for r, n in zip(ORDER, sizes, strict=True)})
    budget = Budget(candidates=candidates, instance_hours=hours)
    answer = {a.name: answers[i % len(answers)] for i, a in enumerate(ladder.alternatives)}

    # The pure search, handed each outcome.
    state, action = advance(ladder, budget, to_state(SearchStatus()))
    while isinstance(action, Measure):
        state, action = advance(ladder, budget, state, answer[action.name])
    assert isinstance(action, Done)

    # Through status: each wake-up reads status, advances, writes status back; the
    # comparison's record fills the in-flight row and adds its instance-hours.
    kept = SearchStatus()
    for _ in range(64):
        got, step = advance(ladder, budget, to_state(kept))
        kept = SearchStatus.model_validate(copy.deepcopy(from_state(got, kept).dump()))
        if isinstance(step, Done):
            break
        row = in_flight(kept)
        assert row is not None and row.name == step.name
        o = answer[step.name]
        row.measured = True
        row.gain, row.improves, row.gates = o.gain, o.improves, o.gates
        row.objective_met, row.binding, row.why = o.objective_met, o.binding, o.why
        row.instance_hours = o.instance_hours
        kept.instance_hours += o.instance_hours
    else:
        raise AssertionError("the search through status did not end")
    assert isinstance(step, Done)
    assert step.stack == action.stack
    assert kept.best == list(state.best)
    assert kept.done == state.done
    assert [(r.name, r.verdict) for r in kept.rows] == [
        (r.name, r.verdict.value if r.verdict else "") for r in state.rows
    ]
    assert kept.candidates == state.candidates
    assert abs(kept.instance_hours - state.instance_hours) < 1e-3


def test_the_peak_gpu_memory_is_read_once_for_a_deployed_measured_candidate() -> None:
    from endpoint_optimizer.pipeline.search_status import memory_unread

    assert memory_unread(None) is None
    refused = SearchRow(name="gptq", rung="quantization", measured=True)  # never deployed
    now = datetime(2026, 12, 5, tzinfo=UTC)
    flying = SearchRow(name="awq", rung="quantization", variant="cawq", started_at=now)
    done = SearchRow(name="fp8", rung="quantization", variant="cfp8", started_at=now, measured=True)
    status = _status([refused, flying, done])
    assert memory_unread(status.search) is done
    done.gpu_memory_read = True
    assert memory_unread(status.search) is None


def test_a_status_from_before_the_instance_rung_resumes_on_the_same_rung() -> None:
    from endpoint_optimizer.pipeline.search import ORDER, Rung
    from endpoint_optimizer.pipeline.search_status import from_state, to_state

    # Written when the rungs were settings, quantization, speculation, compilation: index
    # 2 was speculation, and it stays speculation.
    old = SearchStatus(rung=2, rows=[SearchRow(name="ngram", rung="speculativeDecoding")])
    assert ORDER[to_state(old).rung] is Rung.SPECULATION
    assert to_state(SearchStatus(rung=4)).rung == len(ORDER)
    # Written now: by name, whatever the index.
    state = to_state(old)
    again = from_state(state, old)
    assert again.rung_name == "speculativeDecoding"
    assert to_state(again.model_copy(update={"rung": 0})).rung == state.rung
