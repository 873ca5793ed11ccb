"""The SageMaker control plane: models, endpoint configs, endpoints, optimization and training jobs.

State transitions are lazy: each resource stores when its pending change completes, and
every call first advances the world to "now". No background tasks, so nothing can leak,
and `time_scale` (times the slow-transitions fault) stretches or shrinks every duration.

Error codes and messages follow reference/sagemaker-api.md §6: endpoints, models and
configs answer ValidationException ("Could not find ...", "Cannot create already existing
..."); optimization jobs answer ResourceNotFound / ResourceInUse.
"""

from __future__ import annotations

import base64
import hashlib
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from endpoint_optimizer.sandbox import techniques
from endpoint_optimizer.sandbox.config import SandboxConfig
from endpoint_optimizer.sandbox.serving import (
    VariantProfile,
    profile_from_environment,
    with_regression,
)
from endpoint_optimizer.sandbox.techniques import Baked
from endpoint_optimizer.sandbox.validation import RequestInvalid, response_errors, validate


class AwsError(Exception):
    """An error answered in the service's wire shape."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


def validation_error(message: str) -> AwsError:
    return AwsError("ValidationException", message)


Handler = Callable[[dict[str, Any]], dict[str, Any]]


def operation_handler(
    owner: object, service: str, target: str, operation: str, params: dict[str, Any]
) -> Handler:
    """`owner`'s op_<operation> for a request its service model accepts.

    For the JSON 1.1 services that answer ValidationException and UnknownOperationException
    (SageMaker, Application Auto Scaling): `service` names the botocore model, `target` the
    X-Amz-Target prefix the message names.
    """
    try:
        validate(service, operation, params)
    except RequestInvalid as exc:
        raise validation_error(str(exc)) from exc
    handler: Handler | None = getattr(owner, f"op_{operation}", None)
    if handler is None:
        raise AwsError(
            "UnknownOperationException",
            f"The sandbox does not implement {target}.{operation}.",
        )
    return handler


def modelled(service: str, operation: str, result: dict[str, Any], code: str) -> dict[str, Any]:
    """`result`, unless it is a response AWS could not have sent: a sandbox bug, failed loudly
    with the service's own internal error `code`."""
    broken = response_errors(service, operation, result)
    if broken:
        raise AwsError(
            code,
            f"sandbox response for {operation} breaks the service model: {broken[:3]}",
            500,
        )
    return result


LMI_IMAGE = "763104351884.dkr.ecr.{region}.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"
TRTLLM_IMAGE = (
    "763104351884.dkr.ecr.{region}.amazonaws.com/djl-inference:0.33.0-tensorrtllm0.21.0-cu128"
)
NEURON_IMAGE = "763104351884.dkr.ecr.{region}.amazonaws.com/djl-inference:0.29.0-neuronx-sdk2.19.1"


def _epoch(moment: datetime) -> float:
    return moment.timestamp()


@dataclass
class Artifact:
    """What a finished job baked into the S3 prefix it wrote."""

    prefix: str
    source_uri: str
    baked: Baked = field(default_factory=Baked)
    job: str = ""


@dataclass
class S3Object:
    """One PutObject: what the sandbox keeps (no body) for the admin state."""

    size: int
    etag: str
    content_type: str
    written: datetime


@dataclass
class Model:
    name: str
    arn: str
    request: dict[str, Any]
    created: datetime


@dataclass
class EndpointConfig:
    name: str
    arn: str
    request: dict[str, Any]
    created: datetime

    def variants(self) -> list[dict[str, Any]]:
        return list(self.request.get("ProductionVariants", []))

    def shadow_variants(self) -> list[dict[str, Any]]:
        return list(self.request.get("ShadowProductionVariants", []))


@dataclass
class Deployment:
    """A pending create, update or weights change on an endpoint."""

    kind: str  # "create" | "update" | "weights"
    config_name: str
    started: float
    ready_at: float
    request: dict[str, Any] = field(default_factory=dict)
    # Blue/green: when the new fleet is up, and (seconds after that, share of traffic on
    # the new fleet) for each traffic-shifting step.
    provisioned_at: float | None = None
    shifts: list[tuple[float, float]] = field(default_factory=list)
    # The Model resources as the call found them (by name): what the new fleet serves.
    models: dict[str, Model] = field(default_factory=dict)

    def new_fleet_share(self, now: float) -> float:
        """Share of traffic the new config takes now (0 before its fleet is up)."""
        if self.provisioned_at is None or now < self.provisioned_at:
            return 0.0
        share = 0.0
        for offset, step_share in self.shifts:
            if now - self.provisioned_at >= offset:
                share = step_share
        return share

    def alarms(self) -> list[str]:
        config = (self.request.get("DeploymentConfig") or {}).get("AutoRollbackConfiguration")
        return [a["AlarmName"] for a in (config or {}).get("Alarms", []) if "AlarmName" in a]


@dataclass
class Endpoint:
    name: str
    arn: str
    status: str
    created: datetime
    modified: datetime
    config_name: str | None = None  # the config serving now
    pending: Deployment | None = None
    failure_reason: str | None = None
    delete_at: float | None = None
    weights: dict[str, float] = field(default_factory=dict)
    instance_counts: dict[str, int] = field(default_factory=dict)
    last_deployment_config: dict[str, Any] | None = None
    deployed_at: datetime | None = None
    # The config CreateEndpoint named: DescribeEndpoint shows it while Creating or Failed.
    created_with: str | None = None
    # The models the serving fleet was deployed with. A running variant keeps serving when
    # its Model resource is deleted (the container was already pulled onto the instance,
    # the model data already downloaded); only a new deployment needs the Model again.
    served_models: dict[str, Model] = field(default_factory=dict)


@dataclass
class Job:
    """An optimization job (UPPERCASE statuses) or a training job (CamelCase statuses)."""

    kind: str  # "optimization" | "training"
    name: str
    arn: str
    request: dict[str, Any]
    created: datetime
    status: str
    modified: datetime
    ready_at: float
    started: datetime | None = None
    ended: datetime | None = None
    failure_reason: str | None = None
    stop_at: float | None = None


@dataclass
class CallRecord:
    operation: str
    resource: str | None
    wall_time: float
    error_code: str | None


# Which request member names the resource an operation acts on.
_RESOURCE_MEMBERS = (
    "InferenceComponentName",  # before EndpointName: CreateInferenceComponent names both
    "EndpointName",
    "EndpointConfigName",
    "ModelName",
    "OptimizationJobName",
    "TrainingJobName",
)


class ControlPlane:
    """The SageMaker service's state and its operations (thread-safe)."""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.lock = threading.RLock()
        self.rng = random.Random(config.seed)
        # Services built over this state (sandbox/components.py): their op_<Operation>
        # methods answer SageMaker operations too, and their clocks advance with it.
        self.extra_owners: list[object] = []
        self.advance_hooks: list[Callable[[float, datetime], None]] = []
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.models: dict[str, Model] = {}
            self.endpoint_configs: dict[str, EndpointConfig] = {}
            self.endpoints: dict[str, Endpoint] = {}
            self.optimization_jobs: dict[str, Job] = {}
            self.training_jobs: dict[str, Job] = {}
            self.artifacts: dict[str, Artifact] = {}
            self.objects: dict[str, S3Object] = {}  # s3://bucket/key -> metadata
            self.calls: list[CallRecord] = []
            # Tags by resource ARN: set by a Create* call's Tags or by AddTags.
            self.tags: dict[str, dict[str, str]] = {}
            self.rng = random.Random(self.config.seed)

    # -- helpers --------------------------------------------------------------------------

    def arn(self, kind: str, name: str) -> str:
        region, account = self.config.region, self.config.account_id
        return f"arn:aws:sagemaker:{region}:{account}:{kind}/{name.lower()}"

    def duration(self, seconds: float) -> float:
        return seconds * self.config.time_scale * self.config.faults.slow_transitions

    def handle(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        """Run one SageMaker operation; records it in the call log either way."""
        resource = next(
            (str(params[m]) for m in _RESOURCE_MEMBERS if isinstance(params.get(m), str)), None
        )
        error_code: str | None = None
        try:
            with self.lock:
                self._throttle(operation)
                owner = next((o for o in self.extra_owners if hasattr(o, f"op_{operation}")), self)
                handler = operation_handler(owner, "sagemaker", "SageMaker", operation, params)
                self.advance()
                result = handler(params)
                if operation.startswith("Create"):
                    # A new resource has the create's tags only (a name used before keeps none).
                    arn = next((str(v) for k, v in result.items() if k.endswith("Arn")), None)
                    if arn is not None:
                        given = params.get("Tags") or []
                        self.tags[arn] = {str(t["Key"]): str(t["Value"]) for t in given}
                return modelled("sagemaker", operation, result, "InternalFailure")
        except AwsError as exc:
            error_code = exc.code
            raise
        finally:
            with self.lock:
                self.calls.append(CallRecord(operation, resource, time.time(), error_code))

    def _throttle(self, operation: str) -> None:
        faults = self.config.faults
        if faults.throttle_fraction <= 0:
            return
        if faults.throttle_operations and operation not in faults.throttle_operations:
            return
        if self.rng.random() < faults.throttle_fraction:
            raise AwsError("ThrottlingException", "Rate exceeded")

    def _quota(self, operation: str, config: EndpointConfig | None = None) -> None:
        if operation in self.config.faults.quota_exceeded:
            instance = "ml.g5.12xlarge"
            if config is not None and config.variants():
                instance = str(config.variants()[0].get("InstanceType", instance))
            raise AwsError(
                "ResourceLimitExceeded",
                f"The account-level service limit '{instance} for endpoint usage' is 0 "
                f"Instances, with current utilization of 0 Instances and a request delta of 1 "
                f"Instances. Please use AWS Service Quotas to request an increase for this "
                f"quota. If AWS Service Quotas is not available, contact AWS support to "
                f"request an increase for this quota.",
            )
        if config is None or not self.config.instance_quotas:
            return
        in_use: dict[str, int] = {}
        for endpoint in self.endpoints.values():
            for name in {endpoint.config_name, endpoint.pending and endpoint.pending.config_name}:
                serving = self.endpoint_configs.get(name) if isinstance(name, str) else None
                for variant in serving.variants() if serving else []:
                    kind = str(variant.get("InstanceType"))
                    in_use[kind] = in_use.get(kind, 0) + int(variant.get("InitialInstanceCount", 1))
        for variant in config.variants() + config.shadow_variants():
            kind = str(variant.get("InstanceType"))
            limit = self.config.instance_quotas.get(kind)
            delta = int(variant.get("InitialInstanceCount", 1))
            if limit is not None and in_use.get(kind, 0) + delta > limit:
                raise AwsError(
                    "ResourceLimitExceeded",
                    f"The account-level service limit '{kind} for endpoint usage' is {limit} "
                    f"Instances, with current utilization of {in_use.get(kind, 0)} Instances and "
                    f"a request delta of {delta} Instances. Please use AWS Service Quotas to "
                    f"request an increase for this quota. If AWS Service Quotas is not "
                    f"available, contact AWS support to request an increase for this quota.",
                )

    # -- time -----------------------------------------------------------------------------

    def advance(self) -> None:
        """Complete every pending transition whose time has come."""
        now = time.monotonic()
        wall = datetime.now(UTC)
        for endpoint in list(self.endpoints.values()):
            if endpoint.delete_at is not None:
                if now >= endpoint.delete_at:
                    del self.endpoints[endpoint.name]
                continue
            pending = endpoint.pending
            if pending is not None and now >= pending.ready_at:
                self._finish_deployment(endpoint, pending, wall)
            elif (
                pending is not None
                and pending.new_fleet_share(now) > 0
                and any(self.alarm_state(name) == "ALARM" for name in pending.alarms())
            ):
                # Alarms are watched while traffic shifts and bakes: roll back at once.
                self._finish_deployment(endpoint, pending, wall)
        for job in self.optimization_jobs.values():
            self._advance_job(job, now, wall)
        for job in self.training_jobs.values():
            self._advance_job(job, now, wall)
        for hook in self.advance_hooks:
            hook(now, wall)

    def _finish_deployment(self, endpoint: Endpoint, pending: Deployment, wall: datetime) -> None:
        endpoint.pending = None
        endpoint.modified = wall
        if pending.kind == "weights":
            for item in pending.request.get("DesiredWeightsAndCapacities", []):
                variant = item["VariantName"]
                if "DesiredWeight" in item:
                    endpoint.weights[variant] = float(item["DesiredWeight"])
                if "DesiredInstanceCount" in item:
                    endpoint.instance_counts[variant] = int(item["DesiredInstanceCount"])
            endpoint.status = "InService"
            return
        config = self.endpoint_configs.get(pending.config_name)
        failure = self._deployment_failure(endpoint, pending, config)
        if failure is not None:
            endpoint.failure_reason = failure
            # A failed create leaves nothing serving; a failed update keeps the old config.
            endpoint.status = "Failed" if pending.kind == "create" else "InService"
            return
        assert config is not None
        retain = pending.kind == "update" and bool(
            pending.request.get("RetainAllVariantProperties")
        )
        excluded = {
            item.get("VariantPropertyType")
            for item in pending.request.get("ExcludeRetainedVariantProperties", [])
        }
        old_weights, old_counts = dict(endpoint.weights), dict(endpoint.instance_counts)
        endpoint.weights, endpoint.instance_counts = {}, {}
        for variant in config.variants() + config.shadow_variants():
            name = variant["VariantName"]
            weight = float(variant.get("InitialVariantWeight", 1.0))
            count = int(variant.get("InitialInstanceCount", 1))
            if retain and name in old_weights and "DesiredWeight" not in excluded:
                weight = old_weights[name]
            if retain and name in old_counts and "DesiredInstanceCount" not in excluded:
                count = old_counts[name]
            endpoint.weights[name] = weight
            endpoint.instance_counts[name] = count
        endpoint.config_name = config.name
        endpoint.served_models = dict(pending.models)
        endpoint.status = "InService"
        endpoint.failure_reason = None
        endpoint.deployed_at = wall
        if pending.request.get("DeploymentConfig") is not None:
            endpoint.last_deployment_config = pending.request["DeploymentConfig"]

    def _deployment_failure(
        self, endpoint: Endpoint, pending: Deployment, config: EndpointConfig | None
    ) -> str | None:
        faults = self.config.faults
        if config is None:
            return f'Could not find endpoint configuration "{pending.config_name}".'
        if pending.kind == "create" and endpoint.name in faults.fail_endpoint_creates:
            faults.fail_endpoint_creates.remove(endpoint.name)
            return (
                "The primary container for production variant AllTraffic did not pass the "
                "ping health check. Please check CloudWatch logs for this endpoint."
            )
        if pending.kind == "update" and endpoint.name in faults.fail_endpoint_updates:
            faults.fail_endpoint_updates.remove(endpoint.name)
            return (
                "Failed to update endpoint: the new production variant did not pass the ping "
                "health check. The endpoint was rolled back to its previous endpoint "
                "configuration."
            )
        for variant in config.variants() + config.shadow_variants():
            profile = self.variant_profile(endpoint.name, config, variant)
            if profile is not None and not profile.fits():
                return (
                    f"The primary container for production variant {variant['VariantName']} did "
                    f"not pass the ping health check: CUDA out of memory loading "
                    f"{profile.model_size_b:g}B weights on {variant.get('InstanceType')}. "
                    f"Please check CloudWatch logs for this endpoint."
                )
        alarms = (pending.request.get("DeploymentConfig") or {}).get(
            "AutoRollbackConfiguration", {}
        )
        fired = [
            alarm["AlarmName"]
            for alarm in alarms.get("Alarms", [])
            if self.alarm_state(alarm.get("AlarmName", "")) == "ALARM"
        ]
        if fired:
            return (
                "Rolled back: CloudWatch alarm(s) "
                + ", ".join(fired)
                + " went into ALARM state during the deployment."
            )
        return None

    # The CloudWatch side sets this so auto-rollback can read alarm states.
    alarm_state: Callable[[str], str] = staticmethod(lambda _name: "OK")
    # Application Auto Scaling (sandbox/autoscaling.py) sets these: the variants of an
    # endpoint registered as scalable targets, and what DeleteEndpoint does to them.
    scaled_variants: Callable[[str], frozenset[str]] = staticmethod(lambda _name: frozenset())
    endpoint_deleted: Callable[[str], None] = staticmethod(lambda _name: None)

    def _advance_job(self, job: Job, now: float, wall: datetime) -> None:
        training = job.kind == "training"
        running = ("InProgress", "Stopping") if training else ("INPROGRESS", "STARTING", "STOPPING")
        if job.status not in running:
            return
        if job.stop_at is not None:
            if now >= job.stop_at:
                job.status = "Stopped" if training else "STOPPED"
                job.ended = job.modified = wall
            return
        if now < job.ready_at:
            return
        failing = (
            self.config.faults.fail_training_jobs
            if training
            else (self.config.faults.fail_optimization_jobs)
        )
        job.ended = job.modified = wall
        if job.name in failing:
            job.status = "Failed" if training else "FAILED"
            job.failure_reason = (
                "AlgorithmError: quantization failed: calibration produced NaN scales in "
                "model.layers.17.mlp.down_proj"
                if training
                else "ClientError: Optimization failed: the quantization step exited with code 1."
            )
            return
        job.status = "Completed" if training else "COMPLETED"
        self._register_artifact(job)

    def _register_artifact(self, job: Job) -> None:
        request = job.request
        if job.kind == "optimization":
            prefix = str(request["OutputConfig"]["S3OutputLocation"])
            source = request.get("ModelSource", {})
            uri = str(source.get("S3", {}).get("S3Uri", ""))
            if not uri and "SageMakerModel" in source:
                model = self.models.get(source["SageMakerModel"].get("ModelName", ""))
                uri = model_uri(model.request) if model else ""
            parent = self.artifact_for(uri)
            baked = parent.baked if parent is not None else Baked()
            env = dict(request.get("OptimizationEnvironment", {}))
            for technique in request.get("OptimizationConfigs", []):
                for member, body in technique.items():
                    override = {**env, **(body.get("OverrideEnvironment") or {})}
                    baked = techniques.bake(baked, member, override)
            artifact = Artifact(prefix, parent.source_uri if parent else uri, baked, job=job.name)
            self.artifacts[_norm(prefix)] = artifact
            registered = request["OutputConfig"].get("SageMakerModel", {}).get("ModelName")
            if registered and registered not in self.models:
                image = self._recommended_image(job)
                self.models[registered] = Model(
                    registered,
                    self.arn("model", registered),
                    {
                        "ModelName": registered,
                        "ExecutionRoleArn": request["RoleArn"],
                        "PrimaryContainer": {
                            "Image": image,
                            "ModelDataSource": {
                                "S3DataSource": {
                                    "S3Uri": _norm(prefix),
                                    "S3DataType": "S3Prefix",
                                    "CompressionType": "None",
                                }
                            },
                            "Environment": env,
                        },
                    },
                    datetime.now(UTC),
                )
        else:
            output = str(request["OutputDataConfig"]["S3OutputPath"]).rstrip("/")
            prefix = f"{output}/{job.name}/"
            channels = request.get("InputDataConfig", [])
            uri = ""
            for channel in channels:
                source = channel.get("DataSource", {}).get("S3DataSource", {})
                if channel.get("ChannelName") in ("model", "base_model", "weights"):
                    uri = str(source.get("S3Uri", ""))
            quantization = techniques.trained_quantization(
                request.get("HyperParameters") or {}, request.get("Environment") or {}
            )
            artifact = Artifact(prefix, uri or job.name, Baked(quantization), job=job.name)
            self.artifacts[prefix] = artifact

    def _recommended_image(self, job: Job) -> str:
        members = {key for item in job.request.get("OptimizationConfigs", []) for key in item}
        instance = str(job.request.get("DeploymentInstanceType", ""))
        if instance.startswith(("ml.inf", "ml.trn")):
            return NEURON_IMAGE.format(region=self.config.region)
        if members & techniques.COMPILING_MEMBERS:
            return TRTLLM_IMAGE.format(region=self.config.region)
        return LMI_IMAGE.format(region=self.config.region)

    def artifact_for(self, uri: str) -> Artifact | None:
        """The job artifact an S3 URI points into, if any (longest prefix wins)."""
        if not uri:
            return None
        normalized = _norm(uri)
        best: Artifact | None = None
        for prefix, artifact in self.artifacts.items():
            if normalized.startswith(prefix) and (best is None or len(prefix) > len(best.prefix)):
                best = artifact
        return best

    # -- serving profile --------------------------------------------------------------------

    def variant_profile(
        self, endpoint: str, config: EndpointConfig, variant: dict[str, Any]
    ) -> VariantProfile | None:
        """The serving profile of one variant, regressions included."""
        model = self.served_model(endpoint, config, variant)
        if model is None:
            return None
        container = (
            model.request.get("PrimaryContainer") or (model.request.get("Containers") or [{}])[0]
        )
        uri = model_uri(model.request)
        artifact = self.artifact_for(uri)
        profile = profile_from_environment(
            str(variant.get("InstanceType", "ml.g5.2xlarge")),
            artifact.source_uri if artifact else uri,
            dict(container.get("Environment") or {}),
            quantization=artifact.baked.quantization if artifact else None,
            compiled=artifact.baked.compiled if artifact else False,
            eagle=artifact.baked.eagle if artifact else False,
        )
        for latency in self.config.faults.latency_regressions:
            if latency.matches(endpoint, variant["VariantName"], config.name, model.name):
                profile = with_regression(profile, latency_factor=latency.factor)
        for acceptance in self.config.faults.acceptance_regressions:
            if acceptance.matches(endpoint, variant["VariantName"], config.name, model.name):
                profile = with_regression(profile, acceptance_factor=acceptance.factor)
        for quality in self.config.faults.quality_regressions:
            if quality.matches(endpoint, variant["VariantName"], config.name, model.name):
                profile = with_regression(
                    profile,
                    quality_drop=quality.accuracy_drop,
                    refusal_increase=quality.refusal_increase,
                    prompt_classes=tuple(quality.prompt_classes),
                )
        return profile

    def served_model(
        self, endpoint: str, config: EndpointConfig, variant: dict[str, Any]
    ) -> Model | None:
        """The Model a variant runs: as deployed when `config` serves or is being deployed
        (deleting the Model resource afterwards changes nothing), else the resource."""
        name = str(variant.get("ModelName", ""))
        current = self.endpoints.get(endpoint)
        if current is not None:
            if current.config_name == config.name and name in current.served_models:
                return current.served_models[name]
            pending = current.pending
            if (
                pending is not None
                and pending.config_name == config.name
                and name in pending.models
            ):
                return pending.models[name]
        return self.models.get(name)

    def _require_models(self, config: EndpointConfig) -> None:
        """A new deployment needs every Model its config names: a running variant keeps
        its deployed copy when its Model is deleted, but CreateEndpoint/UpdateEndpoint with
        a config naming the deleted Model fail (ValidationException "Could not find model")."""
        for variant in config.variants() + config.shadow_variants():
            if "ModelName" in variant:
                self._model(str(variant["ModelName"]))

    def _models_of(self, config: EndpointConfig) -> dict[str, Model]:
        return {
            str(v["ModelName"]): self.models[str(v["ModelName"])]
            for v in config.variants() + config.shadow_variants()
            if str(v.get("ModelName", "")) in self.models
        }

    # -- models -----------------------------------------------------------------------------

    def op_CreateModel(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["ModelName"]
        _check_name(name, "modelName")
        if name in self.models:
            raise validation_error(
                f'Cannot create already existing model "{self.arn("model", name)}".'
            )
        if "PrimaryContainer" not in p and not p.get("Containers"):
            raise validation_error(
                "Either PrimaryContainer or Containers must be specified for model " + name + "."
            )
        self._quota("CreateModel")
        self.models[name] = Model(name, self.arn("model", name), p, datetime.now(UTC))
        return {"ModelArn": self.arn("model", name)}

    def _model(self, name: str) -> Model:
        model = self.models.get(name)
        if model is None:
            raise validation_error(f'Could not find model "{self.arn("model", name)}".')
        return model

    def op_DescribeModel(self, p: dict[str, Any]) -> dict[str, Any]:
        model = self._model(p["ModelName"])
        out = {key: value for key, value in model.request.items() if key != "Tags"}
        out.update(ModelArn=model.arn, CreationTime=_epoch(model.created))
        out.setdefault("EnableNetworkIsolation", False)
        return out

    def op_DeleteModel(self, p: dict[str, Any]) -> dict[str, Any]:
        self._model(p["ModelName"])
        del self.models[p["ModelName"]]
        return {}

    def op_ListModels(self, p: dict[str, Any]) -> dict[str, Any]:
        rows = [
            {"ModelName": m.name, "ModelArn": m.arn, "CreationTime": _epoch(m.created)}
            for m in self.models.values()
        ]
        return _page(rows, p, "Models", "ModelName", None)

    # -- endpoint configs -------------------------------------------------------------------

    def op_CreateEndpointConfig(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["EndpointConfigName"]
        _check_name(name, "endpointConfigName")
        if name in self.endpoint_configs:
            raise validation_error(
                "Cannot create already existing endpoint configuration "
                f'"{self.arn("endpoint-config", name)}".'
            )
        production = p.get("ProductionVariants", [])
        shadows = p.get("ShadowProductionVariants") or []
        if shadows and (len(production) != 1 or len(shadows) != 1):
            raise validation_error(
                "An endpoint configuration with ShadowProductionVariants must have exactly one "
                "production variant and one shadow variant."
            )
        names = [v["VariantName"] for v in production + shadows]
        if len(set(names)) != len(names):
            raise validation_error(
                f"Variant names must be unique within endpoint configuration {name}: {names}."
            )
        for variant in production + shadows:
            _check_name(variant["VariantName"], "variantName")
            if "ModelName" in variant:
                self._model(variant["ModelName"])
            scaling = variant.get("ManagedInstanceScaling") or {}
            if "ModelName" in variant and int(scaling.get("MinInstanceCount", 1)) == 0:
                # endpoint-auto-scaling-zero-instances.html: "An endpoint can scale to and
                # from zero instances only if it hosts inference components."
                raise validation_error(
                    f"Variant {variant['VariantName']}: ManagedInstanceScaling MinInstanceCount "
                    "0 is only supported for endpoints that host inference components."
                )
            if "ModelName" not in variant and "ExecutionRoleArn" not in p:
                # A variant without a model hosts inference components; SageMaker needs the
                # config's ExecutionRoleArn to deploy them ([unverified] wording).
                raise validation_error(
                    f"Variant {variant['VariantName']} names no ModelName: an endpoint "
                    "configuration for inference components must specify ExecutionRoleArn."
                )
            if "InstanceType" not in variant and "ServerlessConfig" not in variant:
                raise validation_error(
                    f"Variant {variant['VariantName']}: specify InstanceType and "
                    "InitialInstanceCount, or ServerlessConfig."
                )
        self.endpoint_configs[name] = EndpointConfig(
            name, self.arn("endpoint-config", name), p, datetime.now(UTC)
        )
        return {"EndpointConfigArn": self.arn("endpoint-config", name)}

    def _endpoint_config(self, name: str) -> EndpointConfig:
        config = self.endpoint_configs.get(name)
        if config is None:
            raise validation_error(
                f'Could not find endpoint configuration "{self.arn("endpoint-config", name)}".'
            )
        return config

    def op_DescribeEndpointConfig(self, p: dict[str, Any]) -> dict[str, Any]:
        config = self._endpoint_config(p["EndpointConfigName"])
        out = {key: value for key, value in config.request.items() if key != "Tags"}
        out.update(EndpointConfigArn=config.arn, CreationTime=_epoch(config.created))
        for variant in out.get("ProductionVariants", []) + out.get("ShadowProductionVariants", []):
            variant.setdefault("InitialVariantWeight", 1.0)
        return out

    def op_DeleteEndpointConfig(self, p: dict[str, Any]) -> dict[str, Any]:
        self._endpoint_config(p["EndpointConfigName"])
        # AWS allows deleting a config that is in use (the doc says "must not"); so do we.
        del self.endpoint_configs[p["EndpointConfigName"]]
        return {}

    def op_ListEndpointConfigs(self, p: dict[str, Any]) -> dict[str, Any]:
        rows = [
            {
                "EndpointConfigName": c.name,
                "EndpointConfigArn": c.arn,
                "CreationTime": _epoch(c.created),
            }
            for c in self.endpoint_configs.values()
        ]
        return _page(rows, p, "EndpointConfigs", "EndpointConfigName", None)

    # -- tags -------------------------------------------------------------------------------

    def _tagged(self, arn: str) -> dict[str, str]:
        """The tags of an existing resource (ValidationException when there is none)."""
        existing = [
            *(m.arn for m in self.models.values()),
            *(c.arn for c in self.endpoint_configs.values()),
            *(e.arn for e in self.endpoints.values()),
            *(j.arn for j in self.optimization_jobs.values()),
            *(j.arn for j in self.training_jobs.values()),
        ]
        if arn not in existing:
            raise validation_error(f"Resource {arn} not found.")
        return self.tags.setdefault(arn, {})

    def op_ListTags(self, p: dict[str, Any]) -> dict[str, Any]:
        tags = self._tagged(p["ResourceArn"])
        return {"Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}

    def op_AddTags(self, p: dict[str, Any]) -> dict[str, Any]:
        tags = self._tagged(p["ResourceArn"])
        tags.update({str(t["Key"]): str(t["Value"]) for t in p["Tags"]})
        return {"Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}

    # -- endpoints --------------------------------------------------------------------------

    def _endpoint(self, name: str) -> Endpoint:
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            raise validation_error(f'Could not find endpoint "{self.arn("endpoint", name)}".')
        return endpoint

    def op_CreateEndpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["EndpointName"]
        _check_name(name, "endpointName")
        if name in self.endpoints:
            raise validation_error(
                f'Cannot create already existing endpoint "{self.arn("endpoint", name)}".'
            )
        config = self._endpoint_config(p["EndpointConfigName"])
        self._require_models(config)
        self._quota("CreateEndpoint", config)
        now, wall = time.monotonic(), datetime.now(UTC)
        endpoint = Endpoint(name, self.arn("endpoint", name), "Creating", wall, wall)
        endpoint.created_with = config.name
        endpoint.pending = Deployment(
            "create",
            config.name,
            now,
            now + self.duration(self.config.durations.endpoint_create),
            p,
            models=self._models_of(config),
        )
        self.endpoints[name] = endpoint
        return {"EndpointArn": endpoint.arn}

    def _status(self, endpoint: Endpoint) -> str:
        """The status SageMaker reports: the endpoint_states fault switch overrides it."""
        return self.config.faults.endpoint_states.get(endpoint.name, endpoint.status)

    def op_UpdateEndpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        endpoint = self._endpoint(p["EndpointName"])
        config = self._endpoint_config(p["EndpointConfigName"])
        if self._status(endpoint) != "InService":
            # [unverified] exact wording; the reference only says ValidationException.
            raise validation_error(f'Cannot update in-progress endpoint "{endpoint.arn}".')
        self._refuse_autoscaled(endpoint, config)
        self._require_models(config)
        self._quota("UpdateEndpoint", config)
        request = dict(p)
        if p.get("RetainDeploymentConfig") and endpoint.last_deployment_config is not None:
            request.setdefault("DeploymentConfig", endpoint.last_deployment_config)
        endpoint.pending = self._blue_green(config, request)
        endpoint.pending.models = self._models_of(config)
        endpoint.status = "Updating"
        endpoint.failure_reason = None
        endpoint.modified = datetime.now(UTC)
        return {"EndpointArn": endpoint.arn}

    def _refuse_autoscaled(self, endpoint: Endpoint, config: EndpointConfig) -> None:
        """UpdateEndpoint fails when it would remove a variant registered with Application
        Auto Scaling or change its instance type; a new model is allowed.

        AWS: sagemaker/latest/dg/endpoint-scaling-update.html ("If the update would change
        the instance type for any model that is a target for auto scaling, the update
        fails ... If you are trying to update the endpoint by calling the UpdateEndpoint
        API, the call fails"; its steps 1 and 7 are "only required if you're updating an
        endpoint with ... Changing the instance type for a production variant that has
        autoscaling configured; Removing a production variant that has autoscaling
        configured"; "If you change the model for a variant that is configured for auto
        scaling, Amazon SageMaker AI auto scaling allows the update"). The error code is
        ValidationException; its wording is the sandbox's ([unverified]).
        """
        scaled = self.scaled_variants(endpoint.name)
        serving = self.endpoint_configs.get(endpoint.config_name or "")
        if not scaled or serving is None:
            return
        new = {v["VariantName"]: v for v in config.variants()}
        blocked = []
        for variant in serving.variants():
            name = variant["VariantName"]
            if name not in scaled:
                continue
            if name not in new or new[name].get("InstanceType") != variant.get("InstanceType"):
                blocked.append(name)
        if blocked:
            raise validation_error(
                f'The variant(s) "[{", ".join(sorted(blocked))}]" of endpoint "{endpoint.arn}" '
                "are registered as scalable targets with Application Auto Scaling: an update "
                "cannot remove them or change their instance type. Delete their scaling "
                "policies and deregister them (DeregisterScalableTarget) before the update, "
                "then register the updated variant and attach the policies again."
            )

    def _blue_green(self, config: EndpointConfig, request: dict[str, Any]) -> Deployment:
        """Plan an update: provision the new fleet, shift traffic, bake, then finish.

        No DeploymentConfig means blue/green ALL_AT_ONCE with no wait. CANARY sends the canary
        share for one wait interval before the rest; LINEAR moves one step per interval.
        RollingUpdatePolicy is treated as LINEAR by MaximumBatchSize (simplification).
        """
        now = time.monotonic()
        provisioned = now + self.duration(self.config.durations.endpoint_update)
        deployment = request.get("DeploymentConfig") or {}
        policy = deployment.get("BlueGreenUpdatePolicy") or {}
        routing = policy.get("TrafficRoutingConfiguration") or {}
        rolling = deployment.get("RollingUpdatePolicy")
        kind = str(routing.get("Type", "ALL_AT_ONCE"))
        wait = float(routing.get("WaitIntervalInSeconds", 0))
        instances = sum(int(v.get("InitialInstanceCount", 1)) for v in config.variants()) or 1

        def share_of(size: dict[str, Any] | None, default: float) -> float:
            if not size:
                return default
            value = float(size.get("Value", 0))
            share = value / 100 if size.get("Type") == "CAPACITY_PERCENT" else value / instances
            return min(1.0, max(0.01, share))

        shifts: list[tuple[float, float]]
        if rolling:
            wait = float(rolling.get("WaitIntervalInSeconds", 0))
            kind, routing = "LINEAR", {"LinearStepSize": rolling.get("MaximumBatchSize")}
        if kind == "CANARY":
            shifts = [(0.0, share_of(routing.get("CanarySize"), 0.1)), (wait, 1.0)]
            baking = 2 * wait
        elif kind == "LINEAR":
            step = share_of(routing.get("LinearStepSize"), 0.25)
            count = max(1, int(-(-1 // step)))
            shifts = [(i * wait, min(1.0, (i + 1) * step)) for i in range(count)]
            baking = count * wait
        else:
            shifts = [(0.0, 1.0)]
            baking = wait
        baking += float(policy.get("TerminationWaitInSeconds", 0))
        scale = self.config.time_scale * self.config.faults.slow_transitions
        return Deployment(
            "update",
            config.name,
            now,
            provisioned + baking * scale,
            request,
            provisioned_at=provisioned,
            shifts=[(offset * scale, share) for offset, share in shifts],
        )

    def op_UpdateEndpointWeightsAndCapacities(self, p: dict[str, Any]) -> dict[str, Any]:
        endpoint = self._endpoint(p["EndpointName"])
        if self._status(endpoint) != "InService":
            raise validation_error(f'Cannot update in-progress endpoint "{endpoint.arn}".')
        known = set(endpoint.weights)
        asked = [item["VariantName"] for item in p["DesiredWeightsAndCapacities"]]
        missing = [name for name in asked if name not in known]
        if missing:
            raise validation_error(
                f'The variant(s) "[{", ".join(missing)}]" are not present in endpoint '
                f'"{endpoint.arn}".'
            )
        if len(set(asked)) != len(asked):
            raise validation_error("Variant names in DesiredWeightsAndCapacities must be unique.")
        now = time.monotonic()
        endpoint.pending = Deployment(
            "weights",
            endpoint.config_name or "",
            now,
            now + self.duration(self.config.durations.weights_update),
            p,
        )
        endpoint.status = "Updating"
        endpoint.modified = datetime.now(UTC)
        return {"EndpointArn": endpoint.arn}

    def op_DeleteEndpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        endpoint = self._endpoint(p["EndpointName"])
        if self._status(endpoint) == "SystemUpdating":
            raise validation_error(
                f'Cannot delete endpoint "{endpoint.arn}" while it is SystemUpdating.'
            )
        if endpoint.delete_at is None:
            self.endpoint_deleted(endpoint.name)
            endpoint.status = "Deleting"
            endpoint.pending = None
            endpoint.delete_at = time.monotonic() + self.duration(
                self.config.durations.endpoint_delete
            )
        return {}

    def op_DescribeEndpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        endpoint = self._endpoint(p["EndpointName"])
        out: dict[str, Any] = {
            "EndpointName": endpoint.name,
            "EndpointArn": endpoint.arn,
            "EndpointStatus": self._status(endpoint),
            "CreationTime": _epoch(endpoint.created),
            "LastModifiedTime": _epoch(endpoint.modified),
        }
        if endpoint.failure_reason:
            out["FailureReason"] = endpoint.failure_reason
        if endpoint.last_deployment_config is not None:
            out["LastDeploymentConfig"] = endpoint.last_deployment_config
        config = self.endpoint_configs.get(endpoint.config_name or "")
        if endpoint.config_name or endpoint.created_with:
            out["EndpointConfigName"] = endpoint.config_name or endpoint.created_with
        if config is not None:
            out["ProductionVariants"] = [
                self._variant_summary(endpoint, v) for v in config.variants()
            ]
            if config.shadow_variants():
                out["ShadowProductionVariants"] = [
                    self._variant_summary(endpoint, v) for v in config.shadow_variants()
                ]
        pending = endpoint.pending
        if pending is not None and pending.kind in ("create", "update"):
            target = self.endpoint_configs.get(pending.config_name)
            stage = self._stage(pending)
            summary: dict[str, Any] = {
                "EndpointConfigName": pending.config_name,
                "StartTime": _epoch(endpoint.modified),
            }
            if target is not None:
                summary["ProductionVariants"] = [
                    self._pending_variant(v, stage) for v in target.variants()
                ]
                if target.shadow_variants():
                    summary["ShadowProductionVariants"] = [
                        self._pending_variant(v, stage) for v in target.shadow_variants()
                    ]
            out["PendingDeploymentSummary"] = summary
        return out

    def _stage(self, pending: Deployment) -> str:
        now = time.monotonic()
        if pending.provisioned_at is None:
            return "Creating"
        share = pending.new_fleet_share(now)
        if share <= 0:
            return "Creating"
        if share < 1:
            return "ActivatingTraffic"
        return "Baking"

    def _image_summary(self, variant: dict[str, Any]) -> list[dict[str, Any]]:
        model = self.models.get(str(variant.get("ModelName", "")))
        if model is None:
            return []
        container = model.request.get("PrimaryContainer") or {}
        image = str(container.get("Image", LMI_IMAGE.format(region=self.config.region)))
        digest = base64.b16encode(image.encode()).decode().lower()[:64].ljust(64, "0")
        return [
            {
                "SpecifiedImage": image,
                "ResolvedImage": image.split(":")[0] + "@sha256:" + digest,
                "ResolutionTime": _epoch(model.created),
            }
        ]

    def _variant_summary(self, endpoint: Endpoint, variant: dict[str, Any]) -> dict[str, Any]:
        name = variant["VariantName"]
        weight = endpoint.weights.get(name, float(variant.get("InitialVariantWeight", 1.0)))
        count = endpoint.instance_counts.get(name, int(variant.get("InitialInstanceCount", 1)))
        desired_weight, desired_count = weight, count
        if endpoint.pending is not None and endpoint.pending.kind == "weights":
            for item in endpoint.pending.request.get("DesiredWeightsAndCapacities", []):
                if item["VariantName"] == name:
                    desired_weight = float(item.get("DesiredWeight", weight))
                    desired_count = int(item.get("DesiredInstanceCount", count))
        summary: dict[str, Any] = {
            "VariantName": name,
            "DeployedImages": self._image_summary(variant),
            "CurrentWeight": weight,
            "DesiredWeight": desired_weight,
            "CurrentInstanceCount": count,
            "DesiredInstanceCount": desired_count,
        }
        if variant.get("ManagedInstanceScaling"):
            # ProductionVariantSummary carries the variant's managed instance scaling
            # (API_ProductionVariantSummary.html).
            summary["ManagedInstanceScaling"] = dict(variant["ManagedInstanceScaling"])
        if endpoint.pending is not None and endpoint.pending.kind == "weights":
            summary["VariantStatus"] = [
                {"Status": "Updating", "StartTime": _epoch(endpoint.modified)}
            ]
        return summary

    def _pending_variant(self, variant: dict[str, Any], stage: str) -> dict[str, Any]:
        return {
            "VariantName": variant["VariantName"],
            "DeployedImages": self._image_summary(variant),
            "CurrentWeight": 0.0,
            "DesiredWeight": float(variant.get("InitialVariantWeight", 1.0)),
            "CurrentInstanceCount": 0,
            "DesiredInstanceCount": int(variant.get("InitialInstanceCount", 1)),
            "InstanceType": variant.get("InstanceType", "ml.g5.2xlarge"),
            "VariantStatus": [{"Status": stage, "StartTime": time.time()}],
        }

    def op_ListEndpoints(self, p: dict[str, Any]) -> dict[str, Any]:
        rows = [
            {
                "EndpointName": e.name,
                "EndpointArn": e.arn,
                "CreationTime": _epoch(e.created),
                "LastModifiedTime": _epoch(e.modified),
                "EndpointStatus": self._status(e),
            }
            for e in self.endpoints.values()
        ]
        return _page(rows, p, "Endpoints", "EndpointName", "EndpointStatus")

    # -- optimization jobs ------------------------------------------------------------------

    def op_CreateOptimizationJob(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["OptimizationJobName"]
        _check_name(name, "optimizationJobName")
        if name in self.optimization_jobs:
            raise AwsError(
                "ResourceInUse",
                f"Optimization job {name} already exists: {self.arn('optimization-job', name)}.",
            )
        source = p["ModelSource"]
        if ("S3" in source) == ("SageMakerModel" in source):
            raise validation_error("ModelSource must specify exactly one of S3 or SageMakerModel.")
        if "SageMakerModel" in source:
            self._model(str(source["SageMakerModel"].get("ModelName", "")))
        if not p.get("OptimizationConfigs"):
            raise validation_error("OptimizationConfigs must contain at least one configuration.")
        self._quota("CreateOptimizationJob")
        return {"OptimizationJobArn": self._start_job("optimization", name, p).arn}

    def _start_job(self, kind: str, name: str, p: dict[str, Any]) -> Job:
        wall = datetime.now(UTC)
        seconds = (
            self.config.durations.optimization_job
            if kind == "optimization"
            else self.config.durations.training_job
        )
        arn = self.arn("optimization-job" if kind == "optimization" else "training-job", name)
        job = Job(
            kind,
            name,
            arn,
            p,
            wall,
            "INPROGRESS" if kind == "optimization" else "InProgress",
            wall,
            time.monotonic() + self.duration(seconds),
            started=wall,
        )
        (self.optimization_jobs if kind == "optimization" else self.training_jobs)[name] = job
        return job

    def _optimization_job(self, name: str) -> Job:
        job = self.optimization_jobs.get(name)
        if job is None:
            raise AwsError(
                "ResourceNotFound",
                f"Optimization job {name} does not exist: {self.arn('optimization-job', name)}.",
            )
        return job

    def op_DescribeOptimizationJob(self, p: dict[str, Any]) -> dict[str, Any]:
        job = self._optimization_job(p["OptimizationJobName"])
        out = {key: value for key, value in job.request.items() if key != "Tags"}
        out.update(
            OptimizationJobArn=job.arn,
            OptimizationJobStatus=job.status,
            CreationTime=_epoch(job.created),
            LastModifiedTime=_epoch(job.modified),
        )
        if job.started:
            out["OptimizationStartTime"] = _epoch(job.started)
        if job.ended:
            out["OptimizationEndTime"] = _epoch(job.ended)
        if job.failure_reason:
            out["FailureReason"] = job.failure_reason
        if job.status == "COMPLETED":
            out["OptimizationOutput"] = {"RecommendedInferenceImage": self._recommended_image(job)}
        return out

    def op_StopOptimizationJob(self, p: dict[str, Any]) -> dict[str, Any]:
        job = self._optimization_job(p["OptimizationJobName"])
        if job.status in ("INPROGRESS", "STARTING"):
            job.status = "STOPPING"
            job.modified = datetime.now(UTC)
            job.stop_at = time.monotonic() + self.duration(self.config.durations.job_stop)
        return {}

    def op_DeleteOptimizationJob(self, p: dict[str, Any]) -> dict[str, Any]:
        self._optimization_job(p["OptimizationJobName"])
        del self.optimization_jobs[p["OptimizationJobName"]]
        return {}

    def op_ListOptimizationJobs(self, p: dict[str, Any]) -> dict[str, Any]:
        rows = []
        wanted = str(p.get("OptimizationContains", "")).lower()
        for job in self.optimization_jobs.values():
            types = [
                key.removeprefix("Model").removesuffix("Config")
                for item in job.request.get("OptimizationConfigs", [])
                for key in item
            ]
            if wanted and not any(wanted in t.lower() for t in types):
                continue
            row: dict[str, Any] = {
                "OptimizationJobName": job.name,
                "OptimizationJobArn": job.arn,
                "CreationTime": _epoch(job.created),
                "OptimizationJobStatus": job.status,
                "LastModifiedTime": _epoch(job.modified),
                "DeploymentInstanceType": job.request["DeploymentInstanceType"],
                "OptimizationTypes": types,
            }
            if job.started:
                row["OptimizationStartTime"] = _epoch(job.started)
            if job.ended:
                row["OptimizationEndTime"] = _epoch(job.ended)
            if "MaxInstanceCount" in job.request:
                row["MaxInstanceCount"] = job.request["MaxInstanceCount"]
            rows.append(row)
        return _page(
            rows, p, "OptimizationJobSummaries", "OptimizationJobName", "OptimizationJobStatus"
        )

    # -- training jobs (the llm-compressor quantization path) ------------------------------

    def op_CreateTrainingJob(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["TrainingJobName"]
        _check_name(name, "trainingJobName")
        if name in self.training_jobs:
            raise AwsError(
                "ResourceInUse",
                f"Training job names must be unique within an AWS account and "
                f"region, and a training job with this name already exists "
                f"({self.arn('training-job', name)})",
            )
        self._quota("CreateTrainingJob")
        return {"TrainingJobArn": self._start_job("training", name, p).arn}

    def _training_job(self, name: str) -> Job:
        job = self.training_jobs.get(name)
        if job is None:
            raise validation_error(f"Requested resource not found: training job {name}")
        return job

    def op_DescribeTrainingJob(self, p: dict[str, Any]) -> dict[str, Any]:
        job = self._training_job(p["TrainingJobName"])
        request = job.request
        output = str(request["OutputDataConfig"]["S3OutputPath"]).rstrip("/")
        secondary = {
            "InProgress": "Training",
            "Completed": "Completed",
            "Failed": "Failed",
            "Stopping": "Stopping",
            "Stopped": "Stopped",
        }[job.status]
        out = {key: value for key, value in request.items() if key != "Tags"}
        out.update(
            TrainingJobArn=job.arn,
            TrainingJobStatus=job.status,
            SecondaryStatus=secondary,
            CreationTime=_epoch(job.created),
            LastModifiedTime=_epoch(job.modified),
            ModelArtifacts={"S3ModelArtifacts": _model_artifacts(output, job.name, request)},
        )
        if job.started:
            out["TrainingStartTime"] = _epoch(job.started)
        if job.ended:
            out["TrainingEndTime"] = _epoch(job.ended)
        if job.failure_reason:
            out["FailureReason"] = job.failure_reason
        return out

    def op_StopTrainingJob(self, p: dict[str, Any]) -> dict[str, Any]:
        job = self._training_job(p["TrainingJobName"])
        if job.status != "InProgress":
            # As SageMaker answers it (awslabs/benchmark-ai#928, a Stopped job).
            raise validation_error(
                f"The request was rejected because the training job is in status {job.status}."
            )
        job.status = "Stopping"
        job.modified = datetime.now(UTC)
        job.stop_at = time.monotonic() + self.duration(self.config.durations.job_stop)
        return {}

    def op_ListTrainingJobs(self, p: dict[str, Any]) -> dict[str, Any]:
        rows = []
        for job in self.training_jobs.values():
            row: dict[str, Any] = {
                "TrainingJobName": job.name,
                "TrainingJobArn": job.arn,
                "CreationTime": _epoch(job.created),
                "LastModifiedTime": _epoch(job.modified),
                "TrainingJobStatus": job.status,
            }
            if job.ended:
                row["TrainingEndTime"] = _epoch(job.ended)
            rows.append(row)
        return _page(rows, p, "TrainingJobSummaries", "TrainingJobName", "TrainingJobStatus")

    # -- S3 (only PutObject: the operator uploads the llm-compressor source bundle) --------

    def put_object(self, bucket: str, key: str, body: bytes, content_type: str) -> str:
        """Keep the object's metadata (not its body); return its ETag (the MD5, quoted)."""
        uri = f"s3://{bucket}/{key}"
        etag = f'"{hashlib.md5(body, usedforsecurity=False).hexdigest()}"'
        with self.lock:
            self.objects[uri] = S3Object(len(body), etag, content_type, datetime.now(UTC))
            self.calls.append(CallRecord("PutObject", uri, time.time(), None))
        return etag

    def record_call(self, operation: str, resource: str, error_code: str | None) -> None:
        """A call answered outside the control plane (S3 GetObject) in the call log."""
        with self.lock:
            self.calls.append(CallRecord(operation, resource, time.time(), error_code))

    # -- admin ------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Every resource, for GET /_sandbox/state."""
        with self.lock:
            self.advance()
            return {
                "models": {n: self.op_DescribeModel({"ModelName": n}) for n in self.models},
                "endpointConfigs": {
                    n: self.op_DescribeEndpointConfig({"EndpointConfigName": n})
                    for n in self.endpoint_configs
                },
                "endpoints": {
                    n: self.op_DescribeEndpoint({"EndpointName": n}) for n in self.endpoints
                },
                "optimizationJobs": {
                    n: self.op_DescribeOptimizationJob({"OptimizationJobName": n})
                    for n in self.optimization_jobs
                },
                "trainingJobs": {
                    n: self.op_DescribeTrainingJob({"TrainingJobName": n})
                    for n in self.training_jobs
                },
                "artifacts": {
                    prefix: {
                        "sourceUri": a.source_uri,
                        "quantization": a.baked.quantization,
                        "compiled": a.baked.compiled,
                        "eagle": a.baked.eagle,
                        "job": a.job,
                    }
                    for prefix, a in self.artifacts.items()
                },
                "objects": {
                    uri: {
                        "size": o.size,
                        "etag": o.etag,
                        "contentType": o.content_type,
                        "lastModified": o.written.isoformat(),
                    }
                    for uri, o in self.objects.items()
                },
            }


def _model_artifacts(output: str, job: str, request: dict[str, Any]) -> str:
    """ModelArtifacts.S3ModelArtifacts: with OutputDataConfig.CompressionType NONE SageMaker
    uploads /opt/ml/model as-is under the output/model/ prefix; else as model.tar.gz."""
    compression = str(request["OutputDataConfig"].get("CompressionType", "GZIP"))
    if compression == "NONE":
        return f"{output}/{job}/output/model/"
    return f"{output}/{job}/output/model.tar.gz"


def model_uri(request: dict[str, Any]) -> str:
    """The S3 URI (or JumpStart id) a CreateModel request serves weights from."""
    container = request.get("PrimaryContainer") or (request.get("Containers") or [{}])[0]
    source = (container.get("ModelDataSource") or {}).get("S3DataSource") or {}
    env = container.get("Environment") or {}
    return str(
        source.get("S3Uri")
        or container.get("ModelDataUrl")
        or env.get("HF_MODEL_ID")
        or env.get("OPTION_MODEL_ID")
        or request.get("ModelName", "")
    )


def _norm(uri: str) -> str:
    return uri if uri.endswith("/") else uri + "/"


def _check_name(name: str, member: str) -> None:
    # The service model already enforces length and pattern; this guards names whose
    # member has a looser pattern (e.g. ModelName allows 0 chars).
    if not name:
        raise validation_error(
            f"1 validation error detected: Value '' at '{member}' failed to satisfy "
            "constraint: Member must have length greater than or equal to 1"
        )


def _page(
    rows: list[dict[str, Any]],
    p: dict[str, Any],
    key: str,
    name_key: str,
    status_key: str | None,
) -> dict[str, Any]:
    """Filter, sort and paginate a List* answer the way the List APIs do."""
    contains = str(p.get("NameContains", "")).lower()
    if contains:
        rows = [r for r in rows if contains in str(r[name_key]).lower()]
    status = p.get("StatusEquals")
    if status and status_key:
        rows = [r for r in rows if str(r[status_key]).lower() == str(status).lower()]
    for bound, field_name, after in (
        ("CreationTimeAfter", "CreationTime", True),
        ("CreationTimeBefore", "CreationTime", False),
        ("LastModifiedTimeAfter", "LastModifiedTime", True),
        ("LastModifiedTimeBefore", "LastModifiedTime", False),
    ):
        if bound in p:
            limit = float(p[bound])
            rows = [
                r
                for r in rows
                if field_name in r and (r[field_name] > limit if after else r[field_name] < limit)
            ]
    sort_by = str(p.get("SortBy", "CreationTime"))
    sort_key = {"Name": name_key, "Status": status_key or name_key}.get(sort_by, "CreationTime")
    rows.sort(key=lambda r: (r.get(sort_key), r[name_key]))
    if p.get("SortOrder", "Descending" if key != "OptimizationJobSummaries" else "Ascending") == (
        "Descending"
    ):
        rows.reverse()
    start = 0
    if p.get("NextToken"):
        try:
            start = int(base64.b64decode(str(p["NextToken"])).decode())
        except ValueError as exc:
            raise validation_error("The NextToken is invalid.") from exc
    size = int(p.get("MaxResults", 10 if key != "OptimizationJobSummaries" else 50))
    out: dict[str, Any] = {key: rows[start : start + size]}
    if start + size < len(rows):
        out["NextToken"] = base64.b64encode(str(start + size).encode()).decode()
    return out
