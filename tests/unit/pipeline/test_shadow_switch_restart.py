"""A restart right after the UpdateEndpoint from the pinned config to the shadow config.

The process died before it wrote status: status still says the pinned stage, SageMaker is
moving (or has moved) the endpoint to the shadow config. The next process must wait for
that update, not ask for it again, and record what the lost write would have said.
"""

from __future__ import annotations

from endpoint_optimizer.api import OptimizedEndpointStatus, ShadowStage
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.pipeline.model import ActionKind
from tests.unit.pipeline.test_decide import NAMES, baselined, run, serving
from tests.unit.pipeline.test_shadow_checks import (
    BASELINE,
    DONE,
    EVALUATION,
    PINNED,
    SHADOWED,
    shadow_spec,
)


def pinned_checks_passed() -> OptimizedEndpointStatus:
    """The status as last written before begin_shadow: the pinned comparison passed."""
    data = shadow_spec(evaluation=EVALUATION)
    status, _, _ = run(baselined(), BASELINE, DONE, spec_data=data)
    status, _, _ = run(status, BASELINE, DONE, spec_data=data)
    status, _, _ = run(status, PINNED, DONE, spec_data=data)
    assert status.phase.value == "Analyzing"
    status.checks = [Check(name="eval_exact_match", kind=CheckKind.EVAL, verdict=Verdict.PASS)]
    status.rollout.compared_step = 0
    return status


def test_the_restarted_operator_waits_for_the_shadow_update_and_does_not_repeat_it() -> None:
    data = shadow_spec(evaluation=EVALUATION)
    lost = pinned_checks_passed()
    # What the dead process asked for (and the write that never happened) for comparison.
    asked, actions, _ = run(lost, PINNED, DONE, spec_data=data)
    assert actions == [ActionKind.CREATE_ENDPOINT_CONFIG, ActionKind.UPDATE_ENDPOINT]
    updating = serving(NAMES.rollout_config, (NAMES.baseline_variant, 1.0), status="Updating")
    status, actions, _ = run(lost, updating, DONE, spec_data=data)
    assert actions == [] and status.phase.value == "Analyzing"
    status, actions, _ = run(status, SHADOWED, DONE, spec_data=data)
    assert ActionKind.UPDATE_ENDPOINT not in actions
    assert ActionKind.CREATE_ENDPOINT_CONFIG not in actions
    events = [h.event for h in status.history]
    assert events[-2:] == ["PinnedChecksPassed", "ShadowStarted"]
    assert "after a restart" in status.history[-2].message
    # The shadow config is named in status as if the lost write had happened (cleanup and
    # retention delete only what status names).
    sm = status.sagemaker
    assert sm.candidate_endpoint_config == asked.sagemaker.candidate_endpoint_config
    assert NAMES.rollout_config in sm.endpoint_configs
    assert status.rollout.shadow_stage is ShadowStage.LIVE


def test_without_a_restart_the_pinned_stage_is_recorded_once() -> None:
    data = shadow_spec(evaluation=EVALUATION)
    status, _, _ = run(pinned_checks_passed(), PINNED, DONE, spec_data=data)
    status, _, _ = run(status, SHADOWED, DONE, spec_data=data)
    events = [h.event for h in status.history]
    assert events.count("PinnedChecksPassed") == 1 and events[-1] == "ShadowStarted"
