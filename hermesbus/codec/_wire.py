"""Avro binary encoding primitives for the compiled codec's slow paths.

The generated code (``_read``, ``_write``) handles the common cases inline: one-byte
varints, short strings. Everything else comes here, and every way the bytes can
be wrong raises :class:`Malformed`; a value that decodes but breaks the model's
contract raises :class:`Broken`. The codec turns both into ``DecodeError``s.
"""

from __future__ import annotations

import struct

__all__ = [
    "DOUBLE",
    "LENGTHS",
    "SMALL",
    "Broken",
    "Located",
    "Malformed",
    "block",
    "long_bytes",
    "read_int",
    "read_long",
    "read_string",
    "too_many",
]

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_MAX_LONG_BYTES = 10  # 64 bits in 7-bit groups
_LOW7 = 0x7F  # the payload bits of a varint byte; 0x80 says another byte follows
_TWO_BYTES = 1 << 13  # |n| below this zigzags into 14 bits: two varint bytes

DOUBLE = struct.Struct("<d")


class Located(Exception):
    """A failure inside the body; each enclosing field, index or key adds to ``path``."""

    def __init__(self, rule: str, *path: object) -> None:
        super().__init__(rule)
        self.rule = rule
        self.path = [str(part) for part in path]

    def at(self, outer: object) -> None:
        """Prefix the path with the field (or array index, or map key) that contains it."""
        self.path.insert(0, str(outer))

    def __str__(self) -> str:
        return f"{'.'.join(self.path)}: {self.rule}" if self.path else self.rule


class Malformed(Located):
    """The bytes are not Avro of the writer schema (bad index, length, varint, UTF-8)."""


class Broken(Located):
    """A decoded value breaks the model's contract."""


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > _LOW7:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


SMALL = tuple(_zigzag(n) for n in range(-64, 64))
"""The one-byte encodings of -64..63, at index n + 64."""
LENGTHS = SMALL[64:]
"""The one-byte encodings of 0..63, at index n: string, array and map lengths."""


def long_bytes(n: int, bits: int = 64) -> bytes:
    """The zigzag varint of ``n``; refuses a value outside the signed ``bits`` range."""
    if not isinstance(n, int):
        raise TypeError(f"expected an int, got {type(n).__name__}")
    if -_TWO_BYTES <= n < _TWO_BYTES:  # lengths and counts up to 8 KiB, status codes
        z = (n << 1) ^ (n >> 63)
        return bytes((z & 0x7F | 0x80, z >> 7)) if z > _LOW7 else bytes((z,))
    low, high = (_LONG_MIN, _LONG_MAX) if bits == 64 else (_INT_MIN, _INT_MAX)  # noqa: PLR2004
    if not low <= n <= high:
        raise ValueError(f"{n} is outside the Avro {'long' if bits == 64 else 'int'} range")  # noqa: PLR2004
    return _zigzag(n)


def read_long(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint of up to 64 bits at ``pos`` -> (value, next position)."""
    byte = buf[pos]  # IndexError: the body ends early
    raw, shift, end = byte & _LOW7, 7, pos + 1
    while byte & 0x80:  # up to 9 bytes (63 bits) always fit a long: ms timestamps take 6
        byte = buf[end]
        raw |= (byte & _LOW7) << shift
        shift += 7
        end += 1
        if end - pos == _MAX_LONG_BYTES - 1 and byte & 0x80:
            return _read(buf, pos, _LONG_MIN, _LONG_MAX, "long")
    return (raw >> 1) ^ -(raw & 1), end


def read_int(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint of up to 32 bits at ``pos`` -> (value, next position)."""
    value, end = read_long(buf, pos)
    if _INT_MIN <= value <= _INT_MAX:
        return value, end
    return _read(buf, pos, _INT_MIN, _INT_MAX, "int")  # raises, naming the range


def _read(buf: bytes, pos: int, low: int, high: int, kind: str) -> tuple[int, int]:
    start, shift, raw = pos, 0, 0
    while True:
        byte = buf[pos]  # IndexError: the body ends early
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if pos - start >= _MAX_LONG_BYTES:
            raise Malformed(f"varint at byte {start} runs past {_MAX_LONG_BYTES} bytes")
    value = (raw >> 1) ^ -(raw & 1)
    if not low <= value <= high:
        raise Malformed(f"varint at byte {start} is outside the Avro {kind} range")
    return value, pos


def read_string(buf: bytes, pos: int) -> tuple[str, int]:
    """A length-prefixed UTF-8 string whose length is not a one-byte varint."""
    first = buf[pos]
    if first & 0x80 and not first & 1 and not buf[pos + 1] & 0x80:  # 64 to 8191 bytes
        start = pos + 2
        end = start + ((first & _LOW7) >> 1 | buf[pos + 1] << 6)
    else:
        length, start = read_long(buf, pos)
        if length < 0:
            raise Malformed(f"negative string length {length}")
        end = start + length
    if end > len(buf):
        raise IndexError(end)  # the body ends early
    return buf[start:end].decode(), end


def block(buf: bytes, pos: int) -> tuple[int, int]:
    """The item count of the next array or map block (0 ends it), checked against the bytes.

    A negative count is followed by the block's size in bytes, which is skipped. The
    compiler admits only items of at least one byte, so a count larger than what is left
    is refused before anything is read for it.
    """
    count, pos = read_long(buf, pos)
    if count < 0:
        count = -count
        _size, pos = read_long(buf, pos)
    if count > len(buf) - pos:
        raise Malformed(too_many(count, len(buf) - pos))
    return count, pos


def too_many(count: int, left: int) -> str:
    return f"block of {count} items in {left} bytes"
