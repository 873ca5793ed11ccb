"""One concurrency level split over N independent shards (pods), merged exactly.

`endpoint-optimizer bench --shard i/N` runs shard i of a level: the closed loop's slots
i, i+N, i+2N, ... and the request indices i, i+N, ... (the level's warm-up and measured
requests split N ways exactly, the remainder spread over the first shards), or, for an
open loop, the seeded Poisson arrivals whose index is i mod N behind a ceiling of its
share of the concurrency. Every shard runs its own saturation guard over its own
event loop, threads and sends.

What a shard returns (`ShardResult`) is raw per-request samples and raw lag probes
(`LevelPart`), never summaries: `merge_shards` hands the union to the same
`runner.merge_parts` the single-process path uses, so the merged report is the report
of the union of the samples, bit for bit, whatever the split (tests/unit/bench/
test_shards.py checks it with hypothesis). Histograms would have been smaller, but no
fixed-bucket histogram gives the linear-interpolated p50/p90/p99 the report states.

The barrier is a start instant, `start_at` (seconds since the epoch), chosen by the
coordinator and given to every shard in its arguments; each shard opens its client,
then waits for that instant on its own clock. Chosen over "every shard reports ready,
then the coordinator says go" because it needs no channel back to the coordinator at
start time (no ConfigMap watch or update from the pods, no extra RBAC), and a
coordinator that restarts mid-level leaves the shards running rather than hung at a
gate. Its cost: nodes' wall clocks must agree (NTP / Amazon Time Sync, well under a
millisecond to a few), and the coordinator must leave room for pods to be scheduled
and started. A shard that reaches the instant more than `start_tolerance_s` late sends
nothing and says so: the level is then Inconclusive, naming it, never a silent subset.

Time base: a shard's instants (sent_at, end_at, probe times) are seconds after the
barrier on its own CLOCK_MONOTONIC, so shards on different nodes share one origin
(up to the nodes' clock offset, which moves the window's edges, never a latency:
TTFT, ITL and E2E are differences on one clock).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from pydantic import Field

from endpoint_optimizer.api.camel import CamelModel
from endpoint_optimizer.bench.models import (
    BenchConfig,
    BenchTarget,
    DatasetItem,
    LevelPart,
    LevelReport,
    Validity,
)
from endpoint_optimizer.bench.runner import (
    Partial,
    _Level,
    _switch_interval,
    arrival_offsets,
    level_part,
    merge_parts,
)
from endpoint_optimizer.bench.senders import Send, open_sender
from endpoint_optimizer.bench.timeline import Tokenizer

SHARD_RESULT_FORMAT = 1
DEFAULT_START_TOLERANCE_S = 1.0


class ShardSpecError(ValueError):
    """A --shard value or a shard plan that cannot be run."""


def parse_shard(value: str) -> tuple[int, int]:
    """'i/N' -> (i, N), 0 <= i < N."""
    index, slash, count = value.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise ShardSpecError(f"--shard {value!r}: expected i/N, e.g. 0/4") from None
    if not slash or n < 1 or not 0 <= i < n:
        raise ShardSpecError(f"--shard {value!r}: expected 0 <= i < N")
    return i, n


def share(total: int, shard: int, shards: int) -> range:
    """The items of `total` that shard `shard` of `shards` owns: shard, shard+N, ..."""
    return range(shard, total, shards)


class ShardVariant(CamelModel):
    """One target's share of the level, as one shard measured it."""

    target: BenchTarget
    part: LevelPart
    validity: Validity  # this shard's own saturation guard


class ShardResult(CamelModel):
    """What shard `shard` of `shards` returns: plain data that merges exactly."""

    format: int = SHARD_RESULT_FORMAT
    run_id: str
    level_index: int = Field(ge=0)
    concurrency: int = Field(ge=1)
    shard: int = Field(ge=0)
    shards: int = Field(ge=1)
    start_at: float  # the barrier, seconds since the epoch
    started_late_s: float = 0.0  # how far past the barrier the shard began sending
    problems: list[str] = Field(default_factory=list)  # why it measured nothing usable
    variants: list[ShardVariant] = Field(default_factory=list)


class ShardPlan(CamelModel):
    """Everything a shard pod needs to run its share of one level."""

    targets: list[BenchTarget] = Field(min_length=1)
    config: BenchConfig
    # BenchConfig leaves its prompts out of its JSON; the plan carries them.
    dataset: list[DatasetItem] | None = None
    level_index: int = Field(ge=0)
    shards: int = Field(ge=1)
    start_at: float  # seconds since the epoch
    start_tolerance_s: float = Field(default=DEFAULT_START_TOLERANCE_S, gt=0)
    # How often a shard pod writes its count of measured requests (ConfigMap
    # <run>-s<i>-progress) while it runs; None: only its result at the end.
    progress_interval_s: float | None = Field(default=None, gt=0)

    def bench_config(self) -> BenchConfig:
        return self.config.model_copy(update={"dataset": self.dataset})

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)


class ShardOutcome(CamelModel):
    """What a launcher brings back: the run's id (every result must carry it), the results
    it could read, and why each shard it has no result of is missing (a pod's exit, an
    unreadable part), as far as it knows."""

    run_id: str
    results: list[ShardResult]
    missing: dict[int, str] = Field(default_factory=dict)


ShardProgress = Callable[[int], None]


class ShardLauncher(Protocol):
    """Runs `shards` shard processes of one level somewhere (the operator: the pods of an
    Indexed Job) from one plan, waits for them, and brings their results back. While they
    run it tells `progress`, where given, the measured requests they have finished, all
    shards and targets together, as far as it can see them."""

    async def __call__(
        self,
        targets: Sequence[BenchTarget],
        config: BenchConfig,
        level_index: int,
        shards: int,
        progress: ShardProgress | None = None,
    ) -> ShardOutcome: ...


async def run_level_on_shards(
    launcher: ShardLauncher,
    targets: Sequence[BenchTarget],
    config: BenchConfig,
    level_index: int,
    shards: int,
    progress: ShardProgress | None = None,
) -> list[LevelReport]:
    """One level over `shards` shards: launched, merged and validated (one report per
    target, in the order of `targets`)."""
    outcome = await launcher(targets, config, level_index, shards, progress)
    return merge_shards(
        outcome.results,
        expected=shards,
        run_id=outcome.run_id,
        config=config,
        level_index=level_index,
        targets=targets,
        missing=outcome.missing,
    )


def check_plan(config: BenchConfig, level_index: int, shard: int, shards: int) -> int:
    """The level's concurrency; ShardSpecError when this split cannot be run."""
    if not 0 <= level_index < len(config.concurrency):
        raise ShardSpecError(
            f"level index {level_index} is not one of the {len(config.concurrency)} levels"
        )
    concurrency = config.concurrency[level_index]
    if not 0 <= shard < shards:
        raise ShardSpecError(f"shard {shard}/{shards}: expected 0 <= i < N")
    if shards > concurrency:
        raise ShardSpecError(
            f"{shards} shards for concurrency {concurrency}: a shard would hold no stream"
        )
    if shards > config.warmup + config.requests:
        raise ShardSpecError(
            f"{shards} shards for {config.warmup + config.requests} requests: "
            "a shard would send nothing"
        )
    return concurrency


def _rebase(part: LevelPart, origin: float) -> LevelPart:
    """Instants as seconds after `origin` (the barrier on this host's monotonic clock)."""
    return part.model_copy(
        update={
            "samples": [
                s.model_copy(
                    update={
                        "scheduled_at": s.scheduled_at - origin,
                        "sent_at": s.sent_at - origin,
                        "end_at": s.end_at - origin,
                    }
                )
                for s in part.samples
            ],
            "loop_times": [t - origin for t in part.loop_times],
            "wake_times": [t - origin for t in part.wake_times],
        }
    )


async def run_shard(
    targets: Sequence[BenchTarget],
    config: BenchConfig,
    *,
    level_index: int,
    shard: int,
    shards: int,
    start_at: float,
    start_tolerance_s: float = DEFAULT_START_TOLERANCE_S,
    tokenizer: Tokenizer | None = None,
    wall_clock: Callable[[], float] = time.time,
    on_done: Callable[[int], None] | None = None,
) -> ShardResult:
    """Run this shard's share of one level for every target at once, from `start_at`.

    `on_done`: called with each request's index as it finishes (warm-up included), for
    every target; the shard pod counts its progress with it."""
    concurrency = check_plan(config, level_index, shard, shards)
    total = config.warmup + config.requests
    slots = list(share(concurrency, shard, shards))
    indices = list(share(total, shard, shards))
    ceiling = len(slots)
    arrivals = (
        []
        if config.rate is None
        else list(enumerate(arrival_offsets(config, level_index, config.rate)))[shard::shards]
    )
    result = ShardResult(
        run_id=config.run_id,
        level_index=level_index,
        concurrency=concurrency,
        shard=shard,
        shards=shards,
        start_at=start_at,
    )
    if config.switch_interval_s is not None:
        _switch_interval.enter(config.switch_interval_s)
    try:
        async with contextlib.AsyncExitStack() as stack:
            sends = [
                await stack.enter_async_context(open_sender(target, config, ceiling))
                for target in targets
            ]
            # The barrier on this host's monotonic clock (read once: a wall-clock step
            # during the level moves nothing).
            origin = time.monotonic() + (start_at - wall_clock())
            late = time.monotonic() - origin
            if late > start_tolerance_s:
                return result.model_copy(
                    update={
                        "started_late_s": late,
                        "problems": [
                            f"missed the start barrier by {late:.3f} s (tolerance "
                            f"{start_tolerance_s:.3f} s): it sent nothing"
                        ],
                    }
                )
            if late < 0:
                await asyncio.sleep(-late)
            begun = time.monotonic()

            async def one(send: Send) -> Partial:
                level = _Level(send, config, concurrency, on_done or (lambda index: None))
                if config.rate is None:
                    source = iter(indices)
                    return await level.measure(
                        lambda: level.closed_loop(origin, slots, lambda: next(source, total))
                    )
                return await level.measure(lambda: level.open_loop(origin, arrivals, ceiling))

            partials = await asyncio.gather(*(one(send) for send in sends))
    finally:
        if config.switch_interval_s is not None:
            _switch_interval.exit()
    variants = []
    for target, partial in zip(targets, partials, strict=True):
        part = _rebase(level_part(partial, tokenizer), origin)
        own = merge_parts([part], config, concurrency).validity
        variants.append(ShardVariant(target=target, part=part, validity=own))
    return result.model_copy(
        update={"started_late_s": max(begun - origin, 0.0), "variants": variants}
    )


def _name(shard: int, shards: int) -> str:
    return f"shard {shard}/{shards}"


def merge_shards(
    results: Sequence[ShardResult],
    *,
    expected: int,
    run_id: str,
    config: BenchConfig,
    level_index: int,
    targets: Sequence[BenchTarget],
    missing: dict[int, str] | None = None,
) -> list[LevelReport]:
    """One LevelReport per target from the shards' results, validated.

    The report is `merge_parts` of the accepted shards' samples: with all `expected`
    shards present, of this run and level, and valid, it is exactly the report of the
    union of their samples. Otherwise the level is invalid (Inconclusive to the judges)
    and each reason names the shard: missing (with `missing[i]`, what the caller knows,
    e.g. the pod's exit), reported twice, from another run, level or split, without a
    target, late past the barrier (by more than the send-lag bound, or past its
    tolerance: then it sent nothing), or saturated by its own guard. A shard from another
    run or split is left out of the samples; the others' samples stay in the report,
    which is marked invalid.
    """
    concurrency = config.concurrency[level_index]
    problems: list[str] = []
    accepted: dict[int, ShardResult] = {}
    for result in results:
        name = _name(result.shard, expected)
        if result.format != SHARD_RESULT_FORMAT:
            problems.append(
                f"{name}: result format {result.format}, expected {SHARD_RESULT_FORMAT}"
            )
            continue
        if result.run_id != run_id:
            problems.append(f"{name}: result of run {result.run_id!r}, not {run_id!r}; left out")
            continue
        if result.shards != expected or not 0 <= result.shard < expected:
            problems.append(
                f"shard {result.shard}/{result.shards}: a split of {result.shards}, "
                f"expected {expected}; left out"
            )
            continue
        if result.level_index != level_index or result.concurrency != concurrency:
            problems.append(
                f"{name}: result of level {result.level_index} (c={result.concurrency}), "
                f"expected level {level_index} (c={concurrency}); left out"
            )
            continue
        if result.shard in accepted:
            problems.append(f"{name}: reported twice; the second result left out")
            continue
        accepted[result.shard] = result
        problems.extend(f"{name}: {problem}" for problem in result.problems)
        bound = config.max_send_lag_p99_s
        if not result.problems and result.started_late_s > bound:
            problems.append(
                f"{name}: began {result.started_late_s * 1e3:.0f} ms after the start barrier "
                f"(> {bound * 1e3:.0f} ms, the send-lag bound): not together with the others"
            )
    for shard in range(expected):
        if shard not in accepted:
            why = (missing or {}).get(shard, "no result")
            problems.append(f"{_name(shard, expected)}: missing ({why}); the level is a subset")
    reports = []
    for target in targets:
        parts: list[LevelPart] = []
        reasons = list(problems)
        for shard in sorted(accepted):
            result = accepted[shard]
            variant = next((v for v in result.variants if v.target == target), None)
            if variant is None:
                if not result.problems:
                    reasons.append(
                        f"{_name(shard, expected)}: no samples of {target.endpoint_name}"
                        f"{'/' + target.variant if target.variant else ''}"
                    )
                continue
            parts.append(variant.part)
            reasons.extend(
                f"{_name(shard, expected)}: {reason}" for reason in variant.validity.reasons
            )
        report = merge_parts(parts, config, concurrency)
        if reasons:
            validity = report.validity
            report = report.model_copy(
                update={
                    "validity": validity.model_copy(
                        update={"valid": False, "reasons": [*reasons, *validity.reasons]}
                    )
                }
            )
        reports.append(report)
    return reports
