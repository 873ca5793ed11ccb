"""What the decision engine reads (observations, levers), what it returns (actions, events),
and what a measurement action brings back (raw, then judged).

Actions carry fully built boto3 requests (from sagemaker.requests), so the code
that performs them is a thin loop and the requests are testable without AWS.
Every create is create-or-adopt when performed: names are deterministic, so a
repeated create after a crash finds the operator's own resource.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from endpoint_optimizer.analysis.live import LiveObservation, ProbeSamples
from endpoint_optimizer.analysis.series import VariantRole, VariantSeries
from endpoint_optimizer.analysis.speclog import SpecLine
from endpoint_optimizer.api import VariantMeasurements
from endpoint_optimizer.api.checks import Check
from endpoint_optimizer.api.status import EvalNoise, InstancePrice, ScalableTargetRecord
from endpoint_optimizer.bench.models import BenchReport
from endpoint_optimizer.bench.served_by import EngineSummary, ServedBy, summarize
from endpoint_optimizer.evaluation.dataset import EvalItem
from endpoint_optimizer.evaluation.spot_check import SpotCheck
from endpoint_optimizer.sagemaker.jumpstart import ModelSources
from endpoint_optimizer.sagemaker.naming import Owner

# Annotations: the manual levers (anchors-operators.md (b) 1, 5, 8).
ANNOTATION_PREFIX = "optimizer.dev"
APPROVE = f"{ANNOTATION_PREFIX}/approve"
ROLLBACK = f"{ANNOTATION_PREFIX}/rollback"
PAUSE = f"{ANNOTATION_PREFIX}/pause"
REFRESH = f"{ANNOTATION_PREFIX}/refresh"

IN_PROGRESS_ENDPOINT = frozenset(
    {"Creating", "Updating", "SystemUpdating", "RollingBack", "Deleting"}
)
IN_PROGRESS_JOB = frozenset({"STARTING", "INPROGRESS", "STOPPING"})


@dataclass(frozen=True)
class VariantView:
    name: str
    model_name: str = ""
    current_weight: float | None = None
    desired_weight: float | None = None
    # DescribeEndpoint's CurrentInstanceCount (managed instance scaling moves it).
    current_instance_count: int | None = None


@dataclass(frozen=True)
class EndpointView:
    """DescribeEndpoint, reduced to what decisions need."""

    name: str
    status: str
    config_name: str
    failure_reason: str = ""
    variants: tuple[VariantView, ...] = ()
    shadow_variants: tuple[VariantView, ...] = ()
    # DescribeEndpoint's EndpointArn: spec.adoption.endpointArn must equal it.
    arn: str = ""

    def variant(self, name: str) -> VariantView | None:
        return next((v for v in self.variants if v.name == name), None)

    @property
    def in_service(self) -> bool:
        return self.status == "InService"


@dataclass(frozen=True)
class ComponentView:
    """DescribeInferenceComponent, reduced to what decisions need."""

    name: str
    status: str
    endpoint_name: str = ""
    variant_name: str = ""
    model_name: str = ""
    failure_reason: str = ""
    desired_copies: int = 0
    current_copies: int = 0
    # The Specification as described, less what SageMaker adds (Container.DeployedImage):
    # the candidate copies its compute requirements; a rollback restores it.
    specification: Mapping[str, Any] = field(default_factory=dict)
    # CreationTime and LastModifiedTime (the last status change, as SageMaker reports it).
    created_at: datetime | None = None
    modified_at: datetime | None = None

    @property
    def in_service(self) -> bool:
        return self.status == "InService"


@dataclass(frozen=True)
class JobView:
    """DescribeOptimizationJob, reduced."""

    name: str
    status: str
    failure_reason: str = ""
    output_s3_uri: str = ""
    recommended_image: str = ""


@dataclass(frozen=True)
class Observations:
    """The world as observed at the start of a wake-up."""

    endpoint: EndpointView | None
    jobs: dict[str, JobView] = field(default_factory=dict)
    # Variants of endpoint configs the operator looked up (by config name).
    config_variants: dict[str, tuple[VariantView, ...]] = field(default_factory=dict)
    # The observe cadence (pipeline.cadence) may reuse the last view of the endpoint or the
    # jobs: `endpoint_described` says DescribeEndpoint ran this wake-up, `complete` that
    # everything the phase reads was described now (what a refresh asks for).
    endpoint_described: bool = True
    complete: bool = True
    # The endpoint's tags (ListTags), read only while an adoption by tag waits for its proof.
    endpoint_tags: Mapping[str, str] | None = None
    # The JumpStart metadata of the models the spec names (aws.jumpstart reads it).
    sources: ModelSources = field(default_factory=ModelSources)
    # The endpoint's variants registered with Application Auto Scaling, with their
    # policies; None when not read this wake-up (pipeline.autoscaling.wanted says when).
    scaling: tuple[ScalableTargetRecord, ...] | None = None
    # spec.inferenceComponent: the components status and the spec name (DescribeInference-
    # Component), by name; a name that SageMaker does not know is absent.
    components: Mapping[str, ComponentView] = field(default_factory=dict)
    # The adopted component's CloudWatch Invocations per minute since
    # status.scaleToZero.windowStart, oldest first; read only on the wake-up that sees the
    # promotion done (pipeline/phases/components.py), else None.
    component_invocations: tuple[float, ...] | None = None
    # spec.search without the user's price: the instance's hourly price (the operator's
    # table or the AWS Price List), or why none is known; read once per instance type.
    price: InstancePrice | None = None
    price_problem: str = ""
    # The prices of search.instanceTypes' types looked up this wake-up.
    prices: tuple[InstancePrice, ...] = ()
    # A measured search candidate's peak GPUMemoryUtilization (CloudWatch), by row name;
    # None inside: read, no datapoints.
    gpu_memory: tuple[str, float | None] | None = None


@dataclass(frozen=True)
class Resource:
    """The Kubernetes object's identity and levers."""

    owner: Owner
    generation: int
    annotations: dict[str, str] = field(default_factory=dict)
    deleting: bool = False
    # metadata.creationTimestamp: with `rivals`, it says which resource came first.
    created: str = ""
    # Other OptimizedEndpoints naming the same SageMaker endpoint: (creationTimestamp,
    # "namespace/name"). The oldest one owns the endpoint; the others are refused.
    rivals: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Timing:
    """Process-wide timing settings that decisions depend on."""

    # Spec pauses and intervals are multiplied by this (tests run them in seconds).
    time_scale: float = 1.0
    # Seconds between wake-ups: no retry is asked for sooner than the next one.
    poll_interval: float = 30.0


class ActionKind(StrEnum):
    CREATE_MODEL = "CreateModel"
    CREATE_ENDPOINT_CONFIG = "CreateEndpointConfig"
    CREATE_ENDPOINT = "CreateEndpoint"
    UPDATE_ENDPOINT = "UpdateEndpoint"
    UPDATE_WEIGHTS = "UpdateEndpointWeightsAndCapacities"
    CREATE_OPTIMIZATION_JOB = "CreateOptimizationJob"
    STOP_OPTIMIZATION_JOB = "StopOptimizationJob"
    PUT_OBJECT = "PutObject"  # the llm-compressor entry point's source bundle
    CREATE_TRAINING_JOB = "CreateTrainingJob"
    STOP_TRAINING_JOB = "StopTrainingJob"
    PUT_ALARM = "PutMetricAlarm"
    DELETE_ALARMS = "DeleteAlarms"
    DELETE_MODEL = "DeleteModel"
    DELETE_ENDPOINT_CONFIG = "DeleteEndpointConfig"
    DELETE_ENDPOINT = "DeleteEndpoint"
    MEASURE_BASELINE = "MeasureBaseline"
    COMPARE = "Compare"
    # One analysis interval of live per-variant CloudWatch metrics, for the live judge;
    # request: {"start", "end"} (ISO 8601) and "periodSeconds".
    JUDGE_LIVE = "JudgeLive"
    # Application Auto Scaling: a variant's target held off for an update, then put back.
    REGISTER_SCALABLE_TARGET = "RegisterScalableTarget"
    DEREGISTER_SCALABLE_TARGET = "DeregisterScalableTarget"
    PUT_SCALING_POLICY = "PutScalingPolicy"
    CREATE_INFERENCE_COMPONENT = "CreateInferenceComponent"
    UPDATE_INFERENCE_COMPONENT = "UpdateInferenceComponent"
    DELETE_INFERENCE_COMPONENT = "DeleteInferenceComponent"


# Which AWS service each API action goes to.
SERVICE = {kind: "sagemaker" for kind in ActionKind} | {
    ActionKind.PUT_ALARM: "cloudwatch",
    ActionKind.DELETE_ALARMS: "cloudwatch",
    ActionKind.PUT_OBJECT: "s3",
    ActionKind.REGISTER_SCALABLE_TARGET: "application-autoscaling",
    ActionKind.DEREGISTER_SCALABLE_TARGET: "application-autoscaling",
    ActionKind.PUT_SCALING_POLICY: "application-autoscaling",
}


@dataclass(frozen=True)
class Action:
    """One idempotent step: an AWS call (request ready) or a measurement."""

    kind: ActionKind
    resource: str
    request: dict[str, Any] = field(default_factory=dict)
    # For measurements: the variants to pin with TargetVariant and the rollout step.
    baseline_variant: str = ""
    candidate_variant: str = ""
    step: int = 0
    # For comparisons: the output tokens per second the baseline's own benchmark read per
    # level (one variant), so the first round is placed on shard pods where one process
    # could not carry the level (bench/limits.py), instead of learning it by saturating.
    baseline_tokens_per_s: dict[int, float] = field(default_factory=dict)
    # For comparisons: the candidate's hourly cost over its reference's (a cost objective
    # across instance types, spec.search.instanceTypes); None where a price is unknown.
    cost_ratio: float | None = 1.0

    @property
    def is_measurement(self) -> bool:
        return self.kind in (
            ActionKind.MEASURE_BASELINE,
            ActionKind.COMPARE,
            ActionKind.JUDGE_LIVE,
        )


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post on the resource."""

    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass
class Decision:
    """What one wake-up does: actions in order, then the new status, then events."""

    actions: list[Action]
    status: dict[str, Any]
    events: list[Event]


@dataclass(frozen=True)
class MeasurementPlan:
    """Which variants a measurement action reaches (`pipeline.assess.measurement_plan`)."""

    # The candidate is benchmarked too, pinned with TargetVariant, at the same time.
    candidate: bool = False
    # The measured variants answer the eval set.
    evaluate: bool = False


@dataclass(frozen=True)
class EvalAnswers:
    """The answers in prompt order, and which engine served them (the containers' labels)."""

    texts: list[str]
    served: list[ServedBy | None]

    def engine_summary(self) -> EngineSummary:
        return summarize(self.served)


@dataclass(frozen=True)
class VariantRun:
    """One variant's part of a measurement as it came back: its benchmark, its eval answers."""

    variant: str
    report: BenchReport  # every round merged (summaries, errors)
    answers: EvalAnswers | None = None  # None: no eval set was run
    # The sequential judge's rounds, in order, when there were more than one.
    rounds: tuple[BenchReport, ...] = ()

    @property
    def all_rounds(self) -> tuple[BenchReport, ...]:
        return self.rounds or (self.report,)


@dataclass(frozen=True)
class RawMeasurement:
    """What a measurement action brought back, unjudged: `pipeline.assess.judge` judges it.

    MEASURE_BASELINE and COMPARE: the variants' benchmark reports and eval answers, the
    eval items they answered (with the references the scorers need), and when the
    benchmark ended. A shadow's COMPARE has no candidate: the shadow variant cannot be
    invoked with TargetVariant. JUDGE_LIVE: the CloudWatch series of both variants over
    the window the action asked for.
    """

    action: Action
    baseline: VariantRun | None = None
    candidate: VariantRun | None = None
    eval_items: tuple[EvalItem, ...] = ()
    benchmarked_at: datetime | None = None
    # JUDGE_LIVE: probe requests pinned to each variant while the window was read.
    probes: Mapping[VariantRole, ProbeSamples] = field(default_factory=dict)
    series: Mapping[VariantRole, VariantSeries] = field(default_factory=dict)
    # JUDGE_LIVE of a speculative candidate: the containers' speculative-metrics log lines.
    spec_lines: Mapping[VariantRole, tuple[SpecLine, ...]] = field(default_factory=dict)
    # MEASURE_BASELINE: the eval items (indexes into eval_items) the baseline was asked a
    # second time, and those answers in the same order (the eval set's A/A noise).
    repeated: tuple[int, ...] = ()
    repeat_answers: EvalAnswers | None = None


@dataclass(frozen=True)
class Measurement:
    """A judged measurement (`pipeline.assess.judge`), recorded into status by `pipeline.record`."""

    kind: ActionKind
    step: int
    baseline: VariantMeasurements = field(default_factory=VariantMeasurements)
    candidate: VariantMeasurements | None = None
    checks: tuple[Check, ...] = ()
    # JUDGE_LIVE: the interval the live judge folds in, and the CloudWatch series it came
    # from (exported as the dashboard's live panels).
    live: tuple[LiveObservation, ...] = ()
    series: Mapping[VariantRole, VariantSeries] = field(default_factory=dict)
    # Not a measurement (most requests failed, the client fell behind): why. Nothing of
    # it is judged or recorded as measured; it is tried again after a backoff.
    void: str = ""
    # Void because the container refused the body of every failed request (HTTP 400): the
    # same requests would be refused again.
    refused: bool = False
    # COMPARE with spec.evaluation.spotCheck: the paired samples a person reads; the
    # controller writes them to a ConfigMap before the comparison enters status.
    spot_check: SpotCheck | None = None
    # MEASURE_BASELINE: the eval set's A/A noise (evaluation/noise.py), kept per generation.
    eval_noise: EvalNoise | None = None
