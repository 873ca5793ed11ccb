"""Memory of the operator's benchmarks at its limits: the process tree a measurement makes.

    .venv/bin/python benchmarks/bench_limits.py [--out benchmarks/results/bench_limits.json]

The sandbox runs as its own process (`endpoint-optimizer sandbox serve`) with a
two-variant endpoint. Each scenario runs in a fresh "operator" process that imports the
controller as `endpoint-optimizer run` does (kopf, boto3, prometheus_client), and this
script samples, every 0.1 s from outside, the memory of that process and of every process
under it (spawned benchmark clients, multiprocessing's resource tracker):

- PSS (proportional set size, /proc/PID/smaps_rollup): shared pages split among the
  processes that map them, so the sum is what the container's memory cgroup is charged
  for those processes, the number the chart's `resources.limits.memory` must cover;
- RSS (/proc/PID/status VmRSS) summed, for comparison (counts shared pages once per process);
- the most processes alive at once under the operator process.

Scenarios:
- `unbounded`: baseline and candidate at concurrency 512, side by side, through
  `run_benchmark` as main did before the limits (one process per 64 streams per variant);
- `at-limit`: one comparison at the default limits' per-variant maximum (128) through
  `run_side_by_side`: 2 variants x 2 client processes;
- `four-at-limit`: four such comparisons at once (`--measure-concurrency` 4): the budget
  runs them one after another, so the peak is that of one;
- `refused`: concurrency 512 through `run_side_by_side`: refused, nothing spawned.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ENDPOINT = "limits"
VARIANTS = ("baseline", "candidate")
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"
SCENARIOS = ("unbounded", "at-limit", "four-at-limit", "refused")
SANDBOX_ENV = {
    "AWS_ACCESS_KEY_ID": "sandbox",
    "AWS_SECRET_ACCESS_KEY": "sandbox",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def sandbox(serving_time_scale: float) -> Iterator[str]:
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "endpoint_optimizer.cli",
            "sandbox",
            "serve",
            "--port",
            str(port),
            "--time-scale",
            "0.001",
            "--serving-time-scale",
            str(serving_time_scale),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/_sandbox/state", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def deploy(url: str) -> None:
    import boto3

    sm = boto3.client("sagemaker", endpoint_url=url, region_name="us-east-1", **_keys())
    for name in VARIANTS:
        sm.create_model(
            ModelName=f"{ENDPOINT}-{name}",
            ExecutionRoleArn="arn:aws:iam::123456789012:role/sagemaker-exec",
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
                "VariantName": name,
                "ModelName": f"{ENDPOINT}-{name}",
                "InstanceType": "ml.g6e.2xlarge",
                "InitialInstanceCount": 1,
                "InitialVariantWeight": 1.0,
            }
            for name in VARIANTS
        ],
    )
    sm.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName=f"{ENDPOINT}-config")
    sm.get_waiter("endpoint_in_service").wait(
        EndpointName=ENDPOINT, WaiterConfig={"Delay": 0.1, "MaxAttempts": 600}
    )


def _keys() -> dict[str, str]:
    return {
        "aws_access_key_id": SANDBOX_ENV["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": SANDBOX_ENV["AWS_SECRET_ACCESS_KEY"],
    }


# ---------------------------------------------------------------- the operator process


async def _scenario(name: str, url: str, requests: int) -> dict[str, Any]:
    from endpoint_optimizer.bench.limits import BenchLimitError, BenchLimits, configure
    from endpoint_optimizer.bench.models import BenchConfig, BenchTarget
    from endpoint_optimizer.bench.runner import run_benchmark, run_side_by_side

    limits = BenchLimits()
    configure(limits)
    targets = [
        BenchTarget(endpoint_name=ENDPOINT, variant=v, region="us-east-1", endpoint_url=url)
        for v in VARIANTS
    ]

    def config(concurrency: int) -> BenchConfig:
        return BenchConfig(
            concurrency=[concurrency],
            requests=requests,
            input_tokens=64,
            output_tokens=32,
            run_id=f"limits-{name}",
        )

    if name == "unbounded":
        reports = await asyncio.gather(*(run_benchmark(t, config(512)) for t in targets))
    elif name == "at-limit":
        reports = await run_side_by_side(targets, config(limits.per_variant))
    elif name == "four-at-limit":
        batches = await asyncio.gather(
            *(run_side_by_side(targets, config(limits.per_variant)) for _ in range(4))
        )
        reports = [report for batch in batches for report in batch]
    else:
        try:
            await run_side_by_side(targets, config(512))
        except BenchLimitError as refused:
            return {"refused": str(refused)}
        raise AssertionError("concurrency 512 was not refused")
    return {
        "levels": [
            {
                "concurrency": level.concurrency,
                "workers": level.window.workers,
                "requests": len(level.samples),
                "errors": sum(not s.ok for s in level.samples),
            }
            for report in reports
            for level in report.levels
        ]
    }


def child(name: str, url: str, requests: int) -> None:
    # What `endpoint-optimizer run` has imported by the time it measures.
    import endpoint_optimizer.controller.handlers
    import endpoint_optimizer.controller.run  # noqa: F401

    print("ready", flush=True)
    sys.stdin.readline()
    result = asyncio.run(_scenario(name, url, requests))
    print(json.dumps(result), flush=True)


# ---------------------------------------------------------------- sampling from outside


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            found.append(int(entry))
    return found


def _tree(pid: int) -> list[int]:
    pids, queue = [], [pid]
    while queue:
        current = queue.pop()
        pids.append(current)
        queue.extend(_children(current))
    return pids


def _kib(path: str, key: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def sample(pid: int) -> tuple[float, float, int, float]:
    """(PSS MiB of the tree, RSS MiB summed, processes, the operator's own PSS MiB)."""
    pids = _tree(pid)
    pss = sum(_kib(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids)
    rss = sum(_kib(f"/proc/{p}/status", "VmRSS:") for p in pids)
    own = _kib(f"/proc/{pid}/smaps_rollup", "Pss:")
    return pss / 1024, rss / 1024, len(pids), own / 1024


def run_scenario(name: str, url: str, requests: int) -> dict[str, Any]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--child", name, "--url", url, "--requests", str(requests)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **SANDBOX_ENV},
    )
    assert process.stdin is not None and process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    time.sleep(1.0)
    idle = sample(process.pid)
    process.stdin.write("go\n")
    process.stdin.flush()
    peak = [0.0, 0.0, 0.0, 0.0]
    started = time.monotonic()
    while process.poll() is None:
        current = sample(process.pid)
        peak = [max(a, float(b)) for a, b in zip(peak, current, strict=True)]
        time.sleep(0.1)
    output = process.stdout.read().strip().splitlines()
    return {
        "scenario": name,
        "seconds": round(time.monotonic() - started, 1),
        "idle": {"pssMiB": round(idle[0], 1), "processes": idle[2]},
        "peak": {
            "pssMiB": round(peak[0], 1),
            "rssSumMiB": round(peak[1], 1),
            "processes": int(peak[2]),
            "operatorPssMiB": round(peak[3], 1),
        },
        "result": json.loads(output[-1]) if output else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=SCENARIOS)
    parser.add_argument("--url", default="")
    parser.add_argument("--requests", type=int, default=512)
    parser.add_argument("--serving-time-scale", type=float, default=0.05)
    parser.add_argument("--scenario", choices=SCENARIOS, action="append")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.url, args.requests)
        return
    results = []
    with sandbox(args.serving_time_scale) as url:
        os.environ.update(SANDBOX_ENV)
        deploy(url)
        for name in args.scenario or SCENARIOS:
            results.append(run_scenario(name, url, args.requests))
            print(json.dumps(results[-1]), flush=True)
    report = {
        "command": " ".join(sys.argv),
        "limits": {"maxStreams": 256, "streamsPerWorker": 64, "maxWorkers": 4},
        "scenarios": results,
    }
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
