"""The sandbox's synthetic eval set: items the serving model can "solve" by rule.

Three classes, each with a reference answer a scorer can match exactly:
arithmetic ("What is 37 + 58?"), copy ("Repeat the code exactly: QX-4821-LM"),
capital ("What is the capital of Peru?"). `generate(seed, n)` is the seeded generator
behind sandbox/data/eval.jsonl; `lookup(prompt)` recognises an item from its prompt alone,
so prompts built by hand in a test are answered too.

Customer-support questions whose prompt settles the answer (the examples' support-evals:
a total from a subtotal and tax, a refund within a stated policy, a password against a
stated minimum length, a delivery day) are read the same way, by what they ask, whoever
wrote them: a sum or product of amounts (`support-amount`), a comparison with a stated
limit (`support-yes-no`), a small count or day (`support-count`).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

DATA_FILE = Path(__file__).parent / "data" / "eval.jsonl"

CAPITALS: dict[str, str] = {
    "France": "Paris",
    "Germany": "Berlin",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Portugal": "Lisbon",
    "Peru": "Lima",
    "Chile": "Santiago",
    "Japan": "Tokyo",
    "Kenya": "Nairobi",
    "Egypt": "Cairo",
    "Canada": "Ottawa",
    "Australia": "Canberra",
    "Norway": "Oslo",
    "Sweden": "Stockholm",
    "Poland": "Warsaw",
    "Greece": "Athens",
    "Turkey": "Ankara",
    "India": "New Delhi",
    "Brazil": "Brasilia",
    "Mexico": "Mexico City",
}

# Baseline accuracy by class for an 8B model (70B adds 0.05, capped at 0.99): arithmetic
# is the hardest, copying a code the easiest.
BASE_ACCURACY: dict[str, float] = {
    "arithmetic": 0.88,
    "copy": 0.97,
    "capital": 0.93,
    # The operator's generated suites (evaluation/suites.py): retrieval and chained steps.
    "long-context": 0.9,
    "multi-step-reasoning": 0.8,
    # Customer-support questions (examples/eval-sets.yaml): money arithmetic is where an
    # 8B model slips most; a comparison with a stated limit is the easiest.
    "support-amount": 0.9,
    "support-yes-no": 0.96,
    "support-count": 0.94,
}
REFUSAL = "I can't help with that."

_ARITHMETIC = re.compile(r"What is (-?\d+) ([+\-*]) (-?\d+)\?")
_COPY = re.compile(r"Repeat the code exactly: ([A-Z0-9-]+)")
_CAPITAL = re.compile(r"What is the capital of ([A-Za-z ]+)\?")
_PASS_CODE = re.compile(r"The pass code for (Archive \d+) is ([A-Z0-9-]+)\.")
_PASS_QUESTION = re.compile(r"What is the pass code for (Archive \d+)\?")
_CHAIN_START = re.compile(r"^(\w+) starts with (\d+) marbles\.")
_CHAIN_STEP = re.compile(
    r"Then \w+(?: is given (\d+) more| finds (\d+) more| gives away (\d+)|'s count is "
    r"(doubled|tripled)| keeps one of (\d+) equal shares)"
)

_MONEY = r"\$(\d+(?:\.\d{2})?)"
_TOTAL = re.compile(rf"subtotal of {_MONEY} and tax of {_MONEY}\. What is the total")
_MONTHS = re.compile(rf"costs {_MONEY} a month\. How much will I pay for (\d+) months\?")
_OVERCHARGED = re.compile(
    rf"billed {_MONEY} this month but my plan costs {_MONEY}\. How much was I overcharged\?"
)
_REFUND_DAYS = re.compile(r"refund (\d+) days after purchase if the policy allows (\d+) days\?")
_RETURNED = re.compile(rf"I returned (\d+) of the \d+ items I bought at {_MONEY} each\.")
_PASSWORD = re.compile(r"at least (\d+) characters long\. Is the password (\S+) long enough\?")
_LOCKOUT = re.compile(r"locks after (\d+) failed sign-ins[^.]*\. I have failed (\d+) times\.")
_FREE_SHIPPING = re.compile(rf"free on orders of {_MONEY} or more\. My cart totals {_MONEY}\.")
_ARRIVAL = re.compile(r"shipped on [A-Z][a-z]+ (\d+) and delivery takes (\d+) days\.")


@dataclass(frozen=True)
class EvalItem:
    prompt: str
    reference: str
    kind: str

    def to_json(self) -> str:
        return json.dumps({"prompt": self.prompt, "reference": self.reference, "class": self.kind})


def generate(seed: int = 7, count: int = 300) -> list[EvalItem]:
    """A reproducible mix of the three classes."""
    rng = random.Random(seed)
    items: list[EvalItem] = []
    seen: set[str] = set()
    while len(items) < count:
        kind = rng.choice(["arithmetic", "arithmetic", "copy", "capital"])
        if kind == "arithmetic":
            a, b, op = rng.randint(2, 999), rng.randint(2, 999), rng.choice("+-*")
            prompt = f"What is {a} {op} {b}? Answer with the number only."
        elif kind == "copy":
            code = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(2))
            code += f"-{rng.randint(1000, 9999)}-"
            code += "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(2))
            prompt = f"Repeat the code exactly: {code}"
        else:
            country = rng.choice(sorted(CAPITALS))
            style = rng.randint(1, 50)
            prompt = f"What is the capital of {country}? Answer in one word. (q{style})"
        if prompt in seen:
            continue
        seen.add(prompt)
        found = lookup(prompt)
        assert found is not None
        items.append(found)
    return items


def lookup(prompt: str) -> EvalItem | None:
    """The eval item a prompt asks, solved by rule, or None for ordinary prompts."""
    if (question := _PASS_QUESTION.search(prompt)) is not None:
        codes = dict(_PASS_CODE.findall(prompt))
        if question.group(1) in codes:
            return EvalItem(prompt, codes[question.group(1)], "long-context")
    if (start := _CHAIN_START.search(prompt)) is not None:
        return EvalItem(prompt, str(_chain(int(start.group(2)), prompt)), "multi-step-reasoning")
    if (support := _support(prompt)) is not None:
        return EvalItem(prompt, support[1], support[0])
    if match := _ARITHMETIC.search(prompt):
        a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
        value = a + b if op == "+" else a - b if op == "-" else a * b
        return EvalItem(prompt, str(value), "arithmetic")
    if match := _COPY.search(prompt):
        return EvalItem(prompt, match.group(1), "copy")
    if (match := _CAPITAL.search(prompt)) and match.group(1).strip() in CAPITALS:
        return EvalItem(prompt, CAPITALS[match.group(1).strip()], "capital")
    return None


def _support(prompt: str) -> tuple[str, str] | None:
    """(kind, answer) of a customer-support question the prompt settles, or None."""
    cents = Decimal("0.01")
    if match := _TOTAL.search(prompt):
        return "support-amount", f"{Decimal(match[1]) + Decimal(match[2]):.2f}"
    if match := _MONTHS.search(prompt):
        return "support-amount", f"{(Decimal(match[1]) * int(match[2])).quantize(cents):.2f}"
    if match := _OVERCHARGED.search(prompt):
        return "support-amount", f"{Decimal(match[1]) - Decimal(match[2]):.2f}"
    if match := _RETURNED.search(prompt):
        return "support-amount", f"{(Decimal(match[2]) * int(match[1])).quantize(cents):.2f}"
    if match := _REFUND_DAYS.search(prompt):
        return "support-yes-no", "yes" if int(match[1]) <= int(match[2]) else "no"
    if match := _PASSWORD.search(prompt):
        return "support-yes-no", "yes" if len(match[2]) >= int(match[1]) else "no"
    if match := _FREE_SHIPPING.search(prompt):
        return "support-yes-no", "yes" if Decimal(match[2]) >= Decimal(match[1]) else "no"
    if match := _LOCKOUT.search(prompt):
        return "support-count", str(int(match[1]) - int(match[2]))
    if match := _ARRIVAL.search(prompt):
        return "support-count", str(int(match[1]) + int(match[2]))
    return None


def _chain(value: int, prompt: str) -> int:
    for given, found, away, scaled, shares in _CHAIN_STEP.findall(prompt):
        if given or found:
            value += int(given or found)
        elif away:
            value -= int(away)
        elif scaled:
            value *= 2 if scaled == "doubled" else 3
        else:
            value //= int(shares)
    return value


def wrong_answer(item: EvalItem, u: float) -> str:
    """A plausible wrong answer, chosen by a uniform so it is stable per item."""
    if item.kind == "support-amount":
        return f"{Decimal(item.reference) + (Decimal(1) if u < 0.5 else Decimal('-0.10')):.2f}"
    if item.kind == "support-yes-no":
        return "no" if item.reference == "yes" else "yes"
    if item.kind in ("arithmetic", "multi-step-reasoning", "support-count"):
        return str(int(item.reference) + (1 if u < 0.5 else -10))
    if item.kind == "long-context":
        return item.reference[:-1] + ("Z" if item.reference[-1] != "Z" else "Y")
    if item.kind == "copy":
        last = item.reference[-1]
        return item.reference[:-1] + ("Z" if last != "Z" else "Y")
    others = sorted(c for c in CAPITALS.values() if c != item.reference)
    return others[int(u * len(others)) % len(others)]


def load() -> list[EvalItem]:
    """The shipped eval set (sandbox/data/eval.jsonl)."""
    items = []
    for line in DATA_FILE.read_text(encoding="utf-8").splitlines():
        if line.strip():
            raw = json.loads(line)
            items.append(EvalItem(raw["prompt"], raw["reference"], raw["class"]))
    return items


if __name__ == "__main__":
    DATA_FILE.write_text("\n".join(item.to_json() for item in generate()) + "\n", encoding="utf-8")
