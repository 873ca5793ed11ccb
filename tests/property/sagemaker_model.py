"""An in-process model of the SageMaker (and CloudWatch alarm) calls the operator makes.

A model of SageMaker as AWS documents it (reference/sagemaker-api.md §1-2, §6), not of
the operator: endpoints, endpoint configs (production and shadow variants with weights),
models, optimization jobs and alarms; asynchronous transitions that end on a `tick()`
(Creating/Updating -> InService, Deleting -> gone, jobs STARTING/INPROGRESS ->
COMPLETED/FAILED, STOPPING -> STOPPED); an UpdateEndpoint that fails is rolled back by
SageMaker (InService on the old config, FailureReason set); UpdateEndpointWeights-
AndCapacities moves weights in place; a Failed endpoint takes only DeleteEndpoint.
Errors are raised with AWS's codes and messages (`ApiError`); `ModelClients` turns them
into botocore's ClientError and classifies them with the operator's own
`aws.errors.classify`, exactly as `aws.clients.AwsClients.call` does.

Every resource remembers who made it (the operator, through `ModelClients`, or a person,
through `SageMaker.call(..., by=PERSON)`), and every delete the operator asks for of
something a person made is written to `violations`: the invariants read both.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError, ConnectionClosedError

from endpoint_optimizer.aws.errors import classify

OPERATOR = "operator"
PERSON = "person"

# Application Auto Scaling's reads (another API, its own rate limits): neither SageMaker
# Describe calls for the per-wake-up bound nor changes. The model has no scalable targets
# (no one registers any): the round trip has its own e2e tests (tests/e2e/test_autoscaling).
AUTOSCALING_READS = frozenset({"DescribeScalableTargets", "DescribeScalingPolicies"})
DESCRIBES = frozenset(
    {
        "DescribeEndpoint",
        "DescribeEndpointConfig",
        "DescribeOptimizationJob",
        "DescribeTrainingJob",
        "DescribeModel",
        "ListTags",
    }
)
# The finalizer's look for what a lost status write left unnamed (aws/sweep.py): reads,
# counted apart from the Describe bound.
LISTS = frozenset(
    {
        "ListModels",
        "ListEndpointConfigs",
        "ListOptimizationJobs",
        "ListTrainingJobs",
        "ListInferenceComponents",
        "DescribeAlarms",  # by AlarmNamePrefix: the finalizer's sweep
    }
)
# Endpoint states that take no UpdateEndpoint or weight change (§2.4, §2.5).
_BUSY = frozenset({"Creating", "Updating", "SystemUpdating", "RollingBack", "Deleting"})


class ApiError(Exception):
    """An AWS error response: its code, message and HTTP status."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


class ConnectionReset(Exception):
    """The TCP connection was reset (botocore raises ConnectionClosedError)."""


class Crash(BaseException):
    """The operator process dies here: nothing after it runs, no status is written."""


@dataclass(frozen=True)
class Variant:
    name: str
    model: str
    weight: float


@dataclass
class Model:
    name: str
    creator: str
    tags: tuple[tuple[str, str], ...] = ()


@dataclass
class Config:
    name: str
    variants: tuple[Variant, ...]
    shadows: tuple[Variant, ...]
    creator: str


@dataclass
class Pending:
    """An operation in flight on an endpoint; it ends after `ticks` ticks."""

    kind: str  # create | update | weights | delete
    ticks: int
    config: str = ""
    weights: dict[str, float] = field(default_factory=dict)
    failure: str = ""  # the update fails with this FailureReason (SageMaker rolls it back)
    by: str = OPERATOR


@dataclass
class Endpoint:
    name: str
    creator: str
    status: str = "Creating"
    config: str = ""  # the config serving (during Creating: the one being created with)
    failure_reason: str = ""
    weights: dict[str, float] = field(default_factory=dict)
    # What serves: the endpoint keeps its copy of the config's variants (deleting the
    # config does not stop it). None while it is being created.
    deployed: Config | None = None
    pending: Pending | None = None
    # Who last decided the routing (config or weights): a person's change is theirs.
    routed_by: str = OPERATOR
    tags: dict[str, str] = field(default_factory=dict)


@dataclass
class Job:
    name: str
    creator: str
    status: str = "STARTING"
    ticks: int = 2
    failure_reason: str = ""
    output: str = ""
    fail: str = ""  # the job ends FAILED with this reason


@dataclass
class Alarm:
    name: str
    creator: str


@dataclass
class Fault:
    """The next `count` calls of an operation fail with this error."""

    error: ApiError | ConnectionReset
    count: int = 1


class SageMaker:
    """The account's SageMaker state, the faults armed on it, and what the operator did."""

    def __init__(self, region: str = "us-east-1", account: str = "123456789012") -> None:
        self.region = region
        self.account = account
        self.models: dict[str, Model] = {}
        self.configs: dict[str, Config] = {}
        self.endpoints: dict[str, Endpoint] = {}
        self.jobs: dict[str, Job] = {}
        self.alarms: dict[str, Alarm] = {}
        self.faults: dict[str, Fault] = {}
        # Durations, in ticks (one tick before each wake-up).
        self.create_ticks = 1
        self.update_ticks = 1
        self.job_ticks = 2
        self.next_update_failure = ""
        self.next_job_failure = ""
        # Hooks a rule arms: run by the operator's next call of that operation, before it.
        self.before: dict[str, Callable[[], None]] = {}
        self.violations: list[str] = []
        self.calls: list[tuple[str, str]] = []  # (who, operation)

    # ------------------------------------------------------------------ plumbing

    def arn(self, kind: str, name: str) -> str:
        return f"arn:aws:sagemaker:{self.region}:{self.account}:{kind}/{name.lower()}"

    def call(self, operation: str, params: dict[str, Any], by: str = OPERATOR) -> dict[str, Any]:
        """One API call: the response, or ApiError / ConnectionReset."""
        self.calls.append((by, operation))
        if by == OPERATOR:
            hook = self.before.pop(operation, None)
            if hook is not None:
                hook()
            fault = self.faults.get(operation)
            if fault is not None:
                fault.count -= 1
                if fault.count <= 0:
                    del self.faults[operation]
                raise fault.error
        handler: Callable[[dict[str, Any], str], dict[str, Any]] = getattr(self, f"_{operation}")
        return handler(params, by)

    def _not_found(self, what: str, name: str) -> ApiError:
        return ApiError("ValidationException", f'Could not find {what} "{self.arn(what, name)}".')

    def _exists(self, what: str, name: str) -> ApiError:
        return ApiError(
            "ValidationException",
            f'Cannot create already existing {what} "{self.arn(what, name)}".',
        )

    def _delete_check(self, what: str, creator: str, name: str, by: str) -> None:
        if by == OPERATOR and creator != OPERATOR:
            self.violations.append(f"the operator deleted {what} {name}, made by a {creator}")

    # ------------------------------------------------------------------ time

    def tick(self) -> None:
        """Every operation whose time has come ends."""
        for endpoint in list(self.endpoints.values()):
            pending = endpoint.pending
            if pending is None:
                continue
            pending.ticks -= 1
            if pending.ticks > 0:
                continue
            endpoint.pending = None
            if pending.kind == "delete":
                del self.endpoints[endpoint.name]
            elif pending.kind == "weights":
                endpoint.weights.update(pending.weights)
                endpoint.status = "InService"
                endpoint.routed_by = pending.by
            elif pending.failure:
                # §2.4: a failed create leaves a Failed endpoint; a failed update is rolled
                # back: the old config keeps serving and FailureReason says why.
                endpoint.failure_reason = pending.failure
                endpoint.status = "Failed" if pending.kind == "create" else "InService"
            else:
                config = self.configs.get(pending.config)
                if config is None:
                    endpoint.failure_reason = (
                        f"Could not find endpoint configuration {pending.config}."
                    )
                    endpoint.status = "Failed" if pending.kind == "create" else "InService"
                    continue
                endpoint.config = config.name
                endpoint.deployed = config
                endpoint.weights = {v.name: v.weight for v in (*config.variants, *config.shadows)}
                endpoint.status = "InService"
                endpoint.routed_by = pending.by
        for job in self.jobs.values():
            if job.status == "STOPPING":
                job.status = "STOPPED"
            elif job.status in ("STARTING", "INPROGRESS"):
                job.ticks -= 1
                job.status = "INPROGRESS"
                if job.ticks <= 0:
                    job.status = "FAILED" if job.fail else "COMPLETED"
                    job.failure_reason = job.fail

    # ------------------------------------------------------------------ models, configs

    def _CreateModel(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        name = p["ModelName"]
        if name in self.models:
            raise self._exists("model", name)
        tags = tuple((t["Key"], t["Value"]) for t in p.get("Tags", []))
        self.models[name] = Model(name, by, tags)
        return {"ModelArn": self.arn("model", name)}

    def _DeleteModel(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        name = p["ModelName"]
        model = self.models.get(name)
        if model is None:
            raise self._not_found("model", name)
        self._delete_check("model", model.creator, name, by)
        del self.models[name]  # the record only; endpoints using it keep serving
        return {}

    def _CreateEndpointConfig(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        name = p["EndpointConfigName"]
        if name in self.configs:
            raise self._exists("endpoint configuration", name)
        production = p["ProductionVariants"]
        shadows = p.get("ShadowProductionVariants", [])
        if shadows and (len(production) != 1 or len(shadows) != 1):
            raise ApiError(
                "ValidationException",
                "ShadowProductionVariants needs exactly one production and one shadow variant.",
            )

        def variants(items: list[dict[str, Any]]) -> tuple[Variant, ...]:
            for item in items:
                if item["ModelName"] not in self.models:
                    raise self._not_found("model", item["ModelName"])
            return tuple(
                Variant(i["VariantName"], i["ModelName"], float(i.get("InitialVariantWeight", 1.0)))
                for i in items
            )

        self.configs[name] = Config(name, variants(production), variants(shadows), by)
        return {"EndpointConfigArn": self.arn("endpoint-config", name)}

    def _DescribeEndpointConfig(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        name = p["EndpointConfigName"]
        config = self.configs.get(name)
        if config is None:
            raise self._not_found("endpoint configuration", name)

        def out(v: Variant) -> dict[str, Any]:
            return {"VariantName": v.name, "ModelName": v.model, "InitialVariantWeight": v.weight}

        described: dict[str, Any] = {
            "EndpointConfigName": name,
            "ProductionVariants": [out(v) for v in config.variants],
        }
        if config.shadows:
            described["ShadowProductionVariants"] = [out(v) for v in config.shadows]
        return described

    def _DeleteEndpointConfig(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        name = p["EndpointConfigName"]
        config = self.configs.get(name)
        if config is None:
            raise self._not_found("endpoint configuration", name)
        self._delete_check("endpoint config", config.creator, name, by)
        # §2.2: "must not" delete a config in use, yet AWS allows it; the endpoint serves on.
        del self.configs[name]
        return {}

    # ------------------------------------------------------------------ endpoints

    def _endpoint(self, name: str) -> Endpoint:
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            raise self._not_found("endpoint", name)
        return endpoint

    def _CreateEndpoint(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        name = p["EndpointName"]
        if name in self.endpoints:
            raise self._exists("endpoint", name)
        config = p["EndpointConfigName"]
        if config not in self.configs:
            raise self._not_found("endpoint configuration", config)
        endpoint = Endpoint(name, by, config=config, routed_by=by)
        endpoint.tags = {t["Key"]: t["Value"] for t in p.get("Tags", [])}
        endpoint.pending = Pending("create", self.create_ticks, config=config, by=by)
        self.endpoints[name] = endpoint
        return {"EndpointArn": self.arn("endpoint", name)}

    def _busy(self, endpoint: Endpoint) -> ApiError | None:
        if endpoint.status in _BUSY or endpoint.status in ("Failed", "UpdateRollbackFailed"):
            return ApiError(
                "ValidationException",
                f'Cannot update in-progress endpoint "{self.arn("endpoint", endpoint.name)}".'
                if endpoint.status in _BUSY
                else f"Cannot update endpoint {endpoint.name} in status {endpoint.status}.",
            )
        return None

    def _UpdateEndpoint(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        endpoint = self._endpoint(p["EndpointName"])
        config = p["EndpointConfigName"]
        if config not in self.configs:
            raise self._not_found("endpoint configuration", config)
        if (busy := self._busy(endpoint)) is not None:
            raise busy
        failure, self.next_update_failure = self.next_update_failure, ""
        endpoint.pending = Pending(
            "update", self.update_ticks, config=config, failure=failure, by=by
        )
        endpoint.status = "Updating"
        endpoint.failure_reason = ""
        return {"EndpointArn": self.arn("endpoint", endpoint.name)}

    def _UpdateEndpointWeightsAndCapacities(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        endpoint = self._endpoint(p["EndpointName"])
        if (busy := self._busy(endpoint)) is not None:
            raise busy
        desired = {
            d["VariantName"]: float(d["DesiredWeight"]) for d in p["DesiredWeightsAndCapacities"]
        }
        known = {v.name for v in endpoint.deployed.variants} if endpoint.deployed else set()
        missing = sorted(set(desired) - known)
        if missing:
            raise ApiError(
                "ValidationException",
                f"The variant(s) {missing} are not present on {endpoint.name}.",
            )
        endpoint.pending = Pending("weights", 1, weights=desired, by=by)
        endpoint.status = "Updating"
        return {"EndpointArn": self.arn("endpoint", endpoint.name)}

    def _DeleteEndpoint(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        endpoint = self._endpoint(p["EndpointName"])
        self._delete_check("endpoint", endpoint.creator, endpoint.name, by)
        endpoint.status = "Deleting"
        endpoint.pending = Pending("delete", 1, by=by)
        return {}

    def _DescribeScalableTargets(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        return {"ScalableTargets": []}

    def _DescribeScalingPolicies(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        return {"ScalingPolicies": []}

    def _DescribeEndpoint(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        endpoint = self._endpoint(p["EndpointName"])
        out: dict[str, Any] = {
            "EndpointName": endpoint.name,
            "EndpointArn": self.arn("endpoint", endpoint.name),
            "EndpointConfigName": endpoint.config,
            "EndpointStatus": endpoint.status,
        }
        if endpoint.failure_reason:
            out["FailureReason"] = endpoint.failure_reason
        served = endpoint.deployed
        if served is not None:
            out["ProductionVariants"] = [
                {"VariantName": v.name, "CurrentWeight": endpoint.weights.get(v.name, v.weight)}
                for v in served.variants
            ]
            if served.shadows:
                out["ShadowProductionVariants"] = [
                    {"VariantName": v.name, "CurrentWeight": endpoint.weights.get(v.name, v.weight)}
                    for v in served.shadows
                ]
        return out

    def _listed(
        self, names: Iterable[str], p: dict[str, Any], member: str, key: str
    ) -> dict[str, Any]:
        contains = str(p.get("NameContains", "")).lower()
        rows = sorted(n for n in names if contains in n.lower())
        return {member: [{key: n} for n in rows]}

    def _ListModels(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        return self._listed(self.models, p, "Models", "ModelName")

    def _ListEndpointConfigs(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        return self._listed(self.configs, p, "EndpointConfigs", "EndpointConfigName")

    def _ListOptimizationJobs(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        return self._listed(self.jobs, p, "OptimizationJobSummaries", "OptimizationJobName")

    def _ListTrainingJobs(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        return self._listed((), p, "TrainingJobSummaries", "TrainingJobName")  # none modelled

    def _ListInferenceComponents(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        # spec.inferenceComponent is not modelled here: no components exist.
        return self._listed((), p, "InferenceComponents", "InferenceComponentName")

    def _ListTags(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        arn = str(p["ResourceArn"])
        for endpoint in self.endpoints.values():
            if self.arn("endpoint", endpoint.name) == arn:
                return {"Tags": [{"Key": k, "Value": v} for k, v in endpoint.tags.items()]}
        raise ApiError("ValidationException", f"Resource {arn} does not exist.")

    # ------------------------------------------------------------------ jobs, alarms

    def _CreateOptimizationJob(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        name = p["OptimizationJobName"]
        if name in self.jobs:
            raise ApiError("ResourceInUse", f"Optimization job {name} already exists.")
        failure, self.next_job_failure = self.next_job_failure, ""
        output = p["OutputConfig"]["S3OutputLocation"]
        self.jobs[name] = Job(name, by, ticks=self.job_ticks, output=output, fail=failure)
        return {"OptimizationJobArn": self.arn("optimization-job", name)}

    def _DescribeOptimizationJob(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        name = p["OptimizationJobName"]
        job = self.jobs.get(name)
        if job is None:
            raise ApiError("ResourceNotFound", f"Optimization job {name} not found.")
        out: dict[str, Any] = {
            "OptimizationJobName": name,
            "OptimizationJobStatus": job.status,
            "OutputConfig": {"S3OutputLocation": job.output},
        }
        if job.failure_reason:
            out["FailureReason"] = job.failure_reason
        return out

    def _StopOptimizationJob(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        name = p["OptimizationJobName"]
        job = self.jobs.get(name)
        if job is None:
            raise ApiError("ResourceNotFound", f"Optimization job {name} not found.")
        self._delete_check("optimization job", job.creator, name, by)
        if job.status in ("STARTING", "INPROGRESS"):
            job.status = "STOPPING"
        return {}

    def _PutMetricAlarm(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        self.alarms[p["AlarmName"]] = Alarm(p["AlarmName"], by)
        return {}

    def _DescribeAlarms(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        prefix = str(p.get("AlarmNamePrefix", ""))
        rows = sorted(n for n in self.alarms if n.startswith(prefix))
        return {"MetricAlarms": [{"AlarmName": n} for n in rows]}

    def _DeleteAlarms(self, p: dict[str, Any], by: str) -> dict[str, Any]:
        for name in p["AlarmNames"]:
            alarm = self.alarms.pop(name, None)
            if alarm is not None:
                self._delete_check("alarm", alarm.creator, name, by)
        return {}

    # ------------------------------------------------------------------ faults a rule sets

    def fail_endpoint(self, name: str, reason: str) -> None:
        """The endpoint breaks (e.g. its instances are lost): only DeleteEndpoint is allowed."""
        endpoint = self.endpoints.get(name)
        if endpoint is not None and endpoint.status != "Deleting":
            endpoint.status = "Failed"
            endpoint.failure_reason = reason
            endpoint.pending = None


class ModelClients:
    """`aws.clients.AwsClients` as the operator's aws/ code uses it, answered by the model.

    Errors become botocore's ClientError (or ConnectionClosedError) and go through the
    operator's own `classify`, as in AwsClients.call. A crash armed with `crash_after`
    kills the process before the (n+1)-th operation that changes something.
    """

    def __init__(self, sagemaker: SageMaker) -> None:
        self.sagemaker = sagemaker
        self.crash_after: int | None = None
        self.describes = 0
        self.lists = 0
        self.changes = 0

    def step(self) -> None:
        """An operation that changes something (or a measurement) is about to start."""
        if self.crash_after is not None:
            if self.crash_after <= 0:
                self.crash_after = None
                raise Crash
            self.crash_after -= 1
        self.changes += 1

    async def call(
        self, service: str, region: str, operation: str, resource: str = "", **params: Any
    ) -> dict[str, Any]:
        if operation in DESCRIBES:
            self.describes += 1
        elif operation in LISTS:
            self.lists += 1
        elif operation not in AUTOSCALING_READS:
            self.step()
        try:
            return self.sagemaker.call(operation, params)
        except ApiError as exc:
            raise classify(client_error(exc, operation), operation, resource) from exc
        except ConnectionReset as exc:
            reset = ConnectionClosedError(endpoint_url=f"https://{service}.{region}.amazonaws.com")
            raise classify(reset, operation, resource) from exc

    @contextlib.asynccontextmanager
    async def measuring(self) -> AsyncIterator[None]:
        yield

    async def run(self, fn: Callable[[], Any]) -> Any:
        return fn()


def client_error(exc: ApiError, operation: str) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": exc.code, "Message": exc.message},
            "ResponseMetadata": {"HTTPStatusCode": exc.status},
        },
        operation,
    )
