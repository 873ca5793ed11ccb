"""Which engine served a response, as the container labels it in its CustomAttributes.

SageMaker passes a container's `X-Amzn-SageMaker-Custom-Attributes` response header
back to the caller unchanged, as `CustomAttributes` of InvokeEndpoint and
InvokeEndpointWithResponseStream. The sandbox sets it on every response:
`engine=real`, `engine=synthetic`, or `engine=synthetic; fallback=<reason>` when the
real model cannot express a technique (FP8 on a CPU) and the synthetic effect stands
in; `engine=real; omitted=<what>` when the real model serves without a speed-only
step (compilation). A real container that sets nothing gives no label, and nothing
is claimed.

The attribute is a `key=value; key=value` list by SageMaker's convention; only the
two keys below are read, so anything else a container puts there is ignored and
never stored.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

ENGINE_KEY = "engine"
FALLBACK_KEY = "fallback"
OMITTED_KEY = "omitted"
REAL = "real"
SYNTHETIC = "synthetic"
MIXED = "mixed"
# CustomAttributes is at most 1024 ASCII characters (botocore's service model).
MAX_ATTRIBUTES = 1024
_MAX_NOTE = 480  # two notes and the engine stay within MAX_ATTRIBUTES


@dataclass(frozen=True)
class ServedBy:
    engine: str
    fallback: str = ""  # why the synthetic effect stands in for the real model
    omitted: str = ""  # what the engine serves without

    def header(self) -> str:
        """The CustomAttributes value: ASCII, `;` and `=` kept out of the reason."""
        value = f"{ENGINE_KEY}={_clean(self.engine)}"
        for key, text in (
            (FALLBACK_KEY, _clean(self.fallback)),
            (OMITTED_KEY, _clean(self.omitted)),
        ):
            if text:
                value += f"; {key}={text[:_MAX_NOTE]}"
        return value[:MAX_ATTRIBUTES]


@dataclass(frozen=True)
class EngineSummary:
    """One variant's responses taken together: `engine` is real, synthetic, mixed or ''."""

    engine: str = ""
    note: str = ""


def parse_served_by(custom_attributes: str | None) -> ServedBy | None:
    """The label in a response's CustomAttributes, or None when the container set none."""
    if not custom_attributes:
        return None
    fields: dict[str, str] = {}
    for part in custom_attributes.split(";"):
        key, sep, value = part.partition("=")
        if sep:
            fields[key.strip().lower()] = value.strip()
    engine = fields.get(ENGINE_KEY, "").lower()
    if not engine:
        return None
    return ServedBy(
        engine, fields.get(FALLBACK_KEY, "")[:_MAX_NOTE], fields.get(OMITTED_KEY, "")[:_MAX_NOTE]
    )


def summarize(labels: Iterable[ServedBy | None]) -> EngineSummary:
    """The engine behind a variant's responses and, where any was synthetic, why.

    Unlabelled responses say nothing either way; a variant whose labelled responses
    came from two engines is `mixed`, with the synthetic share in the note.
    """
    seen = [label for label in labels if label is not None]
    if not seen:
        return EngineSummary()
    engines = Counter(label.engine for label in seen)
    reasons = sorted({label.fallback for label in seen if label.fallback})
    reasons += sorted({f"not modelled: {label.omitted}" for label in seen if label.omitted})
    note = "; ".join(reasons)
    if len(engines) == 1:
        return EngineSummary(next(iter(engines)), note[:_MAX_NOTE])
    synthetic = engines.get(SYNTHETIC, 0)
    share = f"{synthetic} of {len(seen)} responses synthetic"
    return EngineSummary(MIXED, (f"{share}: {note}" if note else share)[:_MAX_NOTE])


def combine(first: EngineSummary, second: EngineSummary) -> EngineSummary:
    """Two summaries of one variant (benchmark and eval) as one."""
    if not first.engine:
        return second
    if not second.engine:
        return first
    engine = first.engine if first.engine == second.engine else MIXED
    notes = [n for n in dict.fromkeys((first.note, second.note)) if n]
    return EngineSummary(engine, "; ".join(notes)[:_MAX_NOTE])


def _clean(text: str) -> str:
    # A header value: printable ASCII on one line, and no separator that could forge a key.
    ascii_text = text.encode("ascii", "replace").decode("ascii")
    printable = "".join(c if c.isprintable() else " " for c in ascii_text)
    return " ".join(printable.replace(";", ",").replace("=", "-").split())
