"""What the demo shows: a live table per resource, a line per verdict or Event, a summary.

Everything is read from the resource itself (spec + status) and its Events, as a
person with kubectl would read it; nothing here knows how the operator decided.
`Watch.update(resource, events)` returns the lines that are new since its last call
(phase changes, canary steps and weights, verdicts as they land or change, Events), so
the same code prints a log when the output is not a terminal and feeds rich's live view
when it is. A check's line is printed again whenever its verdict or its figures change,
so the last line of each check is the check the status, the report, the Events and
/metrics show. Durations the operator writes (`1h`, `5m`) are real-time; the demo runs
them scaled, and says so next to each (`1h (36 s in the demo's scaled time)`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from endpoint_optimizer import report

ENDS = ("Succeeded", "RolledBack", "Failed")
PHASE_STYLE = {
    "Succeeded": "bold green",
    "RolledBack": "bold yellow",
    "Failed": "bold red",
    "AwaitingApproval": "bold magenta",
}
VERDICT_STYLE = {
    "Pass": "green",
    "Fail": "red",
    "Inconclusive": "dim",
    "NoImprovement": "yellow",
}


# A Go-style duration the operator writes (`1h`, `5m`, `1m30s`, `90s`), standing alone.
_DURATION = re.compile(r"(?<![\w.:-])((?:\d+(?:\.\d+)?[hms])+)(?![\w-])")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0}


def seconds_of(duration: str) -> float:
    return sum(
        float(amount) * _UNIT_SECONDS[unit]
        for amount, unit in re.findall(r"(\d+(?:\.\d+)?)([hms])", duration)
    )


def scaled_text(text: str, time_scale: float | None) -> str:
    """Each duration in `text` followed by what it lasts in the demo: `1h (36 s in ...)`."""
    if time_scale is None or time_scale == 1.0:
        return text

    def annotate(match: re.Match[str]) -> str:
        seconds = seconds_of(match.group(1)) * time_scale
        shown = f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
        return f"{match.group(1)} ({shown} in the demo's scaled time)"

    return _DURATION.sub(annotate, text)


def verdict_counts(checks: Sequence[Mapping[str, Any]]) -> str:
    """`3 passed, 2 inconclusive`: the report's words for status.checks as stored."""
    return report.counted_verdicts(
        [(str(c.get("verdict")), bool(c.get("gating", True))) for c in checks]
    )


def key_of(resource: Mapping[str, Any]) -> str:
    metadata = resource.get("metadata", {})
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def judged_concurrency(spec: Mapping[str, Any]) -> int | None:
    """The concurrency the objective is judged at: objective.concurrency, else the highest."""
    objective = spec.get("objective")
    if isinstance(objective, Mapping) and objective.get("concurrency"):
        return int(objective["concurrency"])
    levels = spec.get("benchmark", {}).get("concurrency") or []
    return max(int(c) for c in levels) if levels else None


def level(status: Mapping[str, Any], variant: str, concurrency: int | None) -> dict[str, Any]:
    measured = status.get(variant) or {}
    levels = measured.get("levels") or []
    for entry in levels:
        if concurrency is None or entry.get("concurrency") == concurrency:
            return dict(entry)
    return {}


def ms(value: Any) -> str:
    return "–" if value is None else f"{float(value):.0f} ms" if value >= 100 else f"{value:.1f} ms"


def pair(baseline: Any, candidate: Any, unit: str = "ms") -> Text:
    """`baseline → candidate (−12 %)`, green when the candidate is lower."""
    fmt = ms if unit == "ms" else (lambda v: "–" if v is None else f"{float(v):.0f}")
    text = Text(f"{fmt(baseline)} → {fmt(candidate)}")
    if baseline and candidate is not None:
        change = (float(candidate) - float(baseline)) / float(baseline)
        better = change < 0 if unit == "ms" else change > 0
        text.append(f" ({change:+.0%})", style="green" if better else "red")
    return text


def acceptance(status: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
    rate = (status.get("candidate") or {}).get("acceptanceRate")
    if rate is None:
        return "–"
    floor = spec.get("optimizations", {}).get("speculativeDecoding", {}).get("minAcceptanceRate")
    return f"{rate:.0%}" + (f" (floor {float(floor):.0%})" if floor is not None else "")


def eval_delta(status: Mapping[str, Any]) -> str:
    baseline = (status.get("baseline") or {}).get("evalScore")
    candidate = (status.get("candidate") or {}).get("evalScore")
    if baseline is None or candidate is None:
        return "–"
    items = (status.get("candidate") or {}).get("evalItems", 0)
    return f"{baseline:.3f} → {candidate:.3f} ({candidate - baseline:+.3f}, {items} items)"


def step_text(status: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
    rollout = status.get("rollout") or {}
    steps = spec.get("rollout", {}).get("steps") or []
    if status.get("phase") not in ("Analyzing", "AwaitingApproval", "Promoting") or not steps:
        return "–"
    index = int(rollout.get("stepIndex", 0))
    return f"{min(index + 1, len(steps))}/{len(steps)} at {rollout.get('canaryWeight', 0)} %"


def measuring(status: Mapping[str, Any]) -> str | None:
    """`benchmark c=4 (level 1/2): 37/96 requests, 12s` while status.measurement is set."""
    m = status.get("measurement")
    if not m:
        return None
    what = "baseline" if m.get("action") == "MeasureBaseline" else "baseline vs candidate"
    done = f"{m.get('requestsDone', 0)}/{m.get('requestsPlanned', 0)}"
    if m.get("stage") == "evaluation":
        return f"measuring {what}: eval {done} answers, {m.get('elapsed', '')}"
    round_ = f", round {m['round']}" if int(m.get("round", 1)) > 1 else ""
    return (
        f"measuring {what}: c={m.get('concurrency')} (level {m.get('level')}/"
        f"{m.get('levels')}{round_}) {done} requests, {m.get('elapsed', '')}"
    )


def resource_table(resources: Sequence[Mapping[str, Any]]) -> Table:
    """One row per resource: phase, rollout step, latency pairs, acceptance, eval, message."""
    table = Table(title="OptimizedEndpoints", expand=True, title_justify="left")
    for column in ("resource", "phase", "step", "TTFT p99", "ITL p50", "acceptance", "eval"):
        table.add_column(column, no_wrap=column in ("resource", "phase"))
    table.add_column("now", ratio=1)
    for resource in resources:
        spec = resource.get("spec", {})
        status = resource.get("status") or {}
        at = judged_concurrency(spec)
        base, cand = level(status, "baseline", at), level(status, "candidate", at)
        phase = str(status.get("phase", "Pending"))
        if status.get("paused"):
            phase += " (paused)"
        table.add_row(
            key_of(resource),
            Text(phase, style=PHASE_STYLE.get(phase, "cyan")),
            step_text(status, spec),
            pair(base.get("ttftP99Ms"), cand.get("ttftP99Ms")),
            pair(base.get("itlP50Ms"), cand.get("itlP50Ms")),
            acceptance(status, spec),
            eval_delta(status),
            measuring(status) or str(status.get("message", ""))[:80],
        )
    return table


def step_line(status: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
    """`canary step 1/2: 10 % of traffic to the candidate for 5m`, while a canary runs."""
    steps = spec.get("rollout", {}).get("steps") or []
    if status.get("phase") not in ("Analyzing", "AwaitingApproval") or not steps:
        return None
    rollout = status.get("rollout") or {}
    index = min(int(rollout.get("stepIndex", 0)), len(steps) - 1)
    weight = rollout.get("canaryWeight", 0)
    pause = steps[index].get("pause")
    strategy = spec.get("rollout", {}).get("strategy", "canary")
    held = f" for {pause}" if pause else ""
    return f"{strategy} step {index + 1}/{len(steps)}: {weight} % of traffic to the candidate{held}"


def checks_step(status: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
    """`step 2/2: ` for checks recorded at a rollout step (status.rollout.comparedStep)."""
    compared = (status.get("rollout") or {}).get("comparedStep")
    steps = spec.get("rollout", {}).get("steps") or []
    if compared is None or not steps:
        return ""
    return f"step {int(compared) + 1}/{len(steps)}: "


@dataclass
class Watch:
    """Remembers what was shown, to print only what changed."""

    time_scale: float | None = None  # the operator's, to show durations as the demo runs them
    phases: dict[str, str] = field(default_factory=dict)
    steps: dict[str, str] = field(default_factory=dict)
    verdicts: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    events: set[str] = field(default_factory=set)

    def update(
        self, resource: Mapping[str, Any], events: Sequence[Mapping[str, Any]]
    ) -> list[Text]:
        key = key_of(resource)
        spec = resource.get("spec") or {}
        status = resource.get("status") or {}
        lines: list[Text] = []
        phase = status.get("phase")
        if phase and self.phases.get(key) != phase:
            self.phases[key] = str(phase)
            line = Text(f"{key}: phase ")
            line.append(str(phase), style=PHASE_STYLE.get(str(phase), "cyan"))
            if status.get("message"):
                line.append(f" — {scaled_text(str(status['message']), self.time_scale)}")
            lines.append(line)
        step = step_line(status, spec)
        if step is not None and self.steps.get(key) != step:
            self.steps[key] = step
            lines.append(Text(f"{key}: {scaled_text(step, self.time_scale)}", style="cyan"))
        for check in status.get("checks") or []:
            name, verdict = str(check.get("name")), str(check.get("verdict"))
            reason = str(check.get("reason") or "")
            if self.verdicts.get((key, name)) == (verdict, reason):
                continue
            self.verdicts[(key, name)] = (verdict, reason)
            line = Text(f"{key}: {checks_step(status, spec)}verdict {name} ")
            line.append(verdict, style=VERDICT_STYLE.get(verdict, ""))
            if reason:
                line.append(f" — {reason}")
            lines.append(line)
        name = resource.get("metadata", {}).get("name")
        for event in events:
            uid = str(event.get("metadata", {}).get("uid") or event.get("metadata", {}).get("name"))
            if uid in self.events or event.get("involvedObject", {}).get("name") != name:
                continue
            self.events.add(uid)
            style = "yellow" if event.get("type") == "Warning" else "dim"
            message = scaled_text(str(event.get("message", "")), self.time_scale)
            lines.append(Text(f"{key}: event {event.get('reason')}: {message}", style=style))
        return lines


def summary_table(
    resources: Sequence[Mapping[str, Any]],
    reports: Mapping[str, str],
    time_scale: float | None = None,
) -> RenderableType:
    """The end of the run: outcome, what changed and why, and where the report is."""
    table = Table(title="Summary", expand=True, title_justify="left")
    for column in (
        "resource",
        "outcome",
        "techniques",
        "TTFT p99",
        "output tok/s, all requests",
        "checks",
    ):
        table.add_column(column, no_wrap=column in ("resource", "outcome"))
    for resource in resources:
        spec = resource.get("spec", {})
        status = resource.get("status") or {}
        at = judged_concurrency(spec)
        base, cand = level(status, "baseline", at), level(status, "candidate", at)
        phase = str(status.get("phase", "Pending"))
        counts = Text(verdict_counts(status.get("checks") or []))
        table.add_row(
            key_of(resource),
            Text(phase, style=PHASE_STYLE.get(phase, "cyan")),
            ", ".join(status.get("candidateTechniques") or []) or "–",
            pair(base.get("ttftP99Ms"), cand.get("ttftP99Ms")),
            # All requests in flight together, at the concurrency the objective is judged at.
            pair(base.get("outputTokensPerSecond"), cand.get("outputTokensPerSecond"), "tok/s")
            + Text(f" at c{at}" if at is not None else ""),
            counts,
        )
    lines: list[RenderableType] = [table]
    for resource in resources:
        status = resource.get("status") or {}
        spec = resource.get("spec") or {}
        key = key_of(resource)
        if status.get("message"):
            lines.append(Text(f"{key}: {scaled_text(str(status['message']), time_scale)}"))
        checks = status.get("checks") or []
        if checks:
            step = checks_step(status, spec)
            head = f"{key}: checks of {step}" if step else f"{key}: checks: "
            lines.append(Text(head + verdict_counts(checks)))
        for check in checks:
            verdict = str(check.get("verdict"))
            line = Text(f"  {check.get('name')} ")
            line.append(verdict, style=VERDICT_STYLE.get(verdict, ""))
            lines.append(line + Text(f" — {check.get('reason', '')}"))
        if key in reports:
            lines.append(Text(f"{key}: rollout report {reports[key]}"))
    return Group(*lines)
