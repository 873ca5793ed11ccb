"""The pipeline's side of live acceptance: the rollback label, the alert policy."""

from __future__ import annotations

from endpoint_optimizer.analysis.live_acceptance import CHECK_NAME
from endpoint_optimizer.api import RollbackReason
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.pipeline.reasons import Reason, rollback_label


def live(name: str, verdict: Verdict) -> Check:
    return Check(name=name, kind=CheckKind.LIVE, verdict=verdict)


def test_a_rollback_on_live_acceptance_alone_is_labelled_acceptance() -> None:
    alone = [live(CHECK_NAME, Verdict.FAIL), live("live_latency", Verdict.PASS)]
    both = [live(CHECK_NAME, Verdict.FAIL), live("live_latency", Verdict.FAIL)]
    assert rollback_label(Reason.LIVE_CHECK_FAILED, alone) is RollbackReason.ACCEPTANCE
    assert rollback_label(Reason.LIVE_CHECK_FAILED, both) is RollbackReason.LIVE
