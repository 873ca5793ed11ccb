"""Where speculation stops paying: the concurrency cut-off from a per-level comparison.

Speculation buys latency while decode is memory-bound; as the batch grows the verify
step turns compute-bound and the drafts cost more than they save (vLLM's dynamic
speculative decoding docs; h200-calibration.md's c_verify bracket). The benchmark judge
already gives, per concurrency level, a one-sided interval of candidate/baseline for the
objective's statistic at its stated confidence. A level is Wins when the whole interval is
on the candidate's side of 1, Loses when it is on the baseline's side, Undecided otherwise
(or when the level was not judged). The cut-off is the highest Wins level, when every
level above it that is decided Loses and none below it Loses; none when speculation wins
(or is undecided) everywhere, never wins, or the levels disagree (a Wins above a Loses):
a single threshold would then be a guess, not a measurement. Undecided levels between the
last Wins and the first Loses fall above the cut-off: speculation was only shown to pay
up to the last Wins.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from endpoint_optimizer.api.checks import Check
from endpoint_optimizer.api.spec import ConcurrencyCutoff, SpeculativeMethod
from endpoint_optimizer.api.status import CutoffLevel, CutoffOutcome


@dataclass(frozen=True)
class Cutoff:
    concurrency: int | None
    levels: tuple[CutoffLevel, ...]
    reason: str


def level_outcomes(
    checks: Iterable[Check], statistic: str, lower_is_better: bool = True
) -> tuple[CutoffLevel, ...]:
    """Each level's outcome from the judge's `<statistic>@c<N>` checks (intervals as ratios)."""
    levels: dict[int, CutoffLevel] = {}
    prefix = f"{statistic}@c"
    for check in checks:
        if not check.name.startswith(prefix):
            continue
        try:
            concurrency = int(check.name[len(prefix) :])
        except ValueError:
            continue
        low, high = check.interval_low, check.interval_high
        outcome = CutoffOutcome.UNDECIDED
        if low is not None and high is not None and math.isfinite(low) and math.isfinite(high):
            better, worse = (high < 1.0, low > 1.0) if lower_is_better else (low > 1.0, high < 1.0)
            if better:
                outcome = CutoffOutcome.WINS
            elif worse:
                outcome = CutoffOutcome.LOSES
        levels[concurrency] = CutoffLevel(
            concurrency=concurrency, outcome=outcome, ratio_low=low, ratio_high=high
        )
    return tuple(levels[c] for c in sorted(levels))


def find_cutoff(levels: Iterable[CutoffLevel]) -> Cutoff:
    """The highest concurrency at or below which speculation wins and above which it loses."""
    ordered = tuple(sorted(levels, key=lambda level: level.concurrency))
    wins = [lv.concurrency for lv in ordered if lv.outcome is CutoffOutcome.WINS]
    losses = [lv.concurrency for lv in ordered if lv.outcome is CutoffOutcome.LOSES]
    if not ordered:
        return Cutoff(None, ordered, "no level was judged")
    if not losses:
        said = "wins at every level" if len(wins) == len(ordered) else "never judged losing"
        return Cutoff(None, ordered, f"speculation {said}: no cut-off")
    if not wins:
        return Cutoff(None, ordered, "speculation wins at no level: no cut-off to keep it for")
    if max(wins) > min(losses):
        return Cutoff(
            None,
            ordered,
            f"the levels disagree: speculation wins at c{max(wins)} above a loss at "
            f"c{min(losses)}; no single cut-off describes that",
        )
    cutoff = max(wins)
    return Cutoff(
        cutoff,
        ordered,
        f"speculation wins up to c{cutoff} and loses from c{min(losses)} "
        "(the judge's one-sided intervals of candidate/baseline)",
    )


def per_instance(concurrency: int, instance_count: int) -> int:
    """The running batch one instance sees at `concurrency` (SageMaker spreads requests)."""
    return max(1, math.ceil(concurrency / max(1, instance_count)))


def objective_statistic(latency: bool) -> str:
    """The check label prefix that "winning" is judged on.

    Latency: time per output token at p50. The switch changes decode steps only (a step
    that drafts nothing is a plain decode step; prefill and queueing are the same either
    way), so TPOT is the statistic it acts on; e2e mixes in the prefill queue, which at
    high concurrency dilutes a decode loss until the judge cannot see it. Throughput: the
    mean output tokens per second, as the objective judges it.
    """
    return "tpot_p50" if latency else "throughput_mean"


def switch_note(
    method: SpeculativeMethod, policy: ConcurrencyCutoff, batch_size: int | None
) -> str:
    """What the serving container is told, in words (status and the report)."""
    if batch_size is None:
        return "nothing: no cut-off"
    if method is not SpeculativeMethod.NGRAM:
        return (
            f"nothing: {method.value} is served through LMI options "
            "(OPTION_SPECULATIVE_DRAFT_MODEL/LENGTH, or EAGLE heads in the job's weights) "
            "that carry no batch-size switch the operator sets; recorded only"
        )
    if policy is ConcurrencyCutoff.RECORD:
        return (
            "nothing (concurrencyCutoff: record): with apply, OPTION_SPECULATIVE_CONFIG would "
            f"carry num_speculative_tokens_per_batch_size, no drafts above {batch_size} "
            "running requests per instance"
        )
    return (
        "OPTION_SPECULATIVE_CONFIG num_speculative_tokens_per_batch_size: no drafts above "
        f"{batch_size} running requests per instance (vLLM 0.25 or later)"
    )
