"""The safety invariant as a model-based test (issue 17): random sequences against the
operator's real wake-up and an in-process model of SageMaker, invariants after every step.

What runs for real: `controller.reconcile.wake` (observe cadence, freshness against stale
bodies, retry backoff in status, the dataset read, ownership checks, `aws.perform` and
`aws.observe` with errors classified by `aws.errors`), the pure `pipeline.decide`, the
judges for measurements made of failed requests and for CloudWatch windows, the status
merge patch, and `controller.finalize` for deletion. Spec edits go through the CRD's
schema, defaults and CEL rules (tests/unit/api/admission.py): a refused edit is not stored.

What the model stands in for (tests/property/sagemaker_model.py, world.py): SageMaker
(endpoints, configs, models, optimization jobs, alarms, asynchronous transitions one tick
per poll, SageMaker's own rollback of a failed update, AWS error codes); the measurement
traffic (`perform_with_token` for measurement actions: benchmark reports whose requests
all fail, or checks whose verdicts the rules chose, given to `judge` as they are); the
Kubernetes object (generation, annotations, status as the apiserver stores it).

What is not modelled: kopf itself (the watch, handler retries, Events are not read),
several resources at once and claims between them, training jobs (llm-compressor),
JumpStart models, shadow variants' real mirroring, CloudWatch latency percentiles beyond
the live judge's inputs, time-limited scorers, IAM, Hugging Face tokens, benchmark
statistics (the chosen verdicts skip them: the unit tests of analysis/ cover those).

Rules: wake-ups; spec edits (valid; refused by the operator's matrix; refused by the
CRD's schema or CEL); SageMaker faults (a failed update, a failed job, an endpoint going
Failed, slow transitions); throttling, 5XX, resets, quota, access and validation errors
on any call; container errors (ModelError in the eval, connection resets on every
benchmark request, a candidate failing every request); what the candidate turns out to
be; outside changes by a person (weights, a config of their own, a deleted endpoint);
operator crashes between two actions (the status write lost), restarts, outages, a
stale body; the levers (approve, rollback, pause); deletion (the finalizer).

Invariants (world.py `World.check` and `_after_wakeup`), after every step:
1. traffic on the baseline unless a candidate is progressing: users are on a model that
   is not the baseline's (or a person's, or a winner's: promoted, or being promoted once
   every gating check passed) only in Deploying,
   Analyzing, AwaitingApproval, Promoting or RollingBack, never paused with a failed
   check, never after the resource is deleted; a person's own routing is left alone;
2. nothing deleted (or stopped) that the operator did not make; everything it made is
   named in status.sagemaker (after a crash, once a later wake-up adopted it); after
   deletion only the retained endpoint and what it serves remain, no job runs;
3. a verdict never rests on errors: a baseline is never recorded from requests that all
   failed, no check passes and nothing is promoted on a candidate whose requests failed;
4. the status is valid against the CRD's status schema (unknown fields are errors) and
   reads back through parse_status; no wake-up raises;
5. terminal phases (Failed, RolledBack, Succeeded) leave production traffic on the
   baseline or the promoted winner (1 applied to them);
and per wake-up: at most MAX_AWS_ACTIONS actions and MAX_MEASUREMENTS measurement, a
bounded number of Describe calls, one while waiting on a job.

Default profile: 250 derandomized sequences of up to 30 steps (about 8,000 wake-ups),
within a minute on a quiet core; `pytest tests/property --hypothesis-profile=long`
runs 20,000 random sequences of up to 60 steps and shrinks what fails.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from endpoint_optimizer.api import OptimizedEndpointStatus
from tests.property.sagemaker_model import ApiError, ConnectionReset
from tests.property.world import APPROVE, PAUSE, QUALITIES, ROLLBACK, World, names, spec

# The default profile: 250 sequences of up to 30 steps, derandomized (the same sequences
# every run), no shrinking (a failure prints its whole sequence at once; shrinking one
# costs minutes), within a minute on a quiet core. Any other profile (`pytest
# tests/property --hypothesis-profile=long`, see conftest.py) sets its own counts.
if settings.get_current_profile_name() == "default":
    SEQUENCES = settings(
        max_examples=250,
        stateful_step_count=30,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
else:
    SEQUENCES = settings(settings.default)

# adoptExisting with its proof: the person's endpoint's ARN (the model's arn()).
ADOPTION = {
    "adoptExisting": True,
    "adoption": {"endpointArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint/chat"},
}
EVALUATION = {"dataset": {"configMapRef": {"name": "evals", "key": "items.jsonl"}}}
ANALYSIS = {"interval": "1m", "minInvocations": 5}


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    """A spec the CRD and the operator both accept."""
    strategy = draw(st.sampled_from(["canary", "canary", "shadow", "blueGreen"]))
    if strategy == "canary":
        weights = draw(st.sampled_from([[10, 50], [20], [5, 25, 60]]))
        steps: list[dict[str, Any]] = [{"weight": w, "pause": "1m"} for w in weights]
    elif strategy == "shadow":
        steps = [{"pause": "1m"}]
    else:
        steps = [{"weight": 100, "pause": "1m"}]
    rollout = {
        "strategy": strategy,
        "steps": steps,
        "analysis": {**ANALYSIS, "onNoData": draw(st.sampled_from(["pause", "pass", "fail"]))},
        "approval": draw(st.sampled_from(["none", "beforePromotion"])),
        "baselineRetention": draw(st.sampled_from(["0s", "2m", "1h"])),
    }
    technique = draw(st.sampled_from(["fp8", "awq", "settings", "ngram", "search"]))
    optimizations: dict[str, Any] = {
        "fp8": {"quantization": {"scheme": "fp8"}},
        "awq": {"quantization": {"scheme": "awq"}},
        "settings": {},
        "ngram": {
            "speculativeDecoding": {
                "method": "ngram",
                "numSpeculativeTokens": 5,
                "minAcceptanceRate": 0.4,
            }
        },
        "search": {},
    }[technique]
    extra: dict[str, Any] = {}
    if draw(st.booleans()):
        extra["evaluation"] = EVALUATION
    if technique == "search":
        # spec.search: each candidate on a weight-0 variant beside the baseline and the
        # current best; what each turns out to be is the rules' candidate quality.
        extra["search"] = {
            "quantization": [{"name": "fp8", "scheme": "fp8"}, {"name": "awq", "scheme": "awq"}],
            "speculativeDecoding": [{"name": "ngram", "method": "ngram"}],
            "budget": {"candidates": draw(st.sampled_from([1, 2, 3]))},
        }
    return spec(
        instanceType=draw(st.sampled_from(["ml.g6.12xlarge", "ml.g6e.12xlarge", "ml.p5.48xlarge"])),
        optimizations=optimizations,
        container={"maxModelLen": 4096} if technique == "settings" else {},
        benchmark={"concurrency": [1, 8], "requests": draw(st.sampled_from([40, 60]))},
        rollout=rollout,
        deletionPolicy=draw(st.sampled_from(["Retain", "Delete"])),
        **extra,
    )


OPERATOR_REFUSED = {
    "instanceType": "ml.g5.12xlarge",
    "optimizations": {"quantization": {"scheme": "fp8"}},
}
CRD_REFUSED: list[dict[str, Any]] = [
    {"model": {"s3Uri": "s3://models/llama/", "environment": {"MY-VAR": "1"}}},
    {"instanceCount": "two"},
    {"instanceCount": 0},
]

TRANSIENT = ["throttled", "unavailable", "reset"]
PERMANENT = ["quota", "denied", "invalid"]
ERRORS = {
    "throttled": ApiError("ThrottlingException", "Rate exceeded"),
    "unavailable": ApiError("ServiceUnavailable", "Service unavailable", 503),
    "quota": ApiError(
        "ResourceLimitExceeded",
        "The account-level service limit 'ml.g6.12xlarge for endpoint usage' is 2 Instances",
    ),
    "denied": ApiError("AccessDeniedException", "User is not authorized to perform this action"),
    "invalid": ApiError("ValidationException", "1 validation error detected"),
}
CALLS = [
    "CreateModel",
    "CreateEndpointConfig",
    "CreateEndpoint",
    "UpdateEndpoint",
    "UpdateEndpointWeightsAndCapacities",
    "CreateOptimizationJob",
    "StopOptimizationJob",
    "DeleteEndpointConfig",
    "DeleteModel",
    "DeleteEndpoint",
    "PutMetricAlarm",
    "DescribeEndpoint",
    "DescribeEndpointConfig",
    "DescribeOptimizationJob",
    "GetMetricData",
]


def alive(machine: TrafficSafety) -> bool:
    return not machine.world.gone


class TrafficSafety(RuleBasedStateMachine):
    """One OptimizedEndpoint through a random life; every invariant after every step."""

    world: World

    @initialize(spec_data=specs(), adopt=st.booleans())
    def start(self, spec_data: dict[str, Any], adopt: bool) -> None:
        if adopt:
            spec_data = {**spec_data, **ADOPTION}
        self.world = World(spec_data, adopt=adopt)

    def teardown(self) -> None:
        world = getattr(self, "world", None)
        if world is None:
            return
        try:
            world.settle()
            problems = world.check()
            assert not problems, problems
        finally:
            world.close()

    @invariant()
    def safe(self) -> None:
        if hasattr(self, "world"):
            problems = self.world.check()
            assert not problems, problems

    # ------------------------------------------------------------------ time

    @rule(times=st.integers(1, 4))
    @precondition(alive)
    def wake(self, times: int) -> None:
        for _ in range(times):
            self.world.wake()

    @rule()
    @precondition(alive)
    def wake_until_the_phase_changes(self) -> None:
        self.world.wake_until_the_phase_changes()

    # ------------------------------------------------------------------ the spec

    @rule(spec_data=specs())
    @precondition(lambda self: alive(self) and not self.world.deleting)
    def edit_spec(self, spec_data: dict[str, Any]) -> None:
        adopt = self.world.spec.get("adoptExisting")
        refused = self.world.edit_spec({**spec_data, **(ADOPTION if adopt else {})})
        assert not refused, refused  # specs() draws only specs the CRD admits

    @rule(change=st.sampled_from([OPERATOR_REFUSED, *CRD_REFUSED]))
    @precondition(lambda self: alive(self) and not self.world.deleting)
    def edit_spec_refused(self, change: dict[str, Any]) -> None:
        """A spec the operator refuses (the technique matrix), or one the CRD's schema or
        CEL refuses (the apiserver then stores nothing), or that it admits and parse_spec
        refuses: the operator must find its way back from each."""
        self.world.edit_spec({**self.world.spec, **change})

    # ------------------------------------------------------------------ what is measured

    @rule(
        behaviour=st.one_of(
            st.tuples(st.just("candidate"), st.sampled_from(QUALITIES)),
            st.tuples(st.just("benchmarkConnectionsReset"), st.booleans()),
            st.tuples(st.just("evalModelErrors"), st.integers(1, 2)),
            st.tuples(st.just("trafficPerMinute"), st.sampled_from([0.0, 600.0])),
        )
    )
    def serving_behaves(self, behaviour: tuple[str, Any]) -> None:
        """What the candidate turns out to be; TCP resets on every benchmark request; a
        ModelError from the container during the eval; production traffic or none."""
        kind, value = behaviour
        world = self.world
        if kind == "candidate":
            world.candidate_quality = value
        elif kind == "benchmarkConnectionsReset":
            world.network_reset = value
        elif kind == "evalModelErrors":
            world.eval_model_errors = value
        else:
            world.traffic_per_minute = value

    # ------------------------------------------------------------------ SageMaker faults

    @rule(
        fault=st.one_of(
            st.tuples(
                st.just("call"),
                st.sampled_from(CALLS),
                st.sampled_from([*TRANSIENT, *TRANSIENT, *PERMANENT]),
                st.integers(1, 3),
            ),
            st.tuples(st.just("updateRollsBack")),
            st.tuples(st.just("jobFails")),
            st.tuples(st.just("endpointFailed")),
            st.tuples(st.just("ticks"), st.integers(1, 3)),
        )
    )
    def sagemaker_fault(self, fault: tuple[Any, ...]) -> None:
        """A call that fails (throttled, transient or permanent), an update SageMaker rolls
        back, a job that fails, an endpoint going Failed, slower transitions."""
        world = self.world
        sagemaker = world.sagemaker
        if fault[0] == "call":
            _, operation, error, count = fault
            world.fault(operation, ConnectionReset() if error == "reset" else ERRORS[error], count)
        elif fault[0] == "updateRollsBack":
            sagemaker.next_update_failure = "The primary container failed health checks."
        elif fault[0] == "jobFails":
            for job in sagemaker.jobs.values():
                if job.status in ("STARTING", "INPROGRESS"):
                    job.fail = "CapacityError: not enough capacity for ml.g6.12xlarge"
            sagemaker.next_job_failure = "ClientError: the model's weights are not readable"
        elif fault[0] == "endpointFailed":
            sagemaker.fail_endpoint("chat", "The instances of variant failed health checks")
        else:
            sagemaker.update_ticks = sagemaker.create_ticks = fault[1]
            sagemaker.job_ticks = fault[1] + 1

    # ------------------------------------------------------------------ people

    @rule(
        change=st.one_of(
            st.tuples(st.just("weights"), st.sampled_from([0, 30, 70, 100])),
            st.tuples(st.just("config"), st.sampled_from(["a", "b"])),
            st.tuples(st.just("deleteEndpoint")),
        )
    )
    def person_changes_the_endpoint(self, change: tuple[Any, ...]) -> None:
        """Someone sets the variant weights, updates the endpoint to a config of their own,
        or deletes the endpoint."""
        if change[0] == "weights":
            self.world.person_weights(change[1])
        elif change[0] == "config":
            self.world.person_config(change[1])
        else:
            self.world.person("DeleteEndpoint", {"EndpointName": "chat"})

    @rule(lever=st.sampled_from(["approve", "rollback", "pause", "unpause", "delete"]))
    @precondition(alive)
    def person_pulls(self, lever: str) -> None:
        """A lever annotation, or kubectl delete (the finalizer)."""
        if lever == "delete":
            self.world.delete()
        elif lever in ("pause", "unpause"):
            self.world.lever(PAUSE, lever == "pause")
        else:
            self.world.lever(APPROVE if lever == "approve" else ROLLBACK)

    # ------------------------------------------------------------------ the operator process

    @rule(
        event=st.one_of(
            st.tuples(st.just("crashDuringNextWakeup"), st.integers(0, 4)),
            st.tuples(st.just("restart")),
            st.tuples(st.just("staleBody")),
            st.tuples(st.just("outage"), st.integers(2, 12)),
        )
    )
    @precondition(alive)
    def operator_process(self, event: tuple[Any, ...]) -> None:
        """The next wake-up dies after n actions (its status write lost); a restart; the
        operator down for a few polls while SageMaker moves on."""
        if event[0] == "crashDuringNextWakeup":
            self.world.crash_next_wakeup(event[1])
        elif event[0] == "restart":
            self.world.restart()
        elif event[0] == "staleBody":
            self.world.stale_next = True
        else:
            self.world.outage(event[1])


TrafficSafety.TestCase.settings = SEQUENCES
# A hang guard, not a budget: 250 sequences take about a minute on a quiet core, and
# several minutes while the suite's other processes share two busy cores.
test_traffic_safety = pytest.mark.timeout(1800)(TrafficSafety.TestCase)


# ---------------------------------------------------------------------- regression cases
# Sequences the machine above found, and issue 17's listed triggers, as fixed sequences.


def _wake_checked(world: World, times: int = 1) -> None:
    for _ in range(times):
        world.wake()
        problems = world.check()
        assert not problems, problems


def _until(world: World, phase: str, most: int = 40) -> None:
    for _ in range(most):
        if world.status.get("phase") == phase:
            return
        _wake_checked(world)
    raise AssertionError(f"never reached {phase}: {world.status.get('phase')}")


def _canary(**overrides: Any) -> World:
    rollout = {
        "strategy": "canary",
        "steps": [{"weight": 10, "pause": "1m"}, {"weight": 50, "pause": "1m"}],
        "analysis": {**ANALYSIS, "onNoData": "pause"},
        "baselineRetention": "2m",
    }
    return World(spec(rollout=rollout, **overrides))


def test_an_endpoint_made_before_a_lost_first_status_write_stays_ours_across_an_edit() -> None:
    """Found by the machine: the first wake-up creates the baseline and the endpoint, its
    status write is lost, the spec is edited; the endpoint (serving generation 1's baseline
    config) was refused as 'not made by this resource' and left with no owner record."""
    world = World(spec())
    try:
        world.wake()
        assert world.sagemaker.endpoints["chat"].creator == "operator"
        world.status, world.parsed, world.superseded = {}, OptimizedEndpointStatus(), None
        world.restart()
        world.edit_spec(spec(instanceType="ml.p5.48xlarge"))
        _until(world, "Optimizing")
        assert world.parsed.sagemaker.endpoint_name == "chat"
    finally:
        world.close()


def test_a_quota_error_on_the_promotion_leaves_no_one_on_the_candidate() -> None:
    """Issue 17: a quota error on the promotion's update left the endpoint 50/50."""
    world = _canary()
    try:
        _until(world, "Analyzing")
        world.fault("UpdateEndpoint", ERRORS["quota"], 3)
        world.fault("CreateEndpointConfig", ERRORS["quota"], 3)
        _wake_checked(world, 20)
        world.settle()
        assert not world.check()
    finally:
        world.close()


def test_a_model_error_during_the_eval_is_not_a_terminal_verdict_at_the_canary() -> None:
    """Issue 17: one ModelError (503) from the container during the eval was 'fix the
    spec' (Terminal) and left the candidate at 10 %."""
    world = _canary(evaluation=EVALUATION)
    try:
        _until(world, "Analyzing")
        world.eval_model_errors = 1
        _wake_checked(world, 20)
        assert world.parsed.phase.value != "Failed", world.parsed.message
    finally:
        world.close()


def test_a_spec_the_operator_refuses_at_the_canary_returns_traffic_first() -> None:
    """Issue 17: an environment key the CRD admits but the operator refuses, at a 10 %
    canary, left 90/10 serving. Whichever refuses it now, no one stays on the candidate."""
    world = _canary()
    try:
        _until(world, "Analyzing")
        for change in (CRD_REFUSED[0], OPERATOR_REFUSED):
            world.edit_spec({**world.spec, **change})
            _wake_checked(world, 10)
        assert not world.candidate_traffic()
    finally:
        world.close()


def test_a_candidate_failing_every_request_is_never_promoted_on_no_data_pass() -> None:
    """Issue 17: a candidate failing 100 % of its requests was promoted with onNoData: pass."""
    rollout = {
        "strategy": "canary",
        "steps": [{"weight": 10, "pause": "1m"}],
        "analysis": {**ANALYSIS, "onNoData": "pass"},
    }
    world = World(spec(rollout=rollout))
    try:
        world.candidate_quality = "errors"
        _wake_checked(world, 40)
        assert world.parsed.phase.value != "Succeeded", world.parsed.message
    finally:
        world.close()


def test_a_deletion_while_a_winner_is_promoted_leaves_users_on_the_winner() -> None:
    """Found by the machine (it was xfail): an adopted endpoint, shadow, deletionPolicy
    Retain; generation 1 compared, an edit to generation 2 (container settings, no job),
    whose candidate passes and is being promoted when the resource is deleted. The
    finalizer waits for the update and keeps the promoted config (pipeline/cleanup.py):
    the promotion was decided once every gating check passed, as a moment later
    (Succeeded) it would be kept. The model had counted a winner only once Succeeded."""
    rollout = {
        "strategy": "shadow",
        "steps": [{"pause": "1m"}],
        "analysis": {**ANALYSIS, "onNoData": "pass"},
        "approval": "none",
        "baselineRetention": "1h",
    }

    def shadow(**overrides: Any) -> dict[str, Any]:
        return spec(rollout=rollout, deletionPolicy="Retain", **ADOPTION, **overrides)

    world = World(shadow(optimizations={"quantization": {"scheme": "fp8"}}), adopt=True)
    try:
        _until(world, "Analyzing")
        _wake_checked(world)
        world.edit_spec(shadow(optimizations={}, container={"maxModelLen": 4096}))
        _until(world, "Promoting")
        promoting = world.parsed.observed_generation
        world.delete()
        world.settle()
        assert not world.check()
        assert promoting == 2
        served = world.sagemaker.endpoints["chat"]
        assert served.config == names(2).promoted_config
    finally:
        world.close()
