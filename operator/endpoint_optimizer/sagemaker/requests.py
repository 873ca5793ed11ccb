"""Request builders: pure functions from SageMaker-side blueprints to boto3 keyword arguments.

Nothing here calls AWS. The shapes follow reference/sagemaker-api.md and the
SageMaker Python SDK's conventions (S3Prefix + CompressionType None for LLM
weights, one OptimizationConfigs element per technique, a draft model mounted as
channel `draft_model`). botocore's service model validates every request these
build in the unit tests.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from endpoint_optimizer.sagemaker.naming import OWNER_TAG_KEY

DRAFT_CHANNEL = "draft_model"
DRAFT_MOUNT = f"/opt/ml/additional-model-data-sources/{DRAFT_CHANNEL}"


def tags(owner: str, extra: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """The ownership tag on everything the operator makes (cleanup and adoption read it)."""
    result = [{"Key": OWNER_TAG_KEY, "Value": owner[:256]}]
    result += [{"Key": k, "Value": v[:256]} for k, v in (extra or {}).items()]
    return result


def s3_prefix(uri: str, accept_eula: bool = False) -> dict[str, Any]:
    """An uncompressed S3 prefix (LLM weights); SageMaker wants the trailing slash."""
    source: dict[str, Any] = {
        "S3Uri": uri if uri.endswith("/") else uri + "/",
        "S3DataType": "S3Prefix",
        "CompressionType": "None",
    }
    if accept_eula:
        source["ModelAccessConfig"] = {"AcceptEula": True}
    return source


@dataclass(frozen=True)
class Network:
    """spec.network as SageMaker's request members; each builder takes what its API accepts."""

    subnets: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    isolation: bool = False
    volume_kms_key_id: str | None = None
    output_kms_key_id: str | None = None

    def vpc_config(self) -> dict[str, list[str]] | None:
        if not self.subnets:
            return None
        return {"SecurityGroupIds": list(self.security_group_ids), "Subnets": list(self.subnets)}

    def model_members(self) -> dict[str, Any]:
        """CreateModel and CreateTrainingJob: VpcConfig and EnableNetworkIsolation."""
        members: dict[str, Any] = {}
        if (vpc := self.vpc_config()) is not None:
            members["VpcConfig"] = vpc
        if self.isolation:
            members["EnableNetworkIsolation"] = True
        return members


@dataclass(frozen=True)
class DraftModel:
    """A speculative-decoding draft model: an S3 prefix (mounted) or a hub id (passed as-is)."""

    s3_uri: str | None = None
    hub_id: str | None = None
    accept_eula: bool = False


@dataclass(frozen=True)
class ServingModel:
    """A SageMaker Model: image, weights, environment, optional draft model."""

    name: str
    image: str
    # None: the container downloads the weights itself (a Hugging Face id in HF_MODEL_ID).
    model_s3_uri: str | None
    role_arn: str
    environment: Mapping[str, str] = field(default_factory=dict)
    accept_eula: bool = False
    draft: DraftModel | None = None
    network: Network | None = None


def create_model(model: ServingModel, owner: str) -> dict[str, Any]:
    environment = dict(model.environment)
    container: dict[str, Any] = {"Image": model.image}
    if model.model_s3_uri is not None:
        container["ModelDataSource"] = {
            "S3DataSource": s3_prefix(model.model_s3_uri, model.accept_eula)
        }
    if model.draft is not None:
        if model.draft.s3_uri is not None:
            container["AdditionalModelDataSources"] = [
                {
                    "ChannelName": DRAFT_CHANNEL,
                    "S3DataSource": s3_prefix(model.draft.s3_uri, model.draft.accept_eula),
                }
            ]
            environment["OPTION_SPECULATIVE_DRAFT_MODEL"] = DRAFT_MOUNT
        elif model.draft.hub_id is not None:
            environment["OPTION_SPECULATIVE_DRAFT_MODEL"] = model.draft.hub_id
    if environment:
        container["Environment"] = environment
    request: dict[str, Any] = {
        "ModelName": model.name,
        "PrimaryContainer": container,
        "ExecutionRoleArn": model.role_arn,
        "Tags": tags(owner),
    }
    if model.network is not None:
        # A model-based endpoint takes its VPC and isolation from the Model (the endpoint
        # config's own VpcConfig is for inference-component endpoints).
        request |= model.network.model_members()
    return request


@dataclass(frozen=True)
class Variant:
    """One production (or shadow) variant of an endpoint config."""

    name: str
    model_name: str
    instance_type: str
    instance_count: int = 1
    weight: float = 1.0
    download_timeout_s: int | None = None
    startup_timeout_s: int | None = None
    # spec.network.volumeKmsKeyId: the endpoint config's KmsKeyId (one per config).
    volume_kms_key_id: str | None = None


def production_variant(variant: Variant) -> dict[str, Any]:
    body: dict[str, Any] = {
        "VariantName": variant.name,
        "ModelName": variant.model_name,
        "InstanceType": variant.instance_type,
        "InitialInstanceCount": variant.instance_count,
        "InitialVariantWeight": float(variant.weight),
    }
    if variant.download_timeout_s is not None:
        body["ModelDataDownloadTimeoutInSeconds"] = variant.download_timeout_s
    if variant.startup_timeout_s is not None:
        body["ContainerStartupHealthCheckTimeoutInSeconds"] = variant.startup_timeout_s
    return body


def create_endpoint_config(
    name: str,
    variants: Sequence[Variant],
    owner: str,
    shadow: Variant | None = None,
) -> dict[str, Any]:
    if not variants:
        raise ValueError(f"endpoint config {name} needs at least one production variant")
    if shadow is not None and len(variants) != 1:
        # SageMaker: with a shadow variant, exactly one production variant.
        raise ValueError(f"endpoint config {name}: a shadow needs exactly one production variant")
    request: dict[str, Any] = {
        "EndpointConfigName": name,
        "ProductionVariants": [production_variant(v) for v in variants],
        "Tags": tags(owner),
    }
    if shadow is not None:
        request["ShadowProductionVariants"] = [production_variant(shadow)]
    key = next((v.volume_kms_key_id for v in variants if v.volume_kms_key_id), None)
    if key is not None:
        request["KmsKeyId"] = key
    return request


def create_endpoint(name: str, config_name: str, owner: str) -> dict[str, Any]:
    return {"EndpointName": name, "EndpointConfigName": config_name, "Tags": tags(owner)}


def blue_green_deployment(
    alarm_names: Sequence[str],
    wait_s: int,
    termination_wait_s: int = 0,
    max_execution_s: int | None = None,
) -> dict[str, Any]:
    """An all-at-once blue/green switch, rolled back by SageMaker if any alarm fires.

    `termination_wait_s` keeps the blue (baseline) fleet warm after the switch, so a
    rollback in that window needs no cold start.
    """
    policy: dict[str, Any] = {
        "TrafficRoutingConfiguration": {
            "Type": "ALL_AT_ONCE",
            "WaitIntervalInSeconds": max(0, min(3600, wait_s)),
        },
        "TerminationWaitInSeconds": max(0, min(3600, termination_wait_s)),
    }
    if max_execution_s is not None:
        policy["MaximumExecutionTimeoutInSeconds"] = max(600, min(28800, max_execution_s))
    config: dict[str, Any] = {"BlueGreenUpdatePolicy": policy}
    if alarm_names:
        config["AutoRollbackConfiguration"] = {
            "Alarms": [{"AlarmName": name} for name in alarm_names[:10]]
        }
    return config


def update_endpoint(
    name: str,
    config_name: str,
    deployment: Mapping[str, Any] | None = None,
    keep_instance_counts: bool = False,
) -> dict[str, Any]:
    """`keep_instance_counts`: variants that stay keep the instance count SageMaker reports
    now (what autoscaling set) instead of the config's InitialInstanceCount; weights still
    come from the config (endpoint-scaling-update.html, step 6)."""
    request: dict[str, Any] = {"EndpointName": name, "EndpointConfigName": config_name}
    if deployment is not None:
        request["DeploymentConfig"] = dict(deployment)
    if keep_instance_counts:
        request["RetainAllVariantProperties"] = True
        request["ExcludeRetainedVariantProperties"] = [{"VariantPropertyType": "DesiredWeight"}]
    return request


def update_weights(name: str, weights: Mapping[str, float]) -> dict[str, Any]:
    """Shift traffic between production variants; capacities stay as they are."""
    return {
        "EndpointName": name,
        "DesiredWeightsAndCapacities": [
            {"VariantName": variant, "DesiredWeight": float(weight)}
            for variant, weight in weights.items()
        ],
    }


def canary_weights(baseline: str, candidate: str, percent: int) -> dict[str, float]:
    """Weights for `percent` % to the candidate (weights are relative shares)."""
    percent = max(0, min(100, percent))
    return {baseline: float(100 - percent), candidate: float(percent)}


# ------------------------------------------------------------------ optimization jobs


@dataclass(frozen=True)
class OptimizationConfig:
    """One OptimizationConfigs element: its union member and that member's body."""

    member: str  # ModelQuantizationConfig | ModelCompilationConfig | ModelShardingConfig | ...
    body: Mapping[str, Any] = field(default_factory=dict)

    def element(self) -> dict[str, Any]:
        return {self.member: dict(self.body)}

    @property
    def override_environment(self) -> dict[str, str]:
        return dict(self.body.get("OverrideEnvironment") or {})


def container_config(
    member: str, image: str | None = None, override_environment: Mapping[str, str] | None = None
) -> OptimizationConfig:
    """A member of the container shape (quantization, compilation, sharding): an optional
    Image and OverrideEnvironment, each left out when unset."""
    body: dict[str, Any] = {}
    if image is not None:
        body["Image"] = image
    if override_environment:
        body["OverrideEnvironment"] = dict(override_environment)
    return OptimizationConfig(member, body)


@dataclass(frozen=True)
class OptimizationJob:
    name: str
    role_arn: str
    # The weights: an S3 prefix, or (None) the SageMaker Model `source_model` (a Hugging
    # Face model the operator created, whose container downloads them).
    model_s3_uri: str | None
    instance_type: str
    output_s3_uri: str
    configs: Sequence[OptimizationConfig]
    accept_eula: bool = False
    environment: Mapping[str, str] = field(default_factory=dict)
    max_runtime_s: int = 36000
    source_model: str | None = None
    network: Network | None = None


def create_optimization_job(job: OptimizationJob, owner: str) -> dict[str, Any]:
    if not job.configs:
        raise ValueError(f"optimization job {job.name} has no technique")
    model_source: dict[str, Any]
    if job.model_s3_uri is None:
        if job.source_model is None:
            raise ValueError(f"optimization job {job.name} has neither weights nor a model")
        model_source = {"SageMakerModel": {"ModelName": job.source_model}}
    else:
        source: dict[str, Any] = {"S3Uri": job.model_s3_uri}
        if job.accept_eula:
            source["ModelAccessConfig"] = {"AcceptEula": True}
        model_source = {"S3": source}
    request: dict[str, Any] = {
        "OptimizationJobName": job.name,
        "RoleArn": job.role_arn,
        "ModelSource": model_source,
        "DeploymentInstanceType": job.instance_type,
        "OptimizationConfigs": [config.element() for config in job.configs],
        "OutputConfig": {"S3OutputLocation": job.output_s3_uri},
        "StoppingCondition": {"MaxRuntimeInSeconds": job.max_runtime_s},
        "Tags": tags(owner),
    }
    if job.environment:
        request["OptimizationEnvironment"] = dict(job.environment)
    if job.network is not None:
        # Optimization jobs take a VPC and an output key, no isolation or volume key.
        if (vpc := job.network.vpc_config()) is not None:
            request["VpcConfig"] = vpc
        if job.network.output_kms_key_id is not None:
            request["OutputConfig"]["KmsKeyId"] = job.network.output_kms_key_id
    return request


def serving_environment(job: OptimizationJob) -> dict[str, str]:
    """The environment the optimized model serves with: as the SDK does, the job's
    OptimizationEnvironment plus every technique's OverrideEnvironment (later wins)."""
    environment = dict(job.environment)
    for config in job.configs:
        environment.update(config.override_environment)
    return environment


def add_environment(
    operation: str, request: Mapping[str, Any], extra: Mapping[str, str]
) -> dict[str, Any]:
    """A copy of a CreateModel or CreateTrainingJob request with `extra` in its container's
    environment (the token the controller reads at use time, never part of a plan)."""
    copy = json.loads(json.dumps(request))
    if operation == "CreateModel":
        container = copy["PrimaryContainer"]
        container["Environment"] = {**container.get("Environment", {}), **extra}
    elif operation == "CreateTrainingJob":
        copy["Environment"] = {**copy.get("Environment", {}), **extra}
    else:
        raise ValueError(f"{operation} takes no container environment")
    result: dict[str, Any] = copy
    return result


# ------------------------------------------------------------------ CloudWatch alarms


def rollback_alarms(
    endpoint: str,
    variant: str,
    prefix: str,
    max_error_rate: float,
    max_latency_ms: float,
    owner: str = "",
) -> list[dict[str, Any]]:
    """PutMetricAlarm requests SageMaker's auto-rollback watches during a blue/green bake.

    Tagged with the owner like everything else the operator makes (`owner`: Owner.tag_value).
    """
    dimensions = [
        {"Name": "EndpointName", "Value": endpoint},
        {"Name": "VariantName", "Value": variant},
    ]
    common: dict[str, Any] = {
        "Namespace": "AWS/SageMaker",
        "Dimensions": dimensions,
        "Period": 60,
        "EvaluationPeriods": 1,
        "DatapointsToAlarm": 1,
        "ComparisonOperator": "GreaterThanThreshold",
        "TreatMissingData": "notBreaching",
    }
    if owner:
        common["Tags"] = tags(owner)
    return [
        {
            **common,
            "AlarmName": f"{prefix}-errors",
            "AlarmDescription": f"endpoint-optimizer: 5XX rate of {endpoint}/{variant}",
            "MetricName": "Invocation5XXErrors",
            "Statistic": "Average",
            "Threshold": float(max_error_rate),
        },
        {
            **common,
            "AlarmName": f"{prefix}-latency",
            "AlarmDescription": f"endpoint-optimizer: model latency of {endpoint}/{variant}",
            "MetricName": "ModelLatency",
            "Statistic": "Average",
            # ModelLatency is in microseconds.
            "Threshold": float(max_latency_ms) * 1000.0,
        },
    ]


# InferenceComponentSpecification members a create or update may carry (botocore's model);
# DescribeInferenceComponent adds Container.DeployedImage, which no request takes.
_COMPONENT_SPEC_KEYS = (
    "StartupParameters",
    "ComputeResourceRequirements",
    "DataCacheConfig",
    "SchedulingConfig",
)


def component_specification(described: Mapping[str, Any], model_name: str) -> dict[str, Any]:
    """A component's Specification serving `model_name`, with the compute, startup, cache and
    scheduling settings of `described` (a DescribeInferenceComponent Specification).

    The Model carries image, artifacts and environment, so no Container is copied: a
    Container on the described spec overrides its Model's, and would override the
    candidate's (the optimized artifacts and serving environment) too.
    """
    spec: dict[str, Any] = {"ModelName": model_name}
    for key in _COMPONENT_SPEC_KEYS:
        if key in described:
            spec[key] = described[key]
    return spec


def create_inference_component(
    name: str,
    endpoint: str,
    variant: str,
    specification: Mapping[str, Any],
    copies: int,
    owner: str,
) -> dict[str, Any]:
    return {
        "InferenceComponentName": name,
        "EndpointName": endpoint,
        "VariantName": variant,
        "Specification": dict(specification),
        "RuntimeConfig": {"CopyCount": max(1, copies)},
        "Tags": tags(owner),
    }


def update_inference_component(
    name: str,
    specification: Mapping[str, Any],
    *,
    batch_percent: int = 100,
    wait_s: int = 0,
    alarms: list[str] | None = None,
) -> dict[str, Any]:
    """A rolling update of a component to `specification`: batches of `batch_percent` % of
    its copies (CAPACITY_PERCENT), each baked `wait_s` while `alarms` are watched; an alarm
    in ALARM rolls the component back (InferenceComponentDeploymentConfig)."""
    deployment: dict[str, Any] = {
        "RollingUpdatePolicy": {
            "MaximumBatchSize": {
                "Type": "CAPACITY_PERCENT",
                "Value": min(100, max(1, batch_percent)),
            },
            "WaitIntervalInSeconds": min(3600, max(0, wait_s)),
        }
    }
    if alarms:
        deployment["AutoRollbackConfiguration"] = {"Alarms": [{"AlarmName": a} for a in alarms]}
    return {
        "InferenceComponentName": name,
        "Specification": dict(specification),
        "DeploymentConfig": deployment,
    }


def component_alarms(
    component: str,
    prefix: str,
    max_error_rate: float,
    max_latency_ms: float,
    owner: str = "",
) -> list[dict[str, Any]]:
    """rollback_alarms on a component's own metrics (dimension InferenceComponentName)."""
    alarms = rollback_alarms("", "", prefix, max_error_rate, max_latency_ms, owner)
    for alarm in alarms:
        alarm["Dimensions"] = [{"Name": "InferenceComponentName", "Value": component}]
        alarm["AlarmDescription"] = str(alarm["AlarmDescription"]).replace(
            "/", f"inference component {component}", 1
        )
    return alarms
