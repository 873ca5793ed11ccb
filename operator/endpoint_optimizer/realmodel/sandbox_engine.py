"""The real engine behind the sandbox's `Engine` seam, and what each variant maps to.

Mapping from a variant's configuration to something SmolLM2 can really do on a CPU:

| variant configuration                          | real model                           |
|------------------------------------------------|--------------------------------------|
| no quantization                                | fp32 (the GGUF dequantized)          |
| OPTION_DTYPE=bf16                              | bfloat16 weights: near-lossless      |
| OPTION_QUANTIZE int8 / smoothquant             | torch dynamic int8: fast and lossy   |
| n-gram speculation (OPTION_SPECULATIVE_CONFIG) | prompt lookup with the spec's k      |
| fp8, awq/gptq (w4a16), compilation, draft/eagle| not expressible on a CPU: served in  |
|                                                | fp32 and the synthetic effect is     |
|                                                | named in `fallbacks`                 |

Workers are keyed by the real settings, so an A/A pair or a baseline and a
candidate that map to the same settings share one model process (memory: about
1 GB per fp32 worker).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from endpoint_optimizer.realmodel.engine import Completion, RealEngine, TokenEvent
from endpoint_optimizer.realmodel.worker import VariantSettings
from endpoint_optimizer.sandbox.engine import Engine, GenerationRequest, LiveVariant, Token
from endpoint_optimizer.sandbox.serving import VariantProfile


@dataclass(frozen=True)
class RealMapping:
    settings: VariantSettings
    # Techniques the real model cannot express, each said in words.
    fallbacks: tuple[str, ...] = field(default_factory=tuple)


def map_variant(profile: VariantProfile, environment: dict[str, str]) -> RealMapping:
    """What the variant's configuration becomes on the real model, and what it cannot."""
    fallbacks: list[str] = []
    dtype = "float32"
    if environment.get("OPTION_DTYPE", "").lower() in ("bf16", "bfloat16"):
        dtype = "bfloat16"
    quantization = "none"
    if profile.quantization == "int8":
        quantization = "dynamic-int8"
    elif profile.quantization == "fp8":
        fallbacks.append("fp8 needs FP8 tensor cores: served in fp32, FP8 effect is synthetic")
    elif profile.quantization == "w4a16":
        fallbacks.append("w4a16 (awq/gptq) kernels are GPU-only: served in fp32")
    if profile.compiled:
        fallbacks.append("TensorRT-LLM/Neuron compilation has no CPU equivalent")
    speculative = 0
    if profile.speculative is not None:
        if profile.speculative.method == "ngram":
            speculative = profile.speculative.num_speculative_tokens
        else:
            fallbacks.append(
                f"{profile.speculative.method} speculation needs a draft model or EAGLE heads "
                "that SmolLM2 does not have: decoded without speculation"
            )
    settings = VariantSettings(
        dtype=dtype,
        quantization=quantization,
        speculative_tokens=speculative,
        max_batch=max(1, min(8, profile.max_batch_size)),
    )
    return RealMapping(settings, tuple(fallbacks))


class RealSandboxEngine:
    """Implements the sandbox's Engine protocol with real SmolLM2 workers."""

    def __init__(self, engine: RealEngine | None = None) -> None:
        self._engine = engine or RealEngine()

    @property
    def engine(self) -> RealEngine:
        return self._engine

    async def stream(
        self, variant: LiveVariant, request: GenerationRequest
    ) -> AsyncIterator[list[Token]]:
        mapping = map_variant(variant.profile, variant.environment)
        key = mapping.settings.label()
        await self._engine.start_variant(key, mapping.settings)
        messages = [{"role": "user", "content": request.prompt}]
        async with variant.admitted(request.input_tokens + request.max_new_tokens):
            async for event in self._engine.stream(key, messages, request.max_new_tokens):
                if isinstance(event, TokenEvent):
                    # Counters first: the runtime reads them as each chunk goes out.
                    if event.draft_tokens is not None:
                        request.draft_tokens = event.draft_tokens
                        request.accepted_tokens = event.accepted_tokens or 0
                    # The step's text rides on its first token; the others carry ids only,
                    # so counts stay per token and the text is not duplicated.
                    yield [
                        Token(token_id, event.text if index == 0 else "")
                        for index, token_id in enumerate(event.ids)
                    ]
                elif isinstance(event, Completion):
                    request.draft_tokens = event.draft_tokens or 0
                    request.accepted_tokens = event.accepted_tokens or 0

    def answer(self, variant: LiveVariant, prompt: str) -> str | None:
        # Eval prompts are answered by generating for real, through stream().
        return None

    async def close(self) -> None:
        await self._engine.close()


ENGINE_VARIABLE = "SANDBOX_ENGINE"


class SelectingEngine:
    """Chooses the engine per endpoint: the run's default, or the model's SANDBOX_ENGINE.

    `endpoint-optimizer sandbox serve --engine real` makes every endpoint real; a
    model whose environment sets SANDBOX_ENGINE=real (or =synthetic) overrides that
    for its variants, so one sandbox can serve a real endpoint next to fast
    synthetic ones. A real container ignores the variable.
    """

    def __init__(self, synthetic: Engine, real: RealSandboxEngine, default: str = "real") -> None:
        if default not in ("real", "synthetic"):
            raise ValueError(f"engine {default!r}: use 'real' or 'synthetic'")
        self._synthetic = synthetic
        self._real = real
        self._default = default

    def _pick(self, variant: LiveVariant) -> Engine:
        choice = variant.environment.get(ENGINE_VARIABLE, self._default).lower()
        return self._real if choice == "real" else self._synthetic

    def stream(
        self, variant: LiveVariant, request: GenerationRequest
    ) -> AsyncIterator[list[Token]]:
        return self._pick(variant).stream(variant, request)

    def answer(self, variant: LiveVariant, prompt: str) -> str | None:
        return self._pick(variant).answer(variant, prompt)

    async def close(self) -> None:
        await self._real.close()
