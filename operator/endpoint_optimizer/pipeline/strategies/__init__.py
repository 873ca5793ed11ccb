"""Rollout strategies behind one interface: canary, shadow, blueGreen (Flagger's switch).

The phases ask the strategy wherever the strategies differ, and nowhere else (see
`base.Strategy`). A new strategy is a module here, a row of `STRATEGIES`, a value of
`RolloutStrategy` in the api, and its sandbox behaviour.
"""

from __future__ import annotations

from endpoint_optimizer.api import RolloutStrategy
from endpoint_optimizer.pipeline.strategies.base import Strategy
from endpoint_optimizer.pipeline.strategies.blue_green import BlueGreen
from endpoint_optimizer.pipeline.strategies.canary import Canary
from endpoint_optimizer.pipeline.strategies.shadow import Shadow

STRATEGIES: dict[RolloutStrategy, Strategy] = {
    RolloutStrategy.CANARY: Canary(),
    RolloutStrategy.SHADOW: Shadow(),
    RolloutStrategy.BLUE_GREEN: BlueGreen(),
}


def of(kind: RolloutStrategy) -> Strategy:
    return STRATEGIES[kind]


__all__ = ["STRATEGIES", "Strategy", "of"]
