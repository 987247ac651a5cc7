"""``MemoryStores``: the memory processor's one port (``ports["memory"]``) and read API.

It holds a :class:`PreferenceStore`, a :class:`GraphStore`, the settings and the
validator registry. The stores are given: the processor knows their Protocols, never a
backend (``hermesbus.compose.backends.memory_stores`` picks them from settings: SQLite on
``$HERMES_HOME/memory.sqlite3`` by default).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from hermesbus.base.lifecycle import Service
from hermesbus.contract.payloads import TrustLevel
from hermesbus.processors.memory._model import (
    ChoiceCount,
    Edge,
    MidTermItem,
    Preference,
    ReviewItem,
    millis,
)
from hermesbus.processors.memory._ports import GraphStore, PreferenceStore
from hermesbus.processors.memory._settings import MemorySettings
from hermesbus.processors.memory._symbols import VALIDATORS, Validator

__all__ = ["MemoryStores"]


class MemoryStores(Service):
    """Mid-term and long-term stores plus settings; starts and stops both stores."""

    def __init__(
        self,
        settings: MemorySettings,
        *,
        preferences: PreferenceStore,
        graph: GraphStore,
        validators: Mapping[str, Validator] | None = None,
    ) -> None:
        self.settings = settings
        self.validators: Mapping[str, Validator] = validators or VALIDATORS
        self.preferences: PreferenceStore = preferences
        self.graph: GraphStore = graph

    async def start(self) -> None:
        await self.preferences.start()
        await self.graph.start()

    async def stop(self) -> None:
        await self.graph.stop()
        await self.preferences.stop()

    # -- the read API (demo, tests, CLI) ------------------------------------------------

    async def items(self, user_id: str, now: datetime | None = None) -> tuple[MidTermItem, ...]:
        """The user's mid-term items (not preferences), hiding those expired by ``now``."""
        return await self.preferences.items(user_id, None if now is None else millis(now))

    async def item(self, user_id: str, key: str, now: datetime | None = None) -> MidTermItem | None:
        return await self.preferences.item(user_id, key, None if now is None else millis(now))

    async def preference(
        self, user_id: str, name: str, now: datetime | None = None
    ) -> Preference | None:
        """``pref:{user_id}:{name}`` with value, updated_at and confirmed_by, or None."""
        return await self.preferences.preference(
            user_id, name, None if now is None else millis(now)
        )

    async def choices(self, user_id: str, name: str) -> tuple[ChoiceCount, ...]:
        return await self.preferences.choices(user_id, name)

    async def facts(
        self,
        entity: str,
        trust_level: TrustLevel = TrustLevel.VERIFIED,
        *,
        include_deprecated: bool = False,
    ) -> tuple[Edge, ...]:
        """Edges of ``entity`` (as subject or object) trusted at ``trust_level`` or above."""
        return await self.graph.facts(entity, trust_level, include_deprecated=include_deprecated)

    async def edge(self, subject: str, relation: str, object_: str) -> Edge | None:
        return await self.graph.edge(subject, relation, object_)

    async def review_queue(self) -> tuple[ReviewItem, ...]:
        return await self.graph.review_queue()
