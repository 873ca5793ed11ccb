"""AWS event-stream framing (application/vnd.amazon.eventstream), the encoder side.

InvokeEndpointWithResponseStream answers with a sequence of binary messages:

    prelude   total_length:u32  headers_length:u32  prelude_crc:u32
    headers   name_len:u8 name  type:u8(7 = string) value_len:u16 value   (repeated)
    payload   raw bytes
    trailer   message_crc:u32   (CRC32 of everything before it)

botocore's `EventStreamBuffer` parses exactly this; a test decodes our frames
with it, so the sandbox and real SageMaker are read by the same parser.
"""

from __future__ import annotations

import json
import struct
import zlib

_STRING_TYPE = 7


def _encode_headers(headers: dict[str, str]) -> bytes:
    out = bytearray()
    for name, value in headers.items():
        raw_name = name.encode("utf-8")
        raw_value = value.encode("utf-8")
        out += struct.pack("!B", len(raw_name)) + raw_name
        out += struct.pack("!BH", _STRING_TYPE, len(raw_value)) + raw_value
    return bytes(out)


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """Frame one event-stream message."""
    raw_headers = _encode_headers(headers)
    total_length = 12 + len(raw_headers) + len(payload) + 4
    prelude = struct.pack("!II", total_length, len(raw_headers))
    prelude += struct.pack("!I", zlib.crc32(prelude) & 0xFFFFFFFF)
    body = prelude + raw_headers + payload
    return body + struct.pack("!I", zlib.crc32(body) & 0xFFFFFFFF)


def payload_part(data: bytes) -> bytes:
    """A PayloadPart event carrying `data` (a slice of the model's output stream)."""
    return encode_message(
        {
            ":event-type": "PayloadPart",
            ":content-type": "application/octet-stream",
            ":message-type": "event",
        },
        data,
    )


def stream_exception(kind: str, message: str, error_code: str | None = None) -> bytes:
    """A modeled stream exception: `ModelStreamError` or `InternalStreamFailure`."""
    body: dict[str, str] = {"Message": message}
    if error_code is not None:
        body["ErrorCode"] = error_code
    return encode_message(
        {
            ":exception-type": kind,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        json.dumps(body).encode("utf-8"),
    )
