"""The event loop of the load generator's own processes: uvloop where it is installed.

Measured on a quiet 16-CPU host at c=256 and 10 ms per token on one core
(benchmarks/results/bench_client_cost_quiet16_c256_uvloop.json): the lean client costs
0.020 CPU s per 1,000 tokens on uvloop against 0.023 on asyncio's own loop (0.90x the
60-line reference instead of 1.07x), and its per-request TTFT error p99 falls from 6-11 ms
to 1.5-2.6 ms; the p50 error is the same (+0.4-0.5 ms). uvloop (libuv, MagicStack) is
the well-kept drop-in for exactly this: many sockets, small reads.

Used where the load generator owns the process: the client worker processes
(bench/workers.py) and `endpoint-optimizer bench` (also each shard of an Indexed Job).
A level measured inside the operator runs on kopf's loop, which stays asyncio's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main), on uvloop's loop when uvloop is installed (not on Windows)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
