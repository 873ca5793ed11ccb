"""Receive times from the kernel: when a response's bytes reached this host, not when the
event loop got round to reading them.

At c=256 and 10 ms per token one client core is busy most of the time, and a token that
arrives while the loop is serving other streams waits there a millisecond or more before
it is read; stamped at the read, that wait lands in TTFT (issue 24's misses of the
max(2 ms, 2 %) target were the runs with the most loop lag). Linux stamps every received
segment in software (SO_TIMESTAMPNS) and hands the stamp of the newest segment copied
to each recvmsg(); this module keeps it.

How a stamp reaches a body chunk, exactly: asyncio's socket transport reads with
`recv` / `recv_into` and hands the bytes synchronously to the protocol, which (aiohttp's
response parser, and the TLS layer before it) feeds the response's `StreamReader` in
the same call. So the body bytes fed between one read and the next all came from the
first of the two, and `StampedSocket` marks, on entering each read, how far the watched
reader's `total_bytes` had got and with which read's stamp. A body chunk ending at byte E
takes the stamp of the first mark at or past E, or, past every mark, the newest read's.

How late a stamp can be, exactly: the kernel hands each read the stamp of the newest
segment it copied, so a body chunk that shares a read with later bytes (the loop was busy
and segments queued) takes a stamp up to how long it waited. Each read also gets a floor,
the earliest any of its bytes can have arrived: the moment the previous read began, when
that read drained the socket (it did not fill its buffer), since a byte that was already
there would have gone with it. A chunk whose last byte is the last body byte of its read
arrived in that newest segment, so its stamp is exact (a server writes each chunk's
framing with its data, so the segment that ends a read carries body bytes; not so for
the body's end, which comes on its own: a read that brought it stamps none exactly). Any
other chunk arrived between the floor and the stamp; bench/guard.py turns those brackets into
a bound on every quantile it reports.

Where no stamp comes (another OS; uvloop, whose libuv reads the descriptor itself and
never calls these methods; a kernel that refuses the option) the caller keeps its own
read time, so nothing is lost but the precision.
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

# Linux's SO_TIMESTAMPNS (the _OLD form: a struct timespec of two longs); Python's socket
# module does not export it. Elsewhere the option is not set and nothing is stamped.
_SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@ll")
_CMSG_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
_MAX_AGE_S = 60.0  # a stamp older than this is not this read's (a clock step): unused
SUPPORTED = sys.platform == "linux" and _CMSG_SPACE > 0


class _Fed(Protocol):
    """What is read of aiohttp's StreamReader: the body bytes fed to it so far, and
    whether the body's end (chunked encoding's last chunk) has come."""

    total_bytes: int

    def is_eof(self) -> bool: ...


@dataclass(slots=True)
class Claim:
    """What one request's socket sends tell it: which socket took its bytes, and when it
    took the first of them. Set by `claiming`; filled by the first send in its context."""

    sock: StampedSocket | None = None
    wrote_at: float | None = None
    ended_at: float | None = None  # the stamp of the read that brought the response's end


_CLAIM: ContextVar[Claim | None] = ContextVar("endpoint_optimizer_rxstamp_claim", default=None)


@contextmanager
def claiming() -> Iterator[Claim]:
    """Within it, the first send on a `StampedSocket` made from this context (the request's
    own task, or the tasks and callbacks it starts, which copy its context) claims that
    socket for the request. Found this way, not through the response's connection, which
    aiohttp lets go as soon as the whole body has come in."""
    claim = Claim()
    token = _CLAIM.set(claim)
    try:
        yield claim
    finally:
        _CLAIM.reset(token)


class StampedSocket(socket.socket):
    """A TCP socket that keeps the kernel's receive stamp of each read (monotonic s)."""

    __slots__ = (
        "_entered_at",
        "_fed",
        "_floor",
        "_full",
        "_marks",
        "_reader",
        "_reads",
        "_sent_reads",
        "last_at",
        "last_floor",
    )

    last_at: float | None  # the newest read's stamp
    last_floor: float | None  # the earliest any byte of the newest read can have arrived
    _reader: _Fed | None
    _fed: int
    # (body bytes fed up to the end of a read, its stamp, the earliest for a chunk that
    # ends there, its floor), oldest first
    _marks: deque[tuple[int, float | None, float | None, float | None]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last_at = self.last_floor = None
        self._reader = None
        self._fed = 0
        self._marks = deque()
        self._entered_at: float | None = None  # when the newest read began
        self._floor: float | None = None  # the floor of the read now under way
        self._full = False  # the newest read filled its buffer: it may have left bytes
        self._reads = 0
        self._sent_reads = 0  # reads when a request last claimed this socket

    # Stamped just before the call, kept if bytes went: never later than the kernel took
    # them, so the server's own receive can only follow it.
    def send(self, data: Any, flags: int = 0) -> int:
        at = time.monotonic()
        sent = super().send(data, flags)
        if sent:
            self._sent(at)
        return sent

    def sendmsg(self, buffers: Any, *args: Any) -> int:
        at = time.monotonic()
        sent = super().sendmsg(buffers, *args)
        if sent:
            self._sent(at)
        return sent

    def _sent(self, at: float) -> None:
        claim = _CLAIM.get()
        if claim is not None and claim.sock is None:
            claim.sock, claim.wrote_at = self, at
            self._sent_reads = self._reads

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self._entering()
        data, ancillary, _, _ = self.recvmsg(bufsize, _CMSG_SPACE, flags)
        self._stamp(ancillary, len(data) >= bufsize)
        return data

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self._entering()
        view = memoryview(buffer)
        if nbytes:
            view = view[:nbytes]
        size, ancillary, _, _ = self.recvmsg_into([view], _CMSG_SPACE, flags)
        self._stamp(ancillary, size >= view.nbytes)
        return size

    def _entering(self) -> None:
        # Whatever the watched reader was fed since the last read came from that read.
        reader = self._reader
        if reader is not None:
            fed = reader.total_bytes
            if fed > self._fed:
                floor = self.last_floor
                self._marks.append((fed, self.last_at, self._ending(reader, floor), floor))
                self._fed = fed
        # This read finds what came since the last one began, unless that one filled its
        # buffer and left bytes behind (then they are as old as its own floor says).
        # A read that raises (nothing there) still began: it found the socket empty.
        self._floor = self.last_floor if self._full else self._entered_at
        self._entered_at = time.monotonic()
        self._reads += 1

    def _stamp(self, ancillary: list[tuple[int, int, bytes]], full: bool) -> None:
        stamp = None
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                seconds, nanoseconds = _TIMESPEC.unpack_from(data)
                age = time.time() - (seconds + nanoseconds * 1e-9)
                if 0.0 <= age < _MAX_AGE_S:
                    stamp = time.monotonic() - age
        self.last_at = stamp
        self.last_floor = self._floor
        self._full = full

    def watch(self, reader: _Fed) -> None:
        """Start mapping `reader`'s body bytes to reads (at a response's headers)."""
        self._marks.clear()
        self._reader = reader
        self._fed = reader.total_bytes
        if self._fed:
            # Fed before the headers were handed over: the newest read's stamp (exact when
            # one read brought them, as when headers and the first event come together).
            # When more reads since the request's send may have fed them, which one fed
            # the last byte is not known: the newest stamp is then only an upper bound.
            if self._reads - self._sent_reads <= 1:
                floor = self.last_floor
                self._marks.append((self._fed, self.last_at, self._ending(reader, floor), floor))
            else:
                self._marks.append((self._fed, self.last_at, None, None))

    def unwatch(self) -> None:
        self._reader = None
        self._marks.clear()

    def arrived(self, end: int) -> tuple[float | None, float | None]:
        """(stamp, earliest) of the body chunk that ends at byte `end` of the watched
        reader (chunks asked for in order): it reached this host no later than the stamp,
        and no earlier than `earliest`, which is the stamp itself when the chunk ended
        its read. None for what is not known (no stamp; no floor, as for a socket's first
        read: then the request's send is the floor)."""
        marks = self._marks
        while marks:
            fed, stamp, ending, floor = marks[0]
            if fed >= end:
                return stamp, ending if fed == end else floor
            marks.popleft()
        reader = self._reader
        if reader is not None and reader.total_bytes == end:
            return self.last_at, self._ending(reader, self.last_floor)
        return self.last_at, self.last_floor

    def _ending(self, reader: _Fed, floor: float | None) -> float | None:
        """The earliest for a chunk that ends the body bytes of the newest read: its stamp,
        unless the read also brought the body's end, whose segment (the last chunk of
        chunked encoding, written on its own) may have come after the chunk's."""
        return floor if reader.is_eof() else self.last_at


def socket_factory(addr_info: Any) -> socket.socket:
    """aiohttp's `TCPConnector(socket_factory=...)`: a `StampedSocket` with the kernel's
    receive stamps switched on, or a plain socket where they cannot be."""
    family, kind, proto = addr_info[0], addr_info[1], addr_info[2]
    if not SUPPORTED:
        return socket.socket(family=family, type=kind, proto=proto)
    sock = StampedSocket(family=family, type=kind, proto=proto)
    with suppress(OSError):  # then stamps never come: the caller keeps its read times
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    return sock
