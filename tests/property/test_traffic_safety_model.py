"""The safety invariant as a model-based test (issue 17): random sequences against the pure
core and an in-process model of SageMaker, the invariants checked after every step.

Rules: wake-ups; spec edits (a new generation: another strategy, steps, benchmark,
technique; ones the operator refuses; ones the CRD would refuse); SageMaker faults (a
failed update, a failed job, an endpoint going Failed, slow transitions); throttling,
transient and permanent errors on a call; container errors and failed requests in a
measurement; what the candidate turns out to be; outside changes by a person (weights,
a config of their own, a deleted endpoint); operator crashes between two actions and
restarts; the levers; deletion (the finalizer).

Invariants (tests/property/world.py `World.check`):
- candidate traffic only while progressing: users are on a model that is not the
  baseline's (or a person's, or the promoted winner's) only in Deploying, Analyzing,
  AwaitingApproval, Promoting or RollingBack, never paused with a failed check, never
  after the resource is deleted; a person's own routing is left as it is;
- no resource without an owner record: everything the operator made is named in
  status.sagemaker (after a crash, once a later wake-up adopted it); after deletion
  only the retained endpoint and what it serves remain, no job runs;
- nothing deleted that the operator did not make;
- at most MAX_AWS_ACTIONS actions and MAX_MEASUREMENTS measurement per wake-up, a bounded
  number of Describe calls, one while waiting on a job;
- the status always dumps to JSON that parse_status reads back.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from tests.property.sagemaker_model import ApiError, ConnectionReset
from tests.property.world import APPROVE, PAUSE, QUALITIES, ROLLBACK, World, spec

# The default profile: about a minute on CI's shared cores. Any other profile
# (--hypothesis-profile=long, see conftest.py) sets its own counts.
if settings.get_current_profile_name() == "default":
    SEQUENCES = settings(
        max_examples=600,
        stateful_step_count=30,
        deadline=None,
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
    technique = draw(st.sampled_from(["fp8", "awq", "settings", "ngram"]))
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
    }[technique]
    extra: dict[str, Any] = {}
    if draw(st.booleans()):
        extra["evaluation"] = EVALUATION
    return spec(
        instanceType=draw(st.sampled_from(["ml.g6.12xlarge", "ml.g6e.12xlarge", "ml.p5.48xlarge"])),
        optimizations=optimizations,
        container={"maxModelLen": 4096} if technique == "settings" else {},
        benchmark={"concurrency": [1, 8], "requests": draw(st.sampled_from([40, 60]))},
        rollout=rollout,
        deletionPolicy=draw(st.sampled_from(["Retain", "Delete"])),
        **extra,
    )


OPERATOR_REFUSED = {"instanceType": "ml.g5.12xlarge", "optimizations": {"quantization": {"scheme": "fp8"}}}
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
test_traffic_safety = TrafficSafety.TestCase
