"""Envelopes, stores and a runner for the memory tests (the demo's user, sessions, dates)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hermesbus import Envelope, Payload
from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.sqlite.memory import SqliteGraphStore, SqlitePreferenceStore
from hermesbus.contract.fields import Record
from hermesbus.contract.payloads import MemoryTier, MemoryWrite, TrustLevel, Verification
from hermesbus.processors.memory import (
    NAME,
    TOPIC,
    GraphStore,
    MemorySettings,
    MemoryStores,
    PreferenceStore,
    handle,
)
from hermesbus.runtime import HandlerInput, Outcome, SessionState
from hermesbus.testing import Harness

T0 = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)
"""The demo app dates its turns 2024-06-03."""
USER = "u_xyz789"
SESSION = "sess_456"
DISPATCHER = "mcp:dispatcher"

PREFERENCE_STORES: dict[str, Callable[[Path], PreferenceStore]] = {
    "sqlite": lambda tmp: SqlitePreferenceStore(tmp / "memory.sqlite3", book=MarkBook(tmp)),
}
"""Every PreferenceStore implementation; Redis joins here and the same suites run on it."""
GRAPH_STORES: dict[str, Callable[[Path], GraphStore]] = {
    "sqlite": lambda tmp: SqliteGraphStore(tmp / "memory.sqlite3", book=MarkBook(tmp)),
}
"""Every GraphStore implementation; Neo4j joins here."""


def at(seconds: float = 0) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ms(when: datetime) -> int:
    return int((when - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(milliseconds=1))


def envelope(
    body: Record,
    *,
    message_id: str = "m1",
    when: datetime = T0,
    source: str = DISPATCHER,
    target: str = "memory:context",
    session_id: str = SESSION,
    user_id: str = USER,
    context: Mapping[str, Any] | None = None,
    task: str = "",
) -> Envelope:
    return Envelope(
        message_id=message_id,
        timestamp=when,
        source=source,
        target=target,
        session_id=session_id,
        user_id=user_id,
        trace_id="trace_789",
        span_id="span-in",
        payload=Payload(task=task, context=dict(context or {}), body=body),
    )


def fact_write(
    subject: str,
    relation: str,
    object_: str,
    *,
    tool: str = "org_tool",
    when: datetime = T0,
    trust: TrustLevel = TrustLevel.VERIFIED,
    verified: bool = True,
) -> MemoryWrite:
    """What the dispatcher sends for a verified tool fact."""
    fact = {"subject": subject, "relation": relation, "object": object_}
    return MemoryWrite(
        tier=MemoryTier.LONG_TERM,
        key=f"{subject}|{relation}|{object_}",
        value_json=json.dumps(fact, ensure_ascii=False),
        verified_by=Verification(tool=tool, verified_at=when) if verified else None,
        trust_level=trust,
    )


def stores_for(tmp: Path, impl: str = "sqlite", **settings: Any) -> MemoryStores:
    return MemoryStores(
        MemorySettings(home=tmp, **settings),
        preferences=PREFERENCE_STORES[impl](tmp),
        graph=GRAPH_STORES[impl](tmp),
    )


class Session:
    """Feeds envelopes to the handler in order through :class:`Harness`, which carries the
    state like the runtime does (saved as JSON)."""

    def __init__(self, stores: MemoryStores) -> None:
        self.stores = stores
        self.harness = Harness().processor(NAME, handle, [TOPIC], ports={NAME: stores})
        self._count = 0
        self.session = SESSION

    @property
    def state(self) -> SessionState:
        """The state of the session last sent."""
        return self.harness.state(NAME, self.session)

    async def send(self, env: Envelope) -> Outcome:
        self.session = env.session_id
        return (await self.harness.handle(NAME, env)).outcome

    async def unsaved(self, env: Envelope, state: SessionState) -> Outcome:
        """``env`` run again on ``state``, as after a crash between the stores' writes and
        the state's save (the runtime redelivers it; the harness would skip it as applied)."""
        return await handle(HandlerInput(env, state, NAME, ports={NAME: self.stores}))

    async def write(
        self, write: MemoryWrite, *, when: datetime | None = None, **fields: Any
    ) -> Outcome:
        """Send ``write``, dated ``when`` or else when its tool verified it (else T0)."""
        if when is None:
            when = write.verified_by.verified_at if write.verified_by is not None else T0
        self._count += 1
        fields.setdefault("message_id", f"w{self._count}")
        fields.setdefault("target", f"memory:{write.tier.value}")
        return await self.send(envelope(write, when=when, **fields))
