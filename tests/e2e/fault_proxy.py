"""A fault proxy in front of the sandbox: network and service faults SageMaker's model lacks.

The operator's AWS calls go through it (AWS_ENDPOINT_URL); each request is forwarded to the
sandbox unless a rule takes it:

- `reset`: the TCP connection is reset (RST) once the request arrived, as a dropped
  connection or a middlebox does; botocore raises ConnectionClosedError;
- `throttle`: SageMaker Runtime's ThrottlingException (HTTP 400, `Rate exceeded`);
- `model_error`: the container's error, ModelError (HTTP 424) with OriginalStatusCode.

A rule matches the operation (X-Amz-Target for control-plane calls, e.g. `DescribeEndpoint`;
`InvokeEndpoint` / `InvokeEndpointWithResponseStream` by path for the runtime) and
optionally the TargetVariant header, for `times` requests (None: until cleared). Each request
is sent upstream on its own connection with `Connection: close`, so request and response
boundaries need no parsing beyond the request's head and Content-Length.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

Action = Literal["reset", "throttle", "model_error"]


@dataclass
class Rule:
    action: Action
    operation: str
    variant: str | None = None
    times: int | None = None
    original_status: int = 503
    hits: int = 0

    def takes(self, operation: str, variant: str | None) -> bool:
        if operation != self.operation or (self.variant is not None and variant != self.variant):
            return False
        return self.times is None or self.hits < self.times


@dataclass
class FaultProxy:
    upstream: str
    rules: list[Rule] = field(default_factory=list)
    url: str = ""
    forwarded: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _loop: asyncio.AbstractEventLoop | None = None

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def _rule(self, operation: str, variant: str | None) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.takes(operation, variant):
                    rule.hits += 1
                    return rule
        return None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                operation = _operation(path, headers)
                rule = self._rule(operation, headers.get("x-amzn-sagemaker-target-variant"))
                if rule is not None and rule.action == "reset":
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                if rule is not None:
                    writer.write(_error(rule))
                    await writer.drain()
                    continue
                await self._forward(method, path, lines[1:], body, writer)
                return  # the upstream closed: so does this connection
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            return
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _forward(
        self,
        method: str,
        path: str,
        header_lines: list[str],
        body: bytes,
        writer: asyncio.StreamWriter,
    ) -> None:
        target = urlsplit(self.upstream)
        up_reader, up_writer = await asyncio.open_connection(target.hostname, target.port)
        kept = [
            line
            for line in header_lines
            if line and line.split(":", 1)[0].strip().lower() not in ("connection", "keep-alive")
        ]
        head = "\r\n".join([f"{method} {path} HTTP/1.1", *kept, "Connection: close", "", ""])
        up_writer.write(head.encode("latin-1") + body)
        await up_writer.drain()
        response_head = await up_reader.readuntil(b"\r\n\r\n")
        status, *rest = response_head.decode("latin-1").split("\r\n")
        rest = [
            line
            for line in rest
            if line and not line.lower().startswith(("connection:", "keep-alive:"))
        ]
        writer.write("\r\n".join([status, *rest, "Connection: close", "", ""]).encode("latin-1"))
        while chunk := await up_reader.read(65536):
            writer.write(chunk)
            await writer.drain()
        up_writer.close()
        self.forwarded += 1

    async def _serve(self, ready: threading.Event) -> None:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        ready.set()
        async with server:
            await server.serve_forever()


def _operation(path: str, headers: dict[str, str]) -> str:
    if path.endswith("/invocations-response-stream"):
        return "InvokeEndpointWithResponseStream"
    if path.endswith("/invocations"):
        return "InvokeEndpoint"
    return headers.get("x-amz-target", "").rsplit(".", 1)[-1]


def _error(rule: Rule) -> bytes:
    if rule.action == "throttle":
        status, kind = "400 Bad Request", "ThrottlingException"
        body: dict[str, object] = {"message": "Rate exceeded"}
    else:
        status, kind = "424 Failed Dependency", "ModelError"
        text = (
            f"Received server error ({rule.original_status}) from primary with message "
            '"{"error": "injected by the fault proxy"}".'
        )
        body = {
            "message": text,
            "OriginalStatusCode": rule.original_status,
            "OriginalMessage": text,
        }
    payload = json.dumps(body).encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"x-amzn-ErrorType: {kind}:\r\nx-amzn-RequestId: fault-proxy\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


@contextlib.contextmanager
def running_fault_proxy(upstream: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    task: list[asyncio.Task[None]] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        task.append(loop.create_task(proxy._serve(ready)))
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(task[0])

    thread = threading.Thread(target=run, daemon=True, name="fault-proxy")
    thread.start()
    assert ready.wait(10), "the fault proxy did not start"
    try:
        yield proxy
    finally:
        loop.call_soon_threadsafe(task[0].cancel)
        thread.join(timeout=10)
        loop.close()
