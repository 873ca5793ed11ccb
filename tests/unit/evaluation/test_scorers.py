"""Scorers and refusal detection."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from endpoint_optimizer.evaluation.refusal import is_refusal
from endpoint_optimizer.evaluation.scorers import (
    MAX_PATTERN_CHARS,
    PatternError,
    check_pattern,
    contains,
    exact_match,
    lcs_length,
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


def test_a_catastrophic_backtracking_pattern_is_matched_in_linear_time() -> None:
    # Python's re needs about 2**n steps for (a+)+$ on n a's and a mismatch: at n = 40
    # days. RE2 answers at once; the test would hang, not fail slowly, without it.
    assert regex("a" * 40 + "!", r"^(a+)+$") == 0.0
    assert regex("a" * 100_000 + "!", r"^(a+)+$") == 0.0
    assert regex("a" * 100_000, r"^(a+)+$") == 1.0


def test_dollar_matches_before_a_final_newline_as_in_python() -> None:
    assert regex("42\n", r"^\d+$") == 1.0
    assert regex("42\nmore", r"^\d+$") == 0.0


@pytest.mark.parametrize(
    ("pattern", "advice"),
    [
        (r"(ab)\1", "backreferences"),
        (r"(?P<x>a)(?P=x)", "backreferences"),
        (r"foo(?=bar)", "lookaround"),
        (r"(?<!x)y", "lookaround"),
        (r"a++", "possessive"),
        (r"(?>a)", "atomic"),
        (r"end\Z", r"\\z"),
        (r"a{1001}", "repetition"),
        (r"(unclosed", "missing \\)"),
        ("x" * (MAX_PATTERN_CHARS + 1), "shorten it"),
    ],
)
def test_a_pattern_re2_cannot_run_is_refused_with_what_to_change(pattern: str, advice: str) -> None:
    with pytest.raises(PatternError, match=advice) as refused:
        check_pattern(pattern)
    assert "github.com/google/re2" in str(refused.value) or "shorten" in str(refused.value)


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


def _lcs_by_table(a: list[str], b: list[str]) -> int:
    """The textbook O(n*m) dynamic programme, as the reference."""
    previous = [0] * (len(b) + 1)
    for token in a:
        current = [0]
        for j, other in enumerate(b, start=1):
            current.append(
                previous[j - 1] + 1 if token == other else max(previous[j], current[j - 1])
            )
        previous = current
    return previous[-1]


tokens = st.lists(st.sampled_from(["a", "b", "c", "d", "the"]), max_size=80)


@given(tokens, tokens)
def test_the_bit_parallel_lcs_equals_the_dynamic_programme(a: list[str], b: list[str]) -> None:
    assert lcs_length(a, b) == _lcs_by_table(a, b)


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
