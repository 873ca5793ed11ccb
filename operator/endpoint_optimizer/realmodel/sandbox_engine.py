"""The real engine behind the sandbox's `Engine` seam, and what each variant maps to.

Mapping from a variant's configuration to something SmolLM2 can really do on a CPU:

| variant configuration                          | real model                           |
|------------------------------------------------|--------------------------------------|
| no quantization                                | fp32 (the GGUF dequantized)          |
| OPTION_DTYPE=bf16                              | bfloat16 weights: near-lossless      |
| OPTION_QUANTIZE int8 / smoothquant             | torch dynamic int8: fast and lossy   |
| n-gram speculation (OPTION_SPECULATIVE_CONFIG) | prompt lookup with the spec's k      |
| OPTION_KV_CACHE_DTYPE fp8 / nvfp4              | keys and values rounded as stored    |
|                                                | (realmodel/kvcache.py)               |
| fp8, awq/gptq (w4a16), draft/eagle speculation| not expressible on a CPU: a fallback, |
|                                                | served by the synthetic engine         |
| compilation (TensorRT-LLM / Neuron)            | no CPU equivalent: a fallback when it  |
|                                                | is the only technique; next to one the |
|                                                | real model expresses (SmoothQuant int8 |
|                                                | needs TensorRT-LLM), the real model    |
|                                                | serves and the label says `omitted`    |

Compilation is treated apart because it is a speed-only build step: an INT8
SmoothQuant candidate is compiled by definition, and its real, measured int8 answers
matter more than a modelled compile speedup; a candidate that is only compiled has
nothing real to measure, so the synthetic effect stands in.

Workers are keyed by the real settings, so an A/A pair or a baseline and a
candidate that map to the same settings share one model process (memory: about
1 GB per fp32 worker).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from endpoint_optimizer.bench.served_by import REAL, SYNTHETIC, ServedBy
from endpoint_optimizer.realmodel import evalset
from endpoint_optimizer.realmodel.engine import Completion, RealEngine, TokenEvent
from endpoint_optimizer.realmodel.worker import VariantSettings
from endpoint_optimizer.sandbox.engine import Engine, GenerationRequest, LiveVariant, Token
from endpoint_optimizer.sandbox.evalset import REFUSAL
from endpoint_optimizer.sandbox.serving import VariantProfile, eval_outcome


@dataclass(frozen=True)
class RealMapping:
    settings: VariantSettings
    # Techniques the real model cannot express, each said in words (short, ASCII, no
    # `;`: they travel in CustomAttributes): the variant is served synthetically.
    fallbacks: tuple[str, ...] = field(default_factory=tuple)
    # Techniques the real model serves without (compilation next to a real technique).
    omitted: tuple[str, ...] = field(default_factory=tuple)


def map_variant(profile: VariantProfile, environment: dict[str, str]) -> RealMapping:
    """What the variant's configuration becomes on the real model, and what it cannot."""
    fallbacks: list[str] = []
    expressed = False  # does the real model carry any of the variant's techniques?
    dtype = "float32"
    if environment.get("OPTION_DTYPE", "").lower() in ("bf16", "bfloat16"):
        dtype = "bfloat16"
        expressed = True
    quantization = "none"
    if profile.quantization == "int8":
        quantization = "dynamic-int8"
        expressed = True
    elif profile.quantization == "fp8":
        fallbacks.append("fp8 needs FP8 tensor cores (GPU), a CPU has none")
    elif profile.quantization == "w4a16":
        fallbacks.append("w4a16 (awq/gptq) kernels are GPU-only")
    speculative = 0
    if profile.speculative is not None:
        if profile.speculative.method == "ngram":
            speculative = profile.speculative.num_speculative_tokens
            expressed = True
        else:
            fallbacks.append(
                f"{profile.speculative.method} speculation needs a draft model or EAGLE heads "
                "that SmolLM2 lacks"
            )
    if profile.kv_cache_dtype != "auto":
        expressed = True  # the cache's rounding is arithmetic: any CPU does it
    omitted: list[str] = []
    if profile.compiled:
        compilation = "TensorRT-LLM/Neuron compilation has no CPU equivalent"
        (omitted if expressed and not fallbacks else fallbacks).append(compilation)
    settings = VariantSettings(
        dtype=dtype,
        quantization=quantization,
        speculative_tokens=speculative,
        max_batch=max(1, min(8, profile.max_batch_size)),
        kv_cache=profile.kv_cache_dtype,
    )
    return RealMapping(settings, tuple(fallbacks), tuple(omitted))


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

    def served_by(self, variant: LiveVariant) -> ServedBy:
        # On its own (no SelectingEngine) this engine serves every variant: what the real
        # model cannot express is left out, and the label says so.
        mapping = map_variant(variant.profile, variant.environment)
        return ServedBy(REAL, omitted=", ".join((*mapping.fallbacks, *mapping.omitted)))

    async def close(self) -> None:
        await self._engine.close()


ENGINE_VARIABLE = "SANDBOX_ENGINE"


class SelectingEngine:
    """Chooses the engine per endpoint: the run's default, or the model's SANDBOX_ENGINE.

    `endpoint-optimizer sandbox serve --engine real` makes every endpoint real; a
    model whose environment sets SANDBOX_ENGINE=real (or =synthetic) overrides that
    for its variants, so one sandbox can serve a real endpoint next to fast
    synthetic ones. A real container ignores the variable.

    Fallback to the synthetic effect: a variant whose technique the real model cannot
    express (FP8, w4a16, compilation, draft-model or EAGLE speculation: `map_variant`'s
    fallbacks) is served by the synthetic engine, whose serving and quality models
    carry that technique's effect. So that a comparison stays like with like, while
    any variant of an endpoint config needs the fallback, every real variant of that
    config (the baseline too) is served synthetically: the pinned benchmark and the
    paired eval then compare two synthetic variants, never real fp32 against a
    modelled FP8. Each response says so in its CustomAttributes
    (`engine=synthetic; fallback=<reason>`), which the benchmark and eval clients read
    into status. Eval prompts of the real eval set (realmodel/evalset.py) are
    answered under the fallback by the synthetic quality model from the real model's
    fp32 accuracy per class, with the variant's quantization effect applied, so the
    eval gate judges the modelled technique on the same items.
    """

    def __init__(self, synthetic: Engine, real: RealSandboxEngine, default: str = "real") -> None:
        if default not in ("real", "synthetic"):
            raise ValueError(f"engine {default!r}: use 'real' or 'synthetic'")
        self._synthetic = synthetic
        self._real = real
        self._default = default

    def _chooses_real(self, variant: LiveVariant) -> bool:
        return variant.environment.get(ENGINE_VARIABLE, self._default).lower() == "real"

    def served_by(self, variant: LiveVariant) -> ServedBy:
        """Real, or synthetic with the reason: the variant's own or a peer's fallback."""
        if not self._chooses_real(variant):
            return ServedBy(SYNTHETIC)
        mapping = map_variant(variant.profile, variant.environment)
        if mapping.fallbacks:
            return ServedBy(SYNTHETIC, ", ".join(mapping.fallbacks))
        for peer in variant.peers:
            if peer is variant or not self._chooses_real(peer):
                continue
            theirs = map_variant(peer.profile, peer.environment).fallbacks
            if theirs:
                return ServedBy(SYNTHETIC, f"paired with {peer.variant}: {', '.join(theirs)}")
        return ServedBy(REAL, omitted=", ".join(mapping.omitted))

    def _pick(self, variant: LiveVariant) -> Engine:
        return self._real if self.served_by(variant).engine == REAL else self._synthetic

    def stream(
        self, variant: LiveVariant, request: GenerationRequest
    ) -> AsyncIterator[list[Token]]:
        return self._pick(variant).stream(variant, request)

    def answer(self, variant: LiveVariant, prompt: str) -> str | None:
        engine = self._pick(variant)
        found = engine.answer(variant, prompt)
        if found is not None or engine is self._real or not self._chooses_real(variant):
            return found
        return synthetic_answer(variant, prompt)

    async def close(self) -> None:
        await self._real.close()


def synthetic_answer(variant: LiveVariant, prompt: str) -> str | None:
    """A real-eval-set item answered by the synthetic quality model (None: not an item).

    Correct with the fp32 model's rate for the class, moved by the variant's
    quantization and regression effects exactly as the synthetic eval set is.
    """
    key = evalset.lookup(prompt)
    if key is None:
        return None
    outcome = eval_outcome(variant.profile, variant.seed, prompt, evalset.FP32_ACCURACY[key.kind])
    if outcome == "refusal":
        return REFUSAL
    if outcome == "correct":
        return key.reference
    digest = hashlib.sha256(f"wrong|{variant.seed}|{prompt}".encode()).digest()
    return evalset.wrong_answer(key, digest[0] / 256.0)
