"""Stream decoding: PayloadPart reassembly at every split point, each chunk format."""

from __future__ import annotations

import itertools
import json

import pytest
from botocore.eventstream import EventStreamBuffer
from hypothesis import given
from hypothesis import strategies as st

from endpoint_optimizer.bench.stream import ChunkFormat, DecodedLine, StreamDecoder
from endpoint_optimizer.sandbox.eventstream import payload_part

LMI = b"".join(
    json.dumps(
        {
            "token": {"id": i, "text": f" t{i}", "special": False},
            "generated_text": None,
            "details": {"generated_tokens": 3} if i == 2 else None,
        }
    ).encode()
    + b"\n"
    for i in range(3)
)


def decode(parts: list[bytes]) -> list[DecodedLine]:
    decoder = StreamDecoder()
    for at, part in enumerate(parts):
        decoder.feed(part, float(at))
    decoder.close(float(len(parts)))
    return decoder.lines


def summary(lines: list[DecodedLine]) -> list[tuple[str, int | None, int | None]]:
    return [(line.text, line.tokens, line.completion_tokens) for line in lines]


def test_every_split_point_of_the_payload_decodes_the_same() -> None:
    whole = summary(decode([LMI]))
    assert [text for text, _, _ in whole] == [" t0", " t1", " t2"]
    for cut in range(len(LMI) + 1):
        assert summary(decode([LMI[:cut], LMI[cut:]])) == whole


def test_a_line_is_timed_by_the_part_that_completes_it() -> None:
    first_line_end = LMI.index(b"\n")
    lines = decode([LMI[:10], LMI[10 : first_line_end + 5], LMI[first_line_end + 5 :]])
    assert [line.arrived_at for line in lines] == [1.0, 2.0, 2.0]


@given(st.lists(st.integers(min_value=0, max_value=len(LMI)), max_size=12))
def test_any_number_of_split_points_decodes_the_same(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(LMI)]
    parts = [LMI[a:b] for a, b in itertools.pairwise(bounds)]
    assert summary(decode(parts)) == summary(decode([LMI]))


def test_every_split_point_of_the_event_stream_bytes_yields_the_same_payloads() -> None:
    raw = payload_part(LMI[:40]) + payload_part(LMI[40:]) + payload_part(b"")
    for cut in range(len(raw) + 1):
        buffer = EventStreamBuffer()
        payloads: list[bytes] = []
        for piece in (raw[:cut], raw[cut:]):
            buffer.add_data(piece)
            payloads.extend(message.payload for message in buffer)
        assert b"".join(payloads) == LMI


def test_tgi_sse_tokens_special_tokens_and_details() -> None:
    stream = (
        b'data:{"token":{"id":1,"text":"Hi","special":false},"generated_text":null}\n\n'
        b": keep-alive\n\n"
        b'data:{"token":{"id":2,"text":"</s>","special":true},"generated_text":"Hi",'
        b'"details":{"finish_reason":"eos_token","generated_tokens":2}}\n\n'
    )
    lines = decode([stream])
    assert [(line.text, line.token_bearing, line.format) for line in lines] == [
        ("Hi", True, ChunkFormat.LMI),
        ("", False, ChunkFormat.LMI),
    ]
    assert lines[-1].completion_tokens == 2


def test_openai_role_chunk_is_not_token_bearing_and_usage_is_read() -> None:
    stream = (
        b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
        b'data: {"choices":[{"delta":{"content":"Hello"}}]}\n\n'
        b'data: {"choices":[{"delta":{"reasoning_content":"hmm"}}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4}}\n\n'
        b"data: [DONE]\n\n"
    )
    lines = decode([stream])
    assert [line.token_bearing for line in lines] == [False, True, True, False]
    assert [line.tokens for line in lines] == [None, None, None, None]
    assert lines[-1].completion_tokens == 4


def test_openai_continuous_usage_gives_tokens_per_chunk() -> None:
    stream = b"".join(
        b"data: "
        + json.dumps(
            {"choices": [{"delta": {"content": "ab"}}], "usage": {"completion_tokens": n}}
        ).encode()
        + b"\n\n"
        for n in (1, 4, 6)
    )
    assert [line.tokens for line in decode([stream])] == [1, 3, 2]


def test_openai_spec_decode_counters_are_read_from_the_final_chunk() -> None:
    payload = {
        "choices": [],
        "usage": {"completion_tokens": 10},
        "metrics": {
            "speculative_decoding": {
                "num_spec_steps": 4,
                "num_draft_tokens": 12,
                "num_accepted_draft_tokens": 6,
                "mean_acceptance_length": 2.5,
            }
        },
    }
    (line,) = decode([b"data: " + json.dumps(payload).encode() + b"\n\n"])
    assert line.spec_decode is not None
    assert (line.spec_decode.num_drafts, line.spec_decode.num_draft_tokens) == (4, 12)
    assert line.spec_decode.num_accepted_tokens == 6


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b'{"text": "a b"}', "a b"),
        (b'{"generated_text": "xy"}', "xy"),
        (b'{"outputs": ["z"]}', "z"),
        (b'"bare"', "bare"),
    ],
)
def test_plain_json_lines(raw: bytes, text: str) -> None:
    (line,) = decode([raw + b"\n"])
    assert (line.text, line.token_bearing, line.format) == (text, True, ChunkFormat.JSON_LINES)


def test_an_unterminated_last_line_is_decoded_at_close() -> None:
    (line,) = decode([b'{"text": "end"}'])
    assert line.text == "end" and line.arrived_at == 1.0


def test_an_error_object_in_the_stream_is_reported() -> None:
    (line,) = decode([b'data: {"error": {"message": "out of memory", "code": 500}}\n\n'])
    assert line.error == "out of memory" and not line.token_bearing


def test_undecodable_text_still_counts_as_a_token_bearing_line() -> None:
    (line,) = decode([b"plain words\n"])
    assert line.token_bearing and line.text == "plain words"


def test_an_lmi_step_line_may_carry_several_tokens_and_counters() -> None:
    line = {
        "token": {"id": 9, "text": " a b c", "special": False},
        "num_tokens": 3,
        "generated_text": "x a b c",
        "details": {"generated_tokens": 4, "draft_tokens": 8, "accepted_tokens": 5},
    }
    (decoded,) = decode([json.dumps(line).encode() + b"\n"])
    assert (decoded.tokens, decoded.completion_tokens) == (3, 4)
    assert decoded.spec_decode is not None
    assert decoded.spec_decode.num_drafts is None  # LMI gives no step count
    assert (decoded.spec_decode.num_draft_tokens, decoded.spec_decode.num_accepted_tokens) == (8, 5)
