"""The rollout report: one self-contained HTML file with pictures and the verdicts in words.

Rendered from the resource itself (spec + status), so it shows exactly what the
operator measured and decided: baseline versus candidate latency quantiles per
concurrency level, throughput, the acceptance rate against its floor, the eval
delta against the allowed drop, the rollout timeline, and every check with its
values, threshold, rule and reason. Pictures are inline SVG: no scripts, no
network, nothing to install to read it.
"""

from __future__ import annotations

import html
import json
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from endpoint_optimizer.api import (
    LevelMeasurement,
    OptimizedEndpointStatus,
    VariantMeasurements,
)
from endpoint_optimizer.api.checks import Check, Verdict

BASELINE_COLOUR = "#5b7083"
CANDIDATE_COLOUR = "#e07b39"
VERDICT_COLOUR = {
    Verdict.PASS: "#2e7d32",
    Verdict.FAIL: "#c62828",
    Verdict.INCONCLUSIVE: "#9e9e9e",
    Verdict.NO_IMPROVEMENT: "#f9a825",
}
# (field suffix, label) of the latency quantiles drawn per metric.
LATENCY_METRICS = (
    ("ttft", "Time to first token"),
    ("itl", "Inter-token latency"),
    ("e2e", "End-to-end"),
)
QUANTILES = ("p50", "p90", "p99")


def render_report(resource: Mapping[str, Any]) -> str:
    """The whole HTML document for one OptimizedEndpoint object (as the API returns it)."""
    metadata = resource.get("metadata") or {}
    spec = resource.get("spec") or {}
    status = OptimizedEndpointStatus.model_validate(resource.get("status") or {})
    name = str(metadata.get("name", "?"))
    namespace = str(metadata.get("namespace", "default"))
    sections = [
        _summary(name, namespace, spec, status),
        _latency_section(status.baseline, status.candidate),
        _acceptance_section(status, spec),
        _eval_section(status, spec),
        _timeline_section(status),
        _checks_section(status.checks),
    ]
    body = "\n".join(section for section in sections if section)
    title = f"Rollout report: {namespace}/{name}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #222; }}
h1 {{ font-size: 1.5rem; }} h2 {{ font-size: 1.2rem; margin-top: 2rem; }}
table {{ border-collapse: collapse; width: 100%; font-size: 0.85rem; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 4px 6px; text-align: left; vertical-align: top; }}
.verdict {{ font-weight: 600; }} .muted {{ color: #777; }}
.legend span {{ display: inline-block; margin-right: 1rem; }}
.swatch {{ display: inline-block; width: 10px; height: 10px; margin-right: 4px; }}
</style></head><body>
<h1>{_e(title)}</h1>
{body}
</body></html>
"""


def _summary(
    name: str, namespace: str, spec: Mapping[str, Any], status: OptimizedEndpointStatus
) -> str:
    objective = spec.get("objective")
    gain = (
        f"{status.objective_gain * 100:+.1f} %"
        if status.objective_gain is not None
        else "not measured"
    )
    techniques = ", ".join(status.candidate_techniques) or "none recorded"
    failing = [c for c in status.checks if c.verdict in (Verdict.FAIL, Verdict.NO_IMPROVEMENT)]
    if failing:
        why = "; ".join(f"{c.name}: {c.reason}" for c in failing[:5])
    else:
        why = "every check passed" if status.checks else "no checks yet"
    rows = [
        ("Phase", status.phase.value + (" (paused)" if status.paused else "")),
        ("Outcome in words", status.message or why),
        ("Why", why),
        ("Objective", json.dumps(objective) if objective is not None else "default"),
        ("Objective gain", gain),
        ("Candidate techniques", techniques),
        ("Measured on", _served_by(status)),
        ("SageMaker endpoint", status.sagemaker.endpoint_name or str(spec.get("endpointName", ""))),
        ("Serving endpoint config", status.sagemaker.serving_endpoint_config or "-"),
    ]
    cells = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<table>{cells}</table>"


def _served_by(status: OptimizedEndpointStatus) -> str:
    """Which engine the numbers came from, as the containers labelled their answers."""
    parts = []
    for role, measured in (("baseline", status.baseline), ("candidate", status.candidate)):
        if measured is None or not measured.served_by:
            continue
        engine = measured.served_by + (" engine" if measured.served_by != "mixed" else "")
        note = f" ({measured.engine_note})" if measured.engine_note else ""
        parts.append(f"{role}: {engine}{note}")
    return "; ".join(parts) or "not labelled by the container"


def _level_value(level: LevelMeasurement, metric: str, quantile: str) -> float | None:
    value = getattr(level, f"{metric}_{quantile}_ms", None)
    return float(value) if value is not None else None


def _latency_section(
    baseline: VariantMeasurements | None, candidate: VariantMeasurements | None
) -> str:
    if baseline is None and candidate is None:
        return "<h2>Latency</h2><p class='muted'>Not measured yet.</p>"
    levels: dict[int, dict[str, LevelMeasurement]] = {}
    for role, measured in (("baseline", baseline), ("candidate", candidate)):
        for level in measured.levels if measured else []:
            levels.setdefault(level.concurrency, {})[role] = level
    parts = [
        "<h2>Latency quantiles, baseline versus candidate</h2>",
        _legend(),
        "<p class='muted'>Each panel shows the measured p50, p90 and p99 of one metric "
        "at one concurrency level (milliseconds; lower is better).</p>",
    ]
    for concurrency in sorted(levels):
        by_role = levels[concurrency]
        panels = []
        for metric, label in LATENCY_METRICS:
            series = {
                role: [_level_value(level, metric, q) for q in QUANTILES]
                for role, level in by_role.items()
            }
            panels.append(_quantile_bars(f"{label}, concurrency {concurrency}", series))
        throughput = {role: level.output_tokens_per_second for role, level in by_role.items()}
        panels.append(_throughput_bars(f"Throughput, concurrency {concurrency}", throughput))
        parts.append("<div>" + "".join(panels) + "</div>")
    return "\n".join(parts)


def _legend() -> str:
    return (
        "<p class='legend'>"
        f"<span><i class='swatch' style='background:{BASELINE_COLOUR}'></i>baseline</span>"
        f"<span><i class='swatch' style='background:{CANDIDATE_COLOUR}'></i>candidate</span></p>"
    )


def _quantile_bars(title: str, series: Mapping[str, Sequence[float | None]]) -> str:
    width, height, pad = 260, 170, 30
    values = [v for row in series.values() for v in row if v is not None]
    top = max(values) * 1.15 if values else 1.0
    group = (width - pad) / len(QUANTILES)
    bar = group / 3
    shapes = []
    for qi, quantile in enumerate(QUANTILES):
        x0 = pad + qi * group + bar / 2
        for ri, role in enumerate(("baseline", "candidate")):
            row = series.get(role)
            value = row[qi] if row else None
            if value is None:
                continue
            bar_height = (height - 40) * value / top
            x = x0 + ri * bar
            y = height - 20 - bar_height
            colour = BASELINE_COLOUR if role == "baseline" else CANDIDATE_COLOUR
            shapes.append(
                f"<rect x='{x:.1f}' y='{y:.1f}' width='{bar - 2:.1f}' height='{bar_height:.1f}' "
                f"fill='{colour}'><title>{role} {quantile}: {value:.1f} ms</title></rect>"
                f"<text x='{x + bar / 2 - 1:.1f}' y='{y - 3:.1f}' font-size='8' "
                f"text-anchor='middle'>{value:.0f}</text>"
            )
        shapes.append(
            f"<text x='{x0 + bar:.1f}' y='{height - 6}' font-size='10' "
            f"text-anchor='middle'>{quantile}</text>"
        )
    return _svg(title, width, height, "".join(shapes))


def _throughput_bars(title: str, values: Mapping[str, float | None]) -> str:
    width, height = 200, 170
    present = {k: v for k, v in values.items() if v is not None}
    top = max(present.values()) * 1.15 if present else 1.0
    shapes = []
    for index, role in enumerate(("baseline", "candidate")):
        value = present.get(role)
        if value is None:
            continue
        bar_height = (height - 40) * value / top
        x = 40 + index * 70
        y = height - 20 - bar_height
        colour = BASELINE_COLOUR if role == "baseline" else CANDIDATE_COLOUR
        shapes.append(
            f"<rect x='{x}' y='{y:.1f}' width='50' height='{bar_height:.1f}' fill='{colour}'>"
            f"<title>{role}: {value:.1f} tokens/s</title></rect>"
            f"<text x='{x + 25}' y='{y - 3:.1f}' font-size='9' text-anchor='middle'>"
            f"{value:.0f} tok/s</text>"
            f"<text x='{x + 25}' y='{height - 6}' font-size='10' text-anchor='middle'>{role}</text>"
        )
    return _svg(title, width, height, "".join(shapes))


def _gauge(
    title: str, rows: Sequence[tuple[str, float, str]], mark: float | None, mark_label: str
) -> str:
    """Horizontal bars on a 0..1 scale with an optional vertical mark (a floor or a limit)."""
    width, row_height = 420, 28
    height = 30 + row_height * len(rows)
    scale = width - 140
    shapes = []
    for index, (label, value, colour) in enumerate(rows):
        y = 10 + index * row_height
        shapes.append(
            f"<text x='0' y='{y + 14}' font-size='11'>{_e(label)}</text>"
            f"<rect x='110' y='{y}' width='{scale * max(0.0, min(1.0, value)):.1f}' height='18' "
            f"fill='{colour}'/><text x='{114 + scale * max(0.0, min(1.0, value)):.1f}' "
            f"y='{y + 14}' font-size='11'>{value:.3f}</text>"
        )
    if mark is not None:
        x = 110 + scale * mark
        shapes.append(
            f"<line x1='{x:.1f}' x2='{x:.1f}' y1='4' y2='{height - 16}' stroke='#c62828' "
            f"stroke-dasharray='4 3'/><text x='{x + 3:.1f}' y='{height - 4}' font-size='10' "
            f"fill='#c62828'>{_e(mark_label)}</text>"
        )
    return _svg(title, width, height, "".join(shapes))


def _acceptance_section(status: OptimizedEndpointStatus, spec: Mapping[str, Any]) -> str:
    candidate = status.candidate
    if candidate is None or candidate.acceptance_rate is None:
        return ""
    speculative = (spec.get("optimizations") or {}).get("speculativeDecoding") or {}
    floor = float(speculative.get("minAcceptanceRate", 0.4))
    colour = (
        CANDIDATE_COLOUR if candidate.acceptance_rate >= floor else VERDICT_COLOUR[Verdict.FAIL]
    )
    gauge = _gauge(
        "Speculative acceptance rate",
        [("candidate", candidate.acceptance_rate, colour)],
        floor,
        f"floor {floor:.2f}",
    )
    source = _e(candidate.acceptance_source or "unknown source")
    return f"<h2>Speculative decoding</h2>{gauge}<p class='muted'>Measured from {source}.</p>"


def _eval_section(status: OptimizedEndpointStatus, spec: Mapping[str, Any]) -> str:
    baseline, candidate = status.baseline, status.candidate
    if baseline is None or candidate is None:
        return ""
    if baseline.eval_score is None or candidate.eval_score is None:
        return ""
    evaluation = spec.get("evaluation") or {}
    allowed = float(evaluation.get("maxAbsoluteDrop", 0.01))
    delta = candidate.eval_score - baseline.eval_score
    rows: list[tuple[str, float, str]] = [
        ("baseline", baseline.eval_score, BASELINE_COLOUR),
        ("candidate", candidate.eval_score, CANDIDATE_COLOUR),
    ]
    if baseline.refusal_rate is not None and candidate.refusal_rate is not None:
        rows += [
            ("baseline refusals", baseline.refusal_rate, BASELINE_COLOUR),
            ("candidate refusals", candidate.refusal_rate, CANDIDATE_COLOUR),
        ]
    lowest = baseline.eval_score - allowed
    gauge = _gauge("Eval score", rows, max(0.0, lowest), f"lowest allowed {lowest:.3f}")
    items = min(baseline.eval_items, candidate.eval_items) or baseline.eval_items
    return (
        f"<h2>Evaluation</h2>{gauge}<p>Delta {delta * 100:+.2f} points on {items} paired "
        f"items; the candidate may drop at most {allowed * 100:.1f} points.</p>"
    )


def _timeline_section(status: OptimizedEndpointStatus) -> str:
    if not status.history:
        return ""
    entries = sorted(status.history, key=lambda entry: entry.time)
    start, end = entries[0].time, entries[-1].time
    span = max((end - start).total_seconds(), 1.0)
    width, height = 1000, 60 + 16 * len(entries)
    shapes = [f"<line x1='10' x2='{width - 10}' y1='30' y2='30' stroke='#999'/>"]
    for index, entry in enumerate(entries):
        x = 10 + (width - 20) * (entry.time - start).total_seconds() / span
        y = 50 + 16 * index
        shapes.append(
            f"<circle cx='{x:.1f}' cy='30' r='4' fill='{CANDIDATE_COLOUR}'/>"
            f"<line x1='{x:.1f}' x2='{x:.1f}' y1='30' y2='{y - 4}' stroke='#ddd'/>"
            f"<text x='{min(x, width - 380):.1f}' y='{y}' font-size='10'>"
            f"+{(entry.time - start).total_seconds():.0f}s {_e(entry.phase.value)}: "
            f"{_e(entry.event)} {_e(entry.message[:90])}</text>"
        )
    return "<h2>Rollout timeline</h2>" + _svg(
        "Decisions in time order", width, height, "".join(shapes)
    )


def _checks_section(checks: Sequence[Check]) -> str:
    if not checks:
        return "<h2>Checks</h2><p class='muted'>No checks yet.</p>"
    header = (
        "<tr><th>check</th><th>verdict</th><th>baseline</th><th>candidate</th>"
        "<th>threshold</th><th>interval</th><th>n</th><th>rule</th><th>reason</th></tr>"
    )
    rows = []
    for check in checks:
        interval = (
            f"[{check.interval_low:.4g}, {check.interval_high:.4g}]"
            if check.interval_low is not None and check.interval_high is not None
            else "-"
        )
        rows.append(
            f"<tr><td>{_e(check.name)}<br><span class='muted'>{_e(check.kind.value)}</span></td>"
            f"<td class='verdict' style='color:{VERDICT_COLOUR[check.verdict]}'>"
            f"{_e(check.verdict.value)}</td>"
            f"<td>{_num(check.baseline, check.unit)}</td>"
            f"<td>{_num(check.candidate, check.unit)}</td>"
            f"<td>{_num(check.threshold, check.threshold_unit)}</td><td>{_e(interval)}</td>"
            f"<td>{check.samples}</td><td>{_e(check.rule)}</td><td>{_e(check.reason)}</td></tr>"
        )
    return f"<h2>Checks and verdicts</h2><table>{header}{''.join(rows)}</table>"


def _svg(title: str, width: int, height: int, content: str) -> str:
    return (
        f"<figure style='display:inline-block;margin:0 1rem 1rem 0'>"
        f"<figcaption style='font-size:0.85rem'>{_e(title)}</figcaption>"
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"role='img' aria-label='{_e(title)}'>{content}</svg></figure>"
    )


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return _e(f"{value:.4g} {unit}".strip())


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def fetch_with_kubectl(name: str, namespace: str | None) -> dict[str, Any]:
    """The resource as `kubectl get -o json` returns it (kubectl's config and auth apply)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise click.ClickException(
            "kubectl is not on PATH: pass the resource with -f FILE "
            "(kubectl get optimizedendpoint NAME -o json > FILE)"
        )
    command = [kubectl, "get", "optimizedendpoints.optimizer.dev", name, "-o", "json"]
    if namespace:
        command += ["-n", namespace]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise click.ClickException(f"kubectl get failed: {done.stderr.strip()}")
    loaded: dict[str, Any] = json.loads(done.stdout)
    return loaded


@click.command("report")
@click.argument("name", required=False)
@click.option("-n", "--namespace", default=None, help="Namespace of the OptimizedEndpoint.")
@click.option(
    "-f",
    "--file",
    "source",
    type=click.File("r"),
    default=None,
    help="Read the resource (JSON or YAML) from FILE or - instead of the cluster.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write the HTML (default: NAME-report.html).",
)
def report_command(
    name: str | None, namespace: str | None, source: Any, output: Path | None
) -> None:
    """Write a self-contained HTML rollout report for one OptimizedEndpoint."""
    if source is not None:
        import yaml

        resource = yaml.safe_load(source.read())
    elif name:
        resource = fetch_with_kubectl(name, namespace)
    else:
        raise click.UsageError("give NAME (read through kubectl) or -f FILE")
    if not isinstance(resource, dict) or resource.get("kind") != "OptimizedEndpoint":
        raise click.ClickException("the input is not an OptimizedEndpoint object")
    target = output or Path(f"{resource.get('metadata', {}).get('name', 'endpoint')}-report.html")
    target.write_text(render_report(resource))
    click.echo(f"wrote {target}", file=sys.stderr)
