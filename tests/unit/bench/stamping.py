"""Loopback sockets with the kernel's receive stamps switched on, for the tests of
bench/rxstamp.py and of the loop that reads them (bench/loop.py)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

from endpoint_optimizer.bench import rxstamp


@contextmanager
def connected() -> Iterator[tuple[socket.socket, rxstamp.StampedSocket]]:
    """(server side, stamped client side) of one loopback TCP connection."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        info = socket.getaddrinfo("127.0.0.1", listener.getsockname()[1], type=socket.SOCK_STREAM)
        client = rxstamp.socket_factory(info[0])
        assert isinstance(client, rxstamp.StampedSocket)
        client.connect(info[0][4])
        server, _ = listener.accept()
        with server, client:
            yield server, client


@contextmanager
def stamping_on() -> Iterator[None]:
    """Linux switches software receive stamps on for the whole stack when the first socket
    asks, through a deferred work item, and off when the last one closes: a segment that
    comes in before then carries none (the client then keeps its read time). One socket
    held open, read until a stamp comes (a condition, not a clock), keeps them on."""
    with connected() as (server, client):
        for _ in range(1000):
            server.sendall(b"s")
            client.recv(1)
            if client.last_at is not None:
                break
            time.sleep(0.001)
        assert client.last_at is not None, "the kernel never stamped a received segment"
        yield
