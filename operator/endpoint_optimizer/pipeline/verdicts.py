"""Apply the latest checks: roll back, hold (onNoData: pause), or go on.

Live checks are the live judge's to act on (it applies onNoData and failureLimit
itself): only its Rollback decision counts here, and it counts even while the rollout
is paused, so a candidate that fails live is never left holding traffic.
"""

from __future__ import annotations

from endpoint_optimizer.analysis.live_acceptance import CHECK_NAME as ACCEPTANCE_CHECK
from endpoint_optimizer.api import (
    CheckKind,
    ConditionStatus,
    ConditionType,
    LiveDecision,
    NoDataPolicy,
    Verdict,
)
from endpoint_optimizer.api.checks import Check
from endpoint_optimizer.evaluation.slices import is_must_pass
from endpoint_optimizer.pipeline.model import APPROVE
from endpoint_optimizer.pipeline.phases import rollback
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.wakeup import DONE, Outcome, Planned


def live_rollback(w: Planned) -> Outcome | None:
    """RollingBack when the live judge decided so; None otherwise."""
    status = w.status
    live = status.rollout.live_judge
    if live is None or live.decision is not LiveDecision.ROLLBACK:
        return None
    reasons = [
        c.reason or c.name
        for c in status.checks
        if c.kind is CheckKind.LIVE and c.verdict is Verdict.FAIL and c.gating
    ]
    for reason in reasons:
        w.event("Warning", Reason.CHECK_FAILED, reason)
    return rollback.begin(
        w,
        Reason.LIVE_CHECK_FAILED,
        f"live judge: {'; '.join(reasons) or 'the candidate is worse on live traffic'}",
    )


def acceptance_drift(w: Planned) -> None:
    """onAcceptanceDrift: alert or disableSpeculation (phases/speculation.py acts on the
    count). While the newest interval's live acceptance is confidently
    below the floor, the AcceptanceDrift condition is True, with a Warning Event when it
    turns True; a passing interval sets it False. Traffic is left as it is."""
    check = next((c for c in w.status.checks if c.name == ACCEPTANCE_CHECK), None)
    if check is None or check.gating or check.verdict is Verdict.INCONCLUSIVE:
        return
    status = w.status
    held = status.condition(ConditionType.ACCEPTANCE_DRIFT)
    below = check.verdict is Verdict.FAIL
    if below and (held is None or held.status is not ConditionStatus.TRUE):
        w.event("Warning", Reason.ACCEPTANCE_DRIFT, check.reason)
        w.record(Reason.ACCEPTANCE_DRIFT, check.reason)
    if below or held is not None:
        status.set_condition(
            ConditionType.ACCEPTANCE_DRIFT,
            ConditionStatus.TRUE if below else ConditionStatus.FALSE,
            Reason.ACCEPTANCE_DRIFT.value if below else Reason.ACCEPTANCE_AT_FLOOR.value,
            check.reason,
            w.now,
            status.observed_generation,
        )


def _holds(check: Check) -> bool:
    """An Inconclusive check follows onNoData; a class that is not must-pass only informs
    (evaluation/slices.py: the overall gate judged its items)."""
    return (
        check.gating
        and check.verdict is Verdict.INCONCLUSIVE
        and check.kind is not CheckKind.EVAL_SLICE
    )


def apply(w: Planned) -> Outcome | None:
    """RollingBack when the checks decided against the candidate; None to go on."""
    acceptance_drift(w)
    if (out := live_rollback(w)) is not None:
        return out
    status = w.status
    # A check reported but not gating (a tail the budget cannot decide) never holds or fails.
    judged = [c for c in status.checks if c.kind is not CheckKind.LIVE and c.gating]
    failed = [c for c in judged if c.verdict is Verdict.FAIL]
    if failed:
        for check in failed:
            w.event("Warning", Reason.CHECK_FAILED, check.reason or check.name)
        names = ", ".join(c.name for c in failed)
        return rollback.begin(w, Reason.CHECKS_FAILED, f"failed checks: {names}")
    no_gain = [c for c in judged if c.verdict is Verdict.NO_IMPROVEMENT]
    if no_gain:
        w.event("Warning", Reason.NO_IMPROVEMENT, no_gain[0].reason)
        return rollback.begin(
            w,
            Reason.NO_IMPROVEMENT,
            f"the candidate does not improve {w.spec.objective.metric.value}: {no_gain[0].reason}",
        )
    inconclusive = [c for c in judged if _holds(c)]
    if inconclusive and w.spec.rollout.analysis.on_no_data is NoDataPolicy.FAIL:
        return rollback.begin(
            w,
            Reason.CHECKS_INCONCLUSIVE,
            f"inconclusive checks with onNoData: fail: {', '.join(c.name for c in inconclusive)}",
        )
    return None


def hold(w: Planned) -> bool:
    """onNoData: pause with inconclusive checks: True while held (status says why).

    Under onNoData: pass an undecided must-pass eval slice still holds: that class was
    named (or defaulted, for low-bit schemes) so that it cannot be averaged away, and a
    pass by default would skip it unseen (evaluation/slices.py). A new optimizer.dev/approve
    value lets the rollout go on past them, once.
    """
    status = w.status
    policy = w.spec.rollout.analysis.on_no_data
    open_ = [c for c in status.checks if c.kind is not CheckKind.LIVE and _holds(c)]
    if policy is NoDataPolicy.PAUSE:
        held = [c.name for c in open_]
        why = f"inconclusive checks ({', '.join(held)})"
    elif policy is NoDataPolicy.PASS:
        held = [c.name for c in open_ if is_must_pass(c)]
        why = (
            f"must-pass eval slices undecided ({', '.join(held)}); onNoData: pass does not "
            "wave a must-pass class through"
        )
    else:
        held = []
    if not held:
        return False
    if w.lever_pending(APPROVE):
        w.consume_lever(APPROVE)
        status.paused = False
        return False
    status.paused = True
    w.wait(
        f"paused: {why}; the live judge keeps watching. Annotate optimizer.dev/approve=true "
        "to go on or optimizer.dev/rollback=true"
    )
    return True


def apply_or_hold(w: Planned) -> Outcome | None:
    """`apply`, then `hold` as DONE: for the last judgement before a promotion."""
    if (out := apply(w)) is not None:
        return out
    return DONE if hold(w) else None


def through(w: Planned) -> str:
    """How the checks let the candidate through, in words: "all checks passed" only when
    every gating check passed; otherwise the counts (Inconclusive is never "passed")."""
    checks = [c for c in w.status.checks if c.kind is not CheckKind.LIVE]
    gating = [c for c in checks if c.gating]
    reported = len(checks) - len(gating)
    if all(c.verdict is Verdict.PASS for c in gating):
        if reported:
            return f"every gating check passed ({reported} reported, not gating)"
        return "all checks passed"
    passed = sum(1 for c in gating if c.verdict is Verdict.PASS)
    open_ = sum(1 for c in gating if c.verdict is Verdict.INCONCLUSIVE)
    policy = w.spec.rollout.analysis.on_no_data.value
    return f"no check failed ({passed} passed, {open_} inconclusive with onNoData: {policy})"
