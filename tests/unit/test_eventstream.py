"""The sandbox's event-stream frames are read back by botocore's own parser."""

from __future__ import annotations

import json

import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer

from endpoint_optimizer.sandbox.eventstream import payload_part, stream_exception


def _decode(raw: bytes) -> list[tuple[dict[str, object], bytes]]:
    buffer = EventStreamBuffer()
    buffer.add_data(raw)
    return [(message.headers, message.payload) for message in buffer]


def test_payload_parts_round_trip_through_botocore() -> None:
    raw = payload_part(b'{"token": {"text": "a"}}\n') + payload_part(b"")
    messages = _decode(raw)
    assert [payload for _, payload in messages] == [b'{"token": {"text": "a"}}\n', b""]
    assert all(headers[":event-type"] == "PayloadPart" for headers, _ in messages)


def test_stream_exception_carries_kind_and_message() -> None:
    ((headers, payload),) = _decode(stream_exception("ModelStreamError", "boom", "424"))
    assert headers[":message-type"] == "exception"
    assert headers[":exception-type"] == "ModelStreamError"
    assert json.loads(payload) == {"Message": "boom", "ErrorCode": "424"}


def test_corrupted_frame_is_refused_by_the_crc() -> None:
    raw = bytearray(payload_part(b"hello"))
    raw[-6] ^= 0xFF
    with pytest.raises(ChecksumMismatch):
        _decode(bytes(raw))
