"""Hypothesis profiles for the model-based tests, and quiet operator logs while they run.

`default` keeps the property tests within about a minute on CI's two shared cores;
`long` (`pytest tests/property --hypothesis-profile=long`) runs many more sequences,
for a nightly or the slow stage.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog
from hypothesis import HealthCheck, settings

settings.register_profile(
    "long",
    max_examples=20_000,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.fixture(autouse=True)
def quiet_operator_logs() -> Iterator[None]:
    """Thousands of wake-ups log an INFO line per action: dropped here (cost, not content)."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    yield
    structlog.configure(**saved)
