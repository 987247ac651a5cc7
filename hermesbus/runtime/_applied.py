"""What a session has applied: recent ids, and a high-water mark below which nothing is new.

A signed record may be captured and re-sent raw, any time later; a window of recent ids
alone forgets it once enough other records went by, and the session would apply it again.
So the session also keeps a *floor*: the newest envelope timestamp among the ids it has
forgotten. A record whose id is not in the window and whose timestamp is at or below the
floor is not new: it is skipped like a redelivery, however late it comes.

Why the envelope's timestamp: it is inside the signed value (re-sending cannot change
it without breaking the signature), every producer sets it, and it needs nothing new in
the protocol. Why a per-session mark rather than freshness against the clock: a backlog
read after hours of downtime, a durable timer (dated when it is due) and a redrive of
last week's records are all old by the clock yet new to the session; only the session's
own history tells a re-sent record from a new one. Why not every id for the session's
life: the saved state (rewritten on every record) would grow without bound.

The floor moves in epochs of ``window // 2`` applied records: when an epoch fills, the
ids of the epoch before it are dropped and the floor rises to their newest timestamp.
So an id stays in the window for at least half a window, then the floor covers it, and
the window holds fewer than ``window`` ids.

The limit: a *new* record is taken for an old one only if it is dated at or before a
record that was applied half a window (128 records of the same session) or more before
it arrives: a retry whose back-off outlasts 128 other records of its session, or clocks
of two producers further apart than the time the session takes for 128 records. Such a
record is skipped with a warning naming it, never applied twice.

The mark is kept as the first entry of ``SessionState.applied``
(``#applied:<floor>,<previous epoch's newest>,<this epoch's newest>,<ids in this
epoch>``), so every state store saves it as it saves ids. A state saved before the mark
existed counts its ids as the previous epoch, dated by the first record applied after.
"""

from __future__ import annotations

__all__ = ["MARK", "appended", "floor_of"]

MARK = "#applied:"
_NONE = -(2**62)
"""Below every timestamp: no floor yet, or no record in the epoch yet."""


def floor_of(applied: tuple[str, ...]) -> int:
    """The session's floor in epoch ms: a record dated at or before it is not new."""
    if applied and applied[0].startswith(MARK):
        return int(applied[0][len(MARK) :].partition(",")[0])
    return _NONE


def appended(applied: tuple[str, ...], message_id: str, at_ms: int, window: int) -> tuple[str, ...]:
    """``applied`` after the record ``message_id`` dated ``at_ms`` was applied."""
    half = max(1, window // 2)
    if applied and applied[0].startswith(MARK):
        floor, previous, newest, count = map(int, applied[0][len(MARK) :].split(","))
        start = 1
    else:  # none yet, or saved before the mark: these ids are the previous epoch
        floor, previous, newest, count = _NONE, at_ms if applied else _NONE, _NONE, 0
        start = 0
    newest, count = max(newest, at_ms), count + 1
    if count < half:
        return (
            f"{MARK}{floor},{previous},{newest},{count}",
            *applied[start:],
            message_id,
        )
    # the epoch is full: forget the one before it, raise the floor
    kept = applied[len(applied) - count + 1 :] if count > 1 else ()
    return (f"{MARK}{max(floor, previous)},{newest},{_NONE},0", *kept, message_id)
