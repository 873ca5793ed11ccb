"""The fast event-stream decoder reads what botocore's own decoder reads, and refuses the same."""

from __future__ import annotations

import itertools
import struct
import uuid
import zlib

import pytest
from botocore.eventstream import EventStreamBuffer
from hypothesis import given
from hypothesis import strategies as st

from endpoint_optimizer.bench.eventstream import EventStreamCorrupt, EventStreamDecoder
from endpoint_optimizer.sandbox.eventstream import encode_message, payload_part, stream_exception


def frame(raw_headers: bytes, payload: bytes) -> bytes:
    prelude = struct.pack("!II", 12 + len(raw_headers) + len(payload) + 4, len(raw_headers))
    prelude += struct.pack("!I", zlib.crc32(prelude))
    body = prelude + raw_headers + payload
    return body + struct.pack("!I", zlib.crc32(body))


def header(name: str, kind: int, value: bytes = b"") -> bytes:
    return bytes([len(name)]) + name.encode() + bytes([kind]) + value


EVERY_TYPE = (
    header("t", 0)
    + header("f", 1)
    + header("b", 2, struct.pack("!b", -3))
    + header("s", 3, struct.pack("!h", -300))
    + header("i", 4, struct.pack("!i", 70000))
    + header("l", 5, struct.pack("!q", 2**40))
    + header("y", 6, struct.pack("!H", 3) + b"\x00\x01\x02")
    + header("str", 7, struct.pack("!H", 5) + b"hello")
    + header("ts", 8, struct.pack("!q", 1_700_000_000_000))
    + header("u", 9, uuid.UUID(int=42).bytes)
)


def botocore_decode(data: bytes) -> list[tuple[dict[str, object], bytes]]:
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    return [(dict(m.headers), m.payload) for m in buffer]


def test_sandbox_frames_decode_as_botocore_decodes_them() -> None:
    data = (
        payload_part(b'{"token": {"text": " a"}}\n')
        + payload_part(b"")
        + stream_exception("ModelStreamError", "broken", "StreamBroken")
    )
    ours = EventStreamDecoder().feed(data)
    assert [(dict(h), p) for h, p in ours] == botocore_decode(data)
    assert ours[0][0][":event-type"] == "PayloadPart"
    assert ours[2][0][":exception-type"] == "ModelStreamError"


def test_every_header_type_decodes_as_botocore_decodes_it() -> None:
    data = frame(EVERY_TYPE, b"payload")
    ((headers, payload),) = EventStreamDecoder().feed(data)
    ((expected, expected_payload),) = botocore_decode(data)
    assert payload == expected_payload == b"payload"
    assert dict(headers) == expected
    assert headers["ts"] == 1_700_000_000_000
    assert headers["u"] == uuid.UUID(int=42).bytes


@given(
    payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=8),
)
def test_messages_split_anywhere_across_reads_come_out_whole_and_in_order(
    payloads: list[bytes], cuts: list[int]
) -> None:
    data = b"".join(payload_part(p) for p in payloads)
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    decoder = EventStreamDecoder()
    got = []
    for start, end in itertools.pairwise(points):
        got.extend(p for _, p in decoder.feed(data[start:end]))
    assert got == payloads
    assert decoder.pending == 0


def test_an_incomplete_message_is_held_until_the_rest_arrives() -> None:
    data = payload_part(b"abc")
    decoder = EventStreamDecoder()
    assert decoder.feed(data[:-1]) == []
    assert decoder.pending == len(data) - 1
    assert [p for _, p in decoder.feed(data[-1:])] == [b"abc"]


@pytest.mark.parametrize(
    ("offset", "what"),
    [(2, "prelude CRC"), (20, "message CRC"), (-1, "message CRC")],
)
def test_a_flipped_byte_is_refused_by_its_crc(offset: int, what: str) -> None:
    data = bytearray(encode_message({":message-type": "event"}, b"some payload"))
    data[offset] ^= 0x01
    with pytest.raises(EventStreamCorrupt, match=what):
        EventStreamDecoder().feed(bytes(data))


def test_lengths_over_the_protocol_limits_are_refused() -> None:
    prelude = struct.pack("!II", 17 * 1024**2, 0)
    data = prelude + struct.pack("!I", zlib.crc32(prelude))
    with pytest.raises(EventStreamCorrupt, match="limits"):
        EventStreamDecoder().feed(data)


def test_an_unknown_header_type_is_refused() -> None:
    with pytest.raises(EventStreamCorrupt, match="unknown type 12"):
        EventStreamDecoder().feed(frame(header("x", 12), b""))
