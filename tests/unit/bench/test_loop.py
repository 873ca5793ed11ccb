"""bench/loop.py: the load generator's own processes run on uvloop where it is installed."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from endpoint_optimizer.bench import loop


async def _loop_type() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


@pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="uvloop not installed")
def test_the_load_generator_runs_on_uvloop_where_it_is_installed() -> None:
    assert loop.run(_loop_type()).startswith("uvloop")


def test_without_uvloop_it_is_asyncio_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert loop.run(_loop_type()).startswith("asyncio")
