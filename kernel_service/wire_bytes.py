"""Protobuf wire-format pieces the kernel writes as bytes, to be parsed into a message in one call
(`MergeFromString`): cheaper on the tick path than building and copying messages field by field."""

from __future__ import annotations

_ONE_BYTE = [bytes([value]) for value in range(0x80)]


def varint(value: int) -> bytes:
    """A non-negative integer as a protobuf varint (values below 128, the commonest, from a table)."""
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_delimited(tag: bytes, body: bytes) -> bytes:
    """One length-delimited field in protobuf's wire format."""
    return tag + varint(len(body)) + body


def field_tag(number: int, wire_type: int) -> bytes:
    """A field's key: its number and wire type (0 varint, 2 length-delimited)."""
    return varint(number << 3 | wire_type)
