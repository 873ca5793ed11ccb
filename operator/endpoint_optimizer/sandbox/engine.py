"""Engines generate tokens for a variant; the synthetic one paces them from the serving model.

`Engine` is the seam: the runtime routes a request to a variant and asks its engine for a
stream of chunks (one chunk = the tokens one engine step yields for this request). The
synthetic engine below needs no GPU: it draws speculative acceptance from the variant's
profile and sleeps until each step's deadline on the server clock, scaled by
`serving_time_scale`. The real-model engine (realmodel/sandbox_engine.py) sits behind the
same protocol. Each engine names itself for the response's CustomAttributes (`served_by`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Protocol

from endpoint_optimizer.bench.served_by import SYNTHETIC, ServedBy
from endpoint_optimizer.sandbox import evalset
from endpoint_optimizer.sandbox.config import DeterministicServing
from endpoint_optimizer.sandbox.serving import VariantProfile, draw_step_tokens, eval_outcome

# Filler vocabulary for generated text (one word per token).
_WORDS = (
    "the model answers each request with plain filler text so that token counts and timings",
    "stay exact while nothing here depends on a real tokenizer or real weights because the",
    "sandbox only needs to look like a serving container from the outside",
)
_WORDS_FLAT = tuple(word for line in _WORDS for word in line.split())
_OVERLAP_WORDS = ("summarize", "summary", "rewrite", "edit", "refactor", "fix", "code", "copy")


@dataclass
class Token:
    id: int
    text: str


@dataclass
class GenerationRequest:
    prompt: str
    max_new_tokens: int
    input_tokens: int
    stream: bool = True
    # Filled in by the engine as it generates (speculative counters).
    draft_tokens: int = 0
    accepted_tokens: int = 0
    # Speculative steps, and how many of them accepted the draft past each position.
    drafts: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    # The engine's own clock, in model milliseconds (unscaled): queueing plus generation.
    # CloudWatch's ModelLatency reads it, so wall-clock noise at small serving_time_scale
    # is not magnified; None when an engine does not keep one.
    model_ms: float | None = None


@dataclass
class Completion:
    text: str
    tokens: int
    draft_tokens: int = 0
    accepted_tokens: int = 0


@dataclass
class LiveVariant:
    """One variant as it runs in the server: its profile and its current load."""

    endpoint: str
    variant: str
    config_name: str
    model: str | None
    profile: VariantProfile
    environment: dict[str, str]
    seed: int
    # The container image: which request bodies its server takes (runtime.openai_only).
    image: str = ""
    serving_time_scale: float = 1.0
    deterministic: DeterministicServing | None = None
    workload_overlap: float | None = None
    # Model copies serving the variant: instances x (GPUs per instance / TP degree).
    instances: int = 1
    active: int = 0
    # Loop time at which each instance's prefill lane is free again.
    prefill_lanes: list[float] = field(default_factory=lambda: [0.0])
    waiting: int = 0
    served: int = 0
    _slots: asyncio.Semaphore | None = field(default=None, repr=False)
    _limit: int = 0
    # Every variant of the endpoint config this one serves in (itself included), set by
    # the runtime on each request: an engine that must treat the endpoint as a whole
    # (serve a baseline like its candidate) looks here.
    peers: tuple[LiveVariant, ...] = field(default=(), repr=False, compare=False)
    # The inference component these copies belong to (None: a model-based variant).
    inference_component: str | None = None

    def record_counters(self) -> bool:
        """LMI's OPTION_RECORD_ACCEPTANCE_RATE switches the per-request counters on."""
        flag = self.environment.get("OPTION_RECORD_ACCEPTANCE_RATE", "false").lower()
        return self.profile.speculative is not None and flag in ("true", "1", "yes")

    def batch_limit(self, tokens_per_sequence: int) -> int:
        """Sequences the variant runs at once: per-copy limit x model copies."""
        return max(1, self.profile.batch_limit(tokens_per_sequence)) * max(1, self.instances)

    def batch_per_instance(self) -> int:
        """Running sequences on one instance (requests spread evenly, like LOR routing)."""
        return max(1, -(-self.active // max(1, self.instances)))

    @contextlib.asynccontextmanager
    async def admitted(self, tokens_per_sequence: int) -> AsyncIterator[None]:
        """Wait for a batch slot: requests beyond the batch limit queue here."""
        limit = self.batch_limit(tokens_per_sequence)
        if self._slots is None or self._limit != limit:
            self._slots, self._limit = asyncio.Semaphore(limit), limit
        slots = self._slots
        self.waiting += 1
        try:
            await slots.acquire()
        finally:
            self.waiting -= 1
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1
            self.served += 1
            slots.release()


class Engine(Protocol):
    def stream(
        self, variant: LiveVariant, request: GenerationRequest
    ) -> AsyncIterator[list[Token]]:
        """Chunks of tokens as the variant would stream them, paced in real time."""
        ...

    def answer(self, variant: LiveVariant, prompt: str) -> str | None:
        """The text a variant answers an eval prompt with, or None for ordinary prompts."""
        ...

    def served_by(self, variant: LiveVariant) -> ServedBy:
        """The engine that serves the variant now, for the response's CustomAttributes."""
        ...


def estimate_tokens(text: str) -> int:
    """Prompt tokens by the usual ~4 characters per token rule (no tokenizer needed)."""
    return max(1, round(len(text) / 4))


def guess_overlap(prompt: str) -> float:
    """How much output copies the prompt: input-grounded prompts favour n-gram drafting."""
    lowered = prompt.lower()
    return 0.8 if any(word in lowered for word in _OVERLAP_WORDS) else 0.2


def filler_token(seed: int, prompt: str, index: int) -> Token:
    digest = hashlib.blake2b(f"{seed}|{prompt}|{index}".encode(), digest_size=4).digest()
    number = int.from_bytes(digest, "big")
    word = _WORDS_FLAT[number % len(_WORDS_FLAT)]
    return Token(1000 + number % 30000, (" " if index else "") + word)


class SyntheticEngine:
    """Tokens from filler text, timings from the serving model (or fixed, deterministically)."""

    def served_by(self, variant: LiveVariant) -> ServedBy:
        return ServedBy(SYNTHETIC)

    async def stream(
        self, variant: LiveVariant, request: GenerationRequest
    ) -> AsyncIterator[list[Token]]:
        loop = asyncio.get_running_loop()
        total = max(1, request.max_new_tokens)
        # Fixed timings for every variant, or each variant's own as if it ran alone (config.py).
        det = (
            variant.deterministic
            if variant.deterministic and variant.deterministic.timings == "fixed"
            else None
        )
        alone = variant.deterministic is not None and variant.deterministic.timings == "profile"
        overlap = (
            variant.workload_overlap
            if variant.workload_overlap is not None
            else guess_overlap(request.prompt)
        )
        alpha = variant.profile.acceptance_alpha(overlap)
        rng = random.Random(f"{variant.seed}|{variant.served}|{request.prompt[:64]}")
        scale = variant.serving_time_scale / 1000.0  # model ms -> wall seconds
        queued_at = loop.time()
        must_wait = variant.active >= variant.batch_limit(request.input_tokens + total)
        async with variant.admitted(request.input_tokens + total):
            start = loop.time()
            queue_ms = (start - queued_at) / scale if must_wait else 0.0
            if det:
                virtual = det.ttft_ms
            elif alone:
                virtual = variant.profile.prefill_ms(request.input_tokens)
            else:
                # Prefills share the GPU: a burst of arrivals queues behind earlier prompts
                # (one prefill lane per instance), which is how TTFT grows under load.
                prefill = variant.profile.prefill_ms(request.input_tokens) * _jitter(rng)
                lane = min(range(len(variant.prefill_lanes)), key=variant.prefill_lanes.__getitem__)
                begins = max(start, variant.prefill_lanes[lane])
                variant.prefill_lanes[lane] = begins + prefill * scale
                virtual = (begins - start) / scale + prefill
            emitted = 0
            while emitted < total:
                await _sleep_until(loop, start + virtual * scale)
                if emitted == 0:
                    count = det.tokens_per_chunk if det else 1
                elif det:
                    count = det.tokens_per_chunk
                else:
                    # The requests this step schedules: vLLM's batch schedule reads them.
                    scheduled = 1 if alone else variant.batch_per_instance()
                    count, accepted = draw_step_tokens(variant.profile, alpha, rng, scheduled)
                    count = min(count, total - emitted)
                    k = variant.profile.draft_tokens(scheduled)
                    if k:
                        request.draft_tokens += k
                        request.accepted_tokens += min(accepted, count)
                        request.drafts += 1
                        if len(request.accepted_per_position) < k:
                            request.accepted_per_position += [0] * (
                                k - len(request.accepted_per_position)
                            )
                        for position in range(min(accepted, count)):
                            request.accepted_per_position[position] += 1
                count = min(count, total - emitted)
                request.model_ms = queue_ms + virtual
                yield [
                    filler_token(variant.seed, request.prompt, emitted + i) for i in range(count)
                ]
                emitted += count
                if det:
                    virtual += det.itl_ms * det.tokens_per_chunk
                elif alone:
                    virtual += variant.profile.decode_step_ms(
                        1, request.input_tokens
                    ) * variant.profile.speculative_step_factor(1)
                else:
                    batch = variant.batch_per_instance()
                    context = request.input_tokens + emitted
                    virtual += (
                        variant.profile.decode_step_ms(batch, context)
                        * variant.profile.speculative_step_factor(batch)
                        * _jitter(rng)
                    )

    def answer(self, variant: LiveVariant, prompt: str) -> str | None:
        item = evalset.lookup(prompt)
        if item is None:
            return None
        base = evalset.BASE_ACCURACY[item.kind]
        if variant.profile.model_size_b >= 40:
            base = min(0.99, base + 0.05)
        profile = variant.profile
        if profile.quality_drop_classes and item.kind not in profile.quality_drop_classes:
            profile = replace(profile, quality_drop=0.0)
        outcome = eval_outcome(profile, variant.seed, prompt, base)
        if outcome == "refusal":
            return evalset.REFUSAL
        if outcome == "correct":
            return item.reference
        digest = hashlib.sha256(f"wrong|{variant.seed}|{prompt}".encode()).digest()
        return evalset.wrong_answer(item, digest[0] / 256.0)


def _jitter(rng: random.Random) -> float:
    # ~4% step-to-step variation, as on a real GPU with other work interleaved.
    return rng.lognormvariate(0.0, 0.04)


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    delay = deadline - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)
    else:
        await asyncio.sleep(0)
