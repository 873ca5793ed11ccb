"""The acceptance-rate gate for speculative decoding candidates.

Below the floor (default 0.4, vLLM's accepted/drafted convention) the draft work
costs more than the accepted tokens save, so speculation typically loses to plain
decoding; the candidate fails with the measured value and where it came from.
"""

from __future__ import annotations

import math
from enum import StrEnum

from endpoint_optimizer.api.checks import Check, CheckKind, Verdict

DEFAULT_MIN_ACCEPTANCE_RATE = 0.4


class AcceptanceSource(StrEnum):
    SERVER_COUNTERS = "server counters"  # per-request spec-decode metrics from the container
    BLACK_BOX_ESTIMATE = "black-box estimate"  # tokens per streamed chunk, client side


def acceptance_check(
    value: float | None,
    source: AcceptanceSource | str,
    floor: float = DEFAULT_MIN_ACCEPTANCE_RATE,
    drafts: int = 0,
) -> Check:
    """Pass when the acceptance rate reaches `floor`, Fail below, Inconclusive when unknown.

    `drafts` is how many drafted tokens the value rests on (0 when the source cannot say).
    """
    source = AcceptanceSource(source)
    if not 0.0 <= floor <= 1.0:
        raise ValueError("speculativeDecoding.minAcceptanceRate: must be in [0, 1], e.g. 0.4")
    rule = f"acceptance rate (accepted/drafted tokens) >= {floor:.2f}"
    if value is not None and not (math.isfinite(value) and 0.0 <= value <= 1.0):
        # A rate outside [0, 1] is counters read across a restart or a broken estimate:
        # not a measurement a gate may pass or fail on.
        return Check(
            name="acceptance_rate",
            kind=CheckKind.ACCEPTANCE,
            verdict=Verdict.INCONCLUSIVE,
            threshold=floor,
            unit="ratio",
            threshold_unit="ratio",
            samples=drafts,
            rule=rule,
            source=source.value,
            reason=(
                f"acceptance rate {value!r} from {source.value} is not in [0, 1]: the "
                "counters were read across a restart or the estimate is broken; re-measure"
            ),
        )
    if value is None or math.isnan(value):
        return Check(
            name="acceptance_rate",
            kind=CheckKind.ACCEPTANCE,
            verdict=Verdict.INCONCLUSIVE,
            threshold=floor,
            unit="ratio",
            threshold_unit="ratio",
            rule=rule,
            source=source.value,
            reason=(
                f"no acceptance rate from {source.value}; enable per-request spec-decode "
                "metrics on the container or stream with usage so it can be estimated"
            ),
        )
    passed = value >= floor
    verdict = Verdict.PASS if passed else Verdict.FAIL
    reason = (
        f"acceptance rate {value:.2f} ({source.value}) "
        + (f"reaches the floor {floor:.2f}" if passed else f"is below the floor {floor:.2f}; ")
        + ("" if passed else "speculation likely costs more than it saves on this workload")
    )
    return Check(
        name="acceptance_rate",
        kind=CheckKind.ACCEPTANCE,
        verdict=verdict,
        candidate=value,
        threshold=floor,
        unit="ratio",
        threshold_unit="ratio",
        samples=drafts,
        rule=rule,
        source=source.value,
        reason=reason,
    )
