"""The controller tests' world: a sandbox at test speed and the wake-up's dependencies.

`sandbox`: deterministic serving, the control plane at 1/1000 speed, its address in the
environment the AWS clients read. `deps`: two concurrent AWS calls and fast polls; a test
file that needs another clock, other options or other retries defines its own `deps`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.controller.options import OperatorOptions
from endpoint_optimizer.controller.reconcile import Dependencies
from endpoint_optimizer.metrics.exporter import OperatorMetrics
from endpoint_optimizer.sandbox.config import SandboxConfig
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox


@pytest.fixture
def sandbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[SandboxHandle]:
    config = SandboxConfig(time_scale=0.001, serving_time_scale=0.01, serving_mode="deterministic")
    with running_sandbox(config) as handle:
        for key, value in handle.environment.items():
            monkeypatch.setenv(key, value)
        yield handle


@pytest.fixture
async def deps(sandbox: SandboxHandle) -> AsyncIterator[Dependencies]:
    options = OperatorOptions(poll_interval=0.05, time_scale=0.5, endpoint_recheck=0.1)
    made = Dependencies(AwsClients(max_concurrency=2), OperatorMetrics(), options)
    yield made
    made.aws.close()
