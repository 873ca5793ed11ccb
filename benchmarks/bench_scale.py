"""Scale: N OptimizedEndpoints in one operator process against the sandbox.

    .venv/bin/python benchmarks/bench_scale.py [--resources 200] [--poll-interval 30]
        [--time-scale 0.5] [--out benchmarks/results/bench_scale.json]

Runs the KMock Kubernetes emulator and the sandbox in this process (threads) and the
real `endpoint-optimizer run` as a subprocess, creates N resources at once, each with its
own endpoint, and measures:

- operator memory: the subprocess's VmRSS sampled every second, and its peak (VmHWM);
- SageMaker calls per resource per minute while every resource waits for its endpoint
  (Creating), from the sandbox's call log over a window that ends before the first
  endpoint can turn InService;
- reaction delay: for each endpoint, the time from the moment SageMaker turns it InService
  (its CreateEndpoint call + the create duration; the sandbox evaluates transitions
  lazily, so this is the moment a Describe would first see it) to the operator acting on
  it (its first benchmark request in the sandbox's traffic record). The target is a median
  within one poll interval.

The spec asks for no candidate, so each resource ends Succeeded after its baseline
benchmark (two tiny requests): the scale is the control loop's, not the load generator's.

`--scenario job` measures the other long wait instead: each resource asks for an FP8
optimization job (the sandbox's endpoint create shortened to 60 s and the job lengthened to
540 s, time scale 1), and each resource's window runs while its job is in progress, long
enough to hold one endpoint recheck (pipeline.cadence: the endpoint is described once per
--endpoint-recheck, ten polls by default, the job on the other wake-ups). It reports the
calls on each resource's endpoint and job in its window per resource-minute and, for each
job, the delay from its completion to the operator's first DescribeOptimizationJob that
sees it (noticeDelayS); it stops once every job has been noticed, without running the
candidates' rollouts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.harness import (  # noqa: E402
    Cluster,
    OperatorProcess,
    running_cluster,
    tempdir,
    write_kubeconfig,
)

from endpoint_optimizer.pipeline.plan import Names  # noqa: E402
from endpoint_optimizer.sagemaker.naming import Owner  # noqa: E402
from endpoint_optimizer.sandbox.testing import AdminClient  # noqa: E402

NAMESPACE = "scale"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"
CREATE_SECONDS = 360.0  # the sandbox's default endpoint_create duration, before time_scale


JOB_DURATIONS = {"endpointCreate": 60.0, "optimizationJob": 540.0}


def job_spec(index: int) -> dict[str, Any]:
    return spec(index) | {
        "optimizations": {"quantization": {"scheme": "fp8"}},
        "rollout": {"strategy": "canary", "steps": [{"weight": 20, "pause": "1m"}]},
    }


def spec(index: int) -> dict[str, Any]:
    return {
        "endpointName": f"scale-{index:03d}",
        "region": "us-east-1",
        "executionRoleArn": "arn:aws:iam::123456789012:role/sagemaker-exec",
        "model": {"s3Uri": "s3://models/llama-3-1-8b/", "image": IMAGE},
        "instanceType": "ml.g6e.2xlarge",
        "outputS3Uri": "s3://models/optimized/",
        "evaluation": {"waiver": "scale benchmark: control loop only"},
        "benchmark": {
            "concurrency": [1],
            "requests": 2,
            "warmup": 0,
            "inputTokens": 16,
            "outputTokens": 2,
        },
    }


class Sandbox:
    """The sandbox in its own process: its URL and admin routes."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.admin = AdminClient(url)

    def ready(self) -> bool:
        try:
            self.admin.calls()
        except OSError:
            return False
        return True


def rss_kib(pid: int, field: str = "VmRSS") -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True, name="rss")
        self.pid = pid
        self.samples: list[tuple[float, int]] = []
        self.peak_kib = 0
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(1.0):
            value = rss_kib(self.pid)
            if value is not None:
                self.samples.append((time.time(), value))
            self.peak_kib = max(self.peak_kib, rss_kib(self.pid, "VmHWM") or 0)


class PhaseTimeline(threading.Thread):
    """Every `every` seconds: the operator's RSS next to how many resources are in each phase.

    The breakdown of where the memory goes: which phase the resources were in when RSS grew.
    """

    def __init__(self, pid: int, cluster: Any, every: float = 15.0) -> None:
        super().__init__(daemon=True, name="phases")
        self.pid, self.cluster, self.every = pid, cluster, every
        self.rows: list[dict[str, Any]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        started = time.time()
        while not self.stop_event.wait(self.every):
            try:
                counts: dict[str, int] = {}
                for phase in phases(self.cluster).values():
                    counts[phase or "none"] = counts.get(phase or "none", 0) + 1
            except OSError:
                continue  # the emulator is busy; the next row will do
            rss = rss_kib(self.pid)
            if rss is not None:
                self.rows.append(
                    {"t": round(time.time() - started), "rssMiB": round(rss / 1024, 1)} | counts
                )


def phases(cluster: Any) -> dict[str, str]:
    request = urllib.request.Request(cluster.url + cluster.path(NAMESPACE))
    with urllib.request.urlopen(request, timeout=120) as response:
        listing = json.loads(response.read())
    return {
        item["metadata"]["name"]: item.get("status", {}).get("phase", "")
        for item in listing.get("items", [])
    }


def wait_until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(1.0)


def create(cluster: Any, name: str, body: dict[str, Any]) -> None:
    """Create with a patient client: the in-process emulator answers slowly under load."""
    document = {
        "apiVersion": f"{cluster.group}/{cluster.version}",
        "kind": "OptimizedEndpoint",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": body,
    }
    request = urllib.request.Request(
        cluster.url + cluster.path(NAMESPACE),
        data=json.dumps(document).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        response.read()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def serve_emulator() -> None:
    """Child mode: the emulator in its own process (its own GIL), until stdin closes."""
    with running_cluster() as (_, cluster):
        cluster.create_namespace(NAMESPACE)
        print(cluster.url, flush=True)
        sys.stdin.read()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def child(command: list[str], log: Path) -> Iterator[subprocess.Popen[str]]:
    with log.open("w") as out:
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=out, text=True
        )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def uids(cluster: Any) -> dict[str, str]:
    request = urllib.request.Request(cluster.url + cluster.path(NAMESPACE))
    with urllib.request.urlopen(request, timeout=120) as response:
        listing = json.loads(response.read())
    return {item["metadata"]["name"]: item["metadata"]["uid"] for item in listing["items"]}


def waiting_on_jobs(
    sandbox: Sandbox, cluster: Any, n: int, poll: float, job_s: float
) -> dict[str, Any]:
    """Calls per resource per minute while its optimization job runs; job notice delays.

    Each resource has its own window, from one poll after its CreateOptimizationJob to just
    before the job completes (540 s later, long enough to hold one endpoint recheck): the
    emulator creates objects slowly past ~100, so the jobs start minutes apart and no
    window common to all 200 would hold a recheck.
    """

    def jobs() -> dict[str, float]:
        return {
            c["resource"]: c["wallTime"]
            for c in sandbox.admin.calls()
            if c["operation"] == "CreateOptimizationJob" and not c.get("errorCode")
        }

    wait_until(lambda: len(jobs()) == n, 900, "every CreateOptimizationJob")
    job_times = jobs()
    endpoint_of = {
        Names.of(Owner(NAMESPACE, name, uid), 1).job: name for name, uid in uids(cluster).items()
    }
    wait_until(
        lambda: time.time() > max(job_times.values()) + job_s + 2 * poll + 10,
        job_s + 900,
        "every job done and looked at",
    )
    calls = sandbox.admin.calls()
    windows = {job: (created + poll, created + job_s - 2.0) for job, created in job_times.items()}
    endpoint_window = {endpoint_of[job]: w for job, w in windows.items() if job in endpoint_of}
    in_window = []
    for c in calls:
        window = windows.get(c["resource"]) or endpoint_window.get(c["resource"])
        if window is not None and window[0] <= c["wallTime"] <= window[1]:
            in_window.append(c)
    by_operation: dict[str, int] = {}
    for c in in_window:
        by_operation[c["operation"]] = by_operation.get(c["operation"], 0) + 1
    resource_minutes = sum((w[1] - w[0]) / 60.0 for w in windows.values())
    described: dict[str, list[float]] = {}
    for c in calls:
        if c["operation"] == "DescribeOptimizationJob" and not c.get("errorCode"):
            described.setdefault(c["resource"], []).append(c["wallTime"])
    noticed = [
        min(t for t in described[job] if t >= done) - done
        for job, done in ((j, t + job_s) for j, t in job_times.items())
        if any(t >= done for t in described.get(job, []))
    ]
    spread = max(job_times.values()) - min(job_times.values())
    final = phases(cluster)
    return {
        "scenario": "job",
        "resources": n,
        "pollIntervalS": poll,
        "durationsS": {**JOB_DURATIONS, "optimizationJob": job_s},
        "jobStartSpreadS": round(spread, 1),
        "waitingCalls": {
            "windowPerResourceS": round(job_s - 2.0 - poll, 1),
            "resourcesMatched": len(endpoint_window),
            "calls": len(in_window),
            "byOperation": by_operation,
            "perResourcePerMinute": round(len(in_window) / resource_minutes, 3),
            "targetMax": 2,
        },
        "noticeDelayS": {
            "count": len(noticed),
            "median": round(statistics.median(noticed), 2) if noticed else None,
            "p90": round(percentile(noticed, 0.9), 2) if noticed else None,
            "max": round(max(noticed), 2) if noticed else None,
            "targetMedianMax": poll,
        },
        "phases": {p: list(final.values()).count(p) for p in set(final.values())},
    }


def main() -> None:
    if sys.argv[1:] == ["--serve-emulator"]:
        serve_emulator()
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resources", type=int, default=200)
    parser.add_argument("--poll-interval", type=float, default=30.0)
    parser.add_argument("--time-scale", type=float, default=0.5)
    parser.add_argument(
        "--create-rate", type=float, default=5.0, help="resources created per second"
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--scenario", choices=("creating", "job"), default="creating")
    parser.add_argument(
        "--job-seconds", type=float, default=540.0, help="job scenario: the job's duration"
    )
    args = parser.parse_args()
    n, poll = args.resources, args.poll_interval
    create_s = CREATE_SECONDS * args.time_scale
    load_before = os.getloadavg()
    directory = tempdir()
    port = free_port()
    sandbox_command = [
        sys.executable, "-m", "endpoint_optimizer.cli", "sandbox", "serve", "--port", str(port),
        "--time-scale", str(args.time_scale), "--serving-time-scale", "0.05",
    ]  # fmt: skip
    if args.scenario == "job":
        args.time_scale, create_s = 1.0, JOB_DURATIONS["endpointCreate"]
        config = directory / "sandbox.json"
        durations = {**JOB_DURATIONS, "optimizationJob": args.job_seconds}
        config.write_text(json.dumps({"timeScale": 1.0, "durations": durations}))
        sandbox_command[sandbox_command.index("--time-scale") + 1] = "1.0"
        sandbox_command += ["--config", str(config)]
        args.out = args.out or REPO / "benchmarks/results/bench_scale_job.json"
    args.out = args.out or REPO / "benchmarks/results/bench_scale.json"
    emulator_command = [sys.executable, str(Path(__file__).resolve()), "--serve-emulator"]
    with (
        child(emulator_command, directory / "emulator.log") as emulator,
        child(sandbox_command, directory / "sandbox.log"),
    ):
        assert emulator.stdout is not None
        cluster = Cluster(emulator.stdout.readline().strip())
        sandbox = Sandbox(f"http://127.0.0.1:{port}")
        wait_until(sandbox.ready, 60, "the sandbox")
        operator = OperatorProcess(
            kubeconfig=write_kubeconfig(cluster.url, directory),
            namespace=NAMESPACE,
            aws_endpoint_url=sandbox.url,
            log_path=directory / "operator.log",
            extra_env={"ENDPOINT_OPTIMIZER_POLL_INTERVAL": str(poll)},
            extra_args=("--log-level", "WARNING", "--log-json"),
        )
        operator.start()
        assert operator.process is not None
        sampler = RssSampler(operator.process.pid)
        sampler.start()
        timeline = PhaseTimeline(operator.process.pid, cluster)
        timeline.start()
        try:
            started = time.time()
            for i in range(n):
                body = job_spec(i) if args.scenario == "job" else spec(i)
                create(cluster, f"scale-{i:03d}", body)
                # Paced as a rollout of many teams would be: the in-process KMock emulator
                # drops connections when hundreds of objects arrive in one burst.
                time.sleep(max(0.0, started + (i + 1) / args.create_rate - time.time()))
                if (i + 1) % 50 == 0:
                    print(f"{i + 1} created at {time.time() - started:.1f} s", flush=True)
            created = time.time()
            print(f"created {n} resources in {created - started:.1f} s", flush=True)
            if args.scenario == "job":
                result = waiting_on_jobs(sandbox, cluster, n, poll, args.job_seconds)
                samples = [kib / 1024 for _, kib in sampler.samples]
                result["operatorRssMiB"] = {
                    "peak": round(sampler.peak_kib / 1024, 1),
                    "median": round(statistics.median(samples), 1) if samples else None,
                    "last": round(samples[-1], 1) if samples else None,
                    "targetMax": 300,
                    "byPhase": timeline.rows,
                }
                result["wallS"] = {"create": round(created - started, 1)}
                result["host"] = {
                    "cpus": os.cpu_count(),
                    "loadBefore": [round(x, 2) for x in load_before],
                    "loadAfter": [round(x, 2) for x in os.getloadavg()],
                }
                args.out.write_text(json.dumps(result, indent=2) + "\n")
                print(json.dumps(result, indent=2))
                return

            def creates() -> dict[str, float]:
                return {
                    c["resource"]: c["wallTime"]
                    for c in sandbox.admin.calls()
                    if c["operation"] == "CreateEndpoint" and not c.get("errorCode")
                }

            wait_until(lambda: len(creates()) == n, 3 * poll + 120, "every CreateEndpoint")
            create_times = creates()
            all_created = max(create_times.values())
            first_ready = min(create_times.values()) + create_s
            # Steady state: after every resource has made its endpoint and had one more poll
            # to settle, until shortly before the first endpoint can turn InService.
            window = (all_created + poll, first_ready - 2.0)
            if window[1] - window[0] < 2 * poll:
                raise SystemExit(
                    f"the waiting window is {window[1] - window[0]:.0f} s, under two polls: "
                    "raise --time-scale so endpoints take longer to create"
                )
            print(f"waiting window {window[1] - window[0]:.0f} s", flush=True)
            wait_until(lambda: time.time() > window[1], create_s + 60, "the window's end")
            calls = sandbox.admin.calls()
            in_window = [c for c in calls if window[0] <= c["wallTime"] <= window[1]]
            minutes = (window[1] - window[0]) / 60.0
            per_resource_minute = len(in_window) / n / minutes
            by_operation: dict[str, int] = {}
            for c in in_window:
                by_operation[c["operation"]] = by_operation.get(c["operation"], 0) + 1

            wait_until(
                lambda: sum(p in ("Succeeded", "Failed") for p in phases(cluster).values()) == n,
                create_s + 10 * poll + 300,
                "every resource to finish",
            )
            finished = time.time()
            first_traffic: dict[str, float] = {}
            for record in sandbox.admin.traffic():
                name = record["endpoint"]
                first_traffic[name] = min(first_traffic.get(name, 1e18), record["wall_time"])
            delays = [
                first_traffic[name] - (create_times[name] + create_s)
                for name in create_times
                if name in first_traffic
            ]
            # Noticing, as distinct from acting: the first DescribeEndpoint after the change.
            describes: dict[str, list[float]] = {}
            for c in sandbox.admin.calls():
                if c["operation"] == "DescribeEndpoint" and not c.get("errorCode"):
                    describes.setdefault(c["resource"], []).append(c["wallTime"])
            noticed = [
                min(t for t in describes.get(name, [1e18]) if t >= ready) - ready
                for name, ready in ((n_, t_ + create_s) for n_, t_ in create_times.items())
                if any(t >= ready for t in describes.get(name, []))
            ]
            final = phases(cluster)
        finally:
            sampler.stop_event.set()
            sampler.join(timeout=5)
            timeline.stop_event.set()
            timeline.join(timeout=130)
            operator.stop()
    shutil.rmtree(directory, ignore_errors=True)
    rss_mib = [kib / 1024 for _, kib in sampler.samples]
    result = {
        "resources": n,
        "pollIntervalS": poll,
        "sandboxTimeScale": args.time_scale,
        "endpointCreateS": create_s,
        "operatorRssMiB": {
            "peak": round(sampler.peak_kib / 1024, 1),
            "last": round(rss_mib[-1], 1) if rss_mib else None,
            "median": round(statistics.median(rss_mib), 1) if rss_mib else None,
            "targetMax": 300,
            "byPhase": timeline.rows,
        },
        "waitingCalls": {
            "windowS": round(window[1] - window[0], 1),
            "calls": len(in_window),
            "byOperation": by_operation,
            "perResourcePerMinute": round(per_resource_minute, 3),
            "targetMax": 2,
        },
        "reactionDelayS": {
            "count": len(delays),
            "median": round(statistics.median(delays), 2) if delays else None,
            "p90": round(percentile(delays, 0.9), 2) if delays else None,
            "max": round(max(delays), 2) if delays else None,
            "min": round(min(delays), 2) if delays else None,
            "targetMedianMax": poll,
        },
        "noticeDelayS": {
            "count": len(noticed),
            "median": round(statistics.median(noticed), 2) if noticed else None,
            "p90": round(percentile(noticed, 0.9), 2) if noticed else None,
            "max": round(max(noticed), 2) if noticed else None,
        },
        "phases": {p: list(final.values()).count(p) for p in set(final.values())},
        "wallS": {"create": round(created - started, 1), "total": round(finished - started, 1)},
        "host": {
            "cpus": os.cpu_count(),
            "loadBefore": [round(x, 2) for x in load_before],
            "loadAfter": [round(x, 2) for x in os.getloadavg()],
            # The load averages say how busy the cores were; nothing here knows by whom.
            "note": "1/5/15-minute load averages before and after the run",
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
