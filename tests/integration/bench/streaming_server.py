"""A scripted InvokeEndpointWithResponseStream server that records when it sent each chunk.

The endpoint name picks the scenario; the server's own CLOCK_MONOTONIC send
times are the truth the client's measurements are checked against. Every request's
SigV4 signature is checked as AWS checks it (botocore's own canonical request and
signature over the headers the request names as signed) and the verdict recorded.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import ssl
import threading
import time
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from endpoint_optimizer.sandbox.eventstream import payload_part, stream_exception

TTFT_S = 0.02
ITL_S = 0.004
BURST = 4


# Secret keys by access key id: the test modules' fake credentials.
SECRETS = {"testing": "testing", "sandbox": "sandbox"}


def use_credentials(monkeypatch: pytest.MonkeyPatch, key: str = "sandbox") -> None:
    """Fake static credentials from the environment (one of SECRETS), and no profile."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRETS[key])
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@dataclass
class Served:
    inference_id: str
    endpoint: str
    variant: str | None
    received_at: float
    sent_at: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    signature_ok: bool = False
    attempts: int = 1


def signature_ok(request: web.Request, body: bytes) -> bool:
    """Recompute the request's SigV4 signature from what arrived, with botocore's signer."""
    authorization = request.headers.get("Authorization", "")
    match = re.match(
        r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
        r"SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$",
        authorization,
    )
    if match is None or match.group(1) not in SECRETS:
        return False
    access_key, _, region, service, signed, signature = match.groups()
    headers = {name: request.headers.get(name, "") for name in signed.split(";")}
    url = f"http://{request.headers['Host']}{request.raw_path}"
    unsigned = AWSRequest(method=request.method, url=url, headers=headers, data=body)
    unsigned.context["timestamp"] = request.headers.get("X-Amz-Date", "")
    signer = SigV4Auth(Credentials(access_key, SECRETS[access_key]), service, region)
    canonical = signer.canonical_request(unsigned)
    expected = signer.signature(signer.string_to_sign(unsigned, canonical), unsigned)
    return hmac.compare_digest(expected, signature)


def _lmi_lines(n: int) -> list[tuple[bytes, int]]:
    lines = []
    for i in range(n):
        last = i == n - 1
        line = {
            "token": {"id": i, "text": f" w{i}", "special": False},
            "generated_text": None,
            "details": {"finish_reason": "length", "generated_tokens": n} if last else None,
        }
        lines.append((json.dumps(line).encode() + b"\n", 1))
    return lines


def _openai_lines(n: int, per_chunk: int) -> list[tuple[bytes, int]]:
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    lines = [(b"data: " + json.dumps(role).encode() + b"\n\n", 0)]
    done = 0
    while done < n:
        k = min(per_chunk, n - done)
        done += k
        chunk = {
            "choices": [{"index": 0, "delta": {"content": "".join(f" w{j}" for j in range(k))}}],
            "usage": {"prompt_tokens": 8, "completion_tokens": done},
        }
        lines.append((b"data: " + json.dumps(chunk).encode() + b"\n\n", k))
    final = {
        "choices": [],
        "usage": {"prompt_tokens": 8, "completion_tokens": n},
        "metrics": {
            "speculative_decoding": {
                "num_spec_steps": max(n // per_chunk, 1),
                "num_draft_tokens": max(n // per_chunk, 1) * 3,
                "num_accepted_draft_tokens": max(n // per_chunk, 1) * (per_chunk - 1),
            }
        },
    }
    lines.append((b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n", 0))
    return lines


class StreamingServer:
    """Runs on its own thread and event loop; `url` once started."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context  # serve HTTPS with it
        self.served: dict[str, Served] = {}
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-test-server")
        self._runner: web.AppRunner | None = None
        self._stop: asyncio.Event | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        endpoint = request.match_info["name"]
        raw = await request.read()
        body = json.loads(raw)
        received_at = time.monotonic()
        record = Served(
            inference_id=request.headers.get("X-Amzn-SageMaker-Inference-Id", ""),
            endpoint=endpoint,
            variant=request.headers.get("X-Amzn-SageMaker-Target-Variant"),
            received_at=received_at,
            signature_ok=signature_ok(request, raw),
        )
        earlier = self.served.get(record.inference_id)
        if earlier is not None:
            record.attempts = earlier.attempts + 1
        self.served[record.inference_id] = record
        if endpoint == "throttled-once" and record.attempts == 1:
            # SageMaker Runtime's throttling answer (HTTP 400, ThrottlingException).
            return web.json_response(
                {"message": "Rate exceeded"},
                status=400,
                headers={"x-amzn-ErrorType": "ThrottlingException:"},
            )
        if endpoint == "unavailable-once" and record.attempts == 1:
            return web.json_response(
                {"message": "the service is unavailable"},
                status=503,
                headers={"x-amzn-ErrorType": "ServiceUnavailable:"},
            )
        if endpoint == "model-error":
            return web.json_response(
                {"Message": "the container answered 500", "OriginalStatusCode": 500},
                status=424,
                headers={"x-amzn-ErrorType": "ModelError"},
            )
        n = int(body.get("parameters", {}).get("max_new_tokens", 0) or body.get("max_tokens", 8))
        if endpoint.startswith("openai"):
            per_chunk = int(endpoint.rpartition("-")[2]) if endpoint[-1].isdigit() else 1
            lines = _openai_lines(n, per_chunk)
        else:
            lines = _lmi_lines(n)
        response = web.StreamResponse(
            headers={
                "Content-Type": "application/vnd.amazon.eventstream",
                "X-Amzn-SageMaker-Content-Type": "application/jsonlines",
                "x-Amzn-Invoked-Production-Variant": record.variant or "AllTraffic",
            }
        )
        await response.prepare(request)
        await asyncio.sleep(TTFT_S)
        if endpoint == "bursts":
            # Four PayloadParts per write, as a client that fell behind finds them: one
            # read returns the four frames together.
            for start in range(0, len(lines), BURST):
                group = lines[start : start + BURST]
                if start:
                    await asyncio.sleep(ITL_S * BURST)
                record.sent_at.append(time.monotonic())
                record.tokens.append(sum(tokens for _, tokens in group))
                await response.write(b"".join(payload_part(line) for line, _ in group))
            await response.write_eof()
            return response
        for number, (line, tokens) in enumerate(lines):
            if endpoint in ("stream-error", "internal-failure") and number == 3:
                kind = "ModelStreamError" if endpoint == "stream-error" else "InternalStreamFailure"
                await response.write(stream_exception(kind, "the model stopped", "StreamBroken"))
                break
            if number and tokens:
                await asyncio.sleep(ITL_S)
            if tokens:
                # Stamped before the write: the client cannot see it any earlier.
                record.sent_at.append(time.monotonic())
                record.tokens.append(tokens)
            if endpoint == "split" and len(line) > 4:
                # One line over two PayloadParts: the client must reassemble it.
                half = len(line) // 2
                await response.write(payload_part(line[:half]))
                await response.write(payload_part(line[half:]))
            else:
                await response.write(payload_part(line))
        await response.write_eof()
        return response

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/endpoints/{name}/invocations-response-stream", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.ssl_context)
        await site.start()
        port = self._runner.addresses[0][1]
        scheme = "https" if self.ssl_context else "http"
        self.url = f"{scheme}://127.0.0.1:{port}"
        self._stop = asyncio.Event()
        self._ready.set()
        await self._stop.wait()
        await self._runner.cleanup()

    def start(self) -> StreamingServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the test streaming server did not start within 10 s")
        return self

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        self._loop.close()
