"""What a judge may use: measurements it must refuse rather than judge.

A latency or throughput that is NaN, infinite, negative or zero is a broken measurement
(a clock that went backwards, a parse that failed, a statistic CloudWatch could not
compute), not a fast or a slow request. Judging it anyway turns one bad value into a
verdict ("ratio inf" Fails, a zero Average freezes a test), so every judge asks here
first and answers Inconclusive with the reason, never Pass or Fail.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BadValues:
    """How many values of a series a judge cannot use, by kind."""

    total: int
    nan: int = 0
    infinite: int = 0
    negative: int = 0
    zero: int = 0

    @property
    def count(self) -> int:
        return self.nan + self.infinite + self.negative + self.zero

    def describe(self, what: str) -> str:
        kinds = [
            f"{n} {label}"
            for n, label in (
                (self.nan, "NaN"),
                (self.infinite, "infinite"),
                (self.negative, "negative"),
                (self.zero, "zero"),
            )
            if n
        ]
        return f"{what}: {', '.join(kinds)} of {self.total} values"


def bad_values(values: Sequence[float]) -> BadValues:
    """Count the NaN, infinite, negative and zero values (a latency or rate must be > 0)."""
    data = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(data)
    return BadValues(
        total=int(data.size),
        nan=int(np.isnan(data).sum()),
        infinite=int(np.isinf(data).sum()),
        negative=int((finite & (data < 0)).sum()),
        zero=int((data == 0).sum()),
    )


def positive_finite(value: float | None) -> bool:
    """A single statistic a judge can use: a finite number above zero."""
    return value is not None and math.isfinite(value) and value > 0


def finite_or(value: float, default: float) -> float:
    """`value` when finite, else `default`: stored state must stay valid JSON."""
    return value if math.isfinite(value) else default
