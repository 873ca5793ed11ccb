"""SageMaker Runtime: InvokeEndpoint and InvokeEndpointWithResponseStream, plus the traffic record.

A request is routed to a production variant by weight (or to TargetVariant), a copy goes
to each shadow variant (its response discarded), and the variant's engine generates the
answer. Every request, shadow copies included, lands in the traffic record with
server-side monotonic times, which is what CloudWatch metrics and the bench's
ground-truth comparisons are computed from.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Any

from endpoint_optimizer.sandbox.components import InferenceComponents
from endpoint_optimizer.sandbox.config import SandboxConfig
from endpoint_optimizer.sandbox.control import AwsError, ControlPlane, EndpointConfig
from endpoint_optimizer.sandbox.engine import (
    Engine,
    GenerationRequest,
    LiveVariant,
    SyntheticEngine,
    Token,
    estimate_tokens,
)


@dataclass
class TrafficRecord:
    """One request as the server saw it. Times: server monotonic seconds (time.monotonic)."""

    id: int
    endpoint: str
    variant: str
    endpoint_config: str
    shadow: bool
    stream: bool
    wall_time: float  # time.time() at arrival, for CloudWatch periods
    t_start: float
    t_first_token: float | None = None
    t_end: float | None = None
    chunk_send_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    drafts: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    status: int = 200
    error: str | None = None
    serving_time_scale: float = 1.0
    # Engine clock (model ms, unscaled) from arrival to the last token, when the engine
    # keeps one; CloudWatch's ModelLatency prefers it to wall time / serving_time_scale.
    model_latency_ms: float | None = None
    # The client's X-Amzn-SageMaker-Inference-Id (InferenceId), so a benchmark can match
    # each of its requests to this record exactly.
    inference_id: str | None = None
    # The InferenceComponentName the request was invoked with (None: a model variant).
    inference_component: str | None = None
    # The Model resource (by name) whose copy served the request, when there is one.
    model: str | None = None


@dataclass
class ParsedBody:
    prompt: str
    max_new_tokens: int
    chat: bool
    stream_requested: bool
    # OpenAI completions ({"prompt"} without LMI's "inputs").
    completions: bool = False

    @property
    def openai(self) -> bool:
        return self.chat or self.completions


# An OpenAI-only container (vLLM's SageMaker route) answers any other body like this: a
# 400 that SageMaker passes on as ModelError (vLLM's api_server `invocations`).
_NO_HANDLER = (
    '{"object": "error", "message": "Cannot find suitable handler for request. Expected one '
    'of: [ChatCompletionRequest, CompletionRequest]", "type": "BadRequestError", '
    '"param": null, "code": 400}'
)


def openai_only(image: str) -> bool:
    """Whether the container serves only OpenAI bodies: vLLM's images (its repository
    name says vllm); LMI (djl-inference) and TGI take LMI's {"inputs"} too."""
    repository = image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
    return "vllm" in repository.lower()


def parse_body(raw: bytes) -> ParsedBody:
    """Accept LMI `{"inputs", "parameters"}` and OpenAI `{"messages"|"prompt", "max_tokens"}`."""
    try:
        body = json.loads(raw or b"{}")
    except ValueError as exc:
        raise AwsError(
            "ModelError",
            "Received client error (400) from primary with message "
            '"{"error": "the request body is not valid JSON"}".',
            424,
        ) from exc
    if not isinstance(body, dict):
        raise AwsError("ModelError", "Received client error (400): body must be a JSON object", 424)
    parameters = body.get("parameters") or {}
    if "messages" in body:
        messages = body["messages"] if isinstance(body["messages"], list) else []
        prompt = "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        chat = True
    else:
        raw_prompt = body.get("inputs", body.get("prompt", ""))
        prompt = raw_prompt if isinstance(raw_prompt, str) else json.dumps(raw_prompt)
        chat = False
    max_new = (
        parameters.get("max_new_tokens")
        or body.get("max_tokens")
        or body.get("max_completion_tokens")
        or body.get("max_new_tokens")
        or 128
    )
    try:
        max_new_tokens = max(1, int(max_new))
    except (TypeError, ValueError):
        max_new_tokens = 128
    completions = not chat and "prompt" in body and "inputs" not in body
    return ParsedBody(prompt, max_new_tokens, chat, bool(body.get("stream", False)), completions)


class Runtime:
    """Routes invocations to live variants and keeps the traffic record (server-loop side)."""

    def __init__(self, config: SandboxConfig, control: ControlPlane, engine: Engine | None = None):
        self.config = config
        self.control = control
        self.engine: Engine = engine or SyntheticEngine()
        self.lock = threading.Lock()
        self.traffic: list[TrafficRecord] = []
        self.live: dict[tuple[str, str, str], LiveVariant] = {}
        self.rng = random.Random(config.seed)
        self.shadow_tasks: set[asyncio.Task[None]] = set()
        # Set by the Sandbox: the inference components (sandbox/components.py).
        self.components: InferenceComponents | None = None

    def reset(self) -> None:
        with self.lock:
            self.traffic = []
            self.live = {}
            self.rng = random.Random(self.config.seed)

    # -- routing ----------------------------------------------------------------------------

    def resolve(
        self, endpoint_name: str, target_variant: str | None
    ) -> tuple[LiveVariant, list[LiveVariant]]:
        """The production variant that serves this request and the shadows that copy it."""
        with self.control.lock:
            self.control.advance()
            endpoint = self.control.endpoints.get(endpoint_name)
            config = (
                self.control.endpoint_configs.get(endpoint.config_name or "") if endpoint else None
            )
            if endpoint is None or config is None or endpoint.status in ("Deleting", "Failed"):
                raise AwsError(
                    "ValidationError",
                    f"Endpoint {endpoint_name} of account {self.config.account_id} not found.",
                )
            pending = endpoint.pending
            share = pending.new_fleet_share(time.monotonic()) if pending else 0.0
            if pending is not None and share > 0 and self.rng.random() < share:
                # Blue/green shifting: this request goes to the new fleet.
                green = self.control.endpoint_configs.get(pending.config_name)
                if green is not None:
                    config = green
            variants = config.variants()
            if any("ModelName" not in v for v in variants):
                # An endpoint built for inference components serves only by component.
                raise AwsError(
                    "ValidationError",
                    "Inference Component Name header is required for endpoints to which you "
                    "plan to deploy inference components. Please include Inference Component "
                    "Name header or consider using SageMaker models.",
                )
            if target_variant is not None:
                chosen = next((v for v in variants if v["VariantName"] == target_variant), None)
                if chosen is None:
                    raise AwsError(
                        "ValidationError",
                        f"Variant {target_variant} not found for endpoint {endpoint_name}.",
                    )
            else:
                weights = [
                    endpoint.weights.get(v["VariantName"], float(v.get("InitialVariantWeight", 1)))
                    if config.name == endpoint.config_name
                    else float(v.get("InitialVariantWeight", 1))
                    for v in variants
                ]
                if sum(weights) <= 0:
                    raise AwsError(
                        "ValidationError",
                        f"Endpoint {endpoint_name} has no production variant with a positive "
                        "weight; set DesiredWeight with UpdateEndpointWeightsAndCapacities.",
                    )
                chosen = self.rng.choices(variants, weights=weights)[0]
            primary = self._live(endpoint_name, config, chosen)
            # [unverified] The shadow's sampling share is its weight relative to the
            # production variant's (1:1 by default, i.e. every request is copied).
            production_weight = float(chosen.get("InitialVariantWeight", 1.0)) or 1.0
            shadows = [
                self._live(endpoint_name, config, v)
                for v in config.shadow_variants()
                if self.rng.random()
                < min(1.0, float(v.get("InitialVariantWeight", 1.0)) / production_weight)
            ]
            peers = tuple(self._peers(endpoint_name, config))
            for live in (primary, *shadows):
                live.peers = peers
            return primary, shadows

    def resolve_component(self, endpoint_name: str, component_name: str) -> LiveVariant:
        """The copies of an inference component that serve this request."""
        components = self.components
        with self.control.lock:
            self.control.advance()
            endpoint = self.control.endpoints.get(endpoint_name)
            if endpoint is None or endpoint.status in ("Deleting", "Failed"):
                raise AwsError(
                    "ValidationError",
                    f"Endpoint {endpoint_name} of account {self.config.account_id} not found.",
                )
            component = components.components.get(component_name) if components else None
            if (
                components is None
                or component is None
                or component.endpoint != endpoint_name
                or component.delete_at is not None
            ):
                # [unverified] wording; SageMaker answers a ValidationError.
                raise AwsError(
                    "ValidationError",
                    f"Inference Component {component_name} not found for endpoint {endpoint_name}.",
                )
            if component.current_copies <= 0:
                self._no_capacity(endpoint_name, component.variant, component_name)
            generation = components.serving_generation(component, self.rng.random())
            profile, env, image = components.profile(component, generation)
            key = (endpoint_name, f"{component_name}#{generation.number}", component.variant)
            live = self.live.get(key)
            if live is None:
                live = LiveVariant(
                    endpoint=endpoint_name,
                    variant=component.variant,
                    config_name=endpoint.config_name or "",
                    model=generation.model.name if generation.model else None,
                    profile=profile,
                    environment=env,
                    seed=self.config.seed,
                    inference_component=component_name,
                )
                self.live[key] = live
            live.image = image
            live.profile = profile
            deterministic = self.config.deterministic_endpoints.get(endpoint_name)
            if deterministic is None and self.config.serving_mode == "deterministic":
                deterministic = self.config.deterministic
            live.deterministic = deterministic
            live.serving_time_scale = self.config.serving_time_scale
            live.workload_overlap = self.config.workload_overlap
            # One model copy per component copy on this specification.
            share = 1.0
            if component.rollout is not None:
                moved = component.rollout.new_share(time.monotonic())
                share = moved if generation is component.rollout.target else 1.0 - moved
            live.instances = max(1, round(component.current_copies * share))
            if len(live.prefill_lanes) != live.instances:
                live.prefill_lanes = [0.0] * live.instances
            live.peers = (live,)
            return live

    def _no_capacity(self, endpoint: str, variant: str, component: str) -> None:
        """No copy runs (copy count 0, or still Creating): SageMaker refuses the request.

        The message is the one AWS's scale-to-zero announcement quotes; CloudWatch counts
        it in NoCapacityInvocationFailures, not in Invocations.
        """
        with self.lock:
            now = time.monotonic()
            record = TrafficRecord(
                id=len(self.traffic),
                endpoint=endpoint,
                variant=variant,
                endpoint_config="",
                shadow=False,
                stream=False,
                wall_time=time.time(),
                t_start=now,
                t_end=now,
                status=400,
                error="NoCapacity",
                inference_component=component,
            )
            self.traffic.append(record)
        raise AwsError(
            "ValidationError",
            "Inference Component has no capacity to process this request. "
            "ApplicationAutoScaling may be in-progress (if configured) or try to increase the "
            "capacity by invoking UpdateInferenceComponentRuntimeConfig API.",
        )

    def _peers(self, endpoint: str, config: EndpointConfig) -> list[LiveVariant]:
        """The config's variants, production and shadow, that can still serve."""
        peers = []
        for variant in [*config.variants(), *config.shadow_variants()]:
            try:
                peers.append(self._live(endpoint, config, variant))
            except AwsError:
                continue  # its model is gone: it serves nothing, so it constrains nothing
        return peers

    def _live(self, endpoint: str, config: EndpointConfig, variant: dict[str, Any]) -> LiveVariant:
        key = (endpoint, config.name, variant["VariantName"])
        profile = self.control.variant_profile(endpoint, config, variant)
        if profile is None:
            raise AwsError(
                "ModelError",
                f"Model {variant.get('ModelName')} of variant {variant['VariantName']} no longer "
                "exists.",
                424,
            )
        model = self.control.served_model(endpoint, config, variant)
        container = (model.request.get("PrimaryContainer") or {}) if model else {}
        deterministic = self.config.deterministic_endpoints.get(endpoint)
        if deterministic is None and self.config.serving_mode == "deterministic":
            deterministic = self.config.deterministic
        live = self.live.get(key)
        if live is None:
            live = LiveVariant(
                endpoint=endpoint,
                variant=variant["VariantName"],
                config_name=config.name,
                model=model.name if model else None,
                profile=profile,
                environment={
                    str(k): str(v) for k, v in (container.get("Environment") or {}).items()
                },
                seed=self.config.seed,
            )
            self.live[key] = live
        # Faults and config can change at run time; the load state stays.
        live.image = str(container.get("Image", ""))
        live.profile = profile
        live.deterministic = deterministic
        live.serving_time_scale = self.config.serving_time_scale
        live.workload_overlap = self.config.workload_overlap
        current = self.control.endpoints.get(endpoint)
        counts = current.instance_counts if current else {}
        instances = counts.get(variant["VariantName"], int(variant.get("InitialInstanceCount", 1)))
        # Each instance runs one model copy per TP group of its GPUs.
        live.instances = max(1, instances) * profile.replicas
        if len(live.prefill_lanes) != live.instances:
            live.prefill_lanes = [0.0] * live.instances
        return live

    def _record(self, variant: LiveVariant, shadow: bool, stream: bool) -> TrafficRecord:
        with self.lock:
            record = TrafficRecord(
                id=len(self.traffic),
                endpoint=variant.endpoint,
                variant=variant.variant,
                endpoint_config=variant.config_name,
                shadow=shadow,
                stream=stream,
                wall_time=time.time(),
                t_start=time.monotonic(),
                serving_time_scale=self.config.serving_time_scale,
                inference_component=variant.inference_component,
                model=variant.model,
            )
            self.traffic.append(record)
            return record

    def _break_after(self, variant: LiveVariant) -> tuple[int, str, str] | None:
        for rule in self.config.faults.break_streams:
            if rule.endpoint not in (None, variant.endpoint):
                continue
            if rule.variant not in (None, variant.variant):
                continue
            if self.rng.random() < rule.fraction:
                return rule.after_tokens, rule.error_code, rule.exception
        return None

    def refuse_body(self, variant: LiveVariant, body: ParsedBody, stream: bool) -> None:
        """An OpenAI-only container refuses an LMI body as its server does (HTTP 400)."""
        if body.openai or not openai_only(variant.image):
            return
        record = self._record(variant, False, stream)
        record.t_end = time.monotonic()
        record.status = 400
        record.error = "ModelError:400"
        raise AwsError(
            "ModelError",
            f'Received client error (400) from primary with message "{_NO_HANDLER}". See '
            f"the CloudWatch log group /aws/sagemaker/Endpoints/{variant.endpoint} for more "
            "information.",
            424,
        )

    def fail_invocation(self, variant: LiveVariant, shadow: bool, stream: bool) -> None:
        """Raise ModelError for a share of requests when an invocation-errors fault matches."""
        for rule in self.config.faults.invocation_errors:
            if not rule.matches(
                variant.endpoint, variant.variant, variant.config_name, variant.model
            ):
                continue
            if self.rng.random() >= rule.fraction:
                continue
            record = self._record(variant, shadow, stream)
            record.t_end = time.monotonic()
            record.status = rule.original_status
            record.error = f"ModelError:{rule.original_status}"
            raise AwsError(
                "ModelError",
                f"Received server error ({rule.original_status}) from primary with message "
                '"{"error": "injected by the sandbox"}". See the CloudWatch log group '
                f"/aws/sagemaker/Endpoints/{variant.endpoint} for more information.",
                424,
            )

    # -- generation -------------------------------------------------------------------------

    async def generate(
        self,
        variant: LiveVariant,
        body: ParsedBody,
        *,
        shadow: bool,
        stream: bool,
        inference_id: str | None = None,
    ) -> AsyncIterator[tuple[list[Token], TrafficRecord]]:
        """Run the engine, keeping the record's times; raises StreamBroken on a fault."""
        record = self._record(variant, shadow, stream)
        record.inference_id = inference_id
        request = GenerationRequest(
            body.prompt, body.max_new_tokens, estimate_tokens(body.prompt), stream
        )
        record.input_tokens = request.input_tokens
        breaking = self._break_after(variant) if stream and not shadow else None
        try:
            async for chunk in self.engine.stream(variant, request):
                now = time.monotonic()
                if breaking is not None and record.output_tokens + len(chunk) > breaking[0]:
                    raise StreamBroken(breaking[1], breaking[2])
                if record.t_first_token is None:
                    record.t_first_token = now
                record.chunk_send_times.append(now)
                record.chunk_tokens.append(len(chunk))
                record.output_tokens += len(chunk)
                record.draft_tokens = request.draft_tokens
                record.accepted_tokens = request.accepted_tokens
                record.drafts = request.drafts
                record.accepted_per_position = list(request.accepted_per_position)
                record.model_latency_ms = request.model_ms
                yield chunk, record
        except StreamBroken as exc:
            record.status = 424 if exc.exception == "ModelStreamError" else 500
            record.error = f"{exc.exception}:{exc.error_code}"
            raise
        except BaseException:
            record.error = record.error or "ClientDisconnected"
            raise
        finally:
            record.t_end = time.monotonic()

    def start_shadows(self, shadows: list[LiveVariant], body: ParsedBody, stream: bool) -> None:
        """Send a copy to each shadow variant; the responses are generated and dropped."""
        for shadow in shadows:
            task = asyncio.get_running_loop().create_task(self._drain(shadow, body, stream))
            self.shadow_tasks.add(task)
            task.add_done_callback(self.shadow_tasks.discard)

    async def _drain(self, variant: LiveVariant, body: ParsedBody, stream: bool) -> None:
        async for _chunk, _record in self.generate(variant, body, shadow=True, stream=stream):
            pass

    def traffic_dump(self) -> list[dict[str, Any]]:
        with self.lock:
            return [asdict(record) for record in self.traffic]


class StreamBroken(Exception):
    def __init__(self, error_code: str, exception: str = "ModelStreamError") -> None:
        super().__init__(error_code)
        self.error_code = error_code
        self.exception = exception


def lmi_line(tokens: list[Token], final: dict[str, Any] | None = None) -> bytes:
    """One LMI rolling-batch JSON line for one engine step (several tokens when speculative)."""
    line: dict[str, Any] = {
        "token": {"id": tokens[-1].id, "text": "".join(t.text for t in tokens), "special": False},
        "num_tokens": len(tokens),
    }
    if final is not None:
        line.update(final)
    return (json.dumps(line) + "\n").encode()
