"""The eval set's A/A noise: the baseline asked some items twice, judged like a candidate.

Greedy decoding on a batching server is not bit-exact: the batch an answer shares changes
the kernels' reduction order, and a near-tie between two tokens can flip. An identical
model then scores some items differently on a second asking, and a margin of one point
means little if asking twice already moves that much. So when the baseline is measured,
`repeat_indexes` picks up to evaluation.noiseItems items (seeded, the same every wake-up of
a generation) that it answers a second time, after the whole set, with the same request;
`measure` compares the two askings:

- discordance: items that scored differently, with an exact one-sided upper bound of its
  rate (Clopper-Pearson), since zero discordant items out of 200 still allows 1.5 %;
- the A/A difference mean(second - first) bounded as the eval gate bounds a candidate
  (Tango for binary scores, paired bootstrap otherwise);
- the unchanged bound: the lower bound the eval gate would find over the whole eval set for
  a candidate that differs from the baseline by this noise alone (the observed discordance
  rate, split evenly both ways). Below -maxAbsoluteDrop the margin is inside the noise.

Cost: one more request per re-asked item on the baseline, once per generation (200 by
default: half again the baseline's eval of a 400-item set, an eighth of a 1,600-item one).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from datetime import datetime

from endpoint_optimizer.api.status import EvalNoise
from endpoint_optimizer.evaluation.dataset import EvalItem
from endpoint_optimizer.evaluation.gate import paired_difference, tango_bound
from endpoint_optimizer.evaluation.scorers import BINARY_SCORERS


def repeat_indexes(items: Sequence[EvalItem], count: int, seed: int) -> list[int]:
    """Which items (indexes, ascending) are asked a second time: a seeded sample of `count`."""
    if count <= 0:
        return []
    order = sorted(
        range(len(items)),
        key=lambda i: hashlib.sha256(f"{seed}:{i}:{items[i].id}".encode()).hexdigest(),
    )
    return sorted(order[:count])


def binomial_upper(successes: int, trials: int, confidence: float) -> float:
    """Exact one-sided upper bound of a binomial rate (Clopper-Pearson), by bisection."""
    if trials <= 0:
        return 1.0
    if successes >= trials:
        return 1.0
    alpha = 1.0 - confidence

    def cdf(p: float) -> float:
        if p <= 0.0:
            return 1.0
        if p >= 1.0:
            return 0.0
        log_p, log_q = math.log(p), math.log1p(-p)
        return sum(
            math.exp(
                math.lgamma(trials + 1)
                - math.lgamma(k + 1)
                - math.lgamma(trials - k + 1)
                + k * log_p
                + (trials - k) * log_q
            )
            for k in range(successes + 1)
        )

    low, high = successes / trials, 1.0
    for _ in range(60):
        mid = (low + high) / 2.0
        if cdf(mid) > alpha:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0


def _binary(items: Sequence[EvalItem], metric: str, *scores: Sequence[float]) -> bool:
    scorers = {item.scorer or metric for item in items}
    return scorers <= BINARY_SCORERS and all(x in (0.0, 1.0) for s in scores for x in s)


def measure(
    items: Sequence[EvalItem],
    first_answers: Sequence[str],
    second_answers: Sequence[str],
    first_scores: Sequence[float],
    second_scores: Sequence[float],
    metric: str,
    eval_items: int,
    confidence: float,
    now: datetime,
    seed: int = 0,
) -> EvalNoise:
    """The A/A noise of the items asked twice (each list in the same item order)."""
    n = len(items)
    if not n == len(first_answers) == len(second_answers) == len(first_scores):
        raise ValueError("A/A noise: answer and score every repeated item twice")
    if len(second_scores) != n:
        raise ValueError("A/A noise: answer and score every repeated item twice")
    changed = sum(1 for a, b in zip(first_answers, second_answers, strict=True) if a != b)
    discordant = sum(
        1 for a, b in zip(first_scores, second_scores, strict=True) if not math.isclose(a, b)
    )
    if n == 0:
        return EvalNoise(eval_items=eval_items, confidence=confidence, measured_at=now)
    binary = _binary(items, metric, first_scores, second_scores)
    result = paired_difference(first_scores, second_scores, binary, confidence, seed=seed)
    if binary:
        # The observed rate over the whole set, split evenly: what an unchanged model shows.
        each_way = round(discordant / n * eval_items / 2.0)
        unchanged = tango_bound(each_way, each_way, eval_items, confidence, lower=True)
    else:
        # A bootstrap bound's half-width shrinks with the square root of the items.
        unchanged = -(result.difference - result.low) * math.sqrt(n / max(eval_items, 1))
    return EvalNoise(
        items=n,
        eval_items=eval_items,
        changed_answers=changed,
        discordant=discordant,
        discordance_high=round(binomial_upper(discordant, n, confidence), 6),
        difference=round(result.difference, 6),
        interval_low=round(result.low, 6),
        interval_high=round(result.high, 6),
        unchanged_bound=round(unchanged, 6),
        confidence=confidence,
        measured_at=now,
    )


def note(noise: EvalNoise, margin: float) -> str:
    """One clause for the eval check's reason and the report: the noise beside the margin."""
    if noise.items == 0:
        return "A/A noise not measured (evaluation.noiseItems: 0)"
    high = 100 * (noise.discordance_high or 0.0)
    text = (
        f"A/A noise (baseline asked {noise.items} items twice): {noise.discordant} scored "
        f"differently (rate at most {high:.1f} %)"
    )
    if noise.difference is not None and noise.interval_low is not None:
        text += (
            f", A/A {100 * noise.difference:+.2f} points (CI {100 * noise.interval_low:+.2f} "
            f"to {100 * (noise.interval_high or 0.0):+.2f})"
        )
    if noise.unchanged_bound is not None:
        inside = noise.unchanged_bound < -margin
        text += (
            f"; an unchanged candidate would bound at {100 * noise.unchanged_bound:+.2f} "
            f"points over {noise.eval_items} items against the margin -{100 * margin:.1f}"
            + (": the margin is inside the noise, add items" if inside else "")
        )
    return text
