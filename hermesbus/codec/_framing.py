"""The two framings: Avro single-object encoding and the Confluent wire format."""

from __future__ import annotations

import struct
from typing import Literal

from hermesbus.errors import DecodeError

__all__ = [
    "CONFLUENT_MAGIC",
    "SINGLE_OBJECT_MAGIC",
    "Framing",
    "confluent_header",
    "split",
]

Framing = Literal["single-object", "confluent"]

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
"""Avro single-object encoding marker, followed by the 8-byte little-endian fingerprint."""
CONFLUENT_MAGIC = b"\x00"
"""Confluent wire format marker, followed by the big-endian int32 schema id."""

_SINGLE_HEADER = 10
_CONFLUENT_HEADER = 5
_ID = struct.Struct(">i")


def confluent_header(schema_id: int) -> bytes:
    return CONFLUENT_MAGIC + _ID.pack(schema_id)


def split(data: bytes) -> tuple[Framing, bytes | int, int]:
    """Detect the framing from the first byte: (framing, fingerprint or id, body offset)."""
    if not data:
        raise DecodeError("empty message: expected a C3 01 or 00 framing header")
    if data[:1] == CONFLUENT_MAGIC:
        if len(data) < _CONFLUENT_HEADER:
            raise DecodeError(f"truncated Confluent header: {len(data)} of 5 bytes")
        return "confluent", _ID.unpack_from(data, 1)[0], _CONFLUENT_HEADER
    if data[:2] == SINGLE_OBJECT_MAGIC:
        if len(data) < _SINGLE_HEADER:
            raise DecodeError(f"truncated single-object header: {len(data)} of 10 bytes")
        return "single-object", bytes(data[2:_SINGLE_HEADER]), _SINGLE_HEADER
    raise DecodeError(
        f"unknown magic byte 0x{data[0]:02x}: expected C3 01 (Avro single-object) or 00 (Confluent)"
    )
