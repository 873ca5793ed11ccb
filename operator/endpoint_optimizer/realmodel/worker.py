"""One worker process per variant: a real model instance with one torch thread.

Requests arrive on a multiprocessing queue; the worker takes the first waiting
request and up to `max_batch - 1` more that are already queued (static batching),
decodes them together and streams token events back as each step finishes. A
speculative variant decodes one request at a time (prompt lookup verifies a
single sequence's draft). One thread per worker: with two OpenMP threads and any
other busy process, decode steps were measured up to 14x slower on this machine.
"""

from __future__ import annotations

import os
import queue
import time
from dataclasses import dataclass
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class VariantSettings:
    """What the variant's container configuration maps to on the real model."""

    dtype: str = "float32"  # float32 | bfloat16
    quantization: str = "none"  # none | dynamic-int8
    speculative_tokens: int = 0  # prompt-lookup draft length; 0 = off
    max_batch: int = 4
    kv_cache: str = "auto"  # auto | fp8 | nvfp4 (realmodel/kvcache.py)

    def label(self) -> str:
        parts = [self.dtype, self.quantization]
        if self.kv_cache != "auto":
            parts.append(f"kv-{self.kv_cache}")
        if self.speculative_tokens:
            parts.append(f"ngram{self.speculative_tokens}")
        return "/".join(parts)


@dataclass(frozen=True)
class Request:
    request_id: str
    messages: list[dict[str, str]]
    max_new_tokens: int


# Events sent back: (kind, request_id, payload dict)
Event = tuple[str, str, dict[str, Any]]


def load_model(path: Path, settings: VariantSettings) -> tuple[Any, Any, Any]:
    """(torch, model, tokenizer) for the settings, with one intra-op thread."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tokenizer: Any = AutoTokenizer.from_pretrained(str(path))
    dtype = torch.bfloat16 if settings.dtype == "bfloat16" else torch.float32
    model: Any = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    model.eval()
    if settings.quantization == "dynamic-int8":
        # Per-tensor dynamic activation scales: fast on CPU and lossy, and its answers
        # depend on which requests share a batch (scales are computed over the batch).
        quantize: Any = torch.ao.quantization.quantize_dynamic
        model = quantize(model, {torch.nn.Linear}, dtype=torch.qint8)
    return torch, model, tokenizer


def serve(
    path: str,
    settings: VariantSettings,
    requests: Queue[Request | None],
    events: Queue[Event],
) -> None:
    """Worker main loop; exits when it receives None."""
    torch, model, tokenizer = load_model(Path(path), settings)
    eos = int(tokenizer.eos_token_id)
    pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos)
    events.put(("ready", "", {"label": settings.label(), "pid": os.getpid()}))
    batch_limit = 1 if settings.speculative_tokens else max(1, settings.max_batch)
    while True:
        first = requests.get()
        if first is None:
            return
        batch = [first]
        while len(batch) < batch_limit:
            try:
                extra = requests.get_nowait()
            except queue.Empty:
                break
            if extra is None:
                requests.put(None)
                break
            batch.append(extra)
        _run_batch(torch, model, tokenizer, settings, batch, events, eos, pad)


def _run_batch(
    torch: Any,
    model: Any,
    tokenizer: Any,
    settings: VariantSettings,
    batch: list[Request],
    events: Queue[Event],
    eos: int,
    pad: int,
) -> None:
    from transformers import DynamicCache

    from endpoint_optimizer.realmodel.decoding import (
        SpeculationCounters,
        greedy_batch,
        prompt_lookup,
    )
    from endpoint_optimizer.realmodel.kvcache import cache_factory

    cache = cache_factory(torch, DynamicCache, settings.kv_cache)

    prompts = [_encode(tokenizer, r.messages) for r in batch]
    decoders = [_Detokenizer(tokenizer) for _ in batch]
    for request, prompt in zip(batch, prompts, strict=True):
        events.put(("start", request.request_id, {"promptTokens": len(prompt)}))

    counters = SpeculationCounters()

    def on_tokens(index: int, tokens: list[int]) -> None:
        now = time.monotonic()
        tokens = [token for token in tokens if token != eos]  # end of turn is not output
        if not tokens:
            return
        text = decoders[index].push(tokens)
        payload: dict[str, Any] = {"ids": tokens, "text": text, "t": now}
        if settings.speculative_tokens:
            payload["speculation"] = dict(counters.__dict__)
        events.put(("tokens", batch[index].request_id, payload))

    try:
        if settings.speculative_tokens:
            output, finish, counters = prompt_lookup(
                model,
                torch,
                cache,
                prompts[0],
                batch[0].max_new_tokens,
                settings.speculative_tokens,
                eos,
                on_tokens,
                counters,
            )
            _done(events, batch[0], len(prompts[0]), output, finish, eos, counters.__dict__)
            return
        result = greedy_batch(
            model,
            torch,
            cache,
            prompts,
            [r.max_new_tokens for r in batch],
            eos,
            pad,
            on_tokens,
        )
        for request, prompt, output, finish in zip(
            batch, prompts, result.outputs, result.finish_reasons, strict=True
        ):
            _done(events, request, len(prompt), output, finish, eos, None)
    except Exception as exc:  # a worker must answer every request it took
        message = f"{type(exc).__name__}: {exc}"
        for request in batch:
            events.put(("error", request.request_id, {"message": message}))


def _done(
    events: Queue[Event],
    request: Request,
    prompt_tokens: int,
    output: list[int],
    finish: str,
    eos: int,
    speculation: dict[str, int] | None,
) -> None:
    completion = len([t for t in output if t != eos])
    payload: dict[str, Any] = {
        "promptTokens": prompt_tokens,
        "completionTokens": completion,
        "finishReason": finish,
    }
    if speculation is not None:
        payload["speculation"] = dict(speculation)
    events.put(("done", request.request_id, payload))


def _encode(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    encoded = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True
    )
    return list(encoded["input_ids"])


class _Detokenizer:
    """Incremental detokenization: the text delta that the new tokens add."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._text = ""

    def push(self, tokens: list[int]) -> str:
        self._ids.extend(tokens)
        text: str = self._tokenizer.decode(self._ids, skip_special_tokens=True)
        # A token that ends inside a multi-byte character decodes to U+FFFD until the
        # next one completes it: hold the delta back until it is whole.
        if text.endswith("\ufffd"):
            return ""
        delta = text[len(self._text) :]
        self._text = text
        return delta
