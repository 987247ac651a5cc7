"""Each reply once: the reply ids a client has delivered lately, per session.

After a crash a processor's outbox sends its replies again under the same message ids
(the bus applies each id once, but the replies topic holds both copies). A client's
reply iterators drop a copy of an id already delivered: by the same iterator, or by the
client before that iterator began (an app that listens anew each turn is not handed the
last turn's reply again). Two iterators listening at once each get every reply once.

Memory is bounded: the last :data:`PER_SESSION` ids of each of the last
:data:`SESSIONS` sessions the client delivered to. A copy re-sent after more replies
than that is delivered again (the outbox re-sends within a crash's redelivery, a few
records).
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["PER_SESSION", "SESSIONS", "Delivered", "Seen"]

PER_SESSION = 64
"""Reply ids kept per session (about 10 KiB with UUID ids: 40 MiB at most per client)."""
SESSIONS = 4096
"""Sessions kept per client, the least recently delivered to dropped first."""


class Seen:
    """The last ``size`` ids, in the order first seen."""

    __slots__ = ("_ids", "_size")

    def __init__(self, size: int = PER_SESSION) -> None:
        self._ids: OrderedDict[str, int] = OrderedDict()
        self._size = size

    def get(self, message_id: str) -> int | None:
        return self._ids.get(message_id)

    def add(self, message_id: str, at: int) -> None:
        """Keep ``message_id``, first seen at ``at`` (a second add keeps the first)."""
        if message_id in self._ids:
            return
        self._ids[message_id] = at
        if len(self._ids) > self._size:
            self._ids.popitem(last=False)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)


class Delivered:
    """What a client delivered, per session, each id with the tick it was first
    delivered at. ``tick`` counts deliveries: an iterator notes it when it begins."""

    def __init__(self, per_session: int = PER_SESSION, sessions: int = SESSIONS) -> None:
        self._sessions: OrderedDict[str, Seen] = OrderedDict()
        self._per_session, self._most = per_session, sessions
        self.tick = 0

    def at(self, session_id: str, message_id: str) -> int | None:
        """When ``message_id`` was first delivered in the session (None: not lately)."""
        seen = self._sessions.get(session_id)
        return None if seen is None else seen.get(message_id)

    def add(self, session_id: str, message_id: str) -> None:
        self.tick += 1
        seen = self._sessions.get(session_id)
        if seen is None:
            seen = self._sessions[session_id] = Seen(self._per_session)
            if len(self._sessions) > self._most:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(session_id)
        seen.add(message_id, self.tick)

    def __len__(self) -> int:
        return len(self._sessions)
