"""Scorers and refusal detection."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from endpoint_optimizer.evaluation.refusal import is_refusal
from endpoint_optimizer.evaluation.scorers import (
    contains,
    exact_match,
    numeric,
    regex,
    rouge_l,
    score,
)


def test_exact_match_ignores_case_whitespace_and_surrounding_punctuation() -> None:
    assert exact_match("  Paris. ", "paris") == 1.0
    assert exact_match("Paris, France", "Paris") == 0.0


def test_contains_and_regex() -> None:
    assert contains("The capital is Paris.", "paris") == 1.0
    assert contains("Lyon", "Paris") == 0.0
    assert regex("order #12345 shipped", r"#\d{5}\b") == 1.0
    assert regex("order shipped", r"#\d{5}") == 0.0


def test_numeric_compares_the_last_number() -> None:
    assert numeric("3 apples plus 4 is 7", "7") == 1.0
    assert numeric("The answer is 1,234.", "1234") == 1.0
    assert numeric("about 7.5", "7") == 0.0
    assert numeric("no number", "7") == 0.0


def test_rouge_l_known_value() -> None:
    # LCS of "the cat sat on the mat" / "the cat on the mat" is 5 tokens.
    value = rouge_l("the cat sat on the mat", "the cat on the mat")
    precision, recall = 5 / 6, 5 / 5
    assert value == pytest.approx(2 * precision * recall / (precision + recall))
    assert rouge_l("", "") == 1.0 and rouge_l("a", "") == 0.0


words = st.lists(st.sampled_from(["a", "b", "c", "d", "the"]), max_size=30).map(" ".join)


@given(words, words)
def test_rouge_l_is_a_symmetric_score_in_unit_range(a: str, b: str) -> None:
    value = rouge_l(a, b)
    assert 0.0 <= value <= 1.0
    assert value == pytest.approx(rouge_l(b, a))
    assert rouge_l(a, a) == 1.0


def test_unknown_scorer_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"evaluation\.metric"):
        score("a", "a", "bleu")


@pytest.mark.parametrize(
    "answer",
    [
        "I'm sorry, but I can't help with that.",
        "I cannot assist with this request.",
        "As an AI language model, I do not have opinions.",
        "Sorry, I can’t do that.",
        "I apologize, but that is not something I can do.",
    ],
)
def test_refusals_are_detected(answer: str) -> None:
    assert is_refusal(answer)


@pytest.mark.parametrize(
    "answer",
    [
        "Paris is the capital of France.",
        "To kill a Python process, send SIGTERM with kill PID.",
        "Here is the code. " + "x" * 300 + " I cannot stress this enough.",
    ],
)
def test_answers_are_not_refusals(answer: str) -> None:
    assert not is_refusal(answer)
