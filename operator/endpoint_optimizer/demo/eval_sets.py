"""The examples' eval sets, generated: `python -m endpoint_optimizer.demo.eval_sets` writes
examples/eval-sets.yaml, and a unit test checks the file equals what this module renders.

Why generated: the paired gate (evaluation/gate.py) cannot pass a one-point margin on fewer
than 361 items even when the candidate answers every item as the baseline does
(`evaluation.slices.items_to_resolve(0.01)`); a hand-written eval set of a few lines can
never pass it. The support questions are customer-support requests with one exact answer
that the prompt itself settles (a total, a refund, a yes or no against a stated policy, a
day of the month), in four classes the spot check can name: billing, refunds, account,
shipping. Amounts and counts are scored by `numeric` (the last number in the answer, so
"$90.94" and "The total is 90.94." both count); yes/no answers by `exact_match`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path

FILE = Path(__file__).resolve().parents[3] / "examples" / "eval-sets.yaml"
SUPPORT_ITEMS = 400
SUPPORT_SEED = 20
CLASSES = ("billing", "refunds", "account", "shipping")

_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August")
_PLANS = ("Basic", "Team", "Pro", "Family", "Business")
_PASSWORD_CHARS = "abcdefghjkmnpqrstuvwxyz23456789"

_CENT = Decimal("0.01")

Item = dict[str, str]


def _money(rng: random.Random, low: int, high: int) -> Decimal:
    return (Decimal(rng.randint(low * 100, high * 100)) / 100).quantize(_CENT)


def _amount(prompt: str, value: Decimal) -> tuple[str, str, str]:
    return (
        f"{prompt} Answer with the amount only, like 12.34.",
        f"{value:.2f}",
        "numeric",
    )


def _yes_no(prompt: str, yes: bool) -> tuple[str, str, str]:
    return f"{prompt} Answer yes or no.", "yes" if yes else "no", ""


def _number(prompt: str, value: int) -> tuple[str, str, str]:
    return f"{prompt} Answer with the number only.", str(value), "numeric"


def _billing(rng: random.Random, form: int) -> tuple[str, str, str]:
    if form == 0:
        subtotal, tax = _money(rng, 10, 400), _money(rng, 1, 40)
        return _amount(
            f"My invoice lists a subtotal of ${subtotal} and tax of ${tax}. What is the total "
            "I am charged?",
            subtotal + tax,
        )
    if form == 1:
        monthly, months = _money(rng, 5, 60), rng.randint(2, 12)
        plan = rng.choice(_PLANS)
        return _amount(
            f"My {plan} plan costs ${monthly} a month. How much will I pay for {months} months?",
            monthly * months,
        )
    price = _money(rng, 5, 200)
    billed = price + _money(rng, 1, 50)
    return _amount(
        f"I was billed ${billed} this month but my plan costs ${price}. How much was I "
        "overcharged?",
        (billed - price).quantize(_CENT),
    )


def _refunds(rng: random.Random, form: int) -> tuple[str, str, str]:
    if form == 0:
        policy = rng.choice((7, 14, 30, 60))
        days = rng.randint(1, 2 * policy)
        return _yes_no(
            f"Can I get a refund {days} days after purchase if the policy allows {policy} days?",
            days <= policy,
        )
    bought = rng.randint(2, 9)
    returned = rng.randint(1, bought)
    price = _money(rng, 3, 150)
    return _amount(
        f"I returned {returned} of the {bought} items I bought at ${price} each. How much "
        "should my refund be?",
        price * returned,
    )


def _account(rng: random.Random, form: int) -> tuple[str, str, str]:
    if form == 0:
        minimum = rng.randint(8, 12)
        password = "".join(rng.choice(_PASSWORD_CHARS) for _ in range(rng.randint(5, 16)))
        return _yes_no(
            f"Passwords must be at least {minimum} characters long. Is the password "
            f"{password} long enough?",
            len(password) >= minimum,
        )
    limit = rng.randint(3, 12)
    failed = rng.randint(0, limit - 1)
    return _number(
        f"My account locks after {limit} failed sign-ins in a row. I have failed {failed} "
        "times. How many more tries do I have before it locks?",
        limit - failed,
    )


def _shipping(rng: random.Random, form: int) -> tuple[str, str, str]:
    if form == 0:
        threshold = rng.choice((25, 35, 50, 75, 100))
        cart = _money(rng, threshold // 2, threshold * 2)
        return _yes_no(
            f"Shipping is free on orders of ${threshold}.00 or more. My cart totals ${cart}. "
            "Is my shipping free?",
            cart >= threshold,
        )
    month = rng.choice(_MONTHS)
    shipped = rng.randint(1, 20)
    days = rng.randint(1, 8)
    return _number(
        f"My order shipped on {month} {shipped} and delivery takes {days} days. On which day "
        f"of {month} should it arrive?",
        shipped + days,
    )


_MAKERS: dict[str, tuple[Callable[[random.Random, int], tuple[str, str, str]], int]] = {
    "billing": (_billing, 3),
    "refunds": (_refunds, 2),
    "account": (_account, 2),
    "shipping": (_shipping, 2),
}


def support_items(count: int = SUPPORT_ITEMS, seed: int = SUPPORT_SEED) -> list[Item]:
    """`count` distinct support questions, the classes in turn, each form of a class in turn."""
    rng = random.Random(seed)
    items: list[Item] = []
    seen: set[str] = set()
    while len(items) < count:
        prompt_class = CLASSES[len(items) % len(CLASSES)]
        make, forms = _MAKERS[prompt_class]
        form = (len(items) // len(CLASSES)) % forms
        prompt, reference, scorer = make(rng, form)
        while prompt in seen:
            prompt, reference, scorer = make(rng, form)
        seen.add(prompt)
        item = {"id": f"s{len(items) + 1:03d}", "class": prompt_class, "prompt": prompt}
        item["reference"] = reference
        if scorer:
            item["scorer"] = scorer
        items.append(item)
    return items


_HEADER = """\
# Eval sets and benchmark prompts the examples refer to, as ConfigMaps (JSON lines).
# Eval items (items.jsonl): prompt and reference, optional id, class (spot checks and
# per-class gates) and scorer (overrides spec.evaluation.metric). Benchmark prompts
# (prompts.jsonl): one of prompt, messages or body, optional outputTokens.
#
# GENERATED by `python -m endpoint_optimizer.demo.eval_sets` (demo/eval_sets.py): edit
# the generator, not this file. support-evals: {count} customer-support questions
# ({per_class});
# news-summaries: {news} one-sentence summaries (ROUGE-L). The paired gate needs at least
# 361 binary items to pass a one-point margin even when the candidate answers every item
# as the baseline does, and 30 items of any kind to judge at all.
"""

NEWS_ITEMS = 40
NEWS_SEED = 20
_BODIES = (
    "The city council",
    "The school board",
    "The transit authority",
    "The county library",
    "The port authority",
    "The water utility",
    "The parks department",
    "The state museum",
    "The regional hospital",
    "The university senate",
)
_DECISIONS = (
    "approved a new bike lane plan",
    "voted to extend weekday opening hours",
    "agreed to raise its fees by 5 percent",
    "postponed the vote on next year's budget",
    "approved a second site downtown",
    "cut its late evening service",
    "launched a city-wide recycling program",
    "approved the renovation of its main building",
)
_AFTER = (
    "after a two-hour debate",
    "after a public hearing",
    "after months of review",
    "after a close vote",
)
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
_BENCH_PROMPTS: list[dict[str, object]] = [
    {
        "prompt": "Summarize in one sentence: The city council approved the new bike lane plan "
        "on Tuesday after a two-hour debate; construction starts in May."
    },
    {
        "messages": [
            {
                "role": "user",
                "content": "Summarize in one sentence: The library will stay open until 9 pm on "
                "weekdays starting next month, after a vote by the board.",
            }
        ],
        "outputTokens": 60,
    },
]
_EXTRACTION: list[dict[str, object]] = [
    {
        "id": "b1",
        "class": "extraction",
        "prompt": "Extract the company name from: 'Invoice from Northwind Traders, due "
        "2026-04-01.' Answer with the name only.",
        "reference": "Northwind Traders",
    },
    {
        "id": "b2",
        "class": "extraction",
        "prompt": "Extract the due date from: 'Invoice from Northwind Traders, due 2026-04-01.' "
        "Answer in YYYY-MM-DD.",
        "reference": "2026-04-01",
    },
]


def news_items(count: int = NEWS_ITEMS, seed: int = NEWS_SEED) -> list[Item]:
    """`count` distinct one-sentence summaries of short local news (scored by ROUGE-L)."""
    rng = random.Random(seed)
    items: list[Item] = []
    seen: set[tuple[str, str]] = set()
    while len(items) < count:
        body, decision = rng.choice(_BODIES), rng.choice(_DECISIONS)
        if (body, decision) in seen:
            continue
        seen.add((body, decision))
        month = rng.choice(_MONTHS)
        prompt = (
            f"Summarize in one sentence: {body} {decision} on {rng.choice(_DAYS)} "
            f"{rng.choice(_AFTER)}; the change takes effect in {month}."
        )
        reference = f"{body} {decision}, effective in {month}."
        item = {"id": f"n{len(items) + 1:02d}", "class": "news", "prompt": prompt}
        item["reference"] = reference
        items.append(item)
    return items


def _config_map(
    name: str, namespace: str, data: Mapping[str, Sequence[Mapping[str, object]]]
) -> str:
    blocks = "".join(
        f"  {key}: |\n" + "".join(f"    {json.dumps(line)}\n" for line in lines)
        for key, lines in data.items()
    )
    head = f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n"
    return f"{head}  namespace: {namespace}\ndata:\n{blocks}"


def render() -> str:
    """The whole of examples/eval-sets.yaml."""
    support = support_items()
    counts = {c: sum(1 for item in support if item["class"] == c) for c in CLASSES}
    per_class = ", ".join(f"{n} {c}" for c, n in counts.items())
    news = news_items()
    maps = (
        _config_map("support-evals", "ml", {"items.jsonl": support}),
        _config_map(
            "news-summaries", "docs", {"prompts.jsonl": _BENCH_PROMPTS, "items.jsonl": news}
        ),
        _config_map("batch-extraction-evals", "batch", {"items.jsonl": _EXTRACTION}),
    )
    header = _HEADER.format(count=len(support), per_class=per_class, news=len(news))
    return header + "---\n".join(maps)


if __name__ == "__main__":
    FILE.write_text(render(), encoding="utf-8")
