"""Generated eval suites for the slices where low-bit schemes degrade first (no downloads).

Two suites, each deterministic for its seed and size, each item with one exact answer:

- long-context retrieval (class `long-context`): a pass code placed at a known depth
  (0 %..100 % of the text) in distractor sentences; prompt lengths spread evenly from a
  quarter of the longest to all of it, the longest set from container.maxModelLen;
- multi-step reasoning (class `multi-step-reasoning`): a chain of arithmetic steps, each
  on the previous result, with one integer answer (scored by `numeric`, GSM8K's rule).

Lengths are counted in characters at 4 a token (English text under Llama-style
tokenizers runs at 3.5..4.5), so the longest prompt stays under its token budget with
the 10 % margin that `long_context_budget` leaves.

Why 600 items a suite: the paired gate's Tango bound at one-sided 95 % needs ~360 items
to resolve a one-point margin even when every item agrees; with a share psi of items
that change between the variants it needs about 1.645^2 * psi / margin^2 more. 600 items
resolve the default margin (0.01) for psi up to ~2 % and a five-point margin for any psi
a quantized model shows (slice_power in evaluation/slices.py computes it; the report
states it).
"""

from __future__ import annotations

import hashlib
import random

from endpoint_optimizer.api.spec import (
    LONG_CONTEXT_CLASS,
    MULTI_STEP_CLASS,
    EvaluationSpec,
    LongContextSuite,
    OptimizedEndpointSpec,
    ReasoningSuite,
)
from endpoint_optimizer.evaluation.dataset import EvalItem

CHARS_PER_TOKEN = 4
DEFAULT_PROMPT_TOKENS = 4096
# Prompt framing (question and instructions) and tokenizer variance, kept out of the budget.
_MARGIN = 0.10

_SUBJECTS = (
    "The harbour",
    "A committee",
    "The old library",
    "Every spring the village",
    "The survey team",
    "A merchant ship",
    "The orchestra",
    "The northern valley",
    "A quiet laboratory",
    "The railway company",
)
_VERBS = (
    "recorded",
    "discussed",
    "repaired",
    "catalogued",
    "measured",
    "painted",
    "rebuilt",
    "inspected",
    "described",
    "moved",
)
_OBJECTS = (
    "the eastern wall",
    "a collection of maps",
    "the weather over the hills",
    "several wooden boats",
    "the price of grain",
    "a row of lanterns",
    "the river's depth",
    "an unusual clock",
    "the bridge's stones",
    "a set of letters",
)
_TAILS = (
    "before the winter.",
    "in great detail.",
    "for the second time.",
    "without much fuss.",
    "over three long weeks.",
    "while visitors watched.",
    "as the records show.",
    "after a long debate.",
    "at the request of the mayor.",
    "with borrowed tools.",
)
_CODE_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ"
_PREAMBLE = "Read the text and answer the question after it.\n\n"


def long_context_budget(spec: OptimizedEndpointSpec, suite: LongContextSuite) -> int:
    """The longest prompt, in tokens: the suite's own, or maxModelLen less answer and margin."""
    if suite.max_prompt_tokens is not None:
        return suite.max_prompt_tokens
    evaluation = spec.evaluation
    answer = evaluation.max_output_tokens if evaluation is not None else 0
    limit = spec.container.max_model_len
    if limit is None:
        return DEFAULT_PROMPT_TOKENS
    return max(256, int((limit - answer) * (1 - _MARGIN)))


def _rng(kind: str, seed: int, index: int) -> random.Random:
    digest = hashlib.sha256(f"{kind}:{seed}:{index}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _sentence(rng: random.Random) -> str:
    return (
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}"
    )


def long_context_items(suite: LongContextSuite, max_tokens: int) -> list[EvalItem]:
    """`suite.items` retrieval items, depths and lengths spread evenly over the suite."""
    items = []
    n = suite.items
    for index in range(n):
        rng = _rng(LONG_CONTEXT_CLASS, suite.seed, index)
        # Lengths from a quarter of the budget to all of it; depths cycle through 0..100 %
        # in 11 steps, so every length band meets every depth.
        share = 0.25 + 0.75 * (index / max(1, n - 1))
        depth = (index % 11) / 10
        target_chars = int(max_tokens * share * CHARS_PER_TOKEN)
        code = (
            "".join(rng.choice(_CODE_LETTERS) for _ in range(3))
            + f"-{rng.randint(1000, 9999)}-"
            + "".join(rng.choice(_CODE_LETTERS) for _ in range(2))
        )
        keeper = f"Archive {index}"
        fact = f"The pass code for {keeper} is {code}."
        question = (
            f"\n\nQuestion: What is the pass code for {keeper}? Answer with the pass code only."
        )
        budget = max(0, target_chars - len(fact) - len(question) - len(_PREAMBLE) - 80)
        filler: list[str] = []
        length = 0
        while length < budget:
            sentence = _sentence(rng)
            filler.append(sentence)
            length += len(sentence) + 1
        at = round(depth * len(filler))
        text = " ".join([*filler[:at], fact, *filler[at:]])
        prompt = _PREAMBLE + text + question
        items.append(
            EvalItem(
                id=f"long-context-{suite.seed}-{index}",
                prompt=prompt,
                reference=code,
                scorer="contains",
                prompt_class=LONG_CONTEXT_CLASS,
            )
        )
    return items


_NAMES = ("Ana", "Bo", "Chen", "Dara", "Eli", "Femi", "Gus", "Hana", "Ivo", "Jun")


def reasoning_items(suite: ReasoningSuite) -> list[EvalItem]:
    """`suite.items` chained-arithmetic word problems with one integer answer each."""
    items = []
    for index in range(suite.items):
        rng = _rng(MULTI_STEP_CLASS, suite.seed, index)
        steps = suite.min_steps + index % (suite.max_steps - suite.min_steps + 1)
        who = rng.choice(_NAMES)
        value = rng.randint(5, 60)
        lines = [f"{who} starts with {value} marbles."]
        for _ in range(steps):
            op = rng.choice(("add", "take", "double", "triple", "share"))
            if op == "add":
                k = rng.randint(2, 40)
                lines.append(f"Then {who} is given {k} more.")
                value += k
            elif op == "take" and value > 3:
                k = rng.randint(1, value - 1)
                lines.append(f"Then {who} gives away {k}.")
                value -= k
            elif op in ("double", "triple") and value < 5000:
                factor = 2 if op == "double" else 3
                lines.append(f"Then {who}'s count is {'doubled' if factor == 2 else 'tripled'}.")
                value *= factor
            else:
                # Keep every intermediate an integer: share only what divides evenly.
                parts = next((d for d in (2, 3, 4, 5) if value % d == 0 and value > d), None)
                if parts is None:
                    k = rng.randint(2, 40)
                    lines.append(f"Then {who} finds {k} more.")
                    value += k
                else:
                    lines.append(
                        f"Then {who} keeps one of {parts} equal shares and gives the rest away."
                    )
                    value //= parts
        prompt = (
            " ".join(lines)
            + f" How many marbles does {who} have at the end? Work it out step by step, then "
            "give the final number on its own line."
        )
        items.append(
            EvalItem(
                id=f"multi-step-{suite.seed}-{index}",
                prompt=prompt,
                reference=str(value),
                scorer="numeric",
                prompt_class=MULTI_STEP_CLASS,
            )
        )
    return items


def generated_items(spec: OptimizedEndpointSpec) -> list[EvalItem]:
    """The spec's generated suites, in a fixed order (long context, then reasoning)."""
    evaluation: EvaluationSpec | None = spec.evaluation
    if evaluation is None or evaluation.generated is None:
        return []
    items: list[EvalItem] = []
    suites = evaluation.generated
    if suites.long_context is not None:
        budget = long_context_budget(spec, suites.long_context)
        items += long_context_items(suites.long_context, budget)
    if suites.multi_step_reasoning is not None:
        items += reasoning_items(suites.multi_step_reasoning)
    return items
