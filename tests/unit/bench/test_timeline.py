"""Per-request metric arithmetic on synthetic timelines."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from endpoint_optimizer.bench.stream import DecodedLine
from endpoint_optimizer.bench.timeline import (
    RawTimeline,
    TokenizerUnavailable,
    allocate,
    load_tokenizer,
    request_sample,
)


def timeline(lines: list[DecodedLine], **overrides: object) -> RawTimeline:
    values: dict[str, object] = {
        "index": 0,
        "inference_id": "r0",
        "scheduled_at": 9.5,
        "sent_at": 10.0,
        "end_at": 10.5,
        "lines": lines,
    }
    values.update(overrides)
    return RawTimeline(**values)  # type: ignore[arg-type]


def token(at: float, text: str = "x", tokens: int | None = 1) -> DecodedLine:
    return DecodedLine(at, text=text, tokens=tokens, token_bearing=True)


def test_ttft_skips_chunks_without_tokens_and_itl_is_per_token() -> None:
    lines = [
        DecodedLine(10.05, token_bearing=False),  # role-only prelude
        token(10.1),
        token(10.13, tokens=3),  # a speculative step: 3 tokens after a 30 ms gap
        token(10.15),
        DecodedLine(10.2, completion_tokens=5),
    ]
    sample = request_sample(timeline(lines))
    assert sample.ttft_s == pytest.approx(0.1)
    assert sample.output_tokens == 5 and sample.tokens_source == "usage"
    assert sample.chunk_tokens == [1, 3, 1] and sample.chunk_tokens_exact
    assert sample.itl_s == pytest.approx([0.01, 0.01, 0.01, 0.02])
    assert sample.chunk_gaps_s == pytest.approx([0.03, 0.02])
    assert sample.tpot_s == pytest.approx(0.05 / 4)
    assert sample.e2e_s == pytest.approx(0.5)
    assert sample.client_queue_s == pytest.approx(0.5)


def test_a_bundled_first_chunk_adds_no_itl_samples() -> None:
    sample = request_sample(timeline([token(10.1, tokens=4), token(10.2, tokens=2)]))
    assert sample.output_tokens == 6 and sample.tokens_source == "stream"
    assert sample.itl_s == pytest.approx([0.05, 0.05])
    assert sample.tpot_s == pytest.approx(0.05)


def test_lines_in_one_payload_part_form_one_chunk() -> None:
    sample = request_sample(timeline([token(10.1), token(10.1), token(10.3)]))
    assert sample.chunk_tokens == [2, 1]
    assert sample.itl_s == pytest.approx([0.2])


def test_without_server_counts_tokens_come_from_the_tokenizer_not_the_chunks() -> None:
    lines = [token(10.1, "hello world", None), token(10.2, " foo bar baz", None)]
    sample = request_sample(timeline(lines), tokenizer=lambda text: len(text.split()))
    assert sample.output_tokens == 5 and sample.tokens_source == "tokenizer"
    assert sample.chunk_tokens == [2, 3] and not sample.chunk_tokens_exact
    assert len(sample.itl_s) == 3


def test_without_counts_or_tokenizer_tokens_are_unknown() -> None:
    sample = request_sample(timeline([token(10.1, "a", None), token(10.2, "b", None)]))
    assert sample.output_tokens is None and sample.tokens_source == "unknown"
    assert sample.itl_s == [] and sample.tpot_s is None
    assert sample.chunk_gaps_s == pytest.approx([0.1])  # chunk gaps need no token count


def test_server_total_is_spread_over_chunks_by_text_length() -> None:
    lines = [
        token(10.1, "ab", None),
        token(10.2, "abcdef", None),
        DecodedLine(10.3, completion_tokens=8),
    ]
    sample = request_sample(timeline(lines))
    assert sample.chunk_tokens == [2, 6] and sample.output_tokens == 8


def test_a_stream_without_tokens_is_a_failed_request() -> None:
    sample = request_sample(timeline([DecodedLine(10.1, token_bearing=False)]))
    assert sample.error_kind == "EmptyStream" and not sample.ok


def test_an_error_line_fails_the_request() -> None:
    sample = request_sample(timeline([token(10.1), DecodedLine(10.2, error="overloaded")]))
    assert (sample.error_kind, sample.error_message) == ("InStreamError", "overloaded")


def test_a_transport_error_keeps_its_kind() -> None:
    raw = timeline([token(10.1)], error_kind="ModelStreamError", error_message="m" * 500)
    sample = request_sample(raw)
    assert sample.error_kind == "ModelStreamError" and len(sample.error_message or "") == 200


@given(
    st.integers(min_value=0, max_value=500),
    st.lists(st.floats(min_value=0, max_value=100), min_size=1, max_size=30),
)
def test_allocation_keeps_the_total_and_gives_each_chunk_a_token(
    total: int, weights: list[float]
) -> None:
    shares = allocate(total, weights)
    assert sum(shares) == total and len(shares) == len(weights)
    if total >= len(weights):
        assert min(shares) >= 1


def test_a_tokenizer_file_counts_the_whole_text(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    vocabulary = {"[UNK]": 0, "hello": 1, "world": 2, "again": 3}
    model = tokenizers.models.WordLevel(vocab=vocabulary, unk_token="[UNK]")
    built = tokenizers.Tokenizer(model)
    built.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    built.save(str(path))
    count = load_tokenizer(str(path))
    lines = [token(10.1, "hello wor", None), token(10.2, "ld again", None)]
    sample = request_sample(timeline(lines), tokenizer=count)
    # "wor" + "ld" is one word once the text is joined: 3 tokens, not 4.
    assert sample.output_tokens == 3 and sample.tokens_source == "tokenizer"


def test_a_bad_tokenizer_file_names_itself(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    path = tmp_path / "tokenizer.json"
    path.write_text("{}")
    with pytest.raises(TokenizerUnavailable, match=r"tokenizer\.json"):
        load_tokenizer(str(path))


def test_events_of_one_read_are_chunks_timed_as_one_step() -> None:
    """Five events in three socket reads: five chunks (the server's steps, which the
    black-box acceptance counts), but three timed steps. The first read's two tokens are
    what TTFT saw; the third read's 20 ms is spread over its two tokens."""

    def event(at: float, part: int) -> DecodedLine:
        line = token(at)
        line.part = part
        return line

    lines = [event(10.1, 1), event(10.1, 2), event(10.11, 3), event(10.13, 4), event(10.13, 5)]
    sample = request_sample(timeline([*lines, DecodedLine(10.2, completion_tokens=5)]))
    assert sample.chunk_tokens == [1, 1, 1, 1, 1]
    assert sample.chunk_gaps_s == pytest.approx([0.0, 0.01, 0.02, 0.0])
    assert sample.ttft_s == pytest.approx(0.1)
    assert sample.itl_s == pytest.approx([0.01, 0.01, 0.01])
    assert sample.tpot_s == pytest.approx(0.03 / 3)
    # Built without a decoder (part 0), lines of one stamp are one event, as before.
    merged = request_sample(timeline([token(10.1), token(10.1), token(10.12)]))
    assert merged.chunk_tokens == [2, 1] and merged.itl_s == pytest.approx([0.02])


def test_kernel_timed_requests_carry_how_early_their_first_and_last_chunks_can_be() -> None:
    lines = [
        DecodedLine(10.04, token_bearing=False, part=1, earliest_at=10.0),  # role only
        DecodedLine(10.1, text="a", tokens=1, token_bearing=True, part=2, earliest_at=10.06),
        DecodedLine(10.2, text="b", tokens=1, token_bearing=True, part=3, earliest_at=10.2),
        DecodedLine(10.3, text="c", tokens=1, token_bearing=True, part=4, earliest_at=None),
    ]
    sample = request_sample(timeline(lines, clock="kernel"))
    assert sample.ttft_slack_s == pytest.approx(0.04)  # the first token-bearing chunk's
    assert sample.last_chunk_slack_s is None  # its floor is not known
    lines[-1].earliest_at = 10.3
    assert request_sample(timeline(lines, clock="kernel")).last_chunk_slack_s == 0.0
    # Timed at the reads, nothing bounds how late a stamp was.
    read = request_sample(timeline(lines))
    assert read.ttft_slack_s is None and read.last_chunk_slack_s is None
