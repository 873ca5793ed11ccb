"""The parent side of the real engine: worker processes per variant, async token streams.

`RealEngine.stream()` sends a request to the variant's worker and yields its token
events as they arrive. A reader thread per worker moves each event onto the event
loop of the request that waits for it, so no loop blocks on a pipe, and one engine
(its workers loaded once) can serve several sandboxes one after another.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from multiprocessing.context import SpawnProcess
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

from endpoint_optimizer.realmodel.weights import ensure_converted
from endpoint_optimizer.realmodel.worker import Event, Request, VariantSettings, serve


@dataclass(frozen=True)
class TokenEvent:
    """Tokens one decode step produced for this request (several on a speculative step)."""

    ids: list[int]
    text: str
    monotonic: float
    # Running speculative counters up to and including this step (None without speculation).
    draft_tokens: int | None = None
    accepted_tokens: int | None = None


@dataclass(frozen=True)
class Completion:
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    draft_tokens: int | None = None
    accepted_tokens: int | None = None


class RealEngineError(RuntimeError):
    pass


@dataclass
class _Worker:
    settings: VariantSettings
    process: SpawnProcess
    requests: Queue[Request | None]
    events: Queue[Event]
    ready: threading.Event
    reader: threading.Thread | None = None
    streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue[Event]]] = field(
        default_factory=dict
    )
    failure: str | None = None


class RealEngine:
    """Real model instances, one worker process per variant key."""

    def __init__(self, model_path: Path | None = None, start_timeout_s: float = 180.0) -> None:
        self._model_path = model_path
        self._start_timeout_s = start_timeout_s
        self._workers: dict[str, _Worker] = {}
        self._ids = itertools.count()
        self._context = multiprocessing.get_context("spawn")

    async def start_variant(self, key: str, settings: VariantSettings) -> None:
        """Start the variant's worker (idempotent) and wait until its model is loaded."""
        worker = self._workers.get(key)
        if worker is None or worker.settings != settings:
            if worker is not None:
                await self.stop_variant(key)
            path = self._model_path
            if path is None:
                path = await asyncio.to_thread(ensure_converted)
            worker = self._spawn(key, path, settings)
        loaded = await asyncio.to_thread(worker.ready.wait, self._start_timeout_s)
        if not loaded:
            raise RealEngineError(
                f"variant {key!r}: the model did not load within {self._start_timeout_s:.0f} s"
            )
        if worker.failure:
            raise RealEngineError(worker.failure)

    def _spawn(self, key: str, path: Path, settings: VariantSettings) -> _Worker:
        requests: Queue[Request | None] = self._context.Queue()
        events: Queue[Event] = self._context.Queue()
        process = self._context.Process(
            target=serve, args=(str(path), settings, requests, events), daemon=True
        )
        process.start()
        worker = _Worker(settings, process, requests, events, threading.Event())
        worker.reader = threading.Thread(
            target=self._read, args=(worker,), name=f"real-engine-{key}", daemon=True
        )
        worker.reader.start()
        self._workers[key] = worker
        return worker

    @staticmethod
    def _read(worker: _Worker) -> None:
        while True:
            try:
                event = worker.events.get(timeout=1.0)
            except Exception:
                if not worker.process.is_alive():
                    _fail_all(worker, "the real-model worker exited")
                    return
                continue
            kind, request_id, _ = event
            if kind == "closed":
                return
            if kind == "ready":
                worker.ready.set()
                continue
            waiting = worker.streams.get(request_id)
            if waiting is not None:
                loop, inbox = waiting
                loop.call_soon_threadsafe(inbox.put_nowait, event)

    async def stream(
        self, key: str, messages: list[dict[str, str]], max_new_tokens: int
    ) -> AsyncIterator[TokenEvent | Completion]:
        """Token events for one request, then its Completion; raises RealEngineError."""
        worker = self._workers.get(key)
        if worker is None:
            raise RealEngineError(f"variant {key!r} has no real-model worker; start it first")
        request_id = f"r{next(self._ids)}"
        inbox: asyncio.Queue[Event] = asyncio.Queue()
        worker.streams[request_id] = (asyncio.get_running_loop(), inbox)
        worker.requests.put(Request(request_id, messages, max_new_tokens))
        try:
            while True:
                kind, _, payload = await inbox.get()
                if kind == "tokens":
                    ids, text = list(payload["ids"]), str(payload["text"])
                    running = payload.get("speculation") or {}
                    yield TokenEvent(
                        ids,
                        text,
                        float(payload["t"]),
                        running.get("draft_tokens"),
                        running.get("accepted_tokens"),
                    )
                elif kind == "done":
                    speculation = payload.get("speculation") or {}
                    yield Completion(
                        prompt_tokens=int(payload["promptTokens"]),
                        completion_tokens=int(payload["completionTokens"]),
                        finish_reason=str(payload["finishReason"]),
                        draft_tokens=speculation.get("draft_tokens"),
                        accepted_tokens=speculation.get("accepted_tokens"),
                    )
                    return
                elif kind == "error":
                    raise RealEngineError(str(payload["message"]))
        finally:
            worker.streams.pop(request_id, None)

    async def complete(
        self, key: str, messages: list[dict[str, str]], max_new_tokens: int
    ) -> tuple[str, Completion]:
        """The whole answer of one request (for eval items)."""
        parts: list[str] = []
        async for event in self.stream(key, messages, max_new_tokens):
            if isinstance(event, TokenEvent):
                parts.append(event.text)
            else:
                return "".join(parts), event
        raise RealEngineError("the worker ended the stream without a completion")

    async def stop_variant(self, key: str) -> None:
        worker = self._workers.pop(key, None)
        if worker is None:
            return
        worker.requests.put(None)
        await asyncio.to_thread(worker.process.join, 10.0)
        if worker.process.is_alive():
            worker.process.kill()
            await asyncio.to_thread(worker.process.join, 5.0)
        worker.events.put(("closed", "", {}))
        if worker.reader is not None:
            await asyncio.to_thread(worker.reader.join, 5.0)

    async def close(self) -> None:
        for key in list(self._workers):
            await self.stop_variant(key)


def _fail_all(worker: _Worker, message: str) -> None:
    """Called from the reader thread: every waiting request gets the error on its loop."""
    worker.failure = message
    worker.ready.set()
    for request_id, (loop, inbox) in list(worker.streams.items()):
        loop.call_soon_threadsafe(inbox.put_nowait, ("error", request_id, {"message": message}))


def describe(settings: VariantSettings) -> dict[str, Any]:
    return {"engine": "real", "model": "SmolLM2-135M-Instruct", "settings": settings.label()}
