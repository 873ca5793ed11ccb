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
import struct
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_optimizer.bench import rxstamp

from .stamping import connected, stamping_on

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="SO_TIMESTAMPNS is Linux's")


@dataclass
class Reader:
    """What the socket reads of aiohttp's StreamReader."""

    total_bytes: int = 0
    eof: bool = False

    def is_eof(self) -> bool:
        return self.eof


@pytest.fixture(scope="module", autouse=True)
def _stamping_on() -> Iterator[None]:
    with stamping_on():
        yield


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, rxstamp.StampedSocket]]:
    with connected() as sockets:
        yield sockets


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
    body_ended=st.booleans(),
)
def test_every_body_byte_takes_the_stamp_of_the_read_that_fed_it(
    steps: list[tuple[int, int, bool]], fed_before_watch: int, body_ended: bool
) -> None:
    with connected() as (server, client):
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
        # When each fed byte's segment was sent (it arrived no earlier), and the totals at
        # which a read stopped feeding: a byte there ended its read.
        sent: list[float] = [0.0] * len(owners)
        read_ends = {reader.total_bytes} if fed_before_watch <= 1 else set()
        newest = reader.total_bytes  # what the newest read that fed anything fed up to
        asked = 0

        def check(end: int) -> None:
            stamp, earliest = client.arrived(end)
            assert stamp == owners[end - 1]
            if end in read_ends and not (reader.eof and end == newest):
                assert earliest == stamp  # it came in the read's newest segment
            elif earliest is not None:
                # Never later than the byte can have come (its segment's send), nor than
                # its stamp.
                assert earliest <= sent[end - 1] or end <= fed_before_watch
                assert earliest <= stamp

        for size, feed, consume in steps:
            before = time.monotonic()
            server.sendall(b"b" * size)
            got = 0
            while got < size:
                got += len(_read(client, size - got))  # a read of the rest: it fills up
                # Whatever the parser makes of this read, it feeds now, synchronously.
                assert client.last_at is not None
                newest = -1  # this read fed nothing (yet)
                if feed:
                    reader.total_bytes += feed
                    owners.extend([client.last_at] * feed)
                    sent.extend([before] * feed)
                    read_ends.add(reader.total_bytes)
                    newest = reader.total_bytes
                feed = 0  # the rest of a split segment feeds nothing more
            if consume:
                # The reader takes everything fed so far, asking at a few ends.
                for end in sorted({reader.total_bytes, (asked + reader.total_bytes) // 2}):
                    if end > asked:
                        check(end)
                        asked = end
        # The body's end came with the last read (its own segment, maybe the newest):
        # then no chunk that read fed is exact; chunks of earlier reads stay so.
        reader.eof = body_ended
        end = reader.total_bytes
        if end > asked:
            check(end)
        client.unwatch()


def _queued(sock: socket.socket, size: int) -> None:
    """Wait until `size` bytes wait in the socket's receive queue (a condition, no clock)."""
    import fcntl
    import termios

    for _ in range(100_000):
        waiting = struct.unpack("i", fcntl.ioctl(sock, termios.FIONREAD, b"\0" * 4))[0]
        if waiting >= size:
            return
        time.sleep(0.0001)
    raise AssertionError(f"{size} bytes never reached the socket")


def test_a_chunk_that_waited_with_later_ones_is_bracketed_by_the_previous_read(
    pair: tuple[socket.socket, rxstamp.StampedSocket],
) -> None:
    """The loop was busy: B and C queued, one read took both and got C's stamp. B came
    after the previous read began and no later than that stamp; C, which ended the read,
    is exact."""
    server, client = pair
    reader = Reader()
    with rxstamp.claiming():
        client.send(b"request")
    client.watch(reader)
    sent_a = time.monotonic()
    server.sendall(b"A" * 5)
    _read(client, 4096)  # not full: it drained the socket
    reader.total_bytes += 5
    assert client.arrived(5) == (client.last_at, client.last_at)
    sent_b = time.monotonic()
    server.sendall(b"B" * 7)
    sent_c = time.monotonic()
    server.sendall(b"C" * 3)
    _queued(client, 10)
    assert len(_read(client, 4096)) == 10
    reader.total_bytes += 10
    stamp, earliest = client.arrived(12)
    assert stamp == client.last_at and stamp is not None and stamp >= sent_c
    assert earliest is not None and sent_a <= earliest <= sent_b  # the A read's start
    assert client.arrived(15) == (stamp, stamp)


def test_after_a_read_that_filled_its_buffer_the_floor_stays_where_it_was(
    pair: tuple[socket.socket, rxstamp.StampedSocket],
) -> None:
    """A full read may have left older bytes behind: the next read cannot claim they
    came after it began."""
    server, client = pair
    reader = Reader()
    client.watch(reader)
    server.sendall(b"A")
    _read(client, 4096)
    sent_b = time.monotonic()
    server.sendall(b"B" * 8)
    _queued(client, 8)
    assert len(_read(client, 4)) == 4  # full: four B bytes stay
    reader.total_bytes += 4
    server.sendall(b"C")
    _queued(client, 5)
    assert len(_read(client, 4096)) == 5
    reader.total_bytes += 5
    stamp, earliest = client.arrived(4)  # ended its (full) read: exact
    assert earliest == stamp is not None
    # A B byte the full read left behind: it came before the read after it began, so
    # the floor is the A read's start, before B was sent.
    _, earliest = client.arrived(8)
    assert earliest is not None and earliest < sent_b


def test_where_stamps_cannot_be_had_it_hands_out_a_plain_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rxstamp, "SUPPORTED", False)
    info = socket.getaddrinfo("127.0.0.1", 9, type=socket.SOCK_STREAM)[0]
    with rxstamp.socket_factory(info) as plain:
        assert not isinstance(plain, rxstamp.StampedSocket)
