"""The rollout report: one self-contained HTML file with pictures and the verdicts in words.

Rendered from the resource itself (spec + status), so it shows exactly what the
operator measured and decided: the objective in words, baseline versus candidate
latency quantiles per concurrency level, throughput (output tokens per second of all
requests in flight together, labelled as such), the acceptance rate against its floor,
the eval delta against the allowed drop, the rollout timeline, and every check of the
last comparison with its values, threshold, rule and reason, counted by verdict (an
Inconclusive check is never called passed). The terminal's demo summary, `kubectl
describe` and /metrics read the same status.checks. Pictures are inline SVG that
scale to the page: no scripts, no network, nothing to install to read it.
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
    SearchRow,
    VariantMeasurements,
)
from endpoint_optimizer.api.checks import Check, CheckKind, Verdict
from endpoint_optimizer.evaluation import noise
from endpoint_optimizer.evaluation.slices import SLICE_PREFIX, is_slice
from endpoint_optimizer.evaluation.spot_check import CONFIGMAP_KEY, SpotCheck
from endpoint_optimizer.pipeline.search import Point, pareto_front

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


def render_report(resource: Mapping[str, Any], spot: SpotCheck | None = None) -> str:
    """The whole HTML document for one OptimizedEndpoint object (as the API returns it).

    `spot`: the spot check's paired samples (its ConfigMap's content), shown side by side.
    """
    metadata = resource.get("metadata") or {}
    spec = resource.get("spec") or {}
    status = OptimizedEndpointStatus.model_validate(resource.get("status") or {})
    name = str(metadata.get("name", "?"))
    namespace = str(metadata.get("namespace", "default"))
    sections = [
        _summary(name, namespace, spec, status),
        _search_section(status),
        _latency_section(status.baseline, status.candidate),
        _acceptance_section(status, spec),
        _eval_section(status, spec),
        _spot_check_section(status, spot),
        _bake_section(status),
        _scale_to_zero_section(status),
        _watch_section(status, spec),
        _speculation_section(status),
        _cutoff_section(status),
        _timeline_section(status),
        _checks_section(status.checks),
    ]
    body = "\n".join(section for section in sections if section)
    title = f"Rollout report: {namespace}/{name}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<style>
*, *::before, *::after {{ box-sizing: border-box; }}
body {{ font-family: system-ui, sans-serif; margin: 2rem auto; padding: 0 1rem;
       max-width: 1100px; color: #222; }}
h1, .id {{ overflow-wrap: anywhere; }} h1 {{ font-size: 1.5rem; }}
h2 {{ font-size: 1.2rem; margin-top: 2rem; }}
table {{ border-collapse: collapse; width: 100%; font-size: 0.85rem; table-layout: auto; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 4px 6px; text-align: left; vertical-align: top;
         overflow-wrap: break-word; }}
table.checks td:first-child {{ min-width: 8rem; }}
table.checks td:nth-child(3) {{ min-width: 10rem; }}
.verdict {{ font-weight: 600; }} .muted {{ color: #777; }}
.legend span {{ display: inline-block; margin-right: 1rem; }}
.swatch {{ display: inline-block; width: 10px; height: 10px; margin-right: 4px; }}
figure {{ display: inline-block; margin: 0 1rem 1rem 0; max-width: 100%; vertical-align: top; }}
figure svg {{ max-width: 100%; height: auto; display: block; }}
figcaption {{ font-size: 0.85rem; }}
ol.timeline {{ font-size: 0.85rem; padding-left: 1.5rem; }}
ol.timeline li {{ margin-bottom: 0.2rem; overflow-wrap: anywhere; }}
.wide {{ overflow-x: auto; }}
</style></head><body>
<h1>{_e(title)}</h1>
{body}
</body></html>
"""


def _summary(
    name: str, namespace: str, spec: Mapping[str, Any], status: OptimizedEndpointStatus
) -> str:
    gain = (
        f"{status.objective_gain * 100:+.1f} % (the objective check's point estimate at the "
        "concurrency it is judged at; positive is better)"
        if status.objective_gain is not None
        else "not measured"
    )
    techniques = ", ".join(status.candidate_techniques) or "none recorded"
    rows = [
        ("Phase", status.phase.value + (" (paused)" if status.paused else "")),
        ("Outcome in words", status.message or _checks_in_words(status, spec)),
        ("Checks", _checks_in_words(status, spec)),
        ("Objective", objective_in_words(spec, status.checks)),
        ("Objective gain", gain),
        ("Candidate techniques", techniques),
        ("Measured on", _served_by(status)),
        ("SageMaker endpoint", status.sagemaker.endpoint_name or str(spec.get("endpointName", ""))),
        ("Serving endpoint config", status.sagemaker.serving_endpoint_config or "-"),
    ]
    if status.rollout.rollback_reason is not None:
        rows.append(("Rollback reason", status.rollout.rollback_reason.value))
    return _summary_table(rows)


_VERDICT_WORDS = {
    Verdict.PASS: "passed",
    Verdict.FAIL: "failed",
    Verdict.INCONCLUSIVE: "inconclusive",
    Verdict.NO_IMPROVEMENT: "no improvement",
}


def verdict_counts(checks: Sequence[Check]) -> str:
    """`3 passed, 2 inconclusive, 1 reported, not gating`: each gating verdict by its own
    name, and how many checks are reported without gating."""
    return counted_verdicts([(c.verdict.value, c.gating) for c in checks])


def counted_verdicts(verdicts: Sequence[tuple[str, bool]]) -> str:
    """`verdict_counts` over (verdict, gating) pairs, as status stores them."""
    counts = {
        v.value: sum(1 for got, g in verdicts if g and got == v.value) for v in _VERDICT_WORDS
    }
    words = [f"{n} {_VERDICT_WORDS[Verdict(v)]}" for v, n in counts.items() if n]
    if reported := sum(1 for _, g in verdicts if not g):
        words.append(f"{reported} reported, not gating")
    return ", ".join(words) or "no checks"


def _checks_in_words(status: OptimizedEndpointStatus, spec: Mapping[str, Any]) -> str:
    """What the last comparison's checks said, and why the rollout went on or not."""
    checks = status.checks
    if not checks:
        return "no checks yet"
    step = status.rollout.compared_step
    steps = ((spec.get("rollout") or {}).get("steps")) or []
    where = f" at rollout step {step + 1} of {len(steps)}" if step is not None and steps else ""
    text = f"{verdict_counts(checks)}{where}"
    blocking = [
        c for c in checks if c.gating and c.verdict in (Verdict.FAIL, Verdict.NO_IMPROVEMENT)
    ]
    if blocking:
        text += ": " + "; ".join(f"{c.name}: {c.reason}" for c in blocking[:5])
    undecided = [c.name for c in checks if c.gating and c.verdict is Verdict.INCONCLUSIVE]
    if undecided:
        policy = ((spec.get("rollout") or {}).get("analysis") or {}).get("onNoData", "pause")
        effect = {
            "pass": "onNoData: pass let the rollout go on without them",
            "pause": "onNoData: pause holds the rollout until they decide or a person approves",
            "fail": "onNoData: fail counts them as failures",
        }.get(str(policy), f"onNoData: {policy}")
        text += f". Undecided: {', '.join(undecided)} ({effect})"
    return text


def objective_in_words(spec: Mapping[str, Any], checks: Sequence[Check] = ()) -> str:
    """The spec's objective as a sentence, with the statistic the objective check used."""
    raw = spec.get("objective")
    objective = raw if isinstance(raw, Mapping) else {"metric": raw} if raw else {}
    metric = str(objective.get("metric") or "latency")
    least = float(objective.get("minImprovement", 0.05))
    levels = [int(c) for c in ((spec.get("benchmark") or {}).get("concurrency") or [1, 8])]
    at = objective.get("concurrency") or max(levels)
    lower = {
        "ttftP99": "a p99 time to first token",
        "itlP50": "a p50 inter-token latency",
        "e2eP50": "a p50 end-to-end latency",
        "costPerMillionTokens": "an instance cost per million output tokens",
    }
    if metric == "throughput":
        what = (
            f"throughput: the candidate must serve at least {least:.0%} more output tokens per "
            "second than the baseline"
        )
    elif metric in lower:
        what = (
            f"{metric}: the candidate must have {lower[metric]} at least {least:.0%} lower "
            "than the baseline's"
        )
    else:
        what = f"latency: the candidate must be at least {least:.0%} faster than the baseline"
    text = f"{what}, at concurrency {at}, with confidence"
    rule = next((c.rule for c in checks if c.kind is CheckKind.OBJECTIVE and c.rule), "")
    return f"{text} (rule: {rule})" if rule else text


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
        "<h2>Latency quantiles and throughput, baseline versus candidate</h2>",
        _legend(),
        "<p class='muted'>Each latency panel shows the measured p50, p90 and p99 of one metric "
        "at one concurrency level (milliseconds; lower is better). Throughput is output "
        "tokens per second of all requests in flight together at that concurrency "
        "(higher is better), so it grows with concurrency; one request's own speed is "
        "about 1000 / inter-token latency p50 tokens per second.</p>",
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
        panels.append(
            _throughput_bars(
                f"Throughput at concurrency {concurrency}: output tokens/s of "
                + (
                    f"{concurrency} requests in flight together"
                    if concurrency > 1
                    else "1 request at a time"
                ),
                throughput,
            )
        )
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
            f"<title>{role}: {value:.1f} output tokens/s, all requests together</title></rect>"
            f"<text x='{x + 25}' y='{y - 3:.1f}' font-size='9' text-anchor='middle'>"
            f"{value:.0f} tok/s</text>"
            f"<text x='{x + 25}' y='{height - 6}' font-size='10' text-anchor='middle'>{role}</text>"
        )
    return _svg(title, width, height, "".join(shapes))


def _gauge(
    title: str, rows: Sequence[tuple[str, float, str]], mark: float | None, mark_label: str
) -> str:
    """Horizontal bars on a 0..1 scale with an optional vertical mark (a floor or a limit)."""
    width, row_height = 460, 28
    height = 30 + row_height * len(rows)
    scale = width - 140
    shapes = []
    for index, (label, value, colour) in enumerate(rows):
        y = 10 + index * row_height
        end = 110 + scale * max(0.0, min(1.0, value))
        # The value sits after its bar, or inside it when the bar reaches the right edge.
        value_text = (
            f"<text x='{end - 4:.1f}' y='{y + 14}' font-size='11' text-anchor='end' "
            f"fill='#fff'>{value:.3f}</text>"
            if end > width - 40
            else f"<text x='{end + 4:.1f}' y='{y + 14}' font-size='11'>{value:.3f}</text>"
        )
        shapes.append(
            f"<text x='0' y='{y + 14}' font-size='11'>{_e(label)}</text>"
            f"<rect x='110' y='{y}' width='{end - 110:.1f}' height='18' fill='{colour}'/>"
            + value_text
        )
    if mark is not None:
        x = 110 + scale * max(0.0, min(1.0, mark))
        # The label sits on the side of the line with room for it, never past the edge.
        anchor, text_x = ("end", x - 3) if x > width / 2 else ("start", x + 3)
        shapes.append(
            f"<line x1='{x:.1f}' x2='{x:.1f}' y1='4' y2='{height - 16}' stroke='#c62828' "
            f"stroke-dasharray='4 3'/><text x='{text_x:.1f}' y='{height - 4}' font-size='10' "
            f"text-anchor='{anchor}' fill='#c62828'>{_e(mark_label)}</text>"
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
    if status.evaluation_waiver:
        return (
            "<h2>Evaluation</h2><p><strong>Waived</strong>: quality was not judged "
            f"(spec.evaluation.waiver: {_e(status.evaluation_waiver)}).</p>"
        )
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
    gauge = _gauge(
        "Eval score (and refusal rate), 0 to 1",
        rows,
        max(0.0, lowest),
        f"lowest allowed score {max(0.0, lowest):.3f}",
    )
    items = min(baseline.eval_items, candidate.eval_items) or baseline.eval_items
    return (
        f"<h2>Evaluation</h2>{gauge}<p>Delta {delta * 100:+.2f} points on {items} paired "
        f"items; the candidate may drop at most {allowed * 100:.1f} points.</p>"
        + (
            f"<p>{_e(noise.note(status.eval_noise, allowed))}.</p>"
            if status.eval_noise is not None
            else ""
        )
        + _slices_table(status.checks)
    )


def _slices_table(checks: Sequence[Check]) -> str:
    """Each item class judged on its own (evaluation/slices.py), failures first."""
    slices = [c for c in checks if is_slice(c)]
    if not slices:
        return ""
    order = {Verdict.FAIL: 0, Verdict.INCONCLUSIVE: 1}
    rows = "".join(
        f"<tr><td>{_e(c.name.removeprefix(SLICE_PREFIX))}</td><td>{_e(c.verdict.value)}</td>"
        f"<td>{c.samples}</td><td>{_num(c.baseline, '')}</td><td>{_num(c.candidate, '')}</td>"
        f"<td>{_e(c.reason)}</td></tr>"
        for c in sorted(slices, key=lambda c: (order.get(c.verdict, 2), c.name))
    )
    return (
        "<h3>By class</h3><table><tr><th>class</th><th>verdict</th><th>items</th>"
        f"<th>baseline</th><th>candidate</th><th>why</th></tr>{rows}</table>"
        f"<p class='muted'>{_e(slices[0].rule)}</p>"
    )


def _spot_check_section(status: OptimizedEndpointStatus, spot: SpotCheck | None) -> str:
    """The spot check: the reviewer's decision, and the paired answers side by side."""
    written = status.spot_check
    if written is None:
        return ""
    decision = {True: "approved", False: "rejected", None: "waiting for a person"}[written.approved]
    head = (
        "<h2>Spot check</h2>"
        f"<p>{written.samples} paired samples in ConfigMap <code>{_e(written.config_map)}</code>"
        f": {_e(decision)}.</p>"
    )
    if spot is None:
        return head + "<p class='muted'>The samples were not read with this report.</p>"
    rows = "".join(
        f"<tr><td>{number}. {_e(s.item_id)}<br><span class='muted'>{_e(s.prompt_class)}</span>"
        f"</td><td>{_e(s.prompt)}</td><td>{_e(s.baseline_answer)}</td>"
        f"<td>{_e(s.candidate_answer)}</td><td>{_e(s.reference or '')}</td></tr>"
        for number, s in enumerate(spot.samples, start=1)
    )
    return (
        head
        + f"<p class='muted'>From {_e(', '.join(spot.classes))}, seed {spot.seed}.</p>"
        + "<table class='spot'><tr><th>Item</th><th>Prompt</th><th>Baseline</th>"
        + f"<th>Candidate</th><th>Reference</th></tr>{rows}</table>"
    )


def _bake_section(status: OptimizedEndpointStatus) -> str:
    """The bake after the promotion: until when, against what, how it ended."""
    bake = status.rollout.bake
    if bake is None:
        return ""
    ref = bake.reference
    against = []
    if ref.probe_ttft_s:
        ttft = sorted(ref.probe_ttft_s)[len(ref.probe_ttft_s) // 2]
        against.append(f"probe TTFT median {_num(ttft * 1000, 'ms')} ({len(ref.probe_ttft_s)})")
    if ref.latency_mean_s is not None:
        against.append(f"CloudWatch average {_num(ref.latency_mean_s * 1000, 'ms')}")
    if ref.latency_p99_s is not None:
        against.append(f"p99 {_num(ref.latency_p99_s * 1000, 'ms')}")
    if ref.invocations:
        against.append(f"5XX {ref.errors_5xx}/{ref.invocations}")
    ended = (
        f"{bake.outcome.value} at {bake.ended_at:%Y-%m-%d %H:%M:%S} UTC"
        if bake.outcome is not None and bake.ended_at is not None
        else "under way"
    )
    rows = [
        ("Bake", ended),
        ("Until", f"{bake.until:%Y-%m-%d %H:%M:%S} UTC"),
        (
            "Baseline's last live figures",
            (", ".join(against) or "none")
            + (f" (interval ending {ref.interval_end:%H:%M:%S})" if ref.interval_end else ""),
        ),
        (
            "Intervals judged",
            f"{bake.intervals} in {bake.block} evidence block(s); the current block's "
            f"decision {bake.judge.decision.value}",
        ),
    ]
    return (
        "<h2>Bake after the promotion</h2>"
        "<p class='muted'>The live judge kept comparing the promoted variant with the "
        "baseline's last measured live figures; a confident regression rolls back to the "
        "retained baseline.</p>" + _summary_table(rows)
    )


def _scale_to_zero_section(status: OptimizedEndpointStatus) -> str:
    """spec.inferenceComponent: the promoted copies always-on versus scaled to zero."""
    stz = status.scale_to_zero
    if stz is None:
        return ""
    parts = ", ".join(p.value for p in stz.cold_start_measured) or "nothing"
    cold = _num(stz.cold_start_seconds, "s")
    if stz.cold_start_seconds is not None and "instanceProvision" not in parts:
        cold += (
            " (a lower bound: the candidate needed no new instance, so instance "
            "provisioning was not observed)"
        )
    rows = [("Cold start, measured", f"{cold}; parts measured: {parts}")]
    if stz.measured_at is None:
        rows.append(
            (
                "Traffic",
                "not read: it is read once, on the wake-up that sees the promotion done "
                "(before it, or that read failed: the operator's log says why)",
            )
        )
    else:
        rows += [
            (
                "Traffic window",
                f"{stz.window_minutes} min from {stz.window_start:%Y-%m-%d %H:%M:%S} UTC, "
                f"{stz.requests_in_window:g} invocations (CloudWatch, per minute)",
            ),
            ("Instances held by the promoted copies", f"{stz.instances}"),
            ("Always-on", f"{stz.always_on_instance_hours_per_day:g} instance-hours/day"),
            (
                "Scaled to zero",
                f"{stz.scale_to_zero_instance_hours_per_day:g} instance-hours/day, instances "
                f"released after {stz.idle_release_minutes} idle min",
            ),
            (
                "Cold starts",
                f"{stz.cold_starts_per_day:g}/day, meeting "
                f"{stz.requests_meeting_cold_start_per_day:g} requests/day",
            ),
        ]
    return (
        "<h2>Scale to zero, compared</h2>"
        "<p class='muted'>The promoted inference component's instance-hours always-on "
        "versus with managed instance scaling to zero, at the traffic measured during the "
        "rollout (the window repeated over the day).</p>" + _summary_table(rows)
    )


def _watch_section(status: OptimizedEndpointStatus, spec: dict[str, Any]) -> str:
    """After a clean bake: the promoted variant's live acceptance, watched against the
    floor while the baseline is retained (phases/watch.py)."""
    watch = status.rollout.acceptance_watch
    if watch is None:
        return ""
    floor = ((spec.get("optimizations") or {}).get("speculativeDecoding") or {}).get(
        "minAcceptanceRate"
    )
    policy = (spec.get("rollout") or {}).get("onAcceptanceDrift", "rollback")
    state = (
        f"{watch.outcome.value if watch.outcome else 'ended'} at "
        f"{watch.ended_at:%Y-%m-%d %H:%M:%S} UTC"
        if watch.ended_at is not None
        else "watching"
    )
    if watch.alerted_at is not None:
        state += f"; drift announced at {watch.alerted_at:%Y-%m-%d %H:%M:%S} UTC (alert)"
    found = watch.candidate_acceptance

    def pct(value: object) -> str:
        return _num(float(value) * 100, "%") if isinstance(value, int | float) else "-"

    newest = (
        f"{pct(found.rate)} of {found.drafted} drafted tokens "
        f"(bounds {pct(found.low)} to {pct(found.high)})"
        if found is not None
        else "no drafted tokens read yet"
    )
    rows = [
        ("Watch", state),
        ("Floor", pct(floor) if floor is not None else "none"),
        ("Newest interval", newest),
        (
            "Intervals judged",
            f"{watch.intervals}; {watch.acceptance_below_floor} confidently below the floor "
            f"in evidence block {watch.block}",
        ),
        ("On drift", f"rollout.onAcceptanceDrift: {policy}"),
    ]
    return (
        "<h2>Acceptance watch after the bake</h2>"
        "<p class='muted'>While the baseline is retained, the promoted variant's live "
        "acceptance (from its container's speculation log lines) is judged against the "
        "floor; a confident drift applies rollout.onAcceptanceDrift once.</p>"
        + _summary_table(rows)
    )


def _cutoff_section(status: OptimizedEndpointStatus) -> str:
    """speculativeDecoding: the concurrency above which speculation stops winning."""
    found = status.rollout.speculation_cutoff
    if found is None:
        return ""
    levels = ", ".join(
        f"c{lv.concurrency} {lv.outcome.value}"
        + (
            f" [{lv.ratio_low:.3g}, {lv.ratio_high:.3g}]"
            if lv.ratio_low is not None and lv.ratio_high is not None
            else ""
        )
        for lv in found.levels
    )
    chosen = (
        f"c{found.concurrency} ({found.batch_size} running requests per instance)"
        if found.concurrency is not None
        else "none"
    )
    rows = [
        ("Cut-off", chosen),
        ("Why", found.reason),
        (f"Per level ({found.metric}, candidate/baseline)", levels or "none judged"),
        ("Engine switch", found.switch),
    ]
    if found.model:
        serving = (
            f"since {found.serving_at:%Y-%m-%d %H:%M:%S} UTC"
            if found.serving_at is not None
            else "update under way"
        )
        rows.append(("Re-made candidate", f"{found.model} on {found.endpoint_config} ({serving})"))
    return (
        "<h2>Where speculation pays</h2>"
        "<p class='muted'>From the candidate's comparison at each benchmark concurrency: "
        "Wins or Loses when the judge's whole interval is on one side of 1.</p>"
        + _summary_table(rows)
    )


def _speculation_section(status: OptimizedEndpointStatus) -> str:
    """onAcceptanceDrift: disableSpeculation: when and why the twin took the traffic."""
    switch = status.rollout.speculation_disabled
    if switch is None:
        return ""
    serving = (
        f"since {switch.serving_at:%Y-%m-%d %H:%M:%S} UTC"
        if switch.serving_at is not None
        else "update under way"
    )
    rows = [
        ("Decided", f"{switch.at:%Y-%m-%d %H:%M:%S} UTC, during the {switch.during.value}"),
        ("Why", switch.reason),
        ("Twin", f"model {switch.model} on {switch.endpoint_config} ({serving})"),
    ]
    return (
        "<h2>Speculation switched off</h2>"
        "<p class='muted'>Live acceptance fell below the floor with confidence; the "
        "candidate's traffic moved to its twin: the same weights and settings, speculation "
        "off (rollout.onAcceptanceDrift: disableSpeculation).</p>" + _summary_table(rows)
    )


def _timeline_section(status: OptimizedEndpointStatus) -> str:
    """Dots on a time axis, and the decisions as a list that wraps at any width."""
    if not status.history:
        return ""
    entries = sorted(status.history, key=lambda entry: entry.time)
    start, end = entries[0].time, entries[-1].time
    span = max((end - start).total_seconds(), 1.0)
    width, height = 1000, 50
    shapes = [f"<line x1='10' x2='{width - 10}' y1='22' y2='22' stroke='#999'/>"]
    for index, entry in enumerate(entries):
        x = 10 + (width - 20) * (entry.time - start).total_seconds() / span
        shapes.append(
            f"<circle cx='{x:.1f}' cy='22' r='5' fill='{CANDIDATE_COLOUR}'>"
            f"<title>{index + 1}. {_e(entry.event)}</title></circle>"
        )
    shapes.append("<text x='10' y='42' font-size='11'>+0 s</text>")
    shapes.append(
        f"<text x='{width - 10}' y='42' font-size='11' text-anchor='end'>+{span:.0f} s</text>"
    )
    items = "".join(
        f"<li><b>+{(entry.time - start).total_seconds():.0f} s</b> "
        f"{_e(entry.phase.value)}: {_e(entry.event)}"
        + (f" — {_e(entry.message)}" if entry.message else "")
        + "</li>"
        for entry in entries
    )
    return (
        "<h2>Rollout timeline</h2>"
        + _svg("Decisions in time order (seconds since the first)", width, height, "".join(shapes))
        + f"<ol class='timeline'>{items}</ol>"
    )


# Where each search verdict is drawn, and in what colour.
_SEARCH_COLOURS = {
    "Kept": "#2e7d32",
    "Beaten": "#1565c0",
    "NoGain": "#9e9e9e",
    "GateFailed": "#c62828",
    "": "#f9a825",
}


def _search_section(status: OptimizedEndpointStatus) -> str:
    """spec.search: every candidate with what it was built on, measured and decided, the
    winning path with each technique's share, and latency against throughput with the
    Pareto front (cost as a third axis where a price is known) marked."""
    search = status.search
    if search is None:
        return ""
    head = (
        "<tr><th>candidate</th><th>rung</th><th>built on</th><th>verdict</th>"
        "<th>gain</th><th>tok/s</th><th>e2e p50</th><th>eval &Delta;</th><th>acceptance</th>"
        "<th>to InService</th><th>peak GPU mem</th><th>instance-h</th><th>$ / 1M tok</th>"
        "<th>why</th></tr>"
    )
    rows = []
    for r in search.rows:
        gain = "-" if r.gain is None else f"{100 * r.gain:+.1f}&nbsp;%"
        if r.gain_low is not None and r.gain is not None:
            gain += f"<br><span class='muted'>&ge;&nbsp;{100 * r.gain_low:+.1f}&nbsp;%</span>"
        if len(r.levels) > 1:
            per_level = ", ".join(
                f"c{lg.concurrency} {'-' if lg.gain is None else f'{100 * lg.gain:+.0f}&nbsp;%'}"
                for lg in r.levels
            )
            gain += f"<br><span class='muted'>{per_level}</span>"
        delta = "-" if r.eval_delta is None else f"{100 * r.eval_delta:+.2f} pts"
        if r.slice_deltas:
            per_class = ", ".join(f"{_e(k)} {100 * v:+.1f}" for k, v in r.slice_deltas.items())
            delta += f"<br><span class='muted'>{per_class}</span>"
        accepted = "-" if r.acceptance_rate is None else f"{r.acceptance_rate:.2f}"
        rows.append(
            "<tr>"
            f"<td>{_e(r.name)}</td><td>{_e(r.rung)}</td>"
            f"<td>{_e(' + '.join(r.base) or 'baseline')}</td>"
            f"<td class='verdict'>{_e(r.verdict or 'measuring')}</td><td>{gain}</td>"
            f"<td>{_num(r.tokens_per_second, '')}</td><td>{_num(r.latency_ms, 'ms')}</td>"
            f"<td>{delta}</td><td>{accepted}</td><td>{_num(r.in_service_seconds, 's')}</td>"
            f"<td>{_num(r.peak_gpu_memory_percent, '%')}</td>"
            f"<td>{_num(r.instance_hours, '')}</td><td>{_num(r.cost_per_million_tokens, '')}</td>"
            f"<td>{_e(r.why)}</td></tr>"
        )
    if search.done is None:
        where = "running"
    elif search.best:
        shares = ", ".join(
            f"{name} {100 * search.shares.get(name, 0.0):.0f} %" for name in search.best
        )
        where = f"the winner is {' + '.join(search.best)} (share of the gain: {shares})"
    else:
        where = "nothing paid: the baseline stays"
    price = search.price
    if price is not None:
        dated = f", effective {price.effective[:10]}" if price.effective else ""
        priced = (
            f"Costs at ${price.usd_per_hour:.4g} per {price.instance_type or 'instance'}-hour "
            f"({price.source}{dated})."
        )
    else:
        priced = f"No cost: {search.price_problem or 'no price known'}."
    summary = (
        f"<p>{_e(where)}. {search.candidates} candidates measured, "
        f"{search.instance_hours:.3g} instance-hours. {_e(search.done or '')}</p>"
        f"<p class='muted'>{_e(priced)}</p>"
    )
    return (
        "<h2>Search</h2>"
        + summary
        + f"<div class='wide'><table class='checks'>{head}{''.join(rows)}</table></div>"
        + _pareto_plot(search.rows, search.best)
    )


def _pareto_plot(rows: Sequence[SearchRow], best: Sequence[str]) -> str:
    """Latency against throughput for every measured candidate. The Pareto front is drawn
    among the candidates that passed every gate (one that failed a gate is no option,
    however fast); the winner is labelled."""
    measured = [r for r in rows if r.latency_ms is not None and r.tokens_per_second is not None]
    if not measured:
        return ""
    points = {
        r.name: Point(r.latency_ms or 0.0, r.tokens_per_second or 0.0, r.cost_per_million_tokens)
        for r in measured
    }
    front = pareto_front({r.name: points[r.name] for r in measured if r.gates})
    width, height, pad = 440, 270, 52
    xs = [p.latency_ms for p in points.values()]
    ys = [p.tokens_per_second for p in points.values()]
    x_low, x_high = min(xs) * 0.9, max(xs) * 1.1
    y_low, y_high = min(ys) * 0.9, max(ys) * 1.1
    bottom = height - pad + 10

    def x(value: float) -> float:
        return pad + (width - pad - 20) * (value - x_low) / ((x_high - x_low) or 1.0)

    def y(value: float) -> float:
        return bottom - (height - pad - 10) * (value - y_low) / ((y_high - y_low) or 1.0)

    shapes = [
        f"<line x1='{pad}' y1='{bottom}' x2='{width - 10}' y2='{bottom}' stroke='#999'/>",
        f"<line x1='{pad}' y1='10' x2='{pad}' y2='{bottom}' stroke='#999'/>",
        f"<text x='{pad}' y='{bottom + 14}' font-size='9'>{x_low:.0f}</text>",
        f"<text x='{width - 10}' y='{bottom + 14}' font-size='9' text-anchor='end'>"
        f"{x_high:.0f}</text>",
        f"<text x='{pad - 4}' y='{bottom}' font-size='9' text-anchor='end'>{y_low:.0f}</text>",
        f"<text x='{pad - 4}' y='18' font-size='9' text-anchor='end'>{y_high:.0f}</text>",
        f"<text x='{(width + pad) / 2:.0f}' y='{height - 6}' font-size='10' "
        "text-anchor='middle'>e2e latency p50, ms (lower is better)</text>",
        f"<text x='12' y='{bottom / 2:.0f}' font-size='10' text-anchor='middle' "
        f"transform='rotate(-90 12 {bottom / 2:.0f})'>output tok/s (higher is better)</text>",
    ]
    for r in measured:
        p = points[r.name]
        cx, cy = x(p.latency_ms), y(p.tokens_per_second)
        colour = _SEARCH_COLOURS.get(r.verdict, "#616161")
        ring = (
            f"<circle cx='{cx:.1f}' cy='{cy:.1f}' r='9' fill='none' stroke='#000'/>"
            if r.name in front
            else ""
        )
        cost = "" if p.cost is None else f", ${p.cost:.3g} per 1M tokens"
        label = f"{r.name} (winner)" if r.name in best else r.name
        shapes.append(
            f"{ring}<circle cx='{cx:.1f}' cy='{cy:.1f}' r='5' fill='{colour}'>"
            f"<title>{_e(r.name)} ({_e(r.verdict or 'measuring')}): {p.latency_ms:.0f} ms, "
            f"{p.tokens_per_second:.0f} tok/s{_e(cost)}</title></circle>"
            f"<text x='{cx + 8:.1f}' y='{cy - 6:.1f}' font-size='9'>{_e(label)}</text>"
        )
    legend = " ".join(
        f"<span><span class='swatch' style='background:{colour}'></span>{_e(v or 'measuring')}"
        "</span>"
        for v, colour in _SEARCH_COLOURS.items()
    )
    return (
        _svg(
            "Candidates: latency against throughput; ringed: on the Pareto front of those "
            "that passed every gate (cost is a third axis where a price is known)",
            width,
            height,
            "".join(shapes),
        )
        + f"<p class='legend'>{legend}</p>"
    )


def _checks_section(checks: Sequence[Check]) -> str:
    if not checks:
        return "<h2>Checks</h2><p class='muted'>No checks yet.</p>"
    header = "<tr><th>check</th><th>verdict</th><th>measured</th><th>why</th></tr>"
    rows = []
    for check in checks:
        measured = [
            f"baseline {_num(check.baseline, check.unit)}",
            f"candidate {_num(check.candidate, check.unit)}",
            f"threshold {_num(check.threshold, check.threshold_unit)}",
        ]
        if check.interval_low is not None and check.interval_high is not None:
            measured.append(f"interval [{check.interval_low:.4g}, {check.interval_high:.4g}]")
        measured.append(f"n = {check.samples}")
        rows.append(
            f"<tr><td class='id'>{_e(check.name)}<br><span class='muted'>"
            f"{_e(check.kind.value)}</span></td>"
            f"<td class='verdict' style='color:{VERDICT_COLOUR[check.verdict]}'>"
            f"{_e(check.verdict.value)}</td>"
            f"<td>{'<br>'.join(_e(m) for m in measured)}</td>"
            f"<td>{_e(check.reason)}"
            + (f"<br><span class='muted'>rule: {_e(check.rule)}</span>" if check.rule else "")
            + "</td></tr>"
        )
    return (
        f"<h2>Checks and verdicts</h2><p>{_e(verdict_counts(checks))}.</p>"
        f"<table class='checks'>{header}{''.join(rows)}</table>"
    )


def _svg(title: str, width: int, height: int, content: str) -> str:
    # viewBox: the picture scales down with the page instead of running past its edge.
    return (
        f"<figure style='width:{width}px'>"
        f"<figcaption>{_e(title)}</figcaption>"
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' "
        f"width='{width}' height='{height}' role='img' aria-label='{_e(title)}'>{content}</svg>"
        "</figure>"
    )


def _summary_table(rows: list[tuple[str, str]]) -> str:
    """A two-column table of labels and values, escaped."""
    cells = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<table class='summary'>{cells}</table>"


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.4g} {unit}".strip()


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


def fetch_spot_check(resource: Mapping[str, Any]) -> SpotCheck | None:
    """The spot check's samples from the ConfigMap status.spotCheck names (kubectl), if any."""
    written = (resource.get("status") or {}).get("spotCheck") or {}
    name = written.get("configMap")
    kubectl = shutil.which("kubectl")
    if not name or kubectl is None:
        return None
    namespace = str((resource.get("metadata") or {}).get("namespace", "default"))
    command = [kubectl, "get", "configmap", str(name), "-n", namespace, "-o", "json"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        click.echo(f"spot check samples not read: {done.stderr.strip()}", file=sys.stderr)
        return None
    text = (json.loads(done.stdout).get("data") or {}).get(CONFIGMAP_KEY)
    return SpotCheck.model_validate_json(text) if text else None


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
    spot = None
    if source is not None:
        import yaml

        resource = yaml.safe_load(source.read())
    elif name:
        resource = fetch_with_kubectl(name, namespace)
        spot = fetch_spot_check(resource)
    else:
        raise click.UsageError("give NAME (read through kubectl) or -f FILE")
    if not isinstance(resource, dict) or resource.get("kind") != "OptimizedEndpoint":
        raise click.ClickException("the input is not an OptimizedEndpoint object")
    target = output or Path(f"{resource.get('metadata', {}).get('name', 'endpoint')}-report.html")
    target.write_text(render_report(resource, spot))
    click.echo(f"wrote {target}", file=sys.stderr)
