"""Fixtures the unit tests share.

`sandbox`: the sandbox in this process with deterministic serving and its control plane at
1/1000 speed, its address in the environment the AWS clients read. A test file that needs
another speed or faults from the start defines its own `sandbox`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from endpoint_optimizer.sandbox.config import SandboxConfig
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox


@pytest.fixture
def sandbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[SandboxHandle]:
    config = SandboxConfig(time_scale=0.001, serving_time_scale=0.01, serving_mode="deterministic")
    with running_sandbox(config) as handle:
        for key, value in handle.environment.items():
            monkeypatch.setenv(key, value)
        yield handle
