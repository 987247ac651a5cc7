"""The memory processor's I/O boundaries: a mid-term store and a long-term graph store.

One implementation per backend (SQLite in ``hermesbus.connectors.sqlite.memory``;
Redis and Neo4j later), all passing the same abstract test suites. Both are services:
``start()``/``stop()`` are idempotent and ``async with`` opens and closes them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar, runtime_checkable

from hermesbus.contract.payloads import TrustLevel
from hermesbus.processors.memory._model import (
    ChoiceCount,
    Edge,
    GraphPlan,
    MidTermItem,
    Node,
    Preference,
    ReviewItem,
)

__all__ = [
    "CHANGE_LEDGER",
    "CHOICE_HISTORY",
    "GraphReader",
    "GraphStore",
    "Planner",
    "PreferenceStore",
]

T = TypeVar("T")

CHOICE_HISTORY = 20
"""Default observations kept per (user, name): the latest ones; enough for the 3-choice rule."""
CHANGE_LEDGER = 10_000
"""Default applied graph changes remembered (the redelivery ledger), the most recent ones."""


@runtime_checkable
class PreferenceStore(Protocol):
    """Mid-term memory: confirmed preferences, choice observations and budgeted items.

    ``now_ms`` arguments hide what expired by then; None shows everything stored.
    """

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def put_preference(self, preference: Preference) -> None:
        """Insert or replace ``pref:{user_id}:{name}``."""
        ...

    async def preference(
        self, user_id: str, name: str, now_ms: int | None = None
    ) -> Preference | None: ...

    async def observe_choice(
        self,
        user_id: str,
        name: str,
        value_json: str,
        observation_id: str,
        at_ms: int,
        *,
        keep: int = CHOICE_HISTORY,
    ) -> None:
        """Count one choice; the same ``observation_id`` twice counts once (redelivery).
        Only the latest ``keep`` observations of (user, name) are kept (by ``at_ms``)."""
        ...

    async def choices(self, user_id: str, name: str) -> tuple[ChoiceCount, ...]:
        """Counts per value, most chosen first, then most recently chosen."""
        ...

    async def put_item(self, item: MidTermItem) -> None:
        """Insert or update by (user_id, key); an update keeps the stored ``created_at_ms``."""
        ...

    async def item(
        self, user_id: str, key: str, now_ms: int | None = None
    ) -> MidTermItem | None: ...

    async def items(self, user_id: str, now_ms: int | None = None) -> tuple[MidTermItem, ...]:
        """The user's items, by key."""
        ...

    async def purge_expired(self, user_id: str, now_ms: int) -> tuple[str, ...]:
        """Delete the user's items expired at ``now_ms``; their keys, sorted."""
        ...

    async def evict(self, user_id: str, keep: int) -> tuple[str, ...]:
        """Delete items until ``keep`` remain: least important first, then least recently
        updated, then by key; the deleted keys in that order."""
        ...


class GraphReader(Protocol):
    """What deciding a write reads of the graph (a store, or one of its transactions)."""

    async def node(self, entity: str) -> Node | None: ...

    async def edge(self, subject: str, relation: str, object_: str) -> Edge | None: ...

    async def edges_from(self, subject: str, relation: str) -> tuple[Edge, ...]:
        """Every edge of (subject, relation), deprecated ones included, by object."""
        ...


Planner = Callable[[GraphReader], Awaitable[GraphPlan | T]]
"""Reads the graph and returns the plan of a change, or something else (a refusal) that
writes nothing."""


@runtime_checkable
class GraphStore(GraphReader, Protocol):
    """Long-term memory: the entity graph, its deprecated edges and the review queue."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def facts(
        self, entity: str, minimum: TrustLevel, *, include_deprecated: bool = False
    ) -> tuple[Edge, ...]:
        """Edges with ``entity`` as subject or object, trusted at ``minimum`` or above,
        ordered by (subject, relation, object)."""
        ...

    async def apply(self, plan: GraphPlan, *, keep_changes: int = CHANGE_LEDGER) -> GraphPlan:
        """Apply the plan in one transaction, unless its ``change_id`` was applied before;
        either way return the plan that was applied for that id. The ledger of applied ids
        keeps the most recent ``keep_changes``: a redelivery older than that applies again."""
        ...

    async def decide(
        self, change_id: str, planner: Planner[T], *, lock: str, keep_changes: int = CHANGE_LEDGER
    ) -> GraphPlan | T:
        """Read, decide and write in one transaction: unless ``change_id`` was applied
        before (its recorded plan comes back), ``planner`` reads the graph as it is inside
        the transaction and the plan it returns is applied there, so two writers deciding
        on the same ``lock`` (an entity) one after the other see each other's facts. What
        else the planner returns comes back with nothing written."""
        ...

    async def review_queue(self) -> tuple[ReviewItem, ...]:
        """Facts waiting for human review, in the order they were queued."""
        ...
