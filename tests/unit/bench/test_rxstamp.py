"""bench/rxstamp.py on real loopback TCP sockets: the kernel's receive stamp of each read,
and the mapping from a watched reader's body bytes to the read that fed them.

The mapping's claim: aiohttp feeds a response's StreamReader synchronously inside each
socket read, so every body byte is stamped by the read that fed it, exactly, when the
watch began before the body did; bytes fed before the watch take the newest read's stamp
(never an earlier one than their own). The property test drives a real socket with
random segment sizes and random feeds (a parser may hold bytes back, so a read can feed
nothing), and checks both claims against the stamps the reads really got.
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.bench import rxstamp

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="SO_TIMESTAMPNS is Linux's")


@dataclass
class Reader:
    """What the socket reads of aiohttp's StreamReader."""

    total_bytes: int = 0


@contextmanager
def _connected() -> Iterator[tuple[socket.socket, rxstamp.StampedSocket]]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        info = socket.getaddrinfo("127.0.0.1", listener.getsockname()[1], type=socket.SOCK_STREAM)
        client = rxstamp.socket_factory(info[0])
        assert isinstance(client, rxstamp.StampedSocket)
        client.connect(info[0][4])
        server, _ = listener.accept()
        with server, client:
            yield server, client


@pytest.fixture(scope="module", autouse=True)
def stamping_on() -> Iterator[None]:
    """Linux switches software receive stamps on for the whole stack when the first socket
    asks, through a deferred work item, and off when the last one closes: a segment that
    comes in before then carries none (the client then keeps its read time). One socket
    held open for the module, read until a stamp comes, keeps them on for every test."""
    with _connected() as (server, client):
        for _ in range(1000):
            server.sendall(b"s")
            client.recv(1)
            if client.last_at is not None:
                break
            time.sleep(0.001)
        assert client.last_at is not None, "the kernel never stamped a received segment"
        yield


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, rxstamp.StampedSocket]]:
    with _connected() as connected:
        yield connected


def _read(client: rxstamp.StampedSocket, size: int) -> bytes:
    data = client.recv(size)
    assert data
    return data


def test_each_read_is_stamped_by_the_kernel_between_the_send_and_the_read(
    pair: tuple[socket.socket, rxstamp.StampedSocket],
) -> None:
    server, client = pair
    before = time.monotonic()
    server.sendall(b"x" * 10)
    time.sleep(0.02)  # the read comes later than the bytes; the stamp must not
    _read(client, 64)
    after = time.monotonic()
    assert client.last_at is not None
    assert before <= client.last_at < after - 0.015


def test_recv_into_is_stamped_too(pair: tuple[socket.socket, rxstamp.StampedSocket]) -> None:
    server, client = pair
    server.sendall(b"abc")
    buffer = bytearray(16)
    assert client.recv_into(buffer) == 3
    assert bytes(buffer[:3]) == b"abc"
    assert client.last_at is not None


def test_a_request_claims_the_socket_of_its_first_send(
    pair: tuple[socket.socket, rxstamp.StampedSocket],
) -> None:
    server, client = pair
    client.send(b"sent by no request")  # outside a claim: nobody's
    before = time.monotonic()
    with rxstamp.claiming() as one:
        client.send(b"request one")
        client.send(b"more of it")
    assert one.sock is client
    assert one.wrote_at is not None and before <= one.wrote_at  # its first bytes, not its last
    first = one.wrote_at
    with rxstamp.claiming() as two:
        assert two.sock is None
        client.sendmsg([b"request two"])
    assert two.sock is client and two.wrote_at is not None and two.wrote_at >= first
    assert server.recv(64)


async def test_a_claim_reaches_the_tasks_its_request_starts(
    pair: tuple[socket.socket, rxstamp.StampedSocket],
) -> None:
    import asyncio

    _, client = pair
    with rxstamp.claiming() as claim:
        # aiohttp writes a request's body from a task of its own: it copies the context.
        await asyncio.create_task(_send_later(client))
    assert claim.sock is client


async def _send_later(client: rxstamp.StampedSocket) -> None:
    client.send(b"body")


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(1, 40), st.integers(0, 40), st.booleans()), min_size=1, max_size=12
    ),
    fed_before_watch=st.integers(0, 2),
)
def test_every_body_byte_takes_the_stamp_of_the_read_that_fed_it(
    steps: list[tuple[int, int, bool]], fed_before_watch: int
) -> None:
    with _connected() as (server, client):
        reader = Reader()
        # Reads before the watch (the headers' read, maybe with the first bytes).
        owners: list[float] = []  # owners[i]: the stamp of the read that fed byte i+1
        own: list[float] = []
        for _ in range(fed_before_watch):
            server.sendall(b"h")
            _read(client, 1)
            assert client.last_at is not None
            own.append(client.last_at)
            reader.total_bytes += 1
        client.watch(reader)
        if own:
            # Every byte fed before the watch: the newest read's stamp, never an earlier
            # one than its own read's.
            early = own[-1]
            assert all(early >= at for at in own)
            owners.extend([early] * len(own))
        asked = 0
        for size, feed, consume in steps:
            server.sendall(b"b" * size)
            got = 0
            while got < size:
                got += len(_read(client, size - got))
                # Whatever the parser makes of this read, it feeds now, synchronously.
                assert client.last_at is not None
                reader.total_bytes += feed
                owners.extend([client.last_at] * feed)
                feed = 0  # the rest of a split segment feeds nothing more
            if consume:
                # The reader takes everything fed so far, asking at a few ends.
                for end in sorted({reader.total_bytes, (asked + reader.total_bytes) // 2}):
                    if end > asked:
                        assert client.arrived(end) == owners[end - 1]
                        asked = end
        end = reader.total_bytes
        if end > asked:
            assert client.arrived(end) == owners[end - 1]
        client.unwatch()


def test_where_stamps_cannot_be_had_it_hands_out_a_plain_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rxstamp, "SUPPORTED", False)
    info = socket.getaddrinfo("127.0.0.1", 9, type=socket.SOCK_STREAM)[0]
    with rxstamp.socket_factory(info) as plain:
        assert not isinstance(plain, rxstamp.StampedSocket)
