"""End-to-end harness: the KMock Kubernetes emulator on 127.0.0.1 and the real operator process.

The emulator, its thread, the `Cluster` client and `OperatorProcess` live in the package
(`endpoint_optimizer.demo.cluster`) because the first-run demo uses them too; this module
re-exports them under the names the e2e and Prometheus tests import, and keeps what only
tests need (the repository's CRD file, a temporary directory).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from endpoint_optimizer.demo.cluster import (
    ApiError,
    ApiServer,
    Cluster,
    EmulatorThread,
    OperatorProcess,
    condition,
    load_crd,
    running_cluster,
    write_kubeconfig,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = REPO_ROOT / "crds" / "optimizedendpoint.yaml"

__all__ = [
    "CRD_PATH",
    "REPO_ROOT",
    "ApiError",
    "ApiServer",
    "Cluster",
    "EmulatorThread",
    "OperatorProcess",
    "condition",
    "load_crd",
    "running_cluster",
    "tempdir",
    "write_kubeconfig",
]


def tempdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="eo-e2e-"))
