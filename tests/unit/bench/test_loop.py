"""bench/loop.py: the load generator's own processes run on asyncio's loop where the
kernel stamps receives (Linux), else on uvloop where it is installed; EO_BENCH_LOOP
picks one by hand."""

from __future__ import annotations

import asyncio
import importlib.util
import sys

import pytest

from endpoint_optimizer.bench import loop, rxstamp

from .stamping import stamping_on

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


async def _stamped_through_the_loop() -> bool:
    """Whether a StampedSocket read by the running loop's own transport got the kernel's
    stamp (the server writes a byte at a time, until one comes or 50 went unstamped)."""
    import socket

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(1):
            writer.write(b"x")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    info = socket.getaddrinfo("127.0.0.1", port, type=socket.SOCK_STREAM)[0]
    sock = rxstamp.socket_factory(info)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, info[4])
        reader, writer = await asyncio.open_connection(sock=sock)
        stamped = False
        for _ in range(50):
            writer.write(b"?")
            assert await reader.read(1) == b"x"
            if isinstance(sock, rxstamp.StampedSocket) and sock.last_at is not None:
                stamped = True
                break
        writer.close()
        return stamped
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.skipif(not rxstamp.SUPPORTED, reason="the kernel stamps receives on Linux")
def test_the_loop_it_picks_hands_the_kernel_stamps_to_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the choice is for: the default loop reads sockets through the methods that
    take the kernel's stamps; uvloop (libuv reads the descriptor itself) does not."""
    monkeypatch.delenv(loop.ENV, raising=False)
    with stamping_on():  # the kernel stamps segments now: only the reads decide
        assert loop.run(_stamped_through_the_loop())
        if importlib.util.find_spec("uvloop") is not None:
            monkeypatch.setenv(loop.ENV, "uvloop")
            assert not loop.run(_stamped_through_the_loop())
