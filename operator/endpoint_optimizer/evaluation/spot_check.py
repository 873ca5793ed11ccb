"""The spot check: paired samples from named prompt classes for a person to read.

Selection is seeded and independent of numpy: items are ordered by
sha256(seed, id), so the same dataset, classes and seed pick the same samples on
every operator wake-up. The controller writes the result to a ConfigMap
(`configmap_data`, controller/configmaps.py) that status.spotCheck names; the rollout
report shows it; promotion waits in AwaitingApproval for the approve annotation.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from pydantic import Field

from endpoint_optimizer.api.camel import CamelModel
from endpoint_optimizer.evaluation.dataset import EvalItem

CONFIGMAP_KEY = "spot-check.json"


class SpotSample(CamelModel):
    item_id: str
    prompt_class: str
    prompt: str
    baseline_answer: str
    candidate_answer: str
    reference: str | None = None


class SpotCheck(CamelModel):
    """The paired samples a person reads before promotion."""

    classes: list[str]
    seed: int
    requested: int
    created_at: datetime
    samples: list[SpotSample] = Field(default_factory=list)

    def configmap_data(self) -> dict[str, str]:
        return {CONFIGMAP_KEY: json.dumps(self.dump(), indent=2, sort_keys=True)}


UNCLASSIFIED = "unclassified"


def spot_samples(
    items: Sequence[EvalItem],
    baseline_answers: Sequence[str],
    candidate_answers: Sequence[str],
) -> list[SpotSample]:
    """Pair each eval item with both variants' answers; items without a class are
    `unclassified`."""
    if not len(items) == len(baseline_answers) == len(candidate_answers):
        raise ValueError(
            f"spot check: {len(items)} items, {len(baseline_answers)} baseline and "
            f"{len(candidate_answers)} candidate answers; answer every item on both variants"
        )
    return [
        SpotSample(
            item_id=item.id,
            prompt_class=item.prompt_class or UNCLASSIFIED,
            prompt=item.prompt,
            baseline_answer=base,
            candidate_answer=cand,
            reference=item.reference,
        )
        for item, base, cand in zip(items, baseline_answers, candidate_answers, strict=True)
    ]


def hardest_classes(
    items: Sequence[EvalItem], baseline_scores: Sequence[float], count: int = 2
) -> list[str]:
    """The `count` prompt classes with the lowest mean baseline score (ties: by name)."""
    totals: dict[str, list[float]] = defaultdict(list)
    for item, value in zip(items, baseline_scores, strict=True):
        totals[item.prompt_class or UNCLASSIFIED].append(value)
    ranked = sorted(totals, key=lambda c: (sum(totals[c]) / len(totals[c]), c))
    return ranked[:count]


def _order_key(seed: int, item_id: str) -> str:
    return hashlib.sha256(f"{seed}:{item_id}".encode()).hexdigest()


def pick_spot_check(
    samples: Sequence[SpotSample],
    classes: Sequence[str],
    count: int,
    seed: int,
    now: datetime,
) -> SpotCheck:
    """Up to `count` samples, shared as evenly as the named classes allow.

    A class with too few items gives its unused share to the others.
    """
    if count < 0:
        raise ValueError("spotCheck.samples: must be >= 0")
    wanted = list(dict.fromkeys(classes))
    pools = {
        name: sorted(
            (s for s in samples if s.prompt_class == name),
            key=lambda s: _order_key(seed, s.item_id),
        )
        for name in wanted
    }
    taken: dict[str, int] = dict.fromkeys(wanted, 0)
    chosen: list[SpotSample] = []
    # Round-robin over classes keeps shares even and fills from classes that still have items.
    while len(chosen) < count:
        progressed = False
        for name in wanted:
            if len(chosen) >= count:
                break
            if taken[name] < len(pools[name]):
                chosen.append(pools[name][taken[name]])
                taken[name] += 1
                progressed = True
        if not progressed:
            break
    return SpotCheck(classes=wanted, seed=seed, requested=count, created_at=now, samples=chosen)
