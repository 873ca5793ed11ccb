"""The sandbox's settings: time scales, serving mode, durations and fault switches.

Everything here can come from a YAML/JSON file (`sandbox serve --config FILE`), from
Python (`running_sandbox(SandboxConfig(...))`) or at run time (POST /_sandbox/config and
/_sandbox/faults). Keys are accepted in snake_case or camelCase.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field

from endpoint_optimizer.api.camel import CamelModel


class Durations(CamelModel):
    """Realistic control-plane durations in seconds, before `time_scale` applies."""

    endpoint_create: float = 360.0
    endpoint_update: float = 420.0
    endpoint_delete: float = 60.0
    weights_update: float = 30.0
    optimization_job: float = 1500.0
    training_job: float = 2400.0
    job_stop: float = 30.0
    # Inference components (sandbox/components.py): a new component's first copies, one
    # more copy (or one rolling-update batch) provisioned, a component's removal.
    inference_component_create: float = 300.0
    inference_component_copy: float = 240.0
    inference_component_delete: float = 30.0
    # Managed instance scaling of component variants: a new instance (the cold start of a
    # variant scaled to zero; AWS: "several minutes"), and how long a variant whose
    # components hold no copy keeps its instances before releasing them (MinInstanceCount 0).
    instance_provision: float = 300.0
    instance_idle_release: float = 300.0


class DeterministicServing(CamelModel):
    """Fixed timings, no jitter and no load effects: the ground truth for the bench and tests.

    `timings: fixed` serves every variant alike: `ttft_ms`, then `tokens_per_chunk` tokens
    every `itl_ms x tokens_per_chunk`. `timings: profile` gives each variant its own fixed
    timings from its serving profile as if it ran alone (the prompt's prefill, then one
    batch-1 decode step per chunk; injected regressions apply), so a candidate's configured
    gain over its baseline is exact and the host's scheduling is the only noise a
    measurement sees. Speculative steps still draw their accepted tokens (seeded).
    """

    timings: Literal["fixed", "profile"] = "fixed"
    ttft_ms: float = Field(default=50.0, gt=0)
    itl_ms: float = Field(default=10.0, gt=0)
    tokens_per_chunk: int = Field(default=1, ge=1)


class VariantMatch(CamelModel):
    """Which variants a regression applies to; every field given must match.

    Variant names repeat across endpoints ("AllTraffic"), so a match can name the
    endpoint, the endpoint config or the model as well.
    """

    endpoint: str | None = None
    variant: str | None = None
    endpoint_config: str | None = None
    model: str | None = None

    def matches(self, endpoint: str, variant: str, endpoint_config: str, model: str | None) -> bool:
        return (
            (self.endpoint is None or self.endpoint == endpoint)
            and (self.variant is None or self.variant == variant)
            and (self.endpoint_config is None or self.endpoint_config == endpoint_config)
            and (self.model is None or self.model == model)
        )


class LatencyRegression(VariantMatch):
    factor: float = Field(default=1.5, gt=0)


class QualityRegression(VariantMatch):
    accuracy_drop: float = Field(default=0.05, ge=0, le=1)
    refusal_increase: float = Field(default=0.0, ge=0, le=1)
    # Eval item classes the drop applies to (empty: all): a low-bit scheme that breaks
    # long-context retrieval while the average barely moves.
    prompt_classes: list[str] = Field(default_factory=list)


class AcceptanceRegression(VariantMatch):
    """Speculative drafts accepted less often: `factor` multiplies the per-token acceptance."""

    factor: float = Field(default=0.3, ge=0, le=1)


class BreakStreams(CamelModel):
    """Send ModelStreamError (or InternalStreamFailure) after `after_tokens` tokens."""

    endpoint: str | None = None
    variant: str | None = None
    after_tokens: int = Field(default=3, ge=0)
    fraction: float = Field(default=1.0, ge=0, le=1)
    error_code: Literal["StreamBroken", "ModelInvocationTimeExceeded"] = "StreamBroken"
    exception: Literal["ModelStreamError", "InternalStreamFailure"] = "ModelStreamError"


class InvocationErrors(VariantMatch):
    """Fail a share of invocations before any output, as the container would.

    The caller gets ModelError (HTTP 424) carrying the container's status; CloudWatch counts
    it in Invocation5XXErrors (status >= 500) or Invocation4XXErrors.
    """

    fraction: float = Field(default=1.0, ge=0, le=1)
    original_status: int = Field(default=500, ge=400, le=599)


class Faults(CamelModel):
    """Fault switches. POST /_sandbox/faults replaces them; {} clears them all."""

    throttle_fraction: float = Field(default=0.0, ge=0, le=1)
    # Operations the throttle applies to; empty means every control-plane call.
    throttle_operations: list[str] = Field(default_factory=list)
    fail_optimization_jobs: list[str] = Field(default_factory=list)
    fail_training_jobs: list[str] = Field(default_factory=list)
    # Endpoint names whose next UpdateEndpoint fails (the old config keeps serving).
    fail_endpoint_updates: list[str] = Field(default_factory=list)
    fail_endpoint_creates: list[str] = Field(default_factory=list)
    # Operations ("CreateEndpoint", "UpdateEndpoint", ...) refused with ResourceLimitExceeded.
    quota_exceeded: list[str] = Field(default_factory=list)
    # Endpoint name -> the status SageMaker reports while the switch holds (SystemUpdating,
    # RollingBack, UpdateRollbackFailed, Failed, OutOfService): updates and weight changes are
    # refused, and deletes too while SystemUpdating, as on AWS; serving goes on.
    endpoint_states: dict[str, str] = Field(default_factory=dict)
    # Multiplies every control-plane duration on top of time_scale.
    slow_transitions: float = Field(default=1.0, gt=0)
    latency_regressions: list[LatencyRegression] = Field(default_factory=list)
    quality_regressions: list[QualityRegression] = Field(default_factory=list)
    acceptance_regressions: list[AcceptanceRegression] = Field(default_factory=list)
    break_streams: list[BreakStreams] = Field(default_factory=list)
    invocation_errors: list[InvocationErrors] = Field(default_factory=list)
    # Operations of the services without a resource to name (the Price List's GetProducts)
    # refused with AccessDeniedException: a role without the permission.
    access_denied: list[str] = Field(default_factory=list)


ServingMode = Literal["model", "deterministic"]


class SandboxConfig(CamelModel):
    """How the sandbox behaves. Defaults are realistic (minutes, milliseconds)."""

    # Multiplies every control-plane duration: 1.0 = real minutes, 0.001 = milliseconds.
    time_scale: float = Field(default=1.0, gt=0)
    # Multiplies every serving latency (TTFT, ITL); separate so the bench can keep ms timings.
    serving_time_scale: float = Field(default=1.0, gt=0)
    serving_mode: ServingMode = "model"
    deterministic: DeterministicServing = Field(default_factory=DeterministicServing)
    # Endpoints served deterministically whatever serving_mode says.
    deterministic_endpoints: dict[str, DeterministicServing] = Field(default_factory=dict)
    seed: int = 0
    region: str = "us-east-1"
    account_id: str = "123456789012"
    durations: Durations = Field(default_factory=Durations)
    # How much model output overlaps the prompt (drives n-gram acceptance); None = guess
    # from the prompt (summarize/rewrite/edit/code prompts overlap more).
    workload_overlap: float | None = Field(default=None, ge=0, le=1)
    # Split each streamed JSON line over PayloadParts of at most this many bytes, as real
    # endpoints do at arbitrary points; None sends one line per PayloadPart.
    payload_fragment_bytes: int | None = Field(default=None, ge=1)
    # Instance quota per instance type across all endpoints (ResourceLimitExceeded beyond).
    instance_quotas: dict[str, int] = Field(default_factory=dict)
    # How often a speculating container logs its "SpecDecoding metrics" line, wall seconds
    # (vLLM: every log-stats interval while busy, 10 s by default).
    container_log_interval_s: float = Field(default=10.0, gt=0)
    faults: Faults = Field(default_factory=Faults)

    @classmethod
    def from_file(cls, path: Path) -> SandboxConfig:
        """Load a YAML or JSON config file."""
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: the sandbox config must be a mapping of settings")
        return cls.model_validate(raw)


class ConfigPatch(CamelModel):
    """POST /_sandbox/config: the settings that can change while the sandbox runs."""

    time_scale: float | None = Field(default=None, gt=0)
    serving_time_scale: float | None = Field(default=None, gt=0)
    serving_mode: ServingMode | None = None
    deterministic: DeterministicServing | None = None
    deterministic_endpoints: dict[str, DeterministicServing] | None = None
    workload_overlap: float | None = Field(default=None, ge=0, le=1)
    instance_quotas: dict[str, int] | None = None
    payload_fragment_bytes: int | None = Field(default=None, ge=1)
    container_log_interval_s: float | None = Field(default=None, gt=0)
    seed: int | None = None
