"""The real engine's eval set and workloads, written by this project (licence-clean).

Prompt classes are ones SmolLM2-135M-Instruct can do, so a quantization that hurts
shows up as a drop: capitals (about 75 % right in fp32), copying a number from the
prompt (about 93 %), copying an address, and extracting a name. Arithmetic is left
out: the model is at the floor there (3/15), so it would hide deltas.

The committed files under data/ are this module's output; a test regenerates them
and fails if they differ.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).parent / "data"

CAPITALS: dict[str, str] = {
    "France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Egypt": "Cairo",
    "Germany": "Berlin", "Spain": "Madrid", "Canada": "Ottawa", "Russia": "Moscow",
    "China": "Beijing", "India": "New Delhi", "Brazil": "Brasilia", "Mexico": "Mexico City",
    "Argentina": "Buenos Aires", "Kenya": "Nairobi", "Greece": "Athens", "Portugal": "Lisbon",
    "Norway": "Oslo", "Sweden": "Stockholm", "Finland": "Helsinki", "Denmark": "Copenhagen",
    "Poland": "Warsaw", "Austria": "Vienna", "Ireland": "Dublin", "Belgium": "Brussels",
    "Netherlands": "Amsterdam", "Hungary": "Budapest", "Thailand": "Bangkok",
    "South Korea": "Seoul", "Indonesia": "Jakarta", "Peru": "Lima", "Chile": "Santiago",
    "Colombia": "Bogota", "Cuba": "Havana", "Turkey": "Ankara", "Iran": "Tehran",
    "Iraq": "Baghdad", "Saudi Arabia": "Riyadh", "Vietnam": "Hanoi", "Philippines": "Manila",
    "Ukraine": "Kyiv", "Czech Republic": "Prague", "Romania": "Bucharest",
    "Bulgaria": "Sofia", "Serbia": "Belgrade", "Croatia": "Zagreb", "Morocco": "Rabat",
    "Nigeria": "Abuja", "Ethiopia": "Addis Ababa", "Ghana": "Accra", "Afghanistan": "Kabul",
    "Pakistan": "Islamabad", "Bangladesh": "Dhaka", "Nepal": "Kathmandu",
    "Malaysia": "Kuala Lumpur", "Singapore": "Singapore", "New Zealand": "Wellington",
    "Australia": "Canberra", "Iceland": "Reykjavik", "Scotland": "Edinburgh",
    "Wales": "Cardiff",
}  # fmt: skip

_FIRST = ["Maria", "James", "Aiko", "Omar", "Lena", "Carlos", "Priya", "Tom", "Nadia", "Ivan"]
_LAST = ["Lopez", "Smith", "Tanaka", "Haddad", "Fischer", "Silva", "Patel", "Brown", "Novak"]
# More names for extraction_items only (eval_items draws from the two lists above).
_MORE_FIRST = ["Anna", "David", "Sofia", "Kenji", "Fatima", "Lucas", "Mei", "Peter", "Rosa", "Sam"]
_MORE_LAST = ["Garcia", "Johnson", "Kim", "Rossi", "Dubois", "Okafor", "Larsen", "Costa", "Weber"]
_TOPICS = ["the invoice", "a late delivery", "the new contract", "a refund"]
_STREETS = ["Maple Grove Avenue", "Harbor Street", "Elm Road", "Sunset Boulevard", "Oak Lane"]
_CITIES = [("Springfield", "IL"), ("Portland", "OR"), ("Austin", "TX"), ("Denver", "CO")]
_NUMBER_FRAMES = [
    ("Your order number is {n} and it ships on Monday.", "What is the order number?"),
    ("The meeting room code is {n}; bring your badge.", "What is the meeting room code?"),
    ("Invoice {n} was paid in full yesterday.", "What is the invoice number?"),
    ("Flight {n} departs from gate 12 at noon.", "What is the flight number?"),
    ("Please call extension {n} for support.", "What is the extension?"),
]
_CREATIVE = [
    "Write a short poem about a lighthouse keeper who befriends a whale.",
    "Tell a bedtime story about a dragon who is afraid of the dark.",
    "Write a letter from a cat to its owner about breakfast being late.",
    "Describe a city on Mars a hundred years from now.",
    "Invent a new holiday and explain how people celebrate it.",
    "Write a song chorus about rainy Sunday mornings.",
]


def eval_items(seed: int = 7, per_class: int = 60) -> list[dict[str, str]]:
    """Items of four classes, `per_class` each, deterministic for a seed."""
    rng = random.Random(seed)
    items: list[dict[str, str]] = []
    countries = sorted(CAPITALS)
    for index in range(per_class):
        country = countries[index % len(countries)]
        items.append(
            {
                "prompt": f"What is the capital of {country}? Answer with the city name only.",
                "reference": CAPITALS[country],
                "scorer": "contains",
                "class": "capital",
            }
        )
    for _ in range(per_class):
        number = str(rng.randint(1000, 99999))
        statement, question = rng.choice(_NUMBER_FRAMES)
        items.append(
            {
                "prompt": f"{statement.format(n=number)} {question} Answer with the number only.",
                "reference": number,
                "scorer": "numeric",
                "class": "copy_number",
            }
        )
    for _ in range(per_class):
        street = f"{rng.randint(10, 9999)} {rng.choice(_STREETS)}"
        city, state = rng.choice(_CITIES)
        name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
        items.append(
            {
                "prompt": (
                    f"Extract the street address from this note and repeat it exactly: "
                    f"'Please ship the parcel for {name} to {street}, {city}, {state} "
                    f"before Friday.'"
                ),
                "reference": street,
                "scorer": "contains",
                "class": "copy_address",
            }
        )
    for _ in range(per_class):
        name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
        items.append(_extraction(name, rng.choice(_TOPICS)))
    return items


def _extraction(name: str, topic: str) -> dict[str, str]:
    return {
        "prompt": (
            f"Read the note and answer with the caller's full name only: "
            f"'{name} called this morning about {topic} and asked for a call back.'"
        ),
        "reference": name,
        "scorer": "contains",
        "class": "extract_name",
    }


def extraction_items(count: int, seed: int = 13) -> list[dict[str, str]]:
    """`count` distinct name-extraction items (class extract_name) in a seeded order: a
    team's own eval set for an extraction task, hundreds of notes, none repeated."""
    combos = [
        (f"{first} {last}", topic)
        for first in (*_FIRST, *_MORE_FIRST)
        for last in (*_LAST, *_MORE_LAST)
        for topic in _TOPICS
    ]
    if count > len(combos):
        raise ValueError(f"at most {len(combos)} distinct extraction items, not {count}")
    random.Random(seed).shuffle(combos)
    return [_extraction(name, topic) for name, topic in combos[:count]]


# Where the synthetic engine answers these items instead (a technique the real model
# cannot express, see sandbox_engine.py): the fp32 model's rate per class. Capitals and
# copying a number as measured (reference/real-model.md §5, the module docstring);
# the address and name classes are copy tasks of the same kind, set alike.
FP32_ACCURACY: dict[str, float] = {
    "capital": 0.75,
    "copy_number": 0.93,
    "copy_address": 0.9,
    "extract_name": 0.9,
}

_CAPITAL = re.compile(r"What is the capital of ([A-Za-z ]+)\? Answer with the city name only\.")
_NUMBER = re.compile(r"\b(\d{4,5})\b.* Answer with the number only\.")
_ADDRESS = re.compile(r"Extract the street address .* to (\d+ [A-Za-z ]+), ")
_NAME = re.compile(r"full name only: '([A-Z][a-z]+ [A-Z][a-z]+) called")


@dataclass(frozen=True)
class EvalAnswerKey:
    reference: str
    kind: str


def lookup(prompt: str) -> EvalAnswerKey | None:
    """The reference answer of one of this eval set's prompts, read from the prompt alone."""
    if (match := _CAPITAL.search(prompt)) and match.group(1) in CAPITALS:
        return EvalAnswerKey(CAPITALS[match.group(1)], "capital")
    if match := _NAME.search(prompt):
        return EvalAnswerKey(match.group(1), "extract_name")
    if match := _ADDRESS.search(prompt):
        return EvalAnswerKey(match.group(1), "copy_address")
    if match := _NUMBER.search(prompt):
        return EvalAnswerKey(match.group(1), "copy_number")
    return None


def wrong_answer(key: EvalAnswerKey, u: float) -> str:
    """A plausible answer that its scorer marks wrong, stable for a uniform `u`."""
    if key.kind == "capital":
        others = sorted(c for c in CAPITALS.values() if c != key.reference)
        return others[int(u * len(others)) % len(others)]
    if key.kind == "copy_number":
        return str(int(key.reference) + 1 + int(u * 9))
    if key.kind == "copy_address":
        number, _, street = key.reference.partition(" ")
        return f"{int(number) + 1} {street}"
    first, _, last = key.reference.partition(" ")
    others = [name for name in _FIRST if name != first]
    return f"{others[int(u * len(others)) % len(others)]} {last}"


def workload(kind: str, count: int = 32, seed: int = 11) -> list[dict[str, str]]:
    """Benchmark prompts: `extract` (output copies the prompt) or `creative` (it does not)."""
    rng = random.Random(seed)
    if kind == "creative":
        return [{"prompt": _CREATIVE[i % len(_CREATIVE)]} for i in range(count)]
    if kind != "extract":
        raise ValueError(f"workload kind {kind!r}: use 'extract' or 'creative'")
    prompts = []
    for _ in range(count):
        street = f"{rng.randint(10, 9999)} {rng.choice(_STREETS)}"
        city, state = rng.choice(_CITIES)
        name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
        prompts.append(
            {
                "prompt": (
                    f"Repeat this delivery note exactly, word for word: 'Deliver to {name}, "
                    f"{street}, {city}, {state}. Leave the parcel with the front desk and "
                    f"ask for a signature from {name}.'"
                )
            }
        )
    return prompts


def write_data(folder: Path = DATA) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, rows in (
        ("evalset.jsonl", eval_items()),
        ("workload-extract.jsonl", workload("extract")),
        ("workload-creative.jsonl", workload("creative")),
    ):
        path = folder / name
        path.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_data():
        print(path)
