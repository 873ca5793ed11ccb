"""Scorers: how well one answer matches one reference, in [0, 1].

Every scorer runs in time linear in the answer (times a bounded factor from the
reference), because the reference is user data and scoring must never hold the
operator: a `regex` reference is an RE2 pattern (google-re2), matched by automata
without backtracking, so `(a+)+$` costs the same as `a+$`; a pattern RE2 cannot
compile (backreferences, lookaround) is refused when the eval set is parsed
(`check_pattern`), before any traffic. ROUGE-L's longest common subsequence is the
bit-parallel algorithm of Crochemore et al. (2001): one big-integer step per token
of the shorter side instead of a Python loop over every pair.

Why RE2 rather than a time limit: Python's `re` has no timeout and holds the GIL while
it backtracks, so even a worker thread stalls the event loop; the `regex` package's
`timeout=` bounds each search but still fails the slow items (an eval set of them costs
timeout x items); a process per scoring costs tens of MiB and a spawn each. RE2 makes
every pattern it accepts fast, and google-re2 is Google's own binding, with wheels for
every CPython the image runs (cel-python already depends on it).

ROUGE-L is written here (over lower-cased word tokens, F1) rather than taken from
`rouge-score`, which pulls in nltk and absl for a twenty-line function; ours has no
stemming, which is the usual choice for comparing two variants of the same model on
the same items.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Protocol

import re2

_WORDS = re.compile(r"\w+", re.UNICODE)
# Linear under Python's re: after the optional parts nothing can fail, so no backtracking.
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")

# The most characters of one regex reference, and the most memory RE2 may use for one
# compiled pattern (its program and DFA cache; a search that fills the cache falls back
# to RE2's NFA, still linear). Eval references are short answers, not grammars.
MAX_PATTERN_CHARS = 4096
_PATTERN_MEMORY_BYTES = 1 << 20
RE2_SYNTAX = "https://github.com/google/re2/wiki/Syntax"


class PatternError(ValueError):
    """A regex reference that RE2 cannot run; the message says what to change."""


class Program(Protocol):
    """A compiled RE2 pattern (google-re2 ships no type hints)."""

    def search(self, text: str) -> object | None: ...


def _options() -> object:
    options = re2.Options()
    options.max_mem = _PATTERN_MEMORY_BYTES
    # RE2 would log the pattern (eval data) to stderr on a compile error.
    options.log_errors = False
    return options


_RE2_OPTIONS = _options()


def compile_pattern(pattern: str) -> Program:
    """The RE2 program of a regex reference; PatternError names what to change."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(
            f"the pattern has {len(pattern)} characters, more than {MAX_PATTERN_CHARS}; "
            "shorten it (a reference is an answer's shape, not a grammar)"
        )
    try:
        program: Program = re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as error:
        raise PatternError(_advice(pattern, error)) from None
    return program


def check_pattern(pattern: str) -> None:
    """Raise PatternError unless RE2 can compile `pattern` within its limits."""
    compile_pattern(pattern)


def _advice(pattern: str, error: Exception) -> str:
    reason = error.args[0] if error.args else ""
    text = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
    if any(token in pattern for token in ("(?=", "(?!", "(?<=", "(?<!")):
        hint = "lookaround is not supported: match the text itself, or use scorer 'contains'"
    elif re.search(r"\\[1-9]|\(\?P=", pattern):
        hint = "backreferences are not supported: spell the repeated text out"
    elif "(?>" in pattern or re.search(r"[*+?}]\+", pattern):
        hint = "atomic groups and possessive quantifiers are not supported: drop the '+'/'(?>'"
    elif "\\Z" in pattern:
        hint = "use \\z for the end of the answer"
    elif "too large" in text or "repetition" in text:
        hint = "the pattern is too large: lower its repetition counts (at most 1000)"
    else:
        hint = "fix the pattern"
    return f"not an RE2 pattern ({text}); {hint}; syntax: {RE2_SYNTAX}"


def normalize(text: str) -> str:
    """Lower-case, collapse whitespace, strip surrounding punctuation and quotes."""
    return " ".join(text.lower().split()).strip(" .,;:!?\"'`")


def exact_match(answer: str, reference: str) -> float:
    return float(normalize(answer) == normalize(reference))


def contains(answer: str, reference: str) -> float:
    return float(normalize(reference) in normalize(answer))


def regex(answer: str, reference: str) -> float:
    """The reference is an RE2 pattern searched for in the answer.

    As with Python's re, `$` also matches before a final newline (models often end
    with one). RE2's \\d, \\w and \\s are ASCII; \\p{L}, \\p{N} match any script.
    """
    program = compile_pattern(reference)
    if program.search(answer) is not None:
        return 1.0
    if answer.endswith("\n") and program.search(answer[:-1]) is not None:
        return 1.0
    return 0.0


def _last_number(text: str) -> float | None:
    found = _NUMBER.findall(text)
    if not found:
        return None
    return float(found[-1].replace(",", ""))


def numeric(answer: str, reference: str) -> float:
    """The last number in the answer equals the reference number (GSM8K convention)."""
    expected = _last_number(reference)
    got = _last_number(answer)
    if expected is None or got is None:
        return 0.0
    return float(math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-9))


def lcs_length(a: list[str], b: list[str]) -> int:
    """Length of the longest common subsequence of two token lists.

    Bit-parallel (Crochemore, Iliopoulos, Pinzon, Reid 2001): bit j of `row` is 0 where
    the LCS grows at position j of the longer list; one step per token of the shorter.
    """
    if len(a) > len(b):
        a, b = b, a
    if not a:
        return 0
    positions: dict[str, int] = {}
    for j, token in enumerate(b):
        positions[token] = positions.get(token, 0) | (1 << j)
    full = (1 << len(b)) - 1
    row = full
    for token in a:
        matches = row & positions.get(token, 0)
        row = ((row + matches) | (row - matches)) & full
    return len(b) - row.bit_count()


def rouge_l(answer: str, reference: str) -> float:
    """ROUGE-L F1 over lower-cased word tokens."""
    cand = _WORDS.findall(answer.lower())
    ref = _WORDS.findall(reference.lower())
    if not cand or not ref:
        return float(cand == ref)
    lcs = lcs_length(cand, ref)
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(cand), lcs / len(ref)
    return 2 * precision * recall / (precision + recall)


SCORERS: dict[str, Callable[[str, str], float]] = {
    "exact_match": exact_match,
    "contains": contains,
    "regex": regex,
    "numeric": numeric,
    "rouge_l": rouge_l,
}

# Scorers whose value is 0 or 1: the eval gate can use McNemar's exact test on them.
BINARY_SCORERS = frozenset({"exact_match", "contains", "regex", "numeric"})


def score(answer: str, reference: str, scorer: str) -> float:
    try:
        function = SCORERS[scorer]
    except KeyError:
        raise ValueError(
            f"evaluation.metric: unknown scorer {scorer!r}; use one of {sorted(SCORERS)}"
        ) from None
    return function(answer, reference)
