"""AWS event-stream framing (application/vnd.amazon.eventstream), the decoder side.

Each message is

    prelude   total_length:u32  headers_length:u32  prelude_crc:u32
    headers   name_len:u8 name  type:u8 value        (repeated)
    payload   raw bytes
    trailer   message_crc:u32   (CRC32 of every byte before it)

Why not botocore's `EventStreamBuffer`: it builds a prelude object, a header dict
through a per-type dispatch table and a message object per event in pure Python;
on the benchmark's per-token path that is most of the client's CPU. This decoder
checks the same things (length limits, both CRCs with zlib, every header type) with
one `unpack_from` per message and a string-header fast path, and answers plain
tuples. tests/unit/bench/test_eventstream.py decodes botocore-encoded and
sandbox-encoded frames with both and compares.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping

_PRELUDE = struct.Struct("!III")
_CRC = struct.Struct("!I")
_PRELUDE_LENGTH = 12
# botocore's limits (eventstream._MAX_PAYLOAD_LENGTH, _MAX_HEADERS_LENGTH).
MAX_MESSAGE_LENGTH = 16 * 1024**2
MAX_HEADERS_LENGTH = 128 * 1024
_MIN_MESSAGE_LENGTH = _PRELUDE_LENGTH + 4

_STRING = 7
# Fixed-size header values by type: (size, struct format); 0/1 (true/false) carry none.
_FIXED = {2: (1, "!b"), 3: (2, "!h"), 4: (4, "!i"), 5: (8, "!q"), 8: (8, "!q")}

HeaderValue = str | bytes | bool | int
# Headers are shared between messages whose header bytes are equal: read, never write.
Message = tuple[Mapping[str, HeaderValue], bytes]

# Parsed headers by their bytes. A stream repeats the same few header blocks (every
# PayloadPart's are equal), so each is parsed once; bounded for streams that do not.
_parsed: dict[bytes, dict[str, HeaderValue]] = {}
_PARSED_MAX = 256


class EventStreamCorrupt(ValueError):
    """A frame that is not valid event-stream: a bad length, CRC or header type."""


def _headers(data: bytes, start: int, end: int) -> dict[str, HeaderValue]:
    headers: dict[str, HeaderValue] = {}
    at = start
    while at < end:
        name_end = at + 1 + data[at]
        name = data[at + 1 : name_end].decode("utf-8")
        kind = data[name_end]
        at = name_end + 1
        value: HeaderValue
        if kind in (_STRING, 6):
            length = (data[at] << 8) | data[at + 1]
            raw = data[at + 2 : at + 2 + length]
            value = raw.decode("utf-8") if kind == _STRING else raw
            at += 2 + length
        elif kind in (0, 1):
            value = kind == 0
        elif kind in _FIXED:
            size, fmt = _FIXED[kind]
            value = struct.unpack_from(fmt, data, at)[0]
            at += size
        elif kind == 9:
            value = data[at : at + 16]  # a UUID's 16 bytes, as botocore gives them
            at += 16
        else:
            raise EventStreamCorrupt(f"event-stream header {name!r} has unknown type {kind}")
        if at > end:
            raise EventStreamCorrupt(f"event-stream header {name!r} runs past the headers")
        headers[name] = value
    return headers


class EventStreamDecoder:
    """Incremental: `feed` socket reads in order, get whole messages back."""

    __slots__ = ("_offset", "_rest", "ends")

    def __init__(self) -> None:
        self._rest = b""  # the start of a message that the next read completes
        self._offset = 0  # stream offset of `_rest`'s first byte
        # Stream offsets just past each message the last `feed` returned (bytes since
        # the first `feed`): where its last byte was, for the receive stamp of that read.
        self.ends: list[int] = []

    @property
    def pending(self) -> int:
        """Bytes of an incomplete message held for the next read."""
        return len(self._rest)

    def feed(self, data: bytes) -> list[Message]:
        if self._rest:
            data = self._rest + data
        view = memoryview(data)  # of immutable bytes: slices copy nothing
        messages: list[Message] = []
        ends: list[int] = []
        base = self._offset
        at = 0
        size = len(data)
        while size - at >= _PRELUDE_LENGTH:
            total, headers_length, prelude_crc = _PRELUDE.unpack_from(data, at)
            if zlib.crc32(view[at : at + 8]) != prelude_crc:
                raise EventStreamCorrupt("event-stream prelude CRC mismatch")
            if total > MAX_MESSAGE_LENGTH or headers_length > MAX_HEADERS_LENGTH:
                raise EventStreamCorrupt(
                    f"event-stream message of {total} bytes with {headers_length} bytes of "
                    "headers is over the protocol's limits"
                )
            if total < _MIN_MESSAGE_LENGTH + headers_length:
                raise EventStreamCorrupt(f"event-stream message length {total} is too short")
            end = at + total
            if end > size:
                break
            (message_crc,) = _CRC.unpack_from(data, end - 4)
            if zlib.crc32(view[at + 8 : end - 4], prelude_crc) != message_crc:
                raise EventStreamCorrupt("event-stream message CRC mismatch")
            headers_end = at + _PRELUDE_LENGTH + headers_length
            raw_headers = data[at + _PRELUDE_LENGTH : headers_end]
            headers = _parsed.get(raw_headers)
            if headers is None:
                headers = _headers(raw_headers, 0, headers_length)
                if len(_parsed) >= _PARSED_MAX:
                    _parsed.clear()
                _parsed[raw_headers] = headers
            messages.append((headers, data[headers_end : end - 4]))
            ends.append(base + end)
            at = end
        self._rest = data[at:] if at < size else b""
        self._offset = base + at
        self.ends = ends
        return messages
