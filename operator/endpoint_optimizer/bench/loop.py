"""The event loop of the load generator's own processes.

Used where the load generator owns the process: the client worker processes
(bench/workers.py) and `endpoint-optimizer bench` (also each shard of an Indexed Job).
A level measured inside the operator runs on kopf's loop, which stays asyncio's.

Which loop, measured:

- On Linux, asyncio's own loop, because its socket transport reads through Python's
  socket methods, so the lean client gets the kernel's receive and send stamps
  (bench/rxstamp.py): a token is timed when it reached the host, not when a busy loop
  got round to it. See docs/benchmarking.md, "Kernel stamps", for the A/B against uvloop.
- Elsewhere, uvloop where it is installed (libuv, MagicStack: the well-kept drop-in for
  many sockets and small reads). On a quiet 16-CPU host at c=256 and 10 ms per token on
  one core (benchmarks/results/bench_client_cost_quiet16_c256_uvloop.json) it cost 0.020
  CPU s per 1,000 tokens against asyncio's 0.023, with the same TTFT p50 error when
  both stamped at the read.

`EO_BENCH_LOOP=asyncio|uvloop` picks one by hand (benchmarks compare the two with it).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

from endpoint_optimizer.bench.rxstamp import SUPPORTED as KERNEL_STAMPS

T = TypeVar("T")

ENV = "EO_BENCH_LOOP"


def choice() -> str:
    """`asyncio` or `uvloop`: the environment's pick, else asyncio's where the kernel
    stamps receives, else uvloop where it is installed."""
    picked = os.environ.get(ENV, "").strip().lower()
    if picked not in ("asyncio", "uvloop"):
        picked = "asyncio" if KERNEL_STAMPS else "uvloop"
    if picked == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError:
            return "asyncio"
    return picked


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main), on the loop `choice()` names."""
    if choice() == "asyncio":
        return asyncio.run(main)
    import uvloop

    return uvloop.run(main)
