"""A check's verdict: the shape every judge returns and status.checks stores.

Each check carries its values, the threshold, the statistical rule and a one-line
human reason, so it can be written to the resource's status and to an Event as it
is, and a person reading `kubectl describe` learns why without the code.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from endpoint_optimizer.api.camel import CamelModel


class Verdict(StrEnum):
    PASS = "Pass"
    FAIL = "Fail"
    INCONCLUSIVE = "Inconclusive"
    # The candidate is not worse but does not buy what the spec's objective asks for.
    NO_IMPROVEMENT = "NoImprovement"


class CheckKind(StrEnum):
    BENCHMARK = "benchmark"  # candidate vs baseline samples from the same run
    OBJECTIVE = "objective"  # does the candidate improve what the user is buying
    LIVE = "live"  # per-interval CloudWatch series during a canary step
    ACCEPTANCE = "acceptance"  # speculative decoding acceptance rate vs its floor
    EVAL = "eval"  # paired eval-set score (overall, and must-pass classes)
    # A class judged on its own: its Fail rolls back, its Inconclusive does not hold.
    EVAL_SLICE = "evalSlice"
    REFUSAL = "refusal"  # paired refusal rate
    SPOT_CHECK = "spotCheck"  # a person reads paired samples before promotion
    ERRORS = "errors"  # failed requests, judged as evidence (not as missing data)


class Check(CamelModel):
    """One judged check, ready for status.checks and for a Kubernetes Event."""

    name: str = Field(description="What was checked, e.g. `ttft_p99@c16` or `eval_exact_match`.")
    kind: CheckKind
    verdict: Verdict
    baseline: float | None = Field(default=None, description="Baseline value, in `unit`.")
    candidate: float | None = Field(default=None, description="Candidate value, in `unit`.")
    threshold: float | None = Field(
        default=None, description="The limit the rule compared against, in `thresholdUnit`."
    )
    unit: str = Field(default="", description="Unit of baseline and candidate (ms, tok/s, ratio).")
    threshold_unit: str = Field(default="", description="Unit of the threshold.")
    interval_low: float | None = Field(
        default=None, description="Lower end of the confidence interval the rule found."
    )
    interval_high: float | None = Field(
        default=None, description="Upper end of the confidence interval the rule found."
    )
    samples: int = Field(default=0, ge=0, description="Samples (or items) the verdict rests on.")
    p_value: float | None = Field(
        default=None,
        description="The rule's p-value (always-valid for live checks, exact for McNemar).",
    )
    rule: str = Field(default="", description="The statistical rule, in words.")
    reason: str = Field(default="", description="One line a person can act on.")
    source: str = Field(default="", description="Where the values came from.")
    gating: bool = Field(
        default=True,
        description="False: reported with its reason, never holding or failing the candidate "
        "(a tail quantile whose sample need does not fit the benchmark budget, ITL).",
    )
