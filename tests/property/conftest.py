"""Hypothesis profiles for the model-based tests, and quiet operator logs while they run.

`default` (set in test_traffic_safety_model.py) keeps the property test within a minute
on a quiet core, derandomized; `long` (`pytest tests/property --hypothesis-profile=long`:
the path is needed, so that this conftest registers the profile before hypothesis loads
it) runs 20,000 random sequences of up to 60 steps and shrinks a failure, for a nightly
or the slow stage.
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
