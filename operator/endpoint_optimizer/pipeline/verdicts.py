"""Apply the latest checks: roll back, pause, or go on (a short loop over checks).

Live checks are the live judge's to act on (it applies onNoData and failureLimit
itself): only its Rollback decision counts here.
"""

from __future__ import annotations

from endpoint_optimizer.api import CheckKind, LiveDecision, NoDataPolicy, Verdict
from endpoint_optimizer.pipeline.model import APPROVE
from endpoint_optimizer.pipeline.phases import rollback
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.wakeup import Outcome, Planned


def apply(w: Planned) -> Outcome | None:
    """RollingBack or DONE (paused) when the checks decided; None to go on."""
    status = w.status
    live = status.rollout.live_judge
    if live is not None and live.decision is LiveDecision.ROLLBACK:
        reasons = [
            c.reason or c.name
            for c in status.checks
            if c.kind is CheckKind.LIVE and c.verdict is Verdict.FAIL
        ]
        for reason in reasons:
            w.event("Warning", Reason.CHECK_FAILED, reason)
        return rollback.begin(
            w,
            Reason.LIVE_CHECK_FAILED,
            f"live judge: {'; '.join(reasons) or 'the candidate is worse on live traffic'}",
        )
    judged = [c for c in status.checks if c.kind is not CheckKind.LIVE]
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
    inconclusive = [c for c in judged if c.verdict is Verdict.INCONCLUSIVE]
    policy = w.spec.rollout.analysis.on_no_data
    if inconclusive and policy is NoDataPolicy.FAIL:
        return rollback.begin(
            w,
            Reason.CHECKS_INCONCLUSIVE,
            f"inconclusive checks with onNoData: fail: {', '.join(c.name for c in inconclusive)}",
        )
    if inconclusive and policy is NoDataPolicy.PAUSE:
        status.paused = True
        w.wait(
            f"paused: inconclusive checks ({', '.join(c.name for c in inconclusive)}); "
            "annotate optimizer.dev/approve=true to go on or optimizer.dev/rollback=true"
        )
        if not w.lever_pending(APPROVE):
            return w.wait(status.message)
        w.consume_lever(APPROVE)
        status.paused = False
    return None
