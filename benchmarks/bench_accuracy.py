"""Accuracy and overhead of the benchmark against a server whose token timing is known.

    .venv/bin/python benchmarks/bench_accuracy.py [--levels 1,64,256,512] [--out FILE]

Starts the sandbox in its own process (so its CPU is not the client's) with a
deterministic serving mode (fixed TTFT, ITL and tokens per chunk), deploys one
endpoint, and at each concurrency level runs `run_benchmark` through real boto3.
The truth is the sandbox's traffic record: the server's CLOCK_MONOTONIC time of
each request's start and of every chunk it wrote. Measured and true TTFT and
per-token ITL are compared at p50 and p99 over the same requests; client CPU
seconds per 1,000 output tokens come from the client process's CPU time.

Each level runs once per `--workers` setting (default `1,auto`: one client process,
then one per 64 streams), and each measured request is matched to its server record
by its InferenceId, which the sandbox records.

In the same run, AIPerf (PyPI `aiperf`, in its own virtualenv, default
/tmp/toolvenv) drives the sandbox's OpenAI-compatible route at the same levels,
and its TTFT/ITL are compared against the same truth. Results go to one JSON
file; docs/benchmarking.md summarizes them.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import boto3
import numpy as np

from endpoint_optimizer.bench import BenchConfig, BenchTarget, RequestSample, run_benchmark

ROLE = "arn:aws:iam::123456789012:role/sagemaker-exec"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"
ENDPOINT = "accuracy"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "sandbox", "AWS_SECRET_ACCESS_KEY": "sandbox"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Sandbox:
    def __init__(self, ttft_ms: float, itl_ms: float, tokens_per_chunk: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = Path(tempfile.mkdtemp(prefix="bench-accuracy-"))
        config = {
            "timeScale": 0.0002,
            "servingTimeScale": 1.0,
            "deterministicEndpoints": {
                ENDPOINT: {
                    "ttftMs": ttft_ms,
                    "itlMs": itl_ms,
                    "tokensPerChunk": tokens_per_chunk,
                }
            },
        }
        config_file = self.dir / "sandbox.json"
        config_file.write_text(json.dumps(config))
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "endpoint_optimizer.cli",
                "sandbox",
                "serve",
                "--port",
                str(self.port),
                "--config",
                str(config_file),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                self.admin("GET", "state")
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("the sandbox did not start within 60 s") from None
                time.sleep(0.1)

    def admin(self, method: str, path: str) -> Any:
        request = urllib.request.Request(f"{self.url}/_sandbox/{path}", method=method)
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def traffic(self, start: float, end: float) -> list[dict[str, Any]]:
        return [
            r
            for r in self.admin("GET", f"traffic?endpoint={ENDPOINT}")
            if start <= r["t_start"] <= end and not r["shadow"] and r["t_first_token"]
        ]

    def deploy(self) -> None:
        sm = boto3.client(
            "sagemaker",
            region_name="us-east-1",
            endpoint_url=self.url,
            aws_access_key_id="sandbox",
            aws_secret_access_key="sandbox",
        )
        sm.create_model(
            ModelName=f"{ENDPOINT}-model",
            ExecutionRoleArn=ROLE,
            PrimaryContainer={
                "Image": IMAGE,
                "ModelDataSource": {
                    "S3DataSource": {
                        "S3Uri": "s3://models/llama-3.1-8b/",
                        "S3DataType": "S3Prefix",
                        "CompressionType": "None",
                    }
                },
            },
        )
        sm.create_endpoint_config(
            EndpointConfigName=f"{ENDPOINT}-config",
            ProductionVariants=[
                {
                    "VariantName": "AllTraffic",
                    "ModelName": f"{ENDPOINT}-model",
                    "InstanceType": "ml.p5e.48xlarge",
                    "InitialInstanceCount": 1,
                    "InitialVariantWeight": 1.0,
                }
            ],
        )
        sm.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName=f"{ENDPOINT}-config")
        sm.get_waiter("endpoint_in_service").wait(
            EndpointName=ENDPOINT, WaiterConfig={"Delay": 0.05, "MaxAttempts": 1200}
        )

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def ramp_seconds(args: argparse.Namespace) -> float:
    """--ramp-s, or by default:

    Stagger the slots over one request's duration, as a server at steady state sees
    them; without it a deterministic server keeps every slot in lockstep, and each
    round of sends is one burst of request building on the client."""
    if args.ramp_s is not None:
        return float(args.ramp_s)
    return float(args.ttft_ms + args.itl_ms * args.output_tokens) / 1000.0


def truth(records: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """True TTFT per request and true per-token ITL (a k-token chunk's gap / k, k times)."""
    ttft = [r["t_first_token"] - r["t_start"] for r in records]
    itl: list[float] = []
    for r in records:
        for (a, b), k in zip(
            itertools.pairwise(r["chunk_send_times"]), r["chunk_tokens"][1:], strict=True
        ):
            itl.extend([(b - a) / k] * k)
    return ttft, itl


def compare(measured: list[float], true: list[float]) -> dict[str, Any]:
    out: dict[str, Any] = {"nMeasured": len(measured), "nTrue": len(true)}
    for q in (50, 99):
        m = float(np.percentile(measured, q)) if measured else float("nan")
        t = float(np.percentile(true, q)) if true else float("nan")
        out[f"p{q}"] = {
            "measuredMs": m * 1e3,
            "trueMs": t * 1e3,
            "errorMs": (m - t) * 1e3,
            "errorPct": (m - t) / t * 100 if t else float("nan"),
        }
    return out


def per_request(pairs: list[tuple[RequestSample, dict[str, Any]]]) -> dict[str, Any]:
    """Per-request errors, split where they arise (server clock = client clock here).

    ttftError = measured TTFT - server TTFT = intake + firstChunkDelay, where
    intake = server t_start - client send (network, the server's HTTP parsing and
    queueing before it stamps the request) and firstChunkDelay = client arrival of
    the first chunk - server send of it (delivery plus the client's timestamping
    delay). chunkDelay covers every chunk; itlError is measured - true per-token ITL.
    """
    columns: dict[str, list[float]] = {
        "ttftError": [],
        "intake": [],
        "firstChunkDelay": [],
        "chunkDelay": [],
        "itlError": [],
    }
    for sample, record in pairs:
        sends = record["chunk_send_times"]
        arrivals = [sample.sent_at + offset for offset in sample.chunk_offsets_s]
        if len(sends) != len(arrivals) or sample.ttft_s is None:
            continue
        true_ttft = record["t_first_token"] - record["t_start"]
        columns["ttftError"].append(sample.ttft_s - true_ttft)
        columns["intake"].append(record["t_start"] - sample.sent_at)
        columns["firstChunkDelay"].append(arrivals[0] - sends[0])
        columns["chunkDelay"].extend(a - s for a, s in zip(arrivals, sends, strict=True))
        for (a0, a1), (s0, s1), k in zip(
            itertools.pairwise(arrivals),
            itertools.pairwise(sends),
            record["chunk_tokens"][1:],
            strict=True,
        ):
            columns["itlError"].extend([((a1 - a0) - (s1 - s0)) / k] * k)
    out: dict[str, Any] = {"matched": len(columns["ttftError"])}
    for name, values in columns.items():
        if values:
            p50, p99 = np.percentile(values, [50, 99])
            out[name] = {"p50Ms": float(p50) * 1e3, "p99Ms": float(p99) * 1e3, "n": len(values)}
    return out


async def ours(
    sandbox: Sandbox, concurrency: int, workers: int | None, args: argparse.Namespace
) -> dict[str, Any]:
    requests = max(args.rounds * concurrency, args.min_requests)
    config = BenchConfig(
        concurrency=[concurrency],
        requests=requests,
        warmup=concurrency,  # opens one connection per slot before measuring
        ramp_up_s=ramp_seconds(args),
        switch_interval_s=args.switch_interval_ms / 1000 if args.switch_interval_ms else None,
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
        run_id=f"acc-w{workers or 'auto'}",
        workers=workers,
    )
    target = BenchTarget(endpoint_name=ENDPOINT, endpoint_url=sandbox.url)
    server_cpu_before = cpu_seconds(sandbox.process.pid)
    load_before = os.getloadavg()[0]
    report = await run_benchmark(target, config)
    (level,) = report.levels
    # The sandbox records each request's InferenceId (X-Amzn-SageMaker-Inference-Id):
    # every measured request meets its own server record; warm-up ones are left out.
    by_id = {
        r["inference_id"]: r
        for r in sandbox.traffic(level.window.start_at - 60, level.window.end_at)
        if r.get("inference_id")
    }
    records = [by_id[s.inference_id] for s in level.samples if s.inference_id in by_id]
    pairs = [(s, by_id[s.inference_id]) for s in level.samples if s.ok and s.inference_id in by_id]
    true_ttft, true_itl = truth(records)
    tokens = sum(s.output_tokens or 0 for s in level.samples if s.ok)
    return {
        "tool": "endpoint-optimizer bench",
        "concurrency": concurrency,
        "workers": level.window.workers,
        "requests": requests,
        "errors": level.summary.errors,
        "serverRecords": len(records),
        "ttft": compare(level.ttft_samples(), true_ttft),
        "itl": compare(level.itl_samples(), true_itl),
        "perRequest": per_request(pairs),
        "outputTokens": tokens,
        "clientCpuS": level.window.client_cpu_s,
        # Over the level, warm-up included (all processes), per measured token: an upper
        # bound on the steady-state cost.
        "clientCpuSPer1kTokens": level.window.client_cpu_s / tokens * 1e3 if tokens else None,
        "serverCpuS": cpu_seconds(sandbox.process.pid) - server_cpu_before,
        "outputTokensPerS": level.summary.output_tokens_per_s,
        "valid": level.validity.valid,
        "invalidReasons": level.validity.reasons,
        "sendLagP99Ms": (level.validity.send_lag_s.p99 or 0) * 1e3,
        "wakeLagP99Ms": (level.validity.wake_lag_s.p99 or 0) * 1e3,
        "loopLagP99Ms": (level.validity.loop_lag_s.p99 or 0) * 1e3,
        "loadAvg1mBefore": load_before,
        "loadAvg1mAfter": os.getloadavg()[0],
    }


def aiperf(sandbox: Sandbox, concurrency: int, args: argparse.Namespace) -> dict[str, Any]:
    """AIPerf against the sandbox's OpenAI route, scored against the same traffic record."""
    binary = Path(args.aiperf_venv) / "bin" / "aiperf"
    result: dict[str, Any] = {"tool": "aiperf", "concurrency": concurrency}
    if not binary.exists():
        result["skipped"] = f"{binary} not found: python3 -m venv {args.aiperf_venv} && " + (
            f"{args.aiperf_venv}/bin/pip install aiperf"
        )
        return result
    if not args.tokenizer:
        result["skipped"] = "no local tokenizer directory (--tokenizer); AIPerf needs one"
        return result
    requests = max(args.rounds * concurrency, args.min_requests)
    artifacts = sandbox.dir / f"aiperf-c{concurrency}"
    command = [
        str(binary),
        "profile",
        "--model",
        ENDPOINT,
        "--url",
        sandbox.url,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--concurrency",
        str(concurrency),
        "--request-count",
        str(requests),
        "--warmup-request-count",
        str(concurrency),
        "--concurrency-ramp-duration",
        str(ramp_seconds(args)),
        "--synthetic-input-tokens-mean",
        str(args.input_tokens),
        "--output-tokens-mean",
        str(args.output_tokens),
        "--tokenizer",
        args.tokenizer,
        "--use-server-token-count",
        "--artifact-dir",
        str(artifacts),
        "--ui",
        "none",
    ]
    # Not HF_HUB_OFFLINE: in offline mode AIPerf resolves even a local path as a hub
    # repo id and fails; online, a local directory loads without any request.
    env = dict(os.environ)
    start = time.monotonic()
    run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1200)
    end = time.monotonic()
    if run.returncode != 0:
        result["failed"] = (run.stdout + run.stderr)[-2000:]
        return result
    exports = sorted(artifacts.rglob("profile_export_aiperf.json"))
    if not exports:
        result["failed"] = f"no profile_export_aiperf.json under {artifacts}"
        return result
    export = json.loads(exports[0].read_text())
    records = sandbox.traffic(start, end)
    # Warm-up requests come first; the measured ones are the last `requests` to start.
    records = sorted(records, key=lambda r: r["t_start"])[-requests:]
    true_ttft, true_itl = truth(records)

    def metric(name: str) -> dict[str, float]:
        found = export.get(name) or export.get("records", {}).get(name) or {}
        return {k: float(v) for k, v in found.items() if isinstance(v, int | float)}

    ttft, itl = metric("time_to_first_token"), metric("inter_token_latency")
    for label, mine, true in (("ttft", ttft, true_ttft), ("itl", itl, true_itl)):
        entry: dict[str, Any] = {"nTrue": len(true)}
        for q in (50, 99):
            t = float(np.percentile(true, q)) * 1e3 if true else float("nan")
            m = mine.get(f"p{q}", float("nan"))  # AIPerf reports milliseconds
            entry[f"p{q}"] = {
                "measuredMs": m,
                "trueMs": t,
                "errorMs": m - t,
                "errorPct": (m - t) / t * 100 if t else float("nan"),
            }
        result[label] = entry
    result["requests"] = requests
    result["serverRecords"] = len(records)
    result["wallS"] = end - start
    return result


def _cell(entry: dict[str, Any] | None, q: str) -> str:
    if not entry or q not in entry:
        return "-"
    e = entry[q]
    return f"{e['measuredMs']:.1f} / {e['trueMs']:.1f} ({e['errorMs']:+.2f}, {e['errorPct']:+.1f}%)"


def render_markdown(results: dict[str, Any]) -> str:
    """The results as the Markdown table docs/benchmarking.md shows."""
    truth_ = results["truth"]
    lines = [
        f"Truth: TTFT {truth_['ttftMs']:g} ms, ITL {truth_['itlMs']:g} ms, "
        f"{truth_['tokensPerChunk']} token(s) per chunk, {truth_['outputTokens']} output tokens; "
        f"{results['cpus']} CPUs; run {results['when']}.",
        "",
        "Cells: measured / true ms (error ms, error %).",
        "",
        "| tool | c | procs | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | CPU s / 1k tok | valid "
        "| load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results["ours"]:
        cpu = row["clientCpuSPer1kTokens"]
        lines.append(
            f"| ours | {row['concurrency']} | {row.get('workers', 1)} | "
            f"{_cell(row['ttft'], 'p50')} | "
            f"{_cell(row['ttft'], 'p99')} | {_cell(row['itl'], 'p50')} | "
            f"{_cell(row['itl'], 'p99')} | {cpu:.3f} | {'yes' if row['valid'] else 'NO'} | "
            f"{row['loadAvg1mBefore']:.1f} |"
        )
    for row in results["aiperf"]:
        if "ttft" not in row:
            reason = row.get("skipped") or row.get("failed", "")[-200:]
            lines.append(f"| aiperf | {row['concurrency']} | - | not run: {reason} | | | | | | |")
            continue
        lines.append(
            f"| aiperf | {row['concurrency']} | - | {_cell(row['ttft'], 'p50')} | "
            f"{_cell(row['ttft'], 'p99')} | {_cell(row['itl'], 'p50')} | "
            f"{_cell(row['itl'], 'p99')} | - | - | - |"
        )
    lines += [
        "",
        "Ours, per request (ms, p50 / p99): TTFT error = intake + first-chunk delay.",
        "",
        "| c | procs | TTFT error | intake | first-chunk delay | every chunk's delay | ITL error |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["ours"]:
        pr = row["perRequest"]

        def pair(name: str, pr: dict[str, Any] = pr) -> str:
            e = pr.get(name)
            return f"{e['p50Ms']:.2f} / {e['p99Ms']:.1f}" if e else "-"

        lines.append(
            f"| {row['concurrency']} | {row.get('workers', 1)} | {pair('ttftError')} | "
            f"{pair('intake')} | "
            f"{pair('firstChunkDelay')} | {pair('chunkDelay')} | {pair('itlError')} |"
        )
    return "\n".join(lines)


def default_tokenizer() -> str:
    """A tokenizer AIPerf can load offline: `builtin` would download tiktoken's table."""
    if os.environ.get("BENCH_TOKENIZER"):
        return os.environ["BENCH_TOKENIZER"]
    from endpoint_optimizer.realmodel.weights import CACHE_NAME, cache_root

    cached = cache_root() / CACHE_NAME
    return str(cached) if (cached / "tokenizer.json").is_file() else "builtin"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,64,256,512")
    parser.add_argument("--ttft-ms", type=float, default=200.0)
    parser.add_argument("--itl-ms", type=float, default=50.0)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument("--input-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="requests = rounds x concurrency")
    parser.add_argument("--min-requests", type=int, default=32)
    parser.add_argument("--ramp-s", type=float, default=None)
    parser.add_argument(
        "--switch-interval-ms", type=float, default=0.5, help="0: leave Python's default"
    )
    parser.add_argument(
        "--workers",
        default="1,auto",
        help="client processes, each setting run at every level: 1 (all streams in one "
        "process, before sharding) and auto (one process per 64 streams)",
    )
    parser.add_argument(
        "--client-nice",
        type=int,
        default=0,
        help="lower the client's CPU priority (os.nice) after the sandbox has started, so "
        "the truth server is not starved by the client on a small machine",
    )
    parser.add_argument("--aiperf-venv", default="/tmp/toolvenv")
    parser.add_argument(
        "--tokenizer",
        default=default_tokenizer(),
        help="AIPerf's tokenizer: a local directory (no network here); default "
        "$BENCH_TOKENIZER, else the real-model cache's SmolLM2 tokenizer, else builtin",
    )
    parser.add_argument("--no-aiperf", action="store_true")
    parser.add_argument("--out", default="benchmarks/bench_accuracy.json")
    parser.add_argument("--render", help="print an existing results file as Markdown, and stop")
    args = parser.parse_args()
    if args.render:
        print(render_markdown(json.loads(Path(args.render).read_text())))
        return
    os.environ.update(CREDENTIALS)
    levels = [int(x) for x in args.levels.split(",")]
    worker_settings = [None if x == "auto" else int(x) for x in args.workers.split(",")]
    sandbox = Sandbox(args.ttft_ms, args.itl_ms, args.tokens_per_chunk)
    if args.client_nice:
        os.nice(args.client_nice)  # the sandbox started before: it keeps its priority
    results: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
        "clientNice": args.client_nice,
        "truth": {
            "ttftMs": args.ttft_ms,
            "itlMs": args.itl_ms,
            "tokensPerChunk": args.tokens_per_chunk,
            "inputTokens": args.input_tokens,
            "outputTokens": args.output_tokens,
        },
        "ours": [],
        "aiperf": [],
    }
    try:
        sandbox.deploy()
        for concurrency in levels:
            for workers in worker_settings:
                row = asyncio.run(ours(sandbox, concurrency, workers, args))
                results["ours"].append(row)
                print(json.dumps(row), flush=True)
        if not args.no_aiperf:
            for concurrency in levels:
                row = aiperf(sandbox, concurrency, args)
                results["aiperf"].append(row)
                print(json.dumps(row)[:600], flush=True)
    finally:
        sandbox.stop()
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(render_markdown(results))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
