"""A minimal reader of the protobuf wire format.

xlarun reads XLA's HloProto, HloModuleProto, HloSnapshot and LiteralProto without the protobuf
package or XLA's .proto files: it only needs a handful of field numbers (see XLA-FACTS section 6),
so it walks the wire format directly. Unknown fields are skipped, as protobuf itself does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from xlarun.errors import InputError

VARINT, FIXED64, LENGTH_DELIMITED, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5


class ProtoDecodeError(InputError):
    """The bytes are not a well-formed protobuf message."""


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode one varint at ``pos``; return (value, next position)."""
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise ProtoDecodeError("truncated protobuf varint", "the file is cut short or is not a protobuf")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ProtoDecodeError("malformed protobuf varint", "the file is not a protobuf message")


def iter_fields(buf: bytes | memoryview) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield ``(field_number, wire_type, value)`` for each field of one message.

    ``value`` is an ``int`` for varint and fixed-width fields (fixed ones as raw unsigned integers)
    and ``bytes`` for length-delimited fields (sub-messages, strings, packed arrays).
    """
    view = memoryview(buf)
    pos = 0
    end = len(view)
    value: int | bytes
    while pos < end:
        key, pos = read_varint(view, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise ProtoDecodeError("protobuf field number 0", "the file is not a protobuf message")
        if wire_type == VARINT:
            value, pos = read_varint(view, pos)
        elif wire_type == FIXED64:
            if pos + 8 > end:
                raise ProtoDecodeError("truncated protobuf fixed64 field", "the file is cut short")
            value = int.from_bytes(view[pos : pos + 8], "little")
            pos += 8
        elif wire_type == FIXED32:
            if pos + 4 > end:
                raise ProtoDecodeError("truncated protobuf fixed32 field", "the file is cut short")
            value = int.from_bytes(view[pos : pos + 4], "little")
            pos += 4
        elif wire_type == LENGTH_DELIMITED:
            length, pos = read_varint(view, pos)
            if pos + length > end:
                raise ProtoDecodeError("truncated protobuf length-delimited field", "the file is cut short")
            value = bytes(view[pos : pos + length])
            pos += length
        elif wire_type in (START_GROUP, END_GROUP):
            raise ProtoDecodeError("protobuf groups are not supported", "the file is not an XLA proto")
        else:
            raise ProtoDecodeError(f"unknown protobuf wire type {wire_type}", "the file is not a protobuf message")
        yield number, wire_type, value


def fields_by_number(buf: bytes) -> dict[int, list[int | bytes]]:
    """All fields of one message grouped by field number, in wire order."""
    out: dict[int, list[int | bytes]] = {}
    for number, _wire_type, value in iter_fields(buf):
        out.setdefault(number, []).append(value)
    return out


def first(fields: dict[int, list[int | bytes]], number: int, default: Any = None) -> Any:
    """The value of a singular field: the last one on the wire wins, as in protobuf."""
    values = fields.get(number)
    return values[-1] if values else default


def as_str(value: int | bytes | None) -> str | None:
    """A length-delimited field decoded as UTF-8 text."""
    if value is None:
        return None
    if not isinstance(value, bytes):
        raise ProtoDecodeError("expected a string field, found a number", "the file is not the expected proto")
    return value.decode("utf-8", errors="replace")


def as_bytes(value: int | bytes) -> bytes:
    """A length-delimited field's value (a sub-message, string or packed array); a number where one is
    expected means the bytes are not the message they were taken for."""
    if isinstance(value, bytes):
        return value
    raise ProtoDecodeError(
        "a protobuf field holds a number where a sub-message belongs", "the file is not the XLA proto it was taken for"
    )


def as_int(value: int | bytes) -> int:
    """A varint or fixed-width field's value; bytes where a number is expected mean the wrong message."""
    if isinstance(value, int):
        return value
    raise ProtoDecodeError(
        "a protobuf field holds bytes where a number belongs", "the file is not the XLA proto it was taken for"
    )


def as_signed64(value: int) -> int:
    """Reinterpret a varint as a two's-complement int64 (how protobuf encodes negative int64)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def encode_varint(value: int) -> bytes:
    """The wire bytes of ``value``; a negative int64 is written as ten-byte two's complement, as protobuf does."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def packed_varints(data: bytes) -> list[int]:
    """Decode a packed repeated varint field."""
    out = []
    pos = 0
    while pos < len(data):
        value, pos = read_varint(data, pos)
        out.append(value)
    return out


def repeated_varints(values: list[int | bytes]) -> list[int]:
    """A repeated integer field that may be packed (bytes) or not (ints), or both."""
    out: list[int] = []
    for value in values:
        if isinstance(value, bytes):
            out.extend(packed_varints(value))
        else:
            out.append(value)
    return out
