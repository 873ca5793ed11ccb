"""Sequences the traffic-safety state machine found that the derandomized default run does
not draw, kept as they were found (tests/property/test_traffic_safety_model.py's rules).

- Found under a CPU burner on 2026-12-03: a crash loses the first status write after the
  baseline model and config were made; the person deletes the endpoint and the resource
  (deletionPolicy Retain). The finalizer deleted only what status names and left the
  baseline model and config with no owner record; it now also lists what this resource
  made (aws/sweep.py).
- Found in the burner run after that fix: the same start, but the next wake-ups record the
  endpoint; the finalizer (Retain) keeps the Failed endpoint's config and model, and the
  person deletes the endpoint afterwards. What a retained endpoint served is the person's
  from the finalizer's end on (the world now remembers it then); not a leak."""

from __future__ import annotations

from tests.property.test_traffic_safety_model import TrafficSafety

LMI_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"


def _started_then_crashed() -> TrafficSafety:
    """The start both sequences share: a canary with n-gram speculation and deletionPolicy
    Retain; the first wake-up after the approval crashes after its second change (the
    baseline model and config made, status not written); an edit the CRD refuses."""
    state = TrafficSafety()
    state.start(
        adopt=False,
        spec_data={
            "endpointName": "chat",
            "region": "us-east-1",
            "executionRoleArn": "arn:aws:iam::123456789012:role/sagemaker-exec",
            "model": {
                "s3Uri": "s3://models/llama/",
                "image": LMI_IMAGE,
            },
            "instanceType": "ml.p5.48xlarge",
            "optimizations": {
                "speculativeDecoding": {
                    "method": "ngram",
                    "numSpeculativeTokens": 5,
                    "minAcceptanceRate": 0.4,
                }
            },
            "outputS3Uri": "s3://models/out/",
            "benchmark": {"concurrency": [1, 8], "requests": 40},
            "evaluation": {"waiver": "the model's rules choose the verdicts"},
            "rollout": {
                "strategy": "canary",
                "steps": [
                    {"weight": 5, "pause": "1m"},
                    {"weight": 25, "pause": "1m"},
                    {"weight": 60, "pause": "1m"},
                ],
                "analysis": {"interval": "1m", "minInvocations": 5, "onNoData": "pass"},
                "approval": "none",
                "baselineRetention": "1h",
            },
            "container": {},
            "deletionPolicy": "Retain",
        },
    )
    state.safe()
    state.person_pulls(lever="approve")
    state.safe()
    state.operator_process(event=("crashDuringNextWakeup", 2))
    state.safe()
    state.wake(times=1)
    state.safe()
    state.edit_spec_refused(change={"instanceCount": "two"})
    state.safe()
    return state


def test_retained_deletion_after_a_lost_first_status_write_leaves_nothing_unowned() -> None:
    state = _started_then_crashed()
    state.serving_behaves(behaviour=("candidate", "inconclusive"))
    state.safe()
    state.sagemaker_fault(fault=("call", "UpdateEndpointWeightsAndCapacities", "quota", 2))
    state.safe()
    state.person_changes_the_endpoint(change=("weights", 100))
    state.safe()
    state.person_changes_the_endpoint(change=("weights", 30))
    state.safe()
    state.person_changes_the_endpoint(change=("weights", 30))
    state.safe()
    state.sagemaker_fault(fault=("endpointFailed",))
    state.safe()
    state.sagemaker_fault(fault=("updateRollsBack",))
    state.safe()
    state.person_pulls(lever="delete")
    state.safe()
    state.person_changes_the_endpoint(change=("config", "b"))
    state.safe()
    state.operator_process(event=("restart",))
    state.safe()
    state.serving_behaves(behaviour=("candidate", "errors"))
    state.safe()
    state.operator_process(event=("staleBody",))
    state.safe()
    state.wake(times=2)
    state.safe()
    state.person_changes_the_endpoint(change=("weights", 70))
    state.safe()
    state.person_changes_the_endpoint(change=("deleteEndpoint",))
    state.safe()
    state.person_changes_the_endpoint(change=("weights", 30))
    state.safe()
    state.serving_behaves(behaviour=("benchmarkConnectionsReset", False))
    state.safe()
    state.sagemaker_fault(fault=("call", "DescribeEndpointConfig", "throttled", 3))
    state.safe()
    state.serving_behaves(behaviour=("candidate", "inconclusive"))
    state.safe()
    state.sagemaker_fault(fault=("updateRollsBack",))
    state.safe()
    state.person_changes_the_endpoint(change=("weights", 70))
    state.safe()
    state.sagemaker_fault(fault=("jobFails",))
    state.safe()
    state.sagemaker_fault(fault=("endpointFailed",))
    state.safe()
    state.sagemaker_fault(fault=("ticks", 3))
    state.safe()
    state.serving_behaves(behaviour=("evalModelErrors", 2))
    state.safe()
    state.teardown()


def test_what_a_retained_endpoint_served_stays_handed_over_after_the_person_deletes_it() -> None:
    state = _started_then_crashed()
    state.wake(times=2)
    state.safe()
    state.edit_spec_refused(
        change={
            "instanceType": "ml.g5.12xlarge",
            "optimizations": {"quantization": {"scheme": "fp8"}},
        }
    )
    state.safe()
    state.person_changes_the_endpoint(change=("weights", 30))
    state.safe()
    state.person_changes_the_endpoint(change=("weights", 30))
    state.safe()
    state.sagemaker_fault(fault=("endpointFailed",))
    state.safe()
    state.sagemaker_fault(fault=("updateRollsBack",))
    state.safe()
    state.person_pulls(lever="delete")
    state.safe()
    state.person_changes_the_endpoint(change=("config", "b"))
    state.safe()
    state.operator_process(event=("restart",))
    state.safe()
    state.serving_behaves(behaviour=("benchmarkConnectionsReset", False))
    state.safe()
    state.operator_process(event=("staleBody",))
    state.safe()
    state.wake(times=2)
    state.safe()
    state.person_changes_the_endpoint(change=("weights", 70))
    state.safe()
    state.person_changes_the_endpoint(change=("deleteEndpoint",))
    state.safe()
    state.person_changes_the_endpoint(change=("weights", 70))
    state.safe()
    state.serving_behaves(behaviour=("benchmarkConnectionsReset", False))
    state.safe()
    state.sagemaker_fault(fault=("call", "DescribeEndpointConfig", "throttled", 3))
    state.safe()
    state.serving_behaves(behaviour=("candidate", "inconclusive"))
    state.safe()
    state.sagemaker_fault(fault=("updateRollsBack",))
    state.safe()
    state.person_changes_the_endpoint(change=("weights", 70))
    state.safe()
    state.sagemaker_fault(fault=("jobFails",))
    state.safe()
    state.sagemaker_fault(fault=("endpointFailed",))
    state.safe()
    state.sagemaker_fault(fault=("ticks", 3))
    state.safe()
    state.serving_behaves(behaviour=("evalModelErrors", 2))
    state.safe()
    state.teardown()
