"""What the demo shows: a live table per resource, a line per verdict or Event, a summary.

Everything is read from the resource itself (spec + status) and its Events, as a
person with kubectl would read it; nothing here knows how the operator decided.
`Watch.update(resource, events)` returns the lines that are new since its last call
(phase changes, verdicts as they land, Events), so the same code prints a log when
the output is not a terminal and feeds rich's live view when it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

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
            str(status.get("message", ""))[:80],
        )
    return table


@dataclass
class Watch:
    """Remembers what was shown, to print only what changed."""

    phases: dict[str, str] = field(default_factory=dict)
    verdicts: dict[tuple[str, str], str] = field(default_factory=dict)
    events: set[str] = field(default_factory=set)

    def update(
        self, resource: Mapping[str, Any], events: Sequence[Mapping[str, Any]]
    ) -> list[Text]:
        key = key_of(resource)
        status = resource.get("status") or {}
        lines: list[Text] = []
        phase = status.get("phase")
        if phase and self.phases.get(key) != phase:
            self.phases[key] = str(phase)
            line = Text(f"{key}: phase ")
            line.append(str(phase), style=PHASE_STYLE.get(str(phase), "cyan"))
            if status.get("message"):
                line.append(f" — {status['message']}")
            lines.append(line)
        for check in status.get("checks") or []:
            name, verdict = str(check.get("name")), str(check.get("verdict"))
            if self.verdicts.get((key, name)) == verdict:
                continue
            self.verdicts[(key, name)] = verdict
            line = Text(f"{key}: verdict {name} ")
            line.append(verdict, style=VERDICT_STYLE.get(verdict, ""))
            if check.get("reason"):
                line.append(f" — {check['reason']}")
            lines.append(line)
        name = resource.get("metadata", {}).get("name")
        for event in events:
            uid = str(event.get("metadata", {}).get("uid") or event.get("metadata", {}).get("name"))
            if uid in self.events or event.get("involvedObject", {}).get("name") != name:
                continue
            self.events.add(uid)
            style = "yellow" if event.get("type") == "Warning" else "dim"
            lines.append(
                Text(f"{key}: event {event.get('reason')}: {event.get('message', '')}", style=style)
            )
        return lines


def summary_table(
    resources: Sequence[Mapping[str, Any]], reports: Mapping[str, str]
) -> RenderableType:
    """The end of the run: outcome, what changed and why, and where the report is."""
    table = Table(title="Summary", expand=True, title_justify="left")
    for column in ("resource", "outcome", "techniques", "TTFT p99", "throughput", "checks"):
        table.add_column(column, no_wrap=column in ("resource", "outcome"))
    for resource in resources:
        spec = resource.get("spec", {})
        status = resource.get("status") or {}
        at = judged_concurrency(spec)
        base, cand = level(status, "baseline", at), level(status, "candidate", at)
        phase = str(status.get("phase", "Pending"))
        counts: dict[str, int] = {}
        for check in status.get("checks") or []:
            counts[str(check.get("verdict"))] = counts.get(str(check.get("verdict")), 0) + 1
        checks = Text()
        for verdict, count in sorted(counts.items()):
            checks.append(f"{count} {verdict} ", style=VERDICT_STYLE.get(verdict, ""))
        table.add_row(
            key_of(resource),
            Text(phase, style=PHASE_STYLE.get(phase, "cyan")),
            ", ".join(status.get("candidateTechniques") or []) or "–",
            pair(base.get("ttftP99Ms"), cand.get("ttftP99Ms")),
            pair(
                base.get("outputTokensPerSecond"), cand.get("outputTokensPerSecond"), unit="tok/s"
            ),
            checks,
        )
    lines: list[RenderableType] = [table]
    for resource in resources:
        status = resource.get("status") or {}
        key = key_of(resource)
        if status.get("message"):
            lines.append(Text(f"{key}: {status['message']}"))
        for check in status.get("checks") or []:
            if check.get("verdict") == "Fail":
                lines.append(
                    Text(f"{key}: failed {check.get('name')}: {check.get('reason')}", style="red")
                )
        if key in reports:
            lines.append(Text(f"{key}: rollout report {reports[key]}"))
    return Group(*lines)
