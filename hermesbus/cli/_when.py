"""One way to say a time on the command line, for ``tail``, ``search`` and ``replay``.

``-15m`` / ``15m`` (that long before now; ms, s, m, h, d), ``@1764669600000`` or
``1764669600000`` (epoch ms), or an ISO 8601 time (local time unless it says).
``tail --from/--to`` also take ``beginning``, ``end`` and an offset: there a bare number
of fewer than 13 digits is an offset, one of 13 or more is epoch ms (a time after 2001).
A time before 1970 or after the year 9999 is refused: the log holds none (Kafka refuses
a negative time, and epoch ms past year 9999 overflow its field or mean nothing).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING

from ._common import fail

if TYPE_CHECKING:
    from hermesbus.trace.tail import Position

__all__ = ["LAST_MS", "TIMES", "OutOfRange", "parse_time", "parse_when", "tail_position"]

TIMES = "-15m, -2h, -1d, an ISO time, or epoch ms (1764669600000 or @1764669600000)"
"""The forms of a time, for help texts and errors."""
_UNITS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_BEFORE = re.compile(r"^-?(\d+)(ms|s|m|h|d)$")
_EPOCH_MS_DIGITS = 13
"""A bare number this long is epoch ms in ``tail`` (10**12 ms is 2001-09-09); shorter, an offset."""
LAST_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: the last time a command takes (the first is the epoch, 0)."""


class OutOfRange(ValueError):
    """A time in a form that is understood, but before 1970 or after the year 9999."""


def parse_time(text: str, now_ms: int) -> int:
    """Epoch ms of ``text`` in any of the forms above; ValueError naming them, OutOfRange
    for a time before 1970 or after the year 9999."""
    ms = _epoch_ms(text, now_ms)
    if ms < 0:
        raise OutOfRange(
            f"{text!r} is before 1970-01-01 (epoch ms 0): the log holds no earlier time"
        )
    if ms > LAST_MS:
        raise OutOfRange(f"{text!r} is after the year 9999 (epoch ms {LAST_MS}): not a time")
    return ms


def _epoch_ms(text: str, now_ms: int) -> int:
    value = text.strip()
    before = _BEFORE.match(value.lower())
    if before:
        return now_ms - int(before.group(1)) * _UNITS[before.group(2)]
    digits = value.removeprefix("@")
    if digits.isdigit():
        return int(digits)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not a time: use {TIMES}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.now().astimezone().tzinfo)
    return int(moment.timestamp() * 1000)


def tail_position(text: str, now_ms: int) -> Position:
    """``beginning``, ``end``, an offset (fewer than 13 digits), or a time as above."""
    from hermesbus.trace.tail import Position

    value = text.strip().lower()
    if value in ("beginning", "end"):
        return Position(value)  # type: ignore[arg-type]
    if value.isdigit() and len(value) < _EPOCH_MS_DIGITS:
        return Position("offset", int(value))
    try:
        return Position("time", parse_time(text, now_ms))
    except OutOfRange:
        raise
    except ValueError:
        raise ValueError(
            f"{text!r} is not a position: use beginning, end, an offset (42) or a time: {TIMES}"
        ) from None


def parse_when(value: str | None, now_ms: int, option: str) -> int | None:
    """``value`` of ``option`` as epoch ms (:func:`parse_time`'s forms); a bad one exits 2."""
    if value is None:
        return None
    try:
        return parse_time(value, now_ms)
    except ValueError as exc:
        raise fail(f"{option} {exc}", 2) from None
