"""Per-slice non-inferiority: each item class judged on its own, so none is averaged away.

The overall eval gate can pass while one class collapses (AWQ 85.6 -> 69.2 on a reasoning
set where the average moved a point, llm-compressor #2522). Each class with at least
`slices.minItems` items, and every must-pass class whatever its size, gets its own paired
check, `eval@<class>`, with the same rule as the overall gate (Tango score interval for
binary scorers, paired bootstrap otherwise) and the same margin (maxAbsoluteDrop).

Multiplicity, stated: with k judged slices,
- Pass on a slice needs its one-sided lower bound at the spec's confidence 1 - alpha to
  clear -margin. Promotion needs every slice to pass, an intersection-union test (Berger
  1982): a candidate worse than the margin on any one slice passes with probability at
  most alpha, without any correction.
- Fail on a slice needs its one-sided upper bound at confidence 1 - alpha/k below -margin
  (Bonferroni over the k slices): a candidate within the margin on every slice is failed
  on some slice with probability at most alpha.

Must-pass slices are checks of kind `eval` named `eval@<class>`: Inconclusive (or no items
at all) holds like any check under onNoData: pause and rolls back under onNoData: fail; under
onNoData: pass it still holds for a person (pipeline/verdicts.py): a must-pass class is the
quality that cannot be averaged away, and a pass by default would skip it without a word.
Turning a class off is explicit (`evaluation.slices.mustPass`, or an `evaluation.waiver`);
letting one undecided rollout through is the approve lever. The other slices are kind
`evalSlice`: their Fail rolls back, their
Inconclusive is shown but does not hold, since the overall gate already judged those
items together. The default must-pass slices, for 4-bit weights or 8-bit activations,
are long-context and multi-step reasoning, where low-bit schemes degrade first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.api.spec import (
    LONG_CONTEXT_CLASS,
    MULTI_STEP_CLASS,
    CompressorAlgorithm,
    OptimizedEndpointSpec,
    QuantizationScheme,
    QuantizationVia,
    WeightActivation,
)
from endpoint_optimizer.evaluation.dataset import EvalItem
from endpoint_optimizer.evaluation.gate import paired_difference, tango_bound, unusable_scores
from endpoint_optimizer.evaluation.scorers import BINARY_SCORERS

LOW_BIT_MUST_PASS = (LONG_CONTEXT_CLASS, MULTI_STEP_CLASS)
_LOW_BIT_SCHEMES = frozenset(
    {
        QuantizationScheme.AWQ,
        QuantizationScheme.GPTQ,
        QuantizationScheme.FP8,
        QuantizationScheme.INT8,
        QuantizationScheme.SMOOTHQUANT,
    }
)


# Every slice check is named this plus its class: `eval@long-context`.
SLICE_PREFIX = "eval@"


def low_bit(spec: OptimizedEndpointSpec) -> bool:
    """4-bit weights, 8-bit activations or a quantized KV cache: the schemes whose
    failures hide in averages (a quantized cache loses what attention reaches far back)."""
    if spec.container.kv_cache_dtype is not None:
        return True
    q = spec.optimizations.quantization
    if q is None:
        return False
    if q.via is QuantizationVia.OPTIMIZATION_JOB:
        return q.scheme in _LOW_BIT_SCHEMES
    if q.algorithm is CompressorAlgorithm.SMOOTHQUANT:
        return True
    return q.weight_activation in (WeightActivation.W4A16, WeightActivation.W8A8)


def must_pass(spec: OptimizedEndpointSpec) -> list[str]:
    """The classes that must be shown non-inferior on their own."""
    evaluation = spec.evaluation
    if evaluation is None or evaluation.waived:
        return []
    if evaluation.slices.must_pass is not None:
        return list(dict.fromkeys(evaluation.slices.must_pass))
    return list(LOW_BIT_MUST_PASS) if low_bit(spec) else []


@dataclass(frozen=True)
class SlicePolicy:
    metric: str
    margin: float
    confidence: float
    min_items: int
    must_pass: tuple[str, ...]
    seed: int = 0


def _binary(items: Sequence[EvalItem], metric: str, *scores: Sequence[float]) -> bool:
    scorers = {item.scorer or metric for item in items}
    return scorers <= BINARY_SCORERS and all(x in (0.0, 1.0) for s in scores for x in s)


def slice_checks(
    items: Sequence[EvalItem],
    baseline_scores: Sequence[float],
    candidate_scores: Sequence[float],
    policy: SlicePolicy,
) -> list[Check]:
    """One check per judged class, must-pass classes first, then by name."""
    by_class: dict[str, list[int]] = {}
    for index, item in enumerate(items):
        if item.prompt_class:
            by_class.setdefault(item.prompt_class, []).append(index)
    judged = [c for c in by_class if len(by_class[c]) >= policy.min_items]
    names = [*policy.must_pass, *sorted(c for c in judged if c not in policy.must_pass)]
    k = max(1, len(names))
    checks = []
    for name in names:
        indexes = by_class.get(name, [])
        base = [baseline_scores[i] for i in indexes]
        cand = [candidate_scores[i] for i in indexes]
        checks.append(_slice_check(name, [items[i] for i in indexes], base, cand, policy, k))
    return checks


def _slice_check(
    name: str,
    items: Sequence[EvalItem],
    base: Sequence[float],
    cand: Sequence[float],
    policy: SlicePolicy,
    k: int,
) -> Check:
    required = name in policy.must_pass
    kind = CheckKind.EVAL if required else CheckKind.EVAL_SLICE
    alpha = 1.0 - policy.confidence
    binary = _binary(items, policy.metric, base, cand)
    method = "Tango score interval" if binary else "paired bootstrap"
    rule = (
        f"class {name}{' (must pass)' if required else ''}: pass when the one-sided "
        f"{100 * policy.confidence:.3g} % lower bound clears -{100 * policy.margin:.1f} points "
        f"(all slices must pass: intersection-union, no correction); fail when the "
        f"{100 * (1 - alpha / k):.4g} % upper bound is below it (Bonferroni over {k} "
        f"slices); {method}"
    )
    check_name = f"{SLICE_PREFIX}{name}"
    n = len(base)
    empty = Check(
        name=check_name,
        kind=kind,
        verdict=Verdict.INCONCLUSIVE,
        threshold=-policy.margin,
        unit="score",
        threshold_unit="score difference",
        samples=n,
        rule=rule,
    )
    if n == 0:
        return empty.model_copy(
            update={
                "reason": f"{check_name}: no items of class {name} (a must-pass class); add "
                "items of that class to evaluation.dataset, turn on its evaluation.generated "
                "suite, or name other classes in evaluation.slices.mustPass"
            }
        )
    if (refused := unusable_scores(base, cand)) is not None:
        return empty.model_copy(update={"reason": f"{check_name}: {refused}"})
    lower = paired_difference(base, cand, binary, policy.confidence, seed=policy.seed)
    upper = paired_difference(base, cand, binary, 1.0 - alpha / k, seed=policy.seed)
    ci = (
        f"{100 * lower.difference:+.2f} points (lower bound {100 * lower.low:+.2f}, "
        f"upper {100 * upper.high:+.2f}) over {n} items"
    )
    if upper.high < -policy.margin:
        verdict = Verdict.FAIL
        reason = f"class {name} dropped more than {100 * policy.margin:.1f} points: {ci}"
    elif lower.low >= -policy.margin:
        verdict = Verdict.PASS
        reason = f"class {name} within {100 * policy.margin:.1f} points of baseline: {ci}"
    else:
        verdict = Verdict.INCONCLUSIVE
        # A must-pass class holds under onNoData pause or pass, rolls back under fail.
        held = "must pass: holds the rollout" if required else "shown, not holding"
        reason = (
            f"class {name} undecided ({held}): {ci} straddles -{100 * policy.margin:.1f} points"
        )
    return empty.model_copy(
        update={
            "verdict": verdict,
            "baseline": lower.baseline,
            "candidate": lower.candidate,
            "interval_low": lower.low,
            "interval_high": upper.high,
            "p_value": lower.p_value,
            "reason": reason,
        }
    )


def is_slice(check: Check) -> bool:
    """A slice's check, must-pass or not (named `eval@<class>`)."""
    return check.name.startswith(SLICE_PREFIX)


def is_must_pass(check: Check) -> bool:
    """A must-pass slice's check (kind `eval`, named `eval@<class>`)."""
    return check.kind is CheckKind.EVAL and is_slice(check)


def slice_power(
    items: int,
    baseline_accuracy: float,
    drop: float,
    changed: float,
    margin: float = 0.01,
    confidence: float = 0.95,
    slices: int = 2,
    trials: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """(P(Pass), P(Fail)) of one slice's gate, by simulation of paired binary items.

    `changed`: the share of items whose correctness the candidate redraws (the discordance
    source); `drop`: the true mean drop. Each redrawn item is correct with probability
    baseline_accuracy - drop/changed, so the mean moves by `drop`.
    """
    rng = np.random.default_rng(seed)
    alpha = 1.0 - confidence
    p_new = min(1.0, max(0.0, baseline_accuracy - drop / changed)) if changed > 0 else 0.0
    passed = failed = 0
    for _ in range(trials):
        base = rng.random(items) < baseline_accuracy
        redraw = rng.random(items) < changed
        cand = np.where(redraw, rng.random(items) < p_new, base)
        b = int((base & ~cand).sum())
        c = int((~base & cand).sum())
        if tango_bound(b, c, items, confidence, lower=True) >= -margin:
            passed += 1
        elif tango_bound(b, c, items, 1 - alpha / slices, lower=False) < -margin:
            failed += 1
    return passed / trials, failed / trials


def items_to_resolve(margin: float, confidence: float = 0.95) -> int:
    """Fewest items at which a candidate that agrees on every item passes the margin."""
    low, high = 1, 1_000_000
    while low < high:
        mid = (low + high) // 2
        if tango_bound(0, 0, mid, confidence, lower=True) >= -margin:
            high = mid
        else:
            low = mid + 1
    return low
