"""The eval set's A/A noise: the baseline asked twice, judged as the gate judges a candidate."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from endpoint_optimizer.api import parse_spec
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.bench.models import BenchConfig, BenchReport, BenchTarget
from endpoint_optimizer.evaluation import noise
from endpoint_optimizer.evaluation.dataset import EvalItem
from endpoint_optimizer.evaluation.gate import tango_bound
from endpoint_optimizer.pipeline.assess import judge, with_noise
from endpoint_optimizer.pipeline.model import ActionKind, EvalAnswers, RawMeasurement, VariantRun
from tests.unit.pipeline.test_decide import NAMES, spec
from tests.unit.pipeline.test_measurement_plan import EVALUATION, action

AT = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def _items(n: int) -> list[EvalItem]:
    return [EvalItem(id=f"i{k}", prompt=f"q{k}", reference="yes") for k in range(n)]


def test_the_repeated_items_are_a_seeded_sample_the_same_on_every_wake_up() -> None:
    items = _items(500)
    first = noise.repeat_indexes(items, 200, seed=3)
    assert first == noise.repeat_indexes(items, 200, seed=3)
    assert len(first) == 200 and first == sorted(set(first))
    assert first != noise.repeat_indexes(items, 200, seed=4)
    # Not the first 200: a sample over the whole set (the generated suites come last).
    assert max(first) > 400
    assert noise.repeat_indexes(items[:50], 200, seed=3) == list(range(50))
    assert noise.repeat_indexes(items, 0, seed=3) == []


def test_no_discordant_item_of_200_still_allows_a_rate_of_one_and_a_half_percent() -> None:
    # Rule of three, exactly: 1 - 0.05^(1/200).
    assert math.isclose(noise.binomial_upper(0, 200, 0.95), 1 - 0.05 ** (1 / 200), rel_tol=1e-6)
    assert noise.binomial_upper(200, 200, 0.95) == 1.0


@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.integers(0, n - 1), st.just(n))))
def test_the_discordance_bound_leaves_alpha_below_the_observed_count(pair: tuple[int, int]) -> None:
    k, n = pair
    high = noise.binomial_upper(k, n, 0.95)
    assert k / n <= high <= 1.0
    # At the bound, seeing k or fewer has probability alpha (Clopper-Pearson).
    tail = sum(math.comb(n, i) * high**i * (1 - high) ** (n - i) for i in range(k + 1))
    assert math.isclose(tail, 0.05, abs_tol=1e-6)


def test_a_baseline_that_answers_alike_twice_shows_no_noise_and_the_bound_of_its_size() -> None:
    items = _items(200)
    answers = ["yes"] * 150 + ["no"] * 50
    scores = [1.0] * 150 + [0.0] * 50
    measured = noise.measure(items, answers, answers, scores, scores, "exact_match", 1600, 0.95, AT)
    assert (measured.items, measured.eval_items) == (200, 1600)
    assert measured.changed_answers == 0 and measured.discordant == 0
    assert measured.difference == 0.0
    assert measured.unchanged_bound is not None
    assert math.isclose(
        measured.unchanged_bound, tango_bound(0, 0, 1600, 0.95, lower=True), abs_tol=1e-6
    )
    assert measured.unchanged_bound > -0.01
    assert "0 scored differently" in noise.note(measured, 0.01)
    assert "inside the noise" not in noise.note(measured, 0.01)


def test_noise_that_would_fail_an_unchanged_candidate_says_the_margin_is_inside_it() -> None:
    items = _items(200)
    # 8 of 200 items flip on the second asking, 4 each way; two more change text only.
    first = ["no"] * 4 + ["yes"] * 196
    second = ["yes"] * 4 + ["no"] * 4 + ["yes!", "yes."] + ["yes"] * 190
    first_scores = [float(a == "yes") for a in first]
    second_scores = [float(a.strip("!.") == "yes") for a in second]
    measured = noise.measure(
        items, first, second, first_scores, second_scores, "exact_match", 400, 0.95, AT
    )
    assert measured.discordant == 8 and measured.changed_answers == 10
    assert measured.discordance_high is not None and measured.discordance_high > 8 / 200
    # 4 % discordance over 400 items: 8 each way, beyond a one-point margin.
    assert measured.unchanged_bound == round(tango_bound(8, 8, 400, 0.95, lower=True), 6)
    assert measured.unchanged_bound < -0.01
    text = noise.note(measured, 0.01)
    assert "8 scored differently" in text and "margin -1.0" in text
    assert "inside the noise" in text


def test_rouge_noise_is_bounded_by_the_bootstrap_and_scaled_to_the_whole_set() -> None:
    items = _items(100)
    first = [0.5] * 100
    second = [0.5] * 90 + [0.4] * 5 + [0.6] * 5
    measured = noise.measure(
        items, ["a"] * 100, ["a"] * 90 + ["b"] * 10, first, second, "rouge_l", 400, 0.95, AT
    )
    assert measured.discordant == 10
    assert measured.interval_low is not None and measured.interval_low < 0
    assert measured.unchanged_bound is not None
    assert measured.interval_low < measured.unchanged_bound < 0


def test_the_baseline_measurement_judges_its_repeated_answers_into_eval_noise() -> None:
    evaluated = parse_spec(spec(evaluation=EVALUATION | {"noiseItems": 3}))
    report = BenchReport(
        target=BenchTarget(endpoint_name="chat", variant=NAMES.baseline_variant),
        config=BenchConfig(),
        levels=[],
    )
    items = tuple(_items(6))
    answers = EvalAnswers(["yes", "yes", "no", "yes", "yes", "yes"], [None] * 6)
    raw = RawMeasurement(
        action(ActionKind.MEASURE_BASELINE),
        baseline=VariantRun(NAMES.baseline_variant, report, answers),
        eval_items=items,
        benchmarked_at=AT,
        repeated=(0, 2, 5),
        repeat_answers=EvalAnswers(["yes", "yes", "yes"], [None] * 3),
    )
    judged = judge(evaluated, raw)
    assert judged.eval_noise is not None
    assert (judged.eval_noise.items, judged.eval_noise.eval_items) == (3, 6)
    # Item 2 was wrong the first time and right the second.
    assert judged.eval_noise.discordant == 1 and judged.eval_noise.changed_answers == 1
    assert judged.eval_noise.measured_at == AT
    # The baseline's own score is the first asking's, over the whole set.
    assert judged.baseline.eval_score == round(5 / 6, 4)


def test_the_eval_checks_reason_carries_the_noise_beside_the_margin() -> None:
    evaluated = parse_spec(spec(evaluation=EVALUATION))
    items = _items(200)
    answers = ["yes"] * 200
    measured = noise.measure(
        items, answers, answers, [1.0] * 200, [1.0] * 200, "exact_match", 800, 0.95, AT
    )
    checks = [
        Check(name="eval_exact_match", kind=CheckKind.EVAL, verdict=Verdict.PASS, reason="ok"),
        Check(name="eval@billing", kind=CheckKind.EVAL_SLICE, verdict=Verdict.PASS, reason="ok"),
    ]
    overall, by_class = with_noise(evaluated, checks, measured)
    assert overall.reason.startswith("ok; A/A noise (baseline asked 200 items twice)")
    assert "margin -1.0" in overall.reason
    assert by_class.reason == "ok"
    assert with_noise(evaluated, checks, None) == checks
