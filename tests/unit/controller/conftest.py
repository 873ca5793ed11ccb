"""The wake-up's dependencies for the controller tests (the sandbox: tests/unit/conftest.py).

`deps`: two concurrent AWS calls and fast polls; a test file that needs another clock,
other options or other retries defines its own `deps`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.controller.options import OperatorOptions
from endpoint_optimizer.controller.reconcile import Dependencies
from endpoint_optimizer.metrics.exporter import OperatorMetrics
from endpoint_optimizer.sandbox.testing import SandboxHandle


@pytest.fixture
async def deps(sandbox: SandboxHandle) -> AsyncIterator[Dependencies]:
    options = OperatorOptions(poll_interval=0.05, time_scale=0.5, endpoint_recheck=0.1)
    made = Dependencies(AwsClients(max_concurrency=2), OperatorMetrics(), options)
    yield made
    made.aws.close()
