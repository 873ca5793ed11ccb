"""Operator memory with unrelated ConfigMaps in its namespace (issue 17: read only what specs name).

    .venv/bin/python benchmarks/bench_configmaps.py [--config-maps 150] [--size-kib 512]
        [--out benchmarks/results/bench_configmaps.json]

Runs the KMock emulator in this process and the real `endpoint-optimizer run` as a
subprocess serving one namespace, twice: with no ConfigMap in the namespace, and with N
unrelated ConfigMaps of the given size (created before the operator starts, as in a
namespace that already holds Helm releases, dashboards and other teams' data). One
OptimizedEndpoint with an eval set is created so the operator has work and reads the one
ConfigMap it names. Reported: the operator's VmRSS after it settled (median of samples
every 0.5 s over `--sample-seconds`) and its peak (VmHWM), and the emulator's count of
ConfigMap requests by verb (a GET of the named one; a list and a watch when an index caches
them all).

Which operator runs is whatever `endpoint_optimizer` the subprocess imports: set
PYTHONPATH to a checkout's `operator/` to measure that version (docs/resilience.md has the
before/after numbers and commands).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.harness import (  # noqa: E402
    OperatorProcess,
    running_cluster,
    tempdir,
    write_kubeconfig,
)

from endpoint_optimizer.sandbox.config import SandboxConfig  # noqa: E402
from endpoint_optimizer.sandbox.testing import running_sandbox  # noqa: E402

NAMESPACE = "ml"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"
EVAL = '{"prompt": "Capital of France?", "reference": "Paris"}'


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def spec() -> dict[str, Any]:
    return {
        "endpointName": "chat-bench",
        "region": "us-east-1",
        "executionRoleArn": "arn:aws:iam::123456789012:role/sagemaker-exec",
        "model": {"s3Uri": "s3://models/llama-3-1-8b/", "image": IMAGE},
        "instanceType": "ml.g6e.2xlarge",
        "benchmark": {"concurrency": [1], "requests": 2, "warmup": 0, "outputTokens": 4},
        "evaluation": {
            "dataset": {"configMapRef": {"name": "support-evals", "key": "items.jsonl"}},
            "metric": "exact_match",
            "maxOutputTokens": 4,
        },
    }


def measure(config_maps: int, size_kib: int, sample_seconds: float) -> dict[str, Any]:
    directory = tempdir()
    sandbox_config = SandboxConfig(time_scale=0.001, serving_time_scale=0.01, seed=1)
    with running_cluster() as (emulator, cluster), running_sandbox(sandbox_config) as sandbox:
        cluster.create_namespace(NAMESPACE)
        filler = "x" * (size_kib * 1024)
        for index in range(config_maps):
            cluster.create_configmap(NAMESPACE, f"unrelated-{index}", {"data": filler})
        cluster.create_configmap(NAMESPACE, "support-evals", {"items.jsonl": EVAL})
        operator = OperatorProcess(
            kubeconfig=write_kubeconfig(emulator.url, directory),
            namespace=NAMESPACE,
            aws_endpoint_url=sandbox.url,
            log_path=directory / "operator.log",
            extra_env={"ENDPOINT_OPTIMIZER_POLL_INTERVAL": "0.5"},
            extra_args=("--log-console",),
        )
        operator.start()
        try:
            assert operator.pid is not None
            cluster.create(NAMESPACE, "chat", spec())
            cluster.wait_for_phase(NAMESPACE, "chat", {"Succeeded", "Failed"}, timeout=120)
            phase = cluster.get(NAMESPACE, "chat")["status"]["phase"]
            samples: list[int] = []
            deadline = time.monotonic() + sample_seconds
            while time.monotonic() < deadline:
                samples.append(rss_kib(operator.pid))
                time.sleep(0.5)
            peak = rss_kib(operator.pid, "VmHWM")
        finally:
            operator.stop()
            shutil.rmtree(directory, ignore_errors=True)
        assert emulator.emulator is not None
        requests: dict[str, int] = {}
        for request in getattr(emulator.emulator, "_requests", []):
            if getattr(request, "resource", None) is not None and "configmaps" in str(
                request.resource
            ):
                verb = str(request.action).rsplit(".", 1)[-1].lower()
                if verb == "list" and request.params.get("watch"):
                    verb = "watch"
                if verb != "create":  # this script's own creates
                    requests[verb] = requests.get(verb, 0) + 1
    return {
        "configMaps": config_maps,
        "sizeKiB": size_kib,
        "phase": phase,
        "rssMiBMedian": round(statistics.median(samples) / 1024, 1),
        "rssMiBPeak": round(peak / 1024, 1),
        "configMapRequests": requests,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-maps", type=int, default=150)
    parser.add_argument("--size-kib", type=int, default=512)
    parser.add_argument("--sample-seconds", type=float, default=10.0)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    runs = [
        measure(0, args.size_kib, args.sample_seconds),
        measure(args.config_maps, args.size_kib, args.sample_seconds),
    ]
    result = {
        "label": args.label,
        "runs": runs,
        "rssMiBAddedByConfigMaps": round(runs[1]["rssMiBMedian"] - runs[0]["rssMiBMedian"], 1),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
