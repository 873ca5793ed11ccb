"""Scorers: how well one answer matches one reference, in [0, 1].

ROUGE-L is written here (longest common subsequence over lower-cased word tokens,
F1) rather than taken from `rouge-score`, which pulls in nltk and absl for a
twenty-line function; ours has no stemming, which is the usual choice for
comparing two variants of the same model on the same items.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

_WORDS = re.compile(r"\w+", re.UNICODE)
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")


def normalize(text: str) -> str:
    """Lower-case, collapse whitespace, strip surrounding punctuation and quotes."""
    return " ".join(text.lower().split()).strip(" .,;:!?\"'`")


def exact_match(answer: str, reference: str) -> float:
    return float(normalize(answer) == normalize(reference))


def contains(answer: str, reference: str) -> float:
    return float(normalize(reference) in normalize(answer))


def regex(answer: str, reference: str) -> float:
    """The reference is a Python regular expression searched for in the answer."""
    return float(re.search(reference, answer) is not None)


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


def _lcs_length(a: list[str], b: list[str]) -> int:
    if len(a) < len(b):
        a, b = b, a
    previous = [0] * (len(b) + 1)
    for token in a:
        current = [0]
        for j, other in enumerate(b, start=1):
            current.append(
                previous[j - 1] + 1 if token == other else max(previous[j], current[j - 1])
            )
        previous = current
    return previous[-1]


def rouge_l(answer: str, reference: str) -> float:
    """ROUGE-L F1 over lower-cased word tokens."""
    cand = _WORDS.findall(answer.lower())
    ref = _WORDS.findall(reference.lower())
    if not cand or not ref:
        return float(cand == ref)
    lcs = _lcs_length(cand, ref)
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
