"""bench/loop.py: the load generator's own processes run on asyncio's loop where the
kernel stamps receives (Linux), else on uvloop where it is installed; EO_BENCH_LOOP
picks one by hand."""

from __future__ import annotations

import asyncio
import importlib.util
import sys

import pytest

from endpoint_optimizer.bench import loop, rxstamp

needs_uvloop = pytest.mark.skipif(
    importlib.util.find_spec("uvloop") is None, reason="uvloop not installed"
)


async def _loop_type() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


def test_where_the_kernel_stamps_receives_it_is_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(loop.ENV, raising=False)
    monkeypatch.setattr(loop, "KERNEL_STAMPS", True)
    assert loop.run(_loop_type()).startswith("asyncio")


@needs_uvloop
def test_elsewhere_it_is_uvloop_where_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(loop.ENV, raising=False)
    monkeypatch.setattr(loop, "KERNEL_STAMPS", False)
    assert loop.run(_loop_type()).startswith("uvloop")


@needs_uvloop
def test_the_environment_picks_uvloop_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(loop.ENV, "uvloop")
    assert loop.run(_loop_type()).startswith("uvloop")


def test_without_uvloop_it_is_asyncio_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(loop.ENV, "uvloop")
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert loop.run(_loop_type()).startswith("asyncio")


def test_linux_is_where_the_kernel_stamps() -> None:
    assert (sys.platform == "linux") == rxstamp.SUPPORTED
