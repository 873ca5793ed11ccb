"""One report from several rounds of the same levels (the sequential benchmark's rounds).

The judges read each round's samples on their own (throughput windows never span the
pause between rounds); the summaries in status, the error counts and the guard's
verdict are over everything measured, which is this merged report.
"""

from __future__ import annotations

from collections.abc import Sequence

from endpoint_optimizer.bench.models import (
    Acceptance,
    BenchReport,
    Distribution,
    LevelReport,
    Validity,
    Window,
    kernel_clock_share,
)
from endpoint_optimizer.bench.stats import (
    black_box_acceptance,
    server_acceptance,
    summarize,
)


def merged(rounds: Sequence[BenchReport]) -> BenchReport:
    """The rounds as one report: each level's samples in round order, renumbered."""
    if not rounds:
        raise ValueError("merged: no rounds to merge")
    if len(rounds) == 1:
        return rounds[0]
    by_level: dict[int, list[LevelReport]] = {}
    for report in rounds:
        for level in report.levels:
            by_level.setdefault(level.concurrency, []).append(level)
    first = rounds[0]
    levels = [_level(parts, first) for _, parts in sorted(by_level.items())]
    return first.model_copy(update={"levels": levels})


def _level(parts: Sequence[LevelReport], first: BenchReport) -> LevelReport:
    samples = [
        s.model_copy(update={"index": i})
        for i, s in enumerate(s for part in parts for s in part.samples)
    ]
    active = sum(part.window.active_s for part in parts)
    cpu = sum(part.window.client_cpu_s for part in parts)
    tokens = sum(s.output_tokens or 0 for s in samples)
    return LevelReport(
        concurrency=parts[0].concurrency,
        rate=parts[0].rate,
        samples=samples,
        summary=summarize(samples, first.config.slo, active),
        acceptance=Acceptance(
            server=server_acceptance(samples),
            black_box=black_box_acceptance(samples, first.config.num_speculative_tokens),
        ),
        validity=Validity(
            valid=all(part.validity.valid for part in parts),
            reasons=[r for part in parts for r in part.validity.reasons],
            send_lag_s=_worst([part.validity.send_lag_s for part in parts]),
            loop_lag_s=_worst([part.validity.loop_lag_s for part in parts]),
            wake_lag_s=_worst([part.validity.wake_lag_s for part in parts]),
            stamp_error_s=_widest([part.validity.stamp_error_s for part in parts]),
            blurred_s=_widest([part.validity.blurred_s for part in parts]) or {},
        ),
        window=Window(
            start_at=min(part.window.start_at for part in parts),
            end_at=max(part.window.end_at for part in parts),
            active_s=active,
            mean_in_flight=sum(s.end_at - s.sent_at for s in samples) / active if active else 0,
            client_cpu_s=cpu,
            client_cpu_s_per_1k_tokens=cpu / tokens * 1000 if tokens else None,
            workers=max(part.window.workers for part in parts),
            kernel_clock_share=kernel_clock_share(samples),
        ),
    )


def _worst(distributions: Sequence[Distribution]) -> Distribution:
    """The round whose lag was worst (by p99): the guard's figures are not additive."""
    return max(distributions, key=lambda d: (d.p99 is not None, d.p99 or 0.0))


def _widest(errors: Sequence[dict[str, float] | None]) -> dict[str, float] | None:
    """Each quantile's widest bracket over the rounds; None if a round used the lag rule."""
    if any(e is None for e in errors):
        return None
    widest: dict[str, float] = {}
    for each in errors:
        for name, width in (each or {}).items():
            widest[name] = max(widest.get(name, 0.0), width)
    return widest
