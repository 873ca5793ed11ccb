"""The search's pure core: the seed's order, the keep rule, the skips, the budget, restarts.

Scenario tests first (each rule on a small ladder), then properties over random ladders,
outcomes, budgets and restarts (a restart is a state that went through status and back,
possibly with the action that followed it lost).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.pipeline.search import (
    ORDER,
    SPECULATION_HELPS,
    Budget,
    Done,
    Ladder,
    Measure,
    Outcome,
    Point,
    Rung,
    State,
    Verdict,
    advance,
    compounded,
    cost_per_million_tokens,
    pareto_front,
    shares,
    stack_key,
)

FULL = Ladder.of(
    {
        # Written out of order on purpose: the ladder walks the seed's order anyway.
        Rung.COMPILATION: ["neuron"],
        Rung.QUANTIZATION: ["fp8", "awq", "gptq"],
        Rung.SETTINGS: ["batch256"],
        Rung.SPECULATION: ["ngram", "eagle"],
    }
)


def won(gain: float, *, met: bool = False, binding: str = "e2e", hours: float = 1.0) -> Outcome:
    return Outcome(gain, True, True, met, binding, hours)


def lost(gain: float = 0.01, *, gates: bool = True, hours: float = 1.0) -> Outcome:
    return Outcome(gain, False, gates, False, "e2e", hours, why="below minImprovement")


UNBOUNDED = Budget()


def run(
    ladder: Ladder, outcomes: dict[str, Outcome], budget: Budget = UNBOUNDED
) -> tuple[State, Done, list[Measure]]:
    """Drive the search to its end, answering each Measure from `outcomes`."""
    state, action = advance(ladder, budget, State())
    measured: list[Measure] = []
    while isinstance(action, Measure):
        measured.append(action)
        state, action = advance(ladder, budget, state, outcomes[action.name])
    return state, action, measured


def verdicts(state: State) -> dict[str, Verdict | None]:
    return {r.name: r.verdict for r in state.rows}


def test_rungs_are_walked_in_the_seed_order_each_on_the_best_so_far() -> None:
    outcomes = {
        "batch256": won(0.05),
        "fp8": won(0.20),
        "awq": won(0.30),
        "gptq": lost(),
        "ngram": lost(),
        "eagle": won(0.10),
        "neuron": won(0.5),
    }
    state, done, measured = run(FULL, outcomes)
    assert [m.name for m in measured] == [
        "batch256",
        "fp8",
        "awq",
        "gptq",
        "ngram",
        "eagle",
    ]
    # Every alternative of a rung is measured on the same base: the best before the rung.
    assert [m.base for m in measured] == [
        (),
        ("batch256",),
        ("batch256",),
        ("batch256",),
        ("batch256", "awq"),
        ("batch256", "awq"),
    ]
    assert done.stack == ("batch256", "awq", "eagle")
    assert verdicts(state) == {
        "batch256": Verdict.KEPT,
        "fp8": Verdict.BEATEN,
        "awq": Verdict.KEPT,
        "gptq": Verdict.NO_GAIN,
        "ngram": Verdict.NO_GAIN,
        "eagle": Verdict.KEPT,
        # SageMaker's optimization job refuses compilation with speculative decoding.
        "neuron": Verdict.SKIPPED,
    }
    fp8 = next(r for r in state.rows if r.name == "fp8")
    assert fp8.why == "+20.0 %, below awq's +30.0 %"


@pytest.mark.parametrize(
    ("gains", "kept"),
    [((0.3, 0.1, 0.2), "fp8"), ((0.1, 0.2, 0.3), "gptq"), ((0.2, 0.2, 0.1), "fp8")],
)
def test_the_largest_gain_of_a_rung_wins_and_a_tie_goes_to_the_first_written(
    gains: tuple[float, float, float], kept: str
) -> None:
    ladder = Ladder.of({Rung.QUANTIZATION: ["fp8", "awq", "gptq"]})
    state, done, _ = run(
        ladder, {n: won(g) for n, g in zip(["fp8", "awq", "gptq"], gains, strict=True)}
    )
    assert done.stack == (kept,)
    assert [n for n, v in verdicts(state).items() if v is Verdict.KEPT] == [kept]


def test_a_candidate_that_improves_but_fails_a_gate_is_never_kept() -> None:
    outcomes = {
        "batch256": lost(),
        "fp8": won(0.10),
        "awq": Outcome(0.40, True, False, True, "e2e", 1.0, why="eval slice long-context: Fail"),
        "gptq": won(0.12),
        "ngram": lost(),
        "eagle": lost(),
        "neuron": won(0.05),
    }
    state, done, _ = run(FULL, outcomes)
    assert done.stack == ("gptq", "neuron")
    awq = next(r for r in state.rows if r.name == "awq")
    assert awq.verdict is Verdict.GATE_FAILED and awq.why == "eval slice long-context: Fail"


def test_speculation_is_skipped_once_the_objective_is_met_and_throughput_binds() -> None:
    outcomes = {"batch256": lost(), "fp8": won(0.3, met=True, binding="throughput")}
    outcomes |= {"awq": lost(), "gptq": lost(), "neuron": won(0.1)}
    state, done, measured = run(FULL, outcomes)
    assert "ngram" not in [m.name for m in measured]
    assert done.stack == ("fp8", "neuron")
    ngram = next(r for r in state.rows if r.name == "ngram")
    assert ngram.verdict is Verdict.SKIPPED
    assert ngram.why.startswith("the objective is met and throughput binds")


@pytest.mark.parametrize("binding", sorted(SPECULATION_HELPS))
def test_speculation_is_tried_while_first_token_or_inter_token_latency_binds(
    binding: str,
) -> None:
    outcomes = {"batch256": lost(), "fp8": won(0.3, met=True, binding=binding)}
    outcomes |= {"awq": lost(), "gptq": lost(), "ngram": won(0.2), "eagle": lost()}
    _, done, measured = run(FULL, outcomes)
    assert "ngram" in [m.name for m in measured]
    assert done.stack == ("fp8", "ngram")


def test_speculation_is_tried_while_the_objective_is_unmet_whatever_binds() -> None:
    outcomes = {"batch256": lost(), "fp8": won(0.02, met=False, binding="throughput")}
    outcomes |= {"awq": lost(), "gptq": lost(), "ngram": lost(), "eagle": lost()}
    outcomes |= {"neuron": lost()}
    _, done, measured = run(FULL, outcomes)
    assert {"ngram", "eagle", "neuron"} <= {m.name for m in measured}
    assert done.stack == ("fp8",)


def test_the_budget_stops_with_the_best_so_far_and_says_what_was_not_run() -> None:
    outcomes = {"batch256": won(0.05), "fp8": won(0.2, hours=2.0), "awq": lost()}
    state, done, measured = run(FULL, outcomes, Budget(candidates=3))
    assert [m.name for m in measured] == ["batch256", "fp8", "awq"]
    # fp8 was measured before the budget ran out, so the partial rung's winner is kept.
    assert done.stack == ("batch256", "fp8")
    assert done.why == "budget: 3 of 3 candidates measured"
    assert verdicts(state)["gptq"] is Verdict.NOT_RUN
    assert verdicts(state)["neuron"] is Verdict.NOT_RUN
    assert state.instance_hours == 4.0

    _, by_hours, measured = run(FULL, outcomes, Budget(instance_hours=2.5))
    assert [m.name for m in measured] == ["batch256", "fp8"]
    assert by_hours.why == "budget: 3.00 of 2.5 instance-hours spent"


def test_nothing_that_pays_keeps_the_baseline() -> None:
    names = [a.name for a in FULL.alternatives]
    state, done, _ = run(FULL, dict.fromkeys(names, lost()))
    assert done.stack == ()
    assert "the baseline stays" in done.why
    assert shares(state) == {}


def test_a_plain_optimizations_block_is_a_one_rung_search() -> None:
    ladder = Ladder.of({Rung.QUANTIZATION: ["optimizations"]})
    _, done, measured = run(ladder, {"optimizations": won(0.12)})
    assert [(m.name, m.base) for m in measured] == [("optimizations", ())]
    assert done.stack == ("optimizations",)


def test_names_must_be_unique_in_the_ladder() -> None:
    with pytest.raises(ValueError, match=r"repeated: \['fp8'\]"):
        Ladder.of({Rung.QUANTIZATION: ["fp8"], Rung.COMPILATION: ["fp8"]})


def test_an_outcome_with_nothing_in_flight_is_refused() -> None:
    state, done = advance(Ladder(), Budget(), State())
    assert isinstance(done, Done) and done.stack == ()
    with pytest.raises(ValueError, match="no candidate in flight"):
        advance(Ladder(), Budget(), state, won(0.1))


def test_shares_divide_the_compounded_gain() -> None:
    outcomes = {"batch256": won(0.10), "fp8": won(0.21), "awq": lost(), "gptq": lost()}
    outcomes |= {"ngram": lost(), "eagle": lost(), "neuron": lost()}
    state, done, _ = run(FULL, outcomes)
    assert done.stack == ("batch256", "fp8")
    got = shares(state)
    # 1.10 × 1.21 = 1.331 = 1.1³: fp8's 21 % is two of the three compounding steps.
    assert got == pytest.approx({"batch256": 1 / 3, "fp8": 2 / 3})


def test_lower_is_better_gains_compound_on_the_remaining_time() -> None:
    # Two 40 % latency cuts leave 0.6 × 0.6 of the time: 64 %, not the 96 % that
    # compounding them as growth would claim; two 40 % throughput gains are 96 %.
    assert compounded([0.4, 0.4], lower_is_better=True) == pytest.approx(0.64)
    assert compounded([0.4, 0.4], lower_is_better=False) == pytest.approx(0.96)
    assert compounded([], lower_is_better=True) == 0.0
    outcomes = {"batch256": won(0.10), "fp8": won(0.19), "awq": lost(), "gptq": lost()}
    outcomes |= {"ngram": lost(), "eagle": lost(), "neuron": lost()}
    state, _, _ = run(FULL, outcomes)
    # 0.9 × 0.81 = 0.9³: fp8's 19 % latency cut is two of three equal steps.
    assert shares(state, lower_is_better=True) == pytest.approx({"batch256": 1 / 3, "fp8": 2 / 3})


def test_cost_per_million_tokens() -> None:
    # $10/h at 1,000 tokens/s: 3.6M tokens an hour, $2.78 per million.
    assert cost_per_million_tokens(1000.0, 10.0) == pytest.approx(10 / 3.6)
    assert cost_per_million_tokens(0.0, 10.0) is None
    assert cost_per_million_tokens(math.nan, 10.0) is None


def test_stack_keys_are_deterministic_and_distinct() -> None:
    assert stack_key(("fp8", "ngram")) == stack_key(("fp8", "ngram"))
    assert stack_key(("fp8", "ngram")) != stack_key(("fp8ngram",))
    assert len(stack_key(("a",))) == 10


# --- properties -------------------------------------------------------------------------

NAMES = st.text("abcdefgh", min_size=1, max_size=4)
BINDINGS = st.sampled_from(["ttft", "itl", "e2e", "throughput"])
OUTCOMES = st.builds(
    Outcome,
    gain=st.one_of(st.none(), st.floats(-0.5, 2.0), st.just(math.nan)),
    improves=st.booleans(),
    gates=st.booleans(),
    objective_met=st.booleans(),
    binding=BINDINGS,
    instance_hours=st.floats(0.0, 3.0),
)


@st.composite
def ladders(draw: st.DrawFn) -> Ladder:
    names = draw(st.lists(NAMES, unique=True, min_size=0, max_size=9))
    rungs: dict[Rung, list[str]] = {}
    for name in names:
        rungs.setdefault(draw(st.sampled_from(ORDER)), []).append(name)
    return Ladder.of(rungs)


BUDGETS = st.builds(
    Budget,
    candidates=st.one_of(st.none(), st.integers(0, 10)),
    instance_hours=st.one_of(st.none(), st.floats(0.0, 12.0)),
)


@settings(max_examples=300, deadline=None)
@given(ladders(), BUDGETS, st.data())
def test_the_search_ends_within_its_budget_keeping_only_what_paid(
    ladder: Ladder, budget: Budget, data: st.DataObject
) -> None:
    state, action = advance(ladder, budget, State())
    answered: dict[str, Outcome] = {}
    bases: dict[str, tuple[str, ...]] = {}
    steps = 0
    while isinstance(action, Measure):
        steps += 1
        assert steps <= len(ladder.alternatives), "a candidate was measured twice"
        assert action.name not in answered
        # A restart, sometimes: the state is what status kept, the action was lost.
        if data.draw(st.booleans(), label="restart"):
            again, same = advance(ladder, budget, state)
            assert same == action and again == state
        bases[action.name] = action.base
        answered[action.name] = data.draw(OUTCOMES, label=action.name)
        state, action = advance(ladder, budget, state, answered[action.name])

    rows = {r.name: r for r in state.rows}
    # Every alternative ends in the table exactly once, with a verdict.
    assert sorted(rows) == sorted(a.name for a in ladder.alternatives)
    assert len(rows) == len(state.rows)
    assert all(r.verdict is not None for r in state.rows)
    # Within budget: no candidate started once a bound was reached.
    if budget.candidates is not None:
        assert len(answered) <= budget.candidates
    # The winner: at most one alternative per rung, in the seed's order, each of which
    # improved the objective and passed every gate, built on the stack before its rung.
    rung_of = {a.name: a.rung for a in ladder.alternatives}
    positions = [ORDER.index(rung_of[n]) for n in action.stack]
    assert positions == sorted(set(positions))
    for i, name in enumerate(action.stack):
        o = answered[name]
        assert o.improves and o.gates and o.gain is not None and math.isfinite(o.gain)
        assert bases[name] == action.stack[:i]
        assert rows[name].verdict is Verdict.KEPT
        # The best of its rung among those that paid.
        rivals = [
            answered[n]
            for n, r in rows.items()
            if r.rung is rung_of[name] and n in answered and bases[n] == bases[name]
        ]
        paid = [x.gain for x in rivals if x.improves and x.gates and x.gain is not None]
        assert o.gain == max(g for g in paid if math.isfinite(g))
    kept = {n for n, r in rows.items() if r.verdict is Verdict.KEPT}
    assert kept == set(action.stack)
    # Nothing is measured that a gate or the rules say not to: compilation never follows a
    # kept speculation; speculation never runs once the objective is met on a metric it
    # does not improve.
    spec_kept = [n for n in action.stack if rung_of[n] is Rung.SPECULATION]
    if spec_kept:
        assert not any(rung_of[n] is Rung.COMPILATION for n in answered)
    for name, base in bases.items():
        if rung_of[name] is Rung.SPECULATION and base:
            last = answered[base[-1]]
            assert not last.objective_met or last.binding in SPECULATION_HELPS
    # Done is stable: advancing a finished search changes nothing.
    assert advance(ladder, budget, state) == (state, action)
    assert sum(shares(state).values()) == pytest.approx(
        1.0 if any((answered[n].gain or 0) > 0 for n in action.stack) else 0.0
    )


def test_the_pareto_front_keeps_the_stacks_nothing_beats_on_every_axis() -> None:
    points = {
        "baseline": Point(latency_ms=100, tokens_per_second=1000, cost=4.0),
        "fp8": Point(latency_ms=70, tokens_per_second=1500, cost=2.7),
        "awq": Point(latency_ms=80, tokens_per_second=1800, cost=2.2),  # slower, cheaper
        "fp8+ngram": Point(latency_ms=50, tokens_per_second=1300, cost=3.1),  # fastest
        "gptq": Point(latency_ms=85, tokens_per_second=1700, cost=2.4),  # awq beats it
        "twin-of-fp8": Point(latency_ms=70, tokens_per_second=1500, cost=2.7),  # a tie
        "broken": Point(latency_ms=math.nan, tokens_per_second=9e9, cost=0.0),
    }
    assert pareto_front(points) == {"fp8", "awq", "fp8+ngram", "twin-of-fp8"}
    # With no price, cost does not separate: gptq is still beaten on both other axes.
    unpriced = {n: Point(p.latency_ms, p.tokens_per_second) for n, p in points.items()}
    assert pareto_front(unpriced) == {"fp8", "awq", "fp8+ngram", "twin-of-fp8"}
    # One stack without a price (its instance type is not in the table) drops the cost axis
    # for all: a cheaper-only point then no longer makes the front.
    cheap = Point(latency_ms=90, tokens_per_second=1000, cost=1.0)
    assert "cheap" in pareto_front({**points, "cheap": cheap})
    no_price = {**points, "cheap": cheap, "unpriced": Point(200, 10)}
    assert "cheap" not in pareto_front(no_price)
    assert pareto_front({}) == frozenset()


_AXIS = st.floats(1, 1000, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.text("abcdef", min_size=1, max_size=3),
        st.builds(Point, _AXIS, _AXIS, st.one_of(st.none(), _AXIS)),
        max_size=12,
    )
)
def test_every_point_off_the_front_is_beaten_by_one_on_it_and_a_worse_copy_changes_nothing(
    points: dict[str, Point],
) -> None:
    front = pareto_front(points)

    priced = all(p.cost is not None for p in points.values())

    def key(p: Point) -> tuple[float, ...]:
        return (p.latency_ms, p.tokens_per_second, p.cost or 0.0 if priced else 0.0)

    def at_least_as_good(q: Point, p: Point) -> bool:
        return (
            q.latency_ms <= p.latency_ms
            and q.tokens_per_second >= p.tokens_per_second
            and (not priced or (q.cost or 0.0) <= (p.cost or 0.0))
        )

    assert bool(front) == bool(points)
    for name, p in points.items():
        if name not in front:
            # Beaten by a point on the front itself (domination is transitive).
            assert any(at_least_as_good(points[f], p) and key(points[f]) != key(p) for f in front)
    for a in front:
        for b in front:
            if key(points[a]) != key(points[b]):
                assert not at_least_as_good(points[a], points[b])
    if front:
        best = points[min(front)]
        worse = Point(best.latency_ms + 1, best.tokens_per_second, best.cost)
        assert pareto_front({**points, "zz-worse": worse}) == front


SMALLER = Ladder.of(
    {
        Rung.QUANTIZATION: ["awq"],
        Rung.INSTANCE: ["g5-12x", "g6e-12x"],
        Rung.SPECULATION: ["ngram"],
    }
)


def test_a_smaller_instance_is_tried_only_on_a_kept_quantization() -> None:
    # AWQ kept: both instance types are measured on it, the cheaper wins.
    state, done, measured = run(
        SMALLER, {"awq": won(0.4), "g5-12x": won(0.35), "g6e-12x": won(0.25), "ngram": lost()}
    )
    assert [m.name for m in measured][:3] == ["awq", "g5-12x", "g6e-12x"]
    assert measured[1].base == ("awq",)
    assert done.stack[:2] == ("awq", "g5-12x")
    assert verdicts(state)["g6e-12x"] is Verdict.BEATEN
    # AWQ did not pay: the model needs the memory it had, so no smaller instance.
    state, done, measured = run(
        SMALLER, {"awq": lost(), "g5-12x": won(0.35), "g6e-12x": won(0.25), "ngram": lost()}
    )
    assert "g5-12x" not in [m.name for m in measured]
    rows = {r.name: r for r in state.rows}
    assert rows["g5-12x"].verdict is Verdict.SKIPPED
    assert "no quantization was kept" in rows["g5-12x"].why
