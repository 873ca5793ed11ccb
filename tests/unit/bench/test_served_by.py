"""The engine label in CustomAttributes: written by the sandbox, read by the clients."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from endpoint_optimizer.bench.served_by import (
    MAX_ATTRIBUTES,
    MIXED,
    REAL,
    SYNTHETIC,
    EngineSummary,
    ServedBy,
    combine,
    parse_served_by,
    summarize,
)


def test_a_container_that_sets_nothing_claims_nothing() -> None:
    assert parse_served_by(None) is None
    assert parse_served_by("") is None
    assert parse_served_by("trace=abc; user=42") is None  # someone else's attributes
    assert summarize([None, None]) == EngineSummary()


def test_engine_and_fallback_are_read_among_other_attributes() -> None:
    served = parse_served_by("trace=1; Engine=Synthetic ; fallback=fp8 needs FP8 tensor cores")
    assert served == ServedBy(SYNTHETIC, "fp8 needs FP8 tensor cores")
    assert parse_served_by("engine=real; omitted=compilation") == ServedBy(REAL, "", "compilation")


@given(
    engine=st.sampled_from([REAL, SYNTHETIC]),
    reason=st.text(max_size=300),
    omitted=st.text(max_size=300),
)
def test_the_header_is_one_printable_ascii_line_that_reads_back(
    engine: str, reason: str, omitted: str
) -> None:
    header = ServedBy(engine, reason, omitted).header()
    assert header.isascii() and header.isprintable() and len(header) <= MAX_ATTRIBUTES
    parsed = parse_served_by(header)
    assert parsed is not None and parsed.engine == engine
    # Separators inside a reason cannot forge another key: the label reads back as written.
    assert parsed.header() == header
    assert ";" not in parsed.fallback and ";" not in parsed.omitted


def test_one_engine_throughout_keeps_its_reasons() -> None:
    fp8 = ServedBy(SYNTHETIC, "fp8 needs FP8 tensor cores")
    assert summarize([fp8, fp8, None]) == EngineSummary(SYNTHETIC, "fp8 needs FP8 tensor cores")
    assert summarize([ServedBy(REAL, omitted="compilation")]) == EngineSummary(
        REAL, "not modelled: compilation"
    )


def test_two_engines_for_one_variant_read_as_mixed_with_the_synthetic_share() -> None:
    summary = summarize([ServedBy(REAL), ServedBy(SYNTHETIC, "fp8"), ServedBy(REAL)])
    assert summary == EngineSummary(MIXED, "1 of 3 responses synthetic: fp8")


def test_benchmark_and_eval_summaries_combine() -> None:
    synthetic = EngineSummary(SYNTHETIC, "fp8")
    assert combine(EngineSummary(), synthetic) == synthetic
    assert combine(synthetic, EngineSummary()) == synthetic
    assert combine(synthetic, synthetic) == synthetic
    assert combine(EngineSummary(REAL), synthetic) == EngineSummary(MIXED, "fp8")
