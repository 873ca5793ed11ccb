"""The sandbox's HTTP server: one port answers SageMaker, its Runtime, CloudWatch and Auto Scaling.

Dispatch follows what botocore sends:
- SageMaker (JSON 1.1): POST / with `X-Amz-Target: SageMaker.<Operation>`.
- SageMaker Runtime (rest-json): POST /endpoints/{name}/invocations[-response-stream].
- CloudWatch: botocore 1.44.8 sends JSON 1.0 (`X-Amz-Target:
  GraniteServiceVersion20100801.<Operation>`, `x-amzn-query-mode: true`) although the model
  lists smithy-rpc-v2-cbor first; the CBOR route (POST
  /service/GraniteServiceVersion20100801/operation/<Operation>) is answered as well.
- Application Auto Scaling (JSON 1.1): POST / with `X-Amz-Target:
  AnyScaleFrontendService.<Operation>` (sandbox/autoscaling.py: SageMaker variants' scalable
  targets and scaling policies).
- S3, path style as botocore addresses an IP: PutObject (PUT /{bucket}/{key}), and GetObject
  (GET /{bucket}/{key}) of the JumpStart metadata in the regions' content buckets
  (sandbox/jumpstart.py).
- Admin (JSON): /_sandbox/{state,faults,traffic,calls,reset,config}.
- OpenAI-compatible streaming for public benchmark tools: POST /v1/chat/completions and
  /v1/completions (`model` = endpoint name).
Signatures are not checked: any dummy credentials work.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import cbor2
from aiohttp import web

from endpoint_optimizer.sandbox import jumpstart
from endpoint_optimizer.sandbox.autoscaling import TARGET_PREFIX, AutoScaling
from endpoint_optimizer.sandbox.cloudwatch import CloudWatch
from endpoint_optimizer.sandbox.components import InferenceComponents
from endpoint_optimizer.sandbox.config import ConfigPatch, Faults, SandboxConfig
from endpoint_optimizer.sandbox.control import AwsError, ControlPlane
from endpoint_optimizer.sandbox.engine import Engine, LiveVariant
from endpoint_optimizer.sandbox.eventstream import payload_part, stream_exception
from endpoint_optimizer.sandbox.logs import Logs
from endpoint_optimizer.sandbox.pricing import TARGET_PREFIX as PRICING_TARGET
from endpoint_optimizer.sandbox.pricing import PriceList
from endpoint_optimizer.sandbox.runtime import (
    ParsedBody,
    Runtime,
    StreamBroken,
    TrafficRecord,
    lmi_line,
    openai_only,
    parse_body,
)
from endpoint_optimizer.sandbox.validation import RequestInvalid, validate

_MAX_BODY = 6 * 1024 * 1024
_VARIANT_HEADER = "X-Amzn-Invoked-Production-Variant"
# The container's CustomAttributes, passed back by SageMaker as this header on both
# InvokeEndpoint and InvokeEndpointWithResponseStream: here it names the engine. The
# OpenAI-compatible routes carry the same header, so a tool on either route sees one label.
_ATTRIBUTES_HEADER = "X-Amzn-SageMaker-Custom-Attributes"


class Sandbox:
    """The three services over one shared state."""

    def __init__(self, config: SandboxConfig | None = None, engine: Engine | None = None) -> None:
        self.config = config or SandboxConfig()
        self.control = ControlPlane(self.config)
        self.runtime = Runtime(self.config, self.control, engine)
        self.cloudwatch = CloudWatch(self.control, self.runtime)
        self.logs = Logs(self.config, self.control, self.runtime)
        self.autoscaling = AutoScaling(self.control)
        self.components = InferenceComponents(self.control)
        self.pricing = PriceList(self.control)
        self.runtime.components = self.components

    def app(self) -> web.Application:
        app = web.Application(client_max_size=_MAX_BODY + 1024)
        app.router.add_post("/", self.sagemaker)
        app.router.add_post("/endpoints/{name}/invocations", self.invoke)
        app.router.add_post("/endpoints/{name}/invocations-response-stream", self.invoke_stream)
        app.router.add_post("/service/{service}/operation/{operation}", self.cbor_rpc)
        app.router.add_get("/_sandbox/state", self.admin_state)
        app.router.add_post("/_sandbox/faults", self.admin_faults)
        app.router.add_get("/_sandbox/faults", self.admin_get_faults)
        app.router.add_get("/_sandbox/traffic", self.admin_traffic)
        app.router.add_get("/_sandbox/calls", self.admin_calls)
        app.router.add_post("/_sandbox/reset", self.admin_reset)
        app.router.add_post("/_sandbox/config", self.admin_config)
        app.router.add_get("/_sandbox/config", self.admin_get_config)
        app.router.add_post("/v1/chat/completions", self.openai)
        app.router.add_post("/v1/completions", self.openai)
        # S3 PutObject, path style: botocore addresses an IP endpoint as PUT /bucket/key.
        app.router.add_put("/{bucket}/{key:.+}", self.s3_put_object)
        app.router.add_get("/{bucket}/{key:.+}", self.s3_get_object)
        app.on_shutdown.append(self._cancel_shadows)
        return app

    async def _cancel_shadows(self, _app: web.Application) -> None:
        for task in list(self.runtime.shadow_tasks):
            task.cancel()

    # -- JSON 1.1 services by X-Amz-Target: SageMaker, CloudWatch Logs, Auto Scaling ----

    async def sagemaker(self, request: web.Request) -> web.Response:
        target = request.headers.get("X-Amz-Target", "")
        service, _, operation = target.partition(".")
        if service == "GraniteServiceVersion20100801" and operation:
            return await self.cloudwatch_json(request, operation)
        handle = {
            "SageMaker": self.control.handle,
            "Logs_20140328": self.logs.handle,
            TARGET_PREFIX: self.autoscaling.handle,
            PRICING_TARGET: self.pricing.handle,
        }.get(service)
        if handle is None or not operation:
            return _json_error(
                AwsError("UnknownOperationException", f"Unknown X-Amz-Target {target!r}.")
            )
        return await _json_rpc(request, operation, handle)

    # -- S3 (PutObject only: the llm-compressor source bundle) -------------------------------

    async def s3_put_object(self, request: web.Request) -> web.Response:
        body = await request.read()
        etag = self.control.put_object(
            request.match_info["bucket"],
            request.match_info["key"],
            body,
            request.headers.get("Content-Type", "binary/octet-stream"),
        )
        return web.Response(
            status=200, headers={"ETag": etag, "x-amz-request-id": uuid.uuid4().hex[:16]}
        )

    async def s3_get_object(self, request: web.Request) -> web.Response:
        bucket, key = request.match_info["bucket"], request.match_info["key"]
        body = jumpstart.metadata_object(key) if jumpstart.is_metadata_bucket(bucket) else None
        self.control.record_call("GetObject", f"s3://{bucket}/{key}", None if body else "NoSuchKey")
        request_id = uuid.uuid4().hex[:16].upper()
        if body is None:
            code, message, detail = (
                ("NoSuchKey", "The specified key does not exist.", f"<Key>{key}</Key>")
                if jumpstart.is_metadata_bucket(bucket)
                else (
                    "NoSuchBucket",
                    "The specified bucket does not exist",
                    f"<BucketName>{bucket}</BucketName>",
                )
            )
            error = (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{code}</Code><Message>{message}</Message>{detail}"
                f"<RequestId>{request_id}</RequestId></Error>"
            )
            return web.Response(
                status=404,
                body=error.encode(),
                content_type="application/xml",
                headers={"x-amz-request-id": request_id},
            )
        etag = f'"{hashlib.md5(body, usedforsecurity=False).hexdigest()}"'
        return web.Response(
            body=body,
            content_type="application/json",
            headers={
                "ETag": etag,
                "Last-Modified": "Tue, 01 Sep 2026 00:00:00 GMT",
                "x-amz-request-id": request_id,
            },
        )

    # -- CloudWatch (JSON 1.0 as botocore 1.44.8 sends it; rpc-v2-cbor too) -------------

    async def cloudwatch_json(self, request: web.Request, operation: str) -> web.Response:
        headers = {"x-amzn-RequestId": str(uuid.uuid4())}
        try:
            params = json.loads(await request.read() or b"{}")
            result = self.cloudwatch.handle(operation, params)
        except AwsError as exc:
            headers["x-amzn-query-error"] = f"{exc.code};Sender"
            return web.Response(
                status=exc.status,
                body=json.dumps({"__type": exc.code, "message": exc.message}).encode(),
                content_type="application/x-amz-json-1.0",
                headers=headers,
            )
        except ValueError:
            error = {"__type": "SerializationException", "message": "The body is not valid JSON."}
            return web.Response(
                status=400,
                body=json.dumps(error).encode(),
                content_type="application/x-amz-json-1.0",
            )
        return web.Response(
            body=json.dumps(result, default=_epoch_seconds).encode(),
            content_type="application/x-amz-json-1.0",
            headers=headers,
        )

    async def cbor_rpc(self, request: web.Request) -> web.Response:
        operation = request.match_info["operation"]
        headers = {"smithy-protocol": "rpc-v2-cbor", "x-amzn-RequestId": str(uuid.uuid4())}
        try:
            raw = await request.read()
            params = cbor2.loads(raw) if raw else {}
            result = self.cloudwatch.handle(operation, params)
            status = 200
        except AwsError as exc:
            result = {"__type": exc.code, "message": exc.message}
            headers["x-amzn-query-error"] = f"{exc.code};Sender"
            status = exc.status
        body = cbor2.dumps(result, datetime_as_timestamp=True)
        return web.Response(
            body=body, status=status, content_type="application/cbor", headers=headers
        )

    # -- SageMaker Runtime ---------------------------------------------------------------

    async def _prepare(self, request: web.Request) -> tuple[ParsedBody, Any, list[Any]]:
        name = request.match_info["name"]
        try:
            validate("sagemaker-runtime", "InvokeEndpoint", {"EndpointName": name, "Body": ""})
        except RequestInvalid as exc:
            raise AwsError("ValidationError", str(exc)) from exc
        raw = await request.read()
        if len(raw) > _MAX_BODY:
            raise AwsError("ValidationError", "Request body exceeds the 6 MB limit.")
        target = request.headers.get("X-Amzn-SageMaker-Target-Variant")
        component = request.headers.get("X-Amzn-SageMaker-Inference-Component")
        shadows: list[LiveVariant] = []
        if component is not None:
            variant = self.runtime.resolve_component(name, component)
        else:
            variant, shadows = self.runtime.resolve(name, target)
        body = parse_body(raw)
        stream = request.path.endswith("-response-stream")
        self.runtime.refuse_body(variant, body, stream=stream)
        self.runtime.fail_invocation(variant, shadow=False, stream=stream)
        return body, variant, shadows

    async def invoke(self, request: web.Request) -> web.Response:
        try:
            body, variant, shadows = await self._prepare(request)
        except AwsError as exc:
            return _rest_error(exc)
        self.runtime.start_shadows(shadows, body, stream=False)
        # Named before generating: the engine the request is routed to now.
        variant_headers = self._variant_headers(variant)
        answer = self.runtime.engine.answer(variant, body.prompt)
        if answer is not None:
            body = dataclasses.replace(
                body,
                max_new_tokens=max(1, min(body.max_new_tokens, len(answer) // 4 + 1)),
                stream_requested=False,
            )
        text: list[str] = []
        record = None
        async for chunk, current in self.runtime.generate(
            variant, body, shadow=False, stream=False, inference_id=_inference_id(request)
        ):
            text.extend(token.text for token in chunk)
            record = current
        generated = answer if answer is not None else "".join(text)
        tokens = record.output_tokens if record else 0
        if body.chat:
            payload: dict[str, Any] = _chat_completion(variant.endpoint, generated, record)
        elif body.completions and openai_only(variant.image):
            # [unverified] what LMI answers a {"prompt"} body; it is served as LMI's here.
            payload = _text_completion(variant.endpoint, generated, record)
        else:
            payload = {
                "generated_text": generated,
                "details": {
                    "finish_reason": "eos_token" if answer is not None else "length",
                    "generated_tokens": tokens,
                    "prompt_tokens": record.input_tokens if record else 0,
                },
            }
            if record is not None and variant.record_counters():
                payload["details"]["draft_tokens"] = record.draft_tokens
                payload["details"]["accepted_tokens"] = record.accepted_tokens
        return web.Response(
            body=json.dumps(payload).encode(),
            content_type="application/json",
            headers=variant_headers,
        )

    async def invoke_stream(self, request: web.Request) -> web.StreamResponse:
        try:
            body, variant, shadows = await self._prepare(request)
        except AwsError as exc:
            return _rest_error(exc)
        self.runtime.start_shadows(shadows, body, stream=True)
        variant_headers = self._variant_headers(variant)
        # An eval prompt streams its answer (one word per token) and stops, like EOS.
        answer = self.runtime.engine.answer(variant, body.prompt)
        words = answer_words(answer) if answer is not None else None
        if words is not None:
            body = dataclasses.replace(body, max_new_tokens=min(body.max_new_tokens, len(words)))
        # vLLM's SageMaker route streams OpenAI server-sent events, one per PayloadPart.
        sse = _OpenAiChunks(variant.endpoint, body.chat) if openai_only(variant.image) else None
        response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "application/vnd.amazon.eventstream",
                "X-Amzn-SageMaker-Content-Type": "application/jsonlines",
                **variant_headers,
                "x-amzn-RequestId": str(uuid.uuid4()),
            },
        )
        await response.prepare(request)
        text: list[str] = []

        def closing(record: TrafficRecord, finish_reason: str) -> dict[str, Any]:
            details: dict[str, Any] = {
                "finish_reason": finish_reason,
                "generated_tokens": record.output_tokens,
                "prompt_tokens": record.input_tokens,
            }
            if variant.record_counters():
                details["draft_tokens"] = record.draft_tokens
                details["accepted_tokens"] = record.accepted_tokens
            return {"generated_text": "".join(text), "details": details}

        async def send(line: bytes) -> None:
            size = self.config.payload_fragment_bytes or len(line)
            for offset in range(0, len(line), size):
                await response.write(payload_part(line[offset : offset + size]))

        last: TrafficRecord | None = None
        closed = False
        try:
            async for chunk, record in self.runtime.generate(
                variant, body, shadow=False, stream=True, inference_id=_inference_id(request)
            ):
                last = record
                if words is not None:
                    first = record.output_tokens - len(chunk)
                    for index, token in enumerate(chunk):
                        token.text = words[first + index]
                text.extend(token.text for token in chunk)
                if sse is not None:
                    first_chunk = record.output_tokens == len(chunk)
                    await send(sse.chunk("".join(t.text for t in chunk), first_chunk))
                    continue
                final = None
                if record.output_tokens >= body.max_new_tokens:
                    final = closing(record, "length" if words is None else "eos_token")
                    closed = True
                await send(lmi_line(chunk, final))
            if sse is not None:
                finish = "length" if words is None else "stop"
                for event in sse.closing(last, finish, include_usage=True):
                    await send(event)
            elif last is not None and not closed:
                # The engine stopped before max_new_tokens (end of turn): like TGI, close
                # with a special token that carries no text, then the details.
                end = {"id": -1, "text": "", "special": True}
                line = {"token": end, "num_tokens": 0, **closing(last, "eos_token")}
                await send((json.dumps(line) + "\n").encode())
        except StreamBroken as exc:
            message = (
                "Model stream broken: the model container closed the response stream."
                if exc.exception == "ModelStreamError"
                else "Internal stream failure."
            )
            code = exc.error_code if exc.exception == "ModelStreamError" else None
            await response.write(stream_exception(exc.exception, message, code))
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        await response.write_eof()
        return response

    async def openai(self, request: web.Request) -> web.StreamResponse:
        """OpenAI-compatible SSE for public tools; `model` names the endpoint."""
        raw = await request.read()
        try:
            payload = json.loads(raw or b"{}")
            endpoint = str(payload.get("model", ""))
            variant, shadows = self.runtime.resolve(endpoint, None)
            body = parse_body(raw)
        except AwsError as exc:
            error = {"message": exc.message, "type": exc.code}
            return web.json_response({"error": error}, status=404)
        except ValueError:
            return web.json_response({"error": {"message": "invalid JSON"}}, status=400)
        chat = request.path.endswith("/chat/completions")
        self.runtime.start_shadows(shadows, body, stream=True)
        variant_headers = self._variant_headers(variant)
        if not payload.get("stream", False):
            pieces: list[str] = []
            last = None
            async for chunk, current in self.runtime.generate(
                variant, body, shadow=False, stream=False
            ):
                pieces.extend(t.text for t in chunk)
                last = current
            joined = "".join(pieces)
            answer = (_chat_completion if chat else _text_completion)(endpoint, joined, last)
            return web.json_response(answer, headers=variant_headers)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                **variant_headers,
            }
        )
        await response.prepare(request)
        sse = _OpenAiChunks(endpoint, chat)
        record = None
        async for chunk, current in self.runtime.generate(variant, body, shadow=False, stream=True):
            record = current
            text = "".join(t.text for t in chunk)
            await response.write(sse.chunk(text, record.output_tokens == len(chunk)))
        # Like vLLM: usage rides its own last chunk with no choices; sent unless the client
        # opts out with stream_options.include_usage = false.
        options = payload.get("stream_options") or {}
        for event in sse.closing(record, "length", options.get("include_usage", True) is not False):
            await response.write(event)
        await response.write_eof()
        return response

    def _variant_headers(self, variant: LiveVariant) -> dict[str, str]:
        """The headers every invocation route answers with: the variant and its engine label.

        Taken once per request, before generating, so a response's label names the engine
        the request was routed to even if a peer variant changes meanwhile.
        """
        return {
            _VARIANT_HEADER: variant.variant,
            _ATTRIBUTES_HEADER: self.runtime.engine.served_by(variant).header(),
        }

    # -- admin ----------------------------------------------------------------------------

    async def admin_state(self, _request: web.Request) -> web.Response:
        state = self.control.snapshot()
        state.update(self.autoscaling.snapshot())
        state.update(self.components.snapshot())
        state["config"] = self.config.dump()
        return web.Response(text=json.dumps(state, default=str), content_type="application/json")

    async def admin_faults(self, request: web.Request) -> web.Response:
        try:
            faults = Faults.model_validate(await request.json())
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        with self.control.lock:
            self.config.faults = faults
        return web.json_response(faults.dump())

    async def admin_get_faults(self, _request: web.Request) -> web.Response:
        return web.json_response(self.config.faults.dump())

    async def admin_traffic(self, request: web.Request) -> web.Response:
        records = self.runtime.traffic_dump()
        endpoint = request.query.get("endpoint")
        if endpoint:
            records = [r for r in records if r["endpoint"] == endpoint]
        return web.json_response(records)

    async def admin_calls(self, request: web.Request) -> web.Response:
        # ?since=N: the calls after the first N, for a poller that keeps its place.
        try:
            since = max(0, int(request.query.get("since", "0")))
        except ValueError:
            return web.json_response({"error": "since: a call count, e.g. ?since=10"}, status=400)
        with self.control.lock:
            calls = [
                {
                    "operation": c.operation,
                    "resource": c.resource,
                    "wallTime": c.wall_time,
                    "errorCode": c.error_code,
                }
                for c in self.control.calls[since:]
            ]
        return web.json_response(calls)

    async def admin_reset(self, _request: web.Request) -> web.Response:
        with self.control.lock:
            self.config.faults = Faults()
            self.control.reset()
            self.autoscaling.reset()
            self.components.reset()
        self.runtime.reset()
        self.cloudwatch.reset()
        return web.json_response({"reset": True})

    async def admin_config(self, request: web.Request) -> web.Response:
        try:
            patch = ConfigPatch.model_validate(await request.json())
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        with self.control.lock:
            for key, value in patch.model_dump(exclude_unset=True).items():
                setattr(self.config, key, getattr(patch, key) if value is not None else value)
        return web.json_response(self.config.dump())

    async def admin_get_config(self, _request: web.Request) -> web.Response:
        return web.json_response(self.config.dump())


def answer_words(answer: str) -> list[str]:
    """An answer as token texts: one word per token, leading spaces kept."""
    words = answer.split(" ")
    return [words[0]] + [" " + word for word in words[1:]]


def _epoch_seconds(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    raise TypeError(f"cannot encode {type(value).__name__}")


def _usage(record: Any) -> dict[str, int]:
    prompt = record.input_tokens if record else 0
    completion = record.output_tokens if record else 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _text_completion(model: str, text: str, record: Any) -> dict[str, Any]:
    return {
        "id": f"cmpl-{uuid.uuid4().hex[:12]}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
        "usage": _usage(record),
    }


class _OpenAiChunks:
    """OpenAI streaming chunks (server-sent events) of one response, as vLLM writes them."""

    def __init__(self, model: str, chat: bool) -> None:
        self.chat = chat
        self.envelope = {
            "id": f"cmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": model,
        }

    def _event(self, body: dict[str, Any]) -> bytes:
        return f"data: {json.dumps({**self.envelope, **body})}\n\n".encode()

    def chunk(self, text: str, first: bool) -> bytes:
        if not self.chat:
            return self._event({"choices": [{"index": 0, "text": text, "finish_reason": None}]})
        delta: dict[str, Any] = (
            {"role": "assistant", "content": text} if first else {"content": text}
        )
        return self._event({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})

    def closing(self, record: Any, finish: str, include_usage: bool) -> list[bytes]:
        """The finishing choice, the usage chunk (no choices) and [DONE]."""
        last: dict[str, Any] = (
            {"index": 0, "delta": {}, "finish_reason": finish}
            if self.chat
            else {"index": 0, "text": "", "finish_reason": finish}
        )
        events = [self._event({"choices": [last]})]
        if include_usage:
            events.append(self._event({"choices": [], "usage": _usage(record)}))
        return [*events, b"data: [DONE]\n\n"]


def _chat_completion(model: str, text: str, record: Any) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": _usage(record),
    }


async def _json_rpc(
    request: web.Request,
    operation: str,
    handle: Callable[[str, dict[str, Any]], dict[str, Any]],
) -> web.Response:
    """One JSON 1.1 call (SageMaker, CloudWatch Logs, Auto Scaling): the body's parameters to
    the service's `handle`, its result or its error in the wire shape botocore reads."""
    try:
        params = json.loads(await request.read() or b"{}")
        result = handle(operation, params)
    except AwsError as exc:
        return _json_error(exc)
    except ValueError:
        return _json_error(AwsError("SerializationException", "The body is not valid JSON."))
    return web.Response(
        body=json.dumps(result).encode(),
        content_type="application/x-amz-json-1.1",
        headers={"x-amzn-RequestId": str(uuid.uuid4())},
    )


def _json_error(exc: AwsError) -> web.Response:
    return web.Response(
        status=exc.status,
        body=json.dumps({"__type": exc.code, "message": exc.message}).encode(),
        content_type="application/x-amz-json-1.1",
        headers={"x-amzn-RequestId": str(uuid.uuid4())},
    )


def _inference_id(request: web.Request) -> str | None:
    """InvokeEndpoint's InferenceId travels as this header; the traffic record keeps it."""
    return request.headers.get("X-Amzn-SageMaker-Inference-Id")


def _rest_error(exc: AwsError) -> web.Response:
    status = exc.status
    if exc.code == "ModelError":
        status = 424
    body: dict[str, Any] = {"message": exc.message}
    if exc.code == "ModelError":
        # The container's own status, as SageMaker reports it: "Received server error (503)".
        found = re.search(r"error \((\d{3})\)", exc.message)
        original = int(found.group(1)) if found else 400
        body.update(OriginalStatusCode=original, OriginalMessage=exc.message)
    return web.Response(
        status=status,
        body=json.dumps(body).encode(),
        content_type="application/json",
        headers={"x-amzn-ErrorType": f"{exc.code}:", "x-amzn-RequestId": str(uuid.uuid4())},
    )


class SandboxServer:
    """Runs a Sandbox on 127.0.0.1 in a background thread with its own event loop."""

    def __init__(
        self,
        config: SandboxConfig | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        engine: Engine | None = None,
    ) -> None:
        self.sandbox = Sandbox(config, engine)
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sandbox-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout=30):
            raise RuntimeError("the sandbox server did not start within 30 s")
        if self._error is not None:
            raise RuntimeError(f"the sandbox server failed to start: {self._error}")

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to start() and re-raised there
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(self._shutdown())
        loop.close()

    async def _serve(self) -> None:
        runner = web.AppRunner(self.sandbox.app(), access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1])
        self._runner = runner

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        await close_engine(self.sandbox.runtime.engine)
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)


async def serve_forever(
    config: SandboxConfig,
    host: str,
    port: int,
    engine: Engine | None = None,
    listener: socket.socket | None = None,
) -> None:
    """Serve in the current event loop until cancelled (the CLI's path).

    `listener`: an already listening socket to serve on instead of binding host:port.
    """
    sandbox = Sandbox(config, engine)
    runner = web.AppRunner(sandbox.app(), access_log=None)
    await runner.setup()
    site: web.BaseSite = (
        web.SockSite(runner, listener) if listener is not None else web.TCPSite(runner, host, port)
    )
    await site.start()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        await close_engine(sandbox.runtime.engine)


async def close_engine(engine: Engine) -> None:
    """Engines that hold processes (the real-model one) expose `async close()`."""
    close = getattr(engine, "close", None)
    if close is not None:
        await close()
