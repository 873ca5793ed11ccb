"""The wake-up's dependencies for the controller tests (the sandbox: tests/unit/conftest.py).

`deps`: two concurrent AWS calls and fast polls; a test file that needs another clock,
other options or other retries defines its own `deps`. It comes with `tolerant_guard`.

`tolerant_guard`: the benchmark's client-saturation guard widened as the e2e operator's
is (tests/e2e/conftest.py LAG_TOLERANCE): these tests are about the control flow, and a
busy host would otherwise void measurement after measurement (seen with two cores
loaded: the baseline at c=4 voided five times over, event-loop lag p99 86.9 ms).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.bench import limits
from endpoint_optimizer.controller.options import OperatorOptions
from endpoint_optimizer.controller.reconcile import Dependencies
from endpoint_optimizer.metrics.exporter import OperatorMetrics
from endpoint_optimizer.sandbox.testing import SandboxHandle


@pytest.fixture
def tolerant_guard() -> Iterator[None]:
    """The process's bench limits with the guard widened; restored after."""
    limits.configure(limits.BenchLimits(lag_tolerance=10))
    yield
    limits.configure(limits.BenchLimits())


@pytest.fixture
async def deps(sandbox: SandboxHandle, tolerant_guard: None) -> AsyncIterator[Dependencies]:
    options = OperatorOptions(poll_interval=0.05, time_scale=0.5, endpoint_recheck=0.1)
    made = Dependencies(AwsClients(max_concurrency=2), OperatorMetrics(), options)
    yield made
    made.aws.close()
