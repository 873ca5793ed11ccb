"""Live speculative acceptance per variant per interval, and its check against the floor.

The rate is accepted / drafted tokens summed over the interval's log lines (counters, never
an average of the printed ratios). Its bounds cannot treat tokens as independent draws:

- within one speculative step the target accepts a PREFIX of the draft, so a rejection at
  position j rejects every later position: the k tokens of a step move together. At worst
  (perfect correlation) a step is one draw, so the Wilson interval is taken over drafts
  (drafted / k steps), not tokens: a design effect of k;
- between steps, acceptance depends on the request (n-gram lookup pays on prompts the
  answer copies from) and on the traffic mix of the minute, so the lines themselves vary
  more than any binomial says. With three lines or more, a cluster-robust (ratio estimator)
  interval over lines is computed as well, and the wider of the two is kept.

The check fails only when the interval's upper bound is below the floor (confidently
below); too few drafted tokens give no verdict. Each interval is a fresh sample, so one
interval's false failure has probability at most alpha, and a rollback takes
`failureLimit` of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from statistics import NormalDist

from endpoint_optimizer.analysis.speclog import SpecCounts
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.api.live import AcceptanceEstimate

CHECK_NAME = "live_acceptance_rate"


def wilson(rate: float, n: float, z: float) -> tuple[float, float]:
    """Wilson score interval of a proportion over n draws."""
    if n <= 0:
        return 0.0, 1.0
    z2 = z * z
    centre = (rate + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(rate * (1 - rate) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def cluster_interval(counts: Sequence[SpecCounts], rate: float, z: float) -> tuple[float, float]:
    """Ratio-estimator interval with each log line a cluster (needs three lines or more)."""
    m = len(counts)
    drafted = sum(c.drafted for c in counts)
    residual = sum((c.accepted - rate * c.drafted) ** 2 for c in counts)
    variance = m / (m - 1) * residual / (drafted * drafted)
    half = z * math.sqrt(variance)
    return max(0.0, rate - half), min(1.0, rate + half)


def estimate(
    counts: Sequence[SpecCounts],
    tokens_per_step: int,
    alpha: float,
    interval_end: datetime | None = None,
) -> AcceptanceEstimate:
    """The interval's acceptance and its two-sided 1 - 2 alpha bounds (one-sided alpha each)."""
    drafted = sum(c.drafted for c in counts)
    accepted = sum(c.accepted for c in counts)
    if drafted <= 0:
        return AcceptanceEstimate(
            drafted=0, accepted=0, lines=len(counts), interval_end=interval_end
        )
    rate = accepted / drafted
    z = NormalDist().inv_cdf(1.0 - alpha)
    steps = drafted / max(1, tokens_per_step)
    low, high = wilson(rate, steps, z)
    if len(counts) >= 3:
        c_low, c_high = cluster_interval(counts, rate, z)
        low, high = min(low, c_low), max(high, c_high)
    # Rounding in the score formula can put a bound a hair past the rate at 0 or 1.
    low, high = min(low, rate), max(high, rate)
    return AcceptanceEstimate(
        drafted=drafted,
        accepted=accepted,
        lines=len(counts),
        rate=rate,
        low=low,
        high=high,
        effective_samples=steps,
        interval_end=interval_end,
    )


def acceptance_live_check(
    found: AcceptanceEstimate,
    floor: float,
    min_drafted: int,
    gating: bool,
    alpha: float,
) -> Check:
    """Fail when the upper bound is below the floor; no verdict on too few drafted tokens.

    `gating` False (onAcceptanceDrift: alert or disableSpeculation): the verdict is reported,
    never counted as a failure; the pipeline acts on it as the policy says.
    """
    rule = (
        f"accepted/drafted tokens from the container's log lines; fail when the upper bound "
        f"(one-sided alpha {alpha:.3g}, over drafts not tokens, widened by the spread between "
        f"lines) is below the floor {floor:.2f}; at least {min_drafted} drafted tokens"
    )

    def made(verdict: Verdict, gates: bool, reason: str) -> Check:
        return Check(
            name=CHECK_NAME,
            kind=CheckKind.LIVE,
            verdict=verdict,
            candidate=found.rate,
            threshold=floor,
            unit="ratio",
            threshold_unit="ratio",
            interval_low=found.low,
            interval_high=found.high,
            samples=found.drafted,
            rule=rule,
            source="container log (SpecDecoding metrics)",
            gating=gates,
            reason=reason,
        )

    if found.rate is None or found.drafted < min_drafted or found.high is None:
        return made(
            Verdict.INCONCLUSIVE,
            False,
            f"{found.drafted} drafted tokens in {found.lines} log line(s) this interval "
            f"(need {min_drafted}): no verdict on acceptance",
        )
    below = found.high < floor
    said = (
        f"live acceptance {found.rate:.3f} [{found.low:.3f}, {found.high:.3f}] over "
        f"{found.drafted} drafted tokens in {found.lines} line(s)"
    )
    if below:
        said += f": confidently below the floor {floor:.2f}"
        said += (
            "; roll back"
            if gating
            else " (not gating: onAcceptanceDrift alert or disableSpeculation)"
        )
    else:
        said += f", floor {floor:.2f}"
    return made(Verdict.FAIL if below else Verdict.PASS, gating, said)
