"""SageMaker inference components: models hosted as components of an endpoint, with copies.

The wire format is botocore's `sagemaker` model (CreateInferenceComponent,
DescribeInferenceComponent, ListInferenceComponents, UpdateInferenceComponent,
UpdateInferenceComponentRuntimeConfig, DeleteInferenceComponent); requests are validated
against it by the control plane like every other SageMaker call. State changes follow the
control plane's lazy clock (`advance`), scaled by `time_scale`.

What follows AWS's documentation (docs/sandbox.md lists the pages):
- A component lives on an endpoint variant that has no ModelName (an endpoint built for
  inference components; its config carries ExecutionRoleArn). The endpoint must be
  InService. Status Creating -> InService after `durations.inference_component_create`.
- Specification: a ModelName (the Model must exist) or a Container; its
  ComputeResourceRequirements say what one copy takes. RuntimeConfig.CopyCount copies run.
- Copies must fit the variant's instances (ResourceLimitExceeded otherwise). The sandbox
  checks accelerator devices only: an instance has gpu_count_for(InstanceType) devices, a
  copy takes NumberOfAcceleratorDevicesRequired of them (whole devices, rounded up), and
  the variant has InitialInstanceCount instances (ManagedInstanceScaling's
  MaxInstanceCount when it is ENABLED). Memory and CPU cores are not checked.
- UpdateInferenceComponent with a new Specification rolls copies over in batches
  (RollingUpdatePolicy.MaximumBatchSize, COPY_COUNT or CAPACITY_PERCENT of the copies):
  each batch is provisioned (`durations.inference_component_copy`), takes its share of
  traffic, then bakes WaitIntervalInSeconds while the AutoRollbackConfiguration alarms are
  watched. An alarm in ALARM once new copies serve rolls the component back to its
  previous specification (all at once: RollbackMaximumBatchSize is not modelled), with a
  FailureReason. No DeploymentConfig: all copies in one batch, no bake.
- UpdateInferenceComponentRuntimeConfig changes the copy count: Updating until the new
  copies are provisioned (`durations.inference_component_copy`), or at once for fewer.
- DeleteInferenceComponent: Deleting, then gone (`durations.inference_component_delete`).
- An unknown name answers ValidationException "Could not find inference component ...".
Wording of messages AWS does not quote in its docs is the sandbox's ([unverified]).
Not modelled: Specifications (per instance type) beyond picking the one for the variant's
instance type, adapter components (BaseInferenceComponentName), DataCacheConfig,
SchedulingConfig, PlacementStatus.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from endpoint_optimizer.sandbox.control import (
    AwsError,
    ControlPlane,
    Endpoint,
    Model,
    _epoch,
    _page,
    model_uri,
    validation_error,
)
from endpoint_optimizer.sandbox.serving import (
    VariantProfile,
    gpu_count_for,
    profile_from_environment,
    with_regression,
)

OPERATIONS = frozenset(
    {
        "CreateInferenceComponent",
        "DescribeInferenceComponent",
        "ListInferenceComponents",
        "UpdateInferenceComponent",
        "UpdateInferenceComponentRuntimeConfig",
        "DeleteInferenceComponent",
    }
)


@dataclass
class Generation:
    """One specification as deployed: what its copies run."""

    number: int
    spec: dict[str, Any]
    model: Model | None  # the Model resource as the deploying call found it


@dataclass
class Rollout:
    """A pending specification update: batches of copies move to `target`."""

    target: Generation
    started: float
    ready_at: float
    # (seconds after start, share of copies on the new spec) for each batch.
    shifts: list[tuple[float, float]]
    alarms: list[str]
    request: dict[str, Any]

    def new_share(self, now: float) -> float:
        share = 0.0
        for offset, step in self.shifts:
            if now - self.started >= offset:
                share = step
        return share


@dataclass
class Component:
    name: str
    arn: str
    endpoint: str
    variant: str
    created: datetime
    modified: datetime
    status: str
    serving: Generation
    desired_copies: int
    current_copies: int = 0
    ready_at: float | None = None  # when Creating or a copy-count change completes
    rollout: Rollout | None = None
    failure_reason: str | None = None
    last_deployment_config: dict[str, Any] | None = None
    delete_at: float | None = None
    generations: int = 1


class InferenceComponents:
    """The inference-component operations over the control plane's state and lock."""

    def __init__(self, control: ControlPlane) -> None:
        self.control = control
        self.components: dict[str, Component] = {}
        # (endpoint, variant) -> when its components last held no copy (scale to zero).
        self.idle_since: dict[tuple[str, str], float] = {}
        control.extra_owners.append(self)
        control.advance_hooks.append(self.advance)

    def reset(self) -> None:
        with self.control.lock:
            self.components = {}
            self.idle_since = {}

    # -- helpers --------------------------------------------------------------------------

    def _component(self, name: str) -> Component:
        component = self.components.get(name)
        if component is None:
            raise validation_error(
                "Could not find inference component "
                f'"{self.control.arn("inference-component", name)}".'
            )
        return component

    def _duration(self, seconds: float) -> float:
        return self.control.duration(seconds)

    def _variant(self, endpoint: Endpoint, name: str | None) -> dict[str, Any]:
        config = self.control.endpoint_configs.get(endpoint.config_name or "")
        variants = config.variants() if config else []
        if name is None and variants:
            return variants[0]
        for variant in variants:
            if variant["VariantName"] == name:
                return variant
        raise validation_error(f'The variant "{name}" is not present in endpoint "{endpoint.arn}".')

    def _spec_for(self, p: dict[str, Any], instance_type: str) -> dict[str, Any]:
        if "Specification" in p and "Specifications" in p:
            raise validation_error("Specify either Specification or Specifications, not both.")
        if "Specifications" in p:
            specs = list(p["Specifications"])
            return dict(
                next((s for s in specs if s.get("InstanceType") == instance_type), specs[0])
            )
        if "Specification" not in p:
            raise validation_error("Specification is required for an inference component.")
        return dict(p["Specification"])

    def _generation(self, number: int, spec: dict[str, Any]) -> Generation:
        if spec.get("BaseInferenceComponentName"):
            raise validation_error(
                "The sandbox does not model adapter inference components "
                "(BaseInferenceComponentName)."
            )
        if "ComputeResourceRequirements" not in spec:
            raise validation_error(
                "ComputeResourceRequirements is required unless the inference component is "
                "an adapter (BaseInferenceComponentName)."
            )
        model = None
        if spec.get("ModelName"):
            model = self.control._model(str(spec["ModelName"]))
        elif not (spec.get("Container") or {}).get("Image"):
            raise validation_error(
                "Specification must name a ModelName or a Container with an Image."
            )
        return Generation(number, spec, model)

    @staticmethod
    def devices_per_copy(spec: dict[str, Any]) -> int:
        needs = spec.get("ComputeResourceRequirements") or {}
        need = float(needs.get("NumberOfAcceleratorDevicesRequired", 0))
        return math.ceil(need) if need > 0 else 0

    def _capacity(self, variant: dict[str, Any]) -> int:
        instances = int(variant.get("InitialInstanceCount", 1))
        managed = variant.get("ManagedInstanceScaling") or {}
        if managed.get("Status") == "ENABLED" and "MaxInstanceCount" in managed:
            instances = int(managed["MaxInstanceCount"])
        return instances * gpu_count_for(str(variant.get("InstanceType", "")))

    def _check_fit(
        self,
        endpoint: Endpoint,
        variant: dict[str, Any],
        name: str,
        spec: dict[str, Any],
        copies: int,
    ) -> None:
        """ResourceLimitExceeded when the copies' accelerators exceed the variant's."""
        need = self.devices_per_copy(spec) * copies
        if need == 0:
            return
        used = sum(
            self.devices_per_copy(c.serving.spec) * max(c.desired_copies, c.current_copies)
            for c in self.components.values()
            if c.endpoint == endpoint.name
            and c.variant == variant["VariantName"]
            and c.name != name
            and c.delete_at is None
        )
        capacity = self._capacity(variant)
        if used + need > capacity:
            raise AwsError(
                "ResourceLimitExceeded",
                f"The inference component {name} needs {need} accelerator devices for "
                f"{copies} copies, but variant {variant['VariantName']} of endpoint "
                f"{endpoint.name} has {capacity - used} of {capacity} free "
                f"({variant.get('InstanceType')}).",
            )

    # -- clock ----------------------------------------------------------------------------

    def advance(self, now: float, wall: datetime) -> None:
        for component in list(self.components.values()):
            if component.delete_at is not None:
                if now >= component.delete_at:
                    del self.components[component.name]
                continue
            rollout = component.rollout
            if rollout is not None:
                fired = [a for a in rollout.alarms if self.control.alarm_state(a) == "ALARM"]
                failure = None
                if rollout.new_share(now) > 0:
                    new_profile = self.profile(component, rollout.target)[0]
                    if not new_profile.fits():
                        # The first new copy cannot load: the update fails, the old copies stay.
                        failure = (
                            "Rolled back: the new copies of inference component "
                            f"{component.name} did not pass the ping health check: CUDA out "
                            f"of memory loading {new_profile.model_size_b:g}B weights on "
                            f"{new_profile.tensor_parallel_degree} accelerator(s) of "
                            f"{new_profile.instance_type}."
                        )
                    elif fired:
                        # AutoRollbackConfiguration: back to the previous specification.
                        failure = (
                            "Rolled back: CloudWatch alarm(s) "
                            + ", ".join(fired)
                            + " went into ALARM state during the deployment."
                        )
                if failure is not None:
                    component.rollout = None
                    component.status = "InService" if component.ready_at is None else "Updating"
                    component.modified = wall
                    component.failure_reason = failure
                    continue
                if now >= rollout.ready_at:
                    component.serving = rollout.target
                    component.rollout = None
                    component.status = "InService" if component.ready_at is None else "Updating"
                    component.modified = wall
                    component.failure_reason = None
                    if rollout.request.get("DeploymentConfig") is not None:
                        component.last_deployment_config = rollout.request["DeploymentConfig"]
            if component.ready_at is not None and now >= component.ready_at:
                component.ready_at = None
                if component.status == "Creating":
                    profile = self.profile(component, component.serving)[0]
                    if not profile.fits():
                        # As a variant's container would: the copy runs out of GPU memory.
                        component.status = "Failed"
                        component.modified = wall
                        component.failure_reason = (
                            f"The container for inference component {component.name} did not "
                            f"pass the ping health check: CUDA out of memory loading "
                            f"{profile.model_size_b:g}B weights on "
                            f"{profile.tensor_parallel_degree} accelerator(s) of "
                            f"{profile.instance_type}."
                        )
                        continue
                component.current_copies = component.desired_copies
                component.status = "InService" if component.rollout is None else "Updating"
                component.modified = wall
        self._scale_instances(now)

    def _managed(self, endpoint: Endpoint, variant: str) -> dict[str, Any] | None:
        """The variant's ManagedInstanceScaling when it is ENABLED on a component variant."""
        config = self.control.endpoint_configs.get(endpoint.config_name or "")
        for spec in config.variants() if config else []:
            if spec["VariantName"] == variant and "ModelName" not in spec:
                managed = spec.get("ManagedInstanceScaling") or {}
                if managed.get("Status") == "ENABLED":
                    return {**managed, "_spec": spec}
        return None

    def instances(self, endpoint: Endpoint, variant: str) -> int:
        config = self.control.endpoint_configs.get(endpoint.config_name or "")
        initial = 1
        for spec in config.variants() if config else []:
            if spec["VariantName"] == variant:
                initial = int(spec.get("InitialInstanceCount", 1))
        return endpoint.instance_counts.get(variant, initial)

    def _scale_instances(self, now: float) -> None:
        """Managed instance scaling of component variants: instances follow the copies.

        Instances are added as copies come up (the copies' provisioning time covers them);
        with MinInstanceCount 0, a variant whose components hold no copy, current or
        desired, releases its instances after `durations.instance_idle_release`
        (ScaleInPolicy IDLE_RELEASE: "Releases instances that have no hosted inference
        component copies"; the delay is the sandbox's, AWS documents none).
        """
        for endpoint in self.control.endpoints.values():
            if endpoint.status != "InService" or endpoint.delete_at is not None:
                continue
            for variant in {
                c.variant for c in self.components.values() if c.endpoint == endpoint.name
            }:
                managed = self._managed(endpoint, variant)
                if managed is None:
                    continue
                spec = managed["_spec"]
                hosted = [
                    c
                    for c in self.components.values()
                    if c.endpoint == endpoint.name and c.variant == variant and c.delete_at is None
                ]
                running = sum(
                    self.devices_per_copy(c.serving.spec) * c.current_copies for c in hosted
                )
                wanted = sum(
                    self.devices_per_copy(c.serving.spec) * max(c.current_copies, c.desired_copies)
                    for c in hosted
                )
                gpus = max(1, gpu_count_for(str(spec.get("InstanceType", ""))))
                low = int(managed.get("MinInstanceCount", 1))
                high = int(managed.get("MaxInstanceCount", spec.get("InitialInstanceCount", 1)))
                current = self.instances(endpoint, variant)
                key = (endpoint.name, variant)
                if wanted > 0:
                    self.idle_since.pop(key, None)
                    needed = max(low, min(high, math.ceil(running / gpus)))
                    if needed > current:
                        endpoint.instance_counts[variant] = needed
                    continue
                since = self.idle_since.setdefault(key, now)
                release = self._duration(self.control.config.durations.instance_idle_release)
                if low == 0 and current > 0 and now - since >= release:
                    endpoint.instance_counts[variant] = 0

    # -- operations -----------------------------------------------------------------------

    def op_CreateInferenceComponent(self, p: dict[str, Any]) -> dict[str, Any]:
        control = self.control
        name = p["InferenceComponentName"]
        if name in self.components:
            raise validation_error(
                "Cannot create already existing inference component "
                f'"{control.arn("inference-component", name)}".'
            )
        endpoint = control._endpoint(p["EndpointName"])
        if control._status(endpoint) != "InService":
            raise validation_error(
                f'Cannot create inference component {name}: endpoint "{endpoint.arn}" is '
                f"{control._status(endpoint)}, not InService."
            )
        variant = self._variant(endpoint, p.get("VariantName"))
        if variant.get("ModelName"):
            raise validation_error(
                f"Variant {variant['VariantName']} of endpoint {endpoint.name} hosts model "
                f"{variant['ModelName']}: inference components need an endpoint whose "
                "production variants name no ModelName."
            )
        spec = self._spec_for(p, str(variant.get("InstanceType", "")))
        generation = self._generation(1, spec)
        if "RuntimeConfig" not in p:
            raise validation_error("RuntimeConfig is required for an inference component.")
        copies = int(p["RuntimeConfig"]["CopyCount"])
        self._check_fit(endpoint, variant, name, spec, copies)
        control._quota("CreateInferenceComponent")
        now, wall = time.monotonic(), datetime.now(UTC)
        component = Component(
            name=name,
            arn=control.arn("inference-component", name),
            endpoint=endpoint.name,
            variant=variant["VariantName"],
            created=wall,
            modified=wall,
            status="Creating",
            serving=generation,
            desired_copies=copies,
            ready_at=now
            + self._duration(
                self._cold_start(
                    endpoint, variant["VariantName"], self.devices_per_copy(spec) * copies
                )
                + control.config.durations.inference_component_create
            ),
        )
        self.components[name] = component
        return {"InferenceComponentArn": component.arn}

    def op_DescribeInferenceComponent(self, p: dict[str, Any]) -> dict[str, Any]:
        c = self._component(p["InferenceComponentName"])
        endpoint = self.control.endpoints.get(c.endpoint)
        out: dict[str, Any] = {
            "InferenceComponentName": c.name,
            "InferenceComponentArn": c.arn,
            "EndpointName": c.endpoint,
            "EndpointArn": endpoint.arn if endpoint else self.control.arn("endpoint", c.endpoint),
            "VariantName": c.variant,
            "Specification": self._spec_summary(c.serving),
            "RuntimeConfig": {
                "DesiredCopyCount": c.desired_copies,
                "CurrentCopyCount": c.current_copies,
            },
            "CreationTime": _epoch(c.created),
            "LastModifiedTime": _epoch(c.modified),
            "InferenceComponentStatus": c.status,
        }
        if c.failure_reason:
            out["FailureReason"] = c.failure_reason
        if c.last_deployment_config is not None:
            out["LastDeploymentConfig"] = c.last_deployment_config
        return out

    def _spec_summary(self, generation: Generation) -> dict[str, Any]:
        spec = generation.spec
        out: dict[str, Any] = {
            k: v
            for k, v in spec.items()
            if k
            in (
                "ModelName",
                "StartupParameters",
                "ComputeResourceRequirements",
                "DataCacheConfig",
                "SchedulingConfig",
            )
        }
        container = dict(spec.get("Container") or {})
        image = container.pop("Image", None)
        if image is None and generation.model is not None:
            primary = generation.model.request.get("PrimaryContainer") or {}
            image = primary.get("Image")
        if image:
            container["DeployedImage"] = {
                "SpecifiedImage": image,
                "ResolvedImage": str(image).split(":")[0] + "@sha256:" + "0" * 64,
                "ResolutionTime": time.time(),
            }
        if container:
            out["Container"] = container
        return out

    def op_ListInferenceComponents(self, p: dict[str, Any]) -> dict[str, Any]:
        rows = []
        for c in self.components.values():
            if p.get("EndpointNameEquals") and c.endpoint != p["EndpointNameEquals"]:
                continue
            if p.get("VariantNameEquals") and c.variant != p["VariantNameEquals"]:
                continue
            endpoint = self.control.endpoints.get(c.endpoint)
            rows.append(
                {
                    "CreationTime": _epoch(c.created),
                    "InferenceComponentArn": c.arn,
                    "InferenceComponentName": c.name,
                    "EndpointArn": endpoint.arn
                    if endpoint
                    else self.control.arn("endpoint", c.endpoint),
                    "EndpointName": c.endpoint,
                    "VariantName": c.variant,
                    "InferenceComponentStatus": c.status,
                    "LastModifiedTime": _epoch(c.modified),
                }
            )
        return _page(
            rows, p, "InferenceComponents", "InferenceComponentName", "InferenceComponentStatus"
        )

    def _updatable(self, c: Component) -> None:
        if c.status != "InService":
            raise validation_error(
                f'Cannot update inference component "{c.arn}" while it is {c.status}.'
            )

    def op_UpdateInferenceComponent(self, p: dict[str, Any]) -> dict[str, Any]:
        control = self.control
        c = self._component(p["InferenceComponentName"])
        self._updatable(c)
        endpoint = control._endpoint(c.endpoint)
        variant = self._variant(endpoint, c.variant)
        copies = int((p.get("RuntimeConfig") or {}).get("CopyCount", c.desired_copies))
        has_spec = "Specification" in p or "Specifications" in p
        spec = self._spec_for(p, str(variant.get("InstanceType", ""))) if has_spec else None
        self._check_fit(endpoint, variant, c.name, spec or c.serving.spec, copies)
        now, wall = time.monotonic(), datetime.now(UTC)
        c.failure_reason = None
        c.modified = wall
        c.status = "Updating"
        if copies != c.desired_copies:
            self._set_copies(c, copies, now)
        elif spec is None:
            c.ready_at = now  # nothing to change: back to InService on the next look
        if spec is not None:
            c.generations += 1
            target = self._generation(c.generations, spec)
            c.rollout = self._plan(target, copies, p, now)
        return {"InferenceComponentArn": c.arn}

    def _plan(self, target: Generation, copies: int, p: dict[str, Any], now: float) -> Rollout:
        """Batches of the rolling update: provision a batch, shift it, bake; repeat."""
        config = p.get("DeploymentConfig") or {}
        policy = config.get("RollingUpdatePolicy") or {}
        size = policy.get("MaximumBatchSize") or {}
        total = max(1, copies)
        if size.get("Type") == "CAPACITY_PERCENT":
            batch = max(1, math.ceil(total * float(size["Value"]) / 100))
        elif size.get("Type") == "COPY_COUNT":
            batch = max(1, int(size["Value"]))
        else:
            batch = total
        wait = self._duration(float(policy.get("WaitIntervalInSeconds", 0)))
        provision = self._duration(self.control.config.durations.inference_component_copy)
        count = math.ceil(total / batch)
        shifts = [
            (i * (provision + wait) + provision, min(1.0, (i + 1) * batch / total))
            for i in range(count)
        ]
        alarms = [
            str(a["AlarmName"])
            for a in (config.get("AutoRollbackConfiguration") or {}).get("Alarms", [])
            if "AlarmName" in a
        ]
        return Rollout(target, now, now + count * (provision + wait), shifts, alarms, p)

    def _cold_start(self, endpoint: Endpoint, variant: str, adding: int = 0) -> float:
        """Seconds (unscaled) before a copy can load: an instance must be provisioned first
        when the variant has scaled to zero instances ("the provisioning process takes
        several minutes", endpoint-auto-scaling-zero-instances.html), or when managed
        instance scaling must add one because the running instances cannot hold the copies
        asked for (MaxInstanceCount: "the maximum number of instances that the endpoint can
        provision when it scales up", API_ProductionVariantManagedInstanceScaling.html).
        `adding`: accelerator devices of copies not yet counted in the components."""
        current = self.instances(endpoint, variant)
        provision = self.control.config.durations.instance_provision
        if current == 0:
            return provision
        managed = self._managed(endpoint, variant)
        if managed is None:
            return 0.0
        gpus = max(1, gpu_count_for(str(managed["_spec"].get("InstanceType", ""))))
        wanted = adding + sum(
            self.devices_per_copy(c.serving.spec) * max(c.current_copies, c.desired_copies)
            for c in self.components.values()
            if c.endpoint == endpoint.name and c.variant == variant and c.delete_at is None
        )
        return provision if wanted > current * gpus else 0.0

    def _set_copies(self, c: Component, copies: int, now: float) -> None:
        c.desired_copies = copies
        seconds = 0.0
        if copies > c.current_copies:
            endpoint = self.control._endpoint(c.endpoint)
            seconds = (
                self._cold_start(endpoint, c.variant)
                + self.control.config.durations.inference_component_copy
            )
        c.ready_at = now + self._duration(seconds)

    def op_UpdateInferenceComponentRuntimeConfig(self, p: dict[str, Any]) -> dict[str, Any]:
        control = self.control
        c = self._component(p["InferenceComponentName"])
        self._updatable(c)
        endpoint = control._endpoint(c.endpoint)
        variant = self._variant(endpoint, c.variant)
        copies = int(p["DesiredRuntimeConfig"]["CopyCount"])
        self._check_fit(endpoint, variant, c.name, c.serving.spec, copies)
        c.status = "Updating"
        c.modified = datetime.now(UTC)
        self._set_copies(c, copies, time.monotonic())
        return {"InferenceComponentArn": c.arn}

    def op_DeleteInferenceComponent(self, p: dict[str, Any]) -> dict[str, Any]:
        c = self._component(p["InferenceComponentName"])
        if c.delete_at is None:
            c.status = "Deleting"
            c.rollout = None
            c.ready_at = None
            c.modified = datetime.now(UTC)
            c.delete_at = time.monotonic() + self._duration(
                self.control.config.durations.inference_component_delete
            )
        return {}

    # -- serving --------------------------------------------------------------------------

    def serving_generation(self, c: Component, draw: float) -> Generation:
        """The specification a request lands on: during a rolling update, the new one for
        the share of copies already moved (`draw` in [0, 1))."""
        rollout = c.rollout
        if rollout is not None and draw < rollout.new_share(time.monotonic()):
            return rollout.target
        return c.serving

    def profile(
        self, c: Component, generation: Generation
    ) -> tuple[VariantProfile, dict[str, str], str]:
        """(serving profile of one copy, its environment, its image)."""
        spec = generation.spec
        container = dict(spec.get("Container") or {})
        env: dict[str, str] = {}
        image = str(container.get("Image", ""))
        uri = str(container.get("ArtifactUrl", ""))
        if generation.model is not None:
            primary = generation.model.request.get("PrimaryContainer") or {}
            env.update({str(k): str(v) for k, v in (primary.get("Environment") or {}).items()})
            image = image or str(primary.get("Image", ""))
            uri = uri or model_uri(generation.model.request)
        env.update({str(k): str(v) for k, v in (container.get("Environment") or {}).items()})
        devices = self.devices_per_copy(spec)
        if devices and "OPTION_TENSOR_PARALLEL_DEGREE" not in env:
            env["OPTION_TENSOR_PARALLEL_DEGREE"] = str(devices)
        endpoint = self.control.endpoints.get(c.endpoint)
        config = self.control.endpoint_configs.get(endpoint.config_name or "") if endpoint else None
        instance = "ml.g5.2xlarge"
        for variant in config.variants() if config else []:
            if variant["VariantName"] == c.variant:
                instance = str(variant.get("InstanceType", instance))
        artifact = self.control.artifact_for(uri)
        profile = profile_from_environment(
            instance,
            artifact.source_uri if artifact else uri,
            env,
            quantization=artifact.baked.quantization if artifact else None,
            compiled=artifact.baked.compiled if artifact else False,
            eagle=artifact.baked.eagle if artifact else False,
        )
        model_name = generation.model.name if generation.model else None
        faults = self.control.config.faults
        config_name = endpoint.config_name or "" if endpoint else ""
        for latency in faults.latency_regressions:
            if latency.matches(c.endpoint, c.variant, config_name, model_name):
                profile = with_regression(profile, latency_factor=latency.factor)
        return profile, env, image

    def snapshot(self) -> dict[str, Any]:
        with self.control.lock:
            self.control.advance()
            now = time.monotonic()
            return {
                "inferenceComponents": {
                    n: self.op_DescribeInferenceComponent({"InferenceComponentName": n})
                    for n in self.components
                },
                # Sandbox-only view: the share of copies on the new specification during a
                # rolling update (what DescribeInferenceComponent does not show).
                "inferenceComponentRollouts": {
                    n: c.rollout.new_share(now)
                    for n, c in self.components.items()
                    if c.rollout is not None
                },
            }
