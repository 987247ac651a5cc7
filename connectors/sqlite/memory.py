"""SQLite memory stores: mid-term preferences/items and the long-term graph, one file.

Both default to ``$HERMES_HOME/memory.sqlite3`` (see ``MemorySettings``); WAL lets
readers run beside the one writer, every write is one short ``BEGIN IMMEDIATE``
transaction with parameterised SQL, and calls are local, so they run inline. The two
growing tables are bounded on write: ``choices`` to the latest observations per (user,
name), ``graph_changes`` (the redelivery ledger) to the most recent changes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, TypeVar

from hermesbus.connectors.sqlite.client import SqliteFile
from hermesbus.contract.payloads import TrustLevel
from hermesbus.processors.memory import (
    CHANGE_LEDGER,
    CHOICE_HISTORY,
    TRUST_RANK,
    ChoiceCount,
    Edge,
    GraphPlan,
    MidTermItem,
    Node,
    Planner,
    Preference,
    ReviewItem,
)

T = TypeVar("T")

__all__ = ["SqliteGraphStore", "SqlitePreferenceStore"]

_MID_TERM = """
CREATE TABLE IF NOT EXISTS preferences (
    key TEXT PRIMARY KEY, user_id TEXT NOT NULL, name TEXT NOT NULL, value_json TEXT NOT NULL,
    updated_at_ms INTEGER NOT NULL, confirmed_by TEXT NOT NULL, expires_at_ms INTEGER);
CREATE TABLE IF NOT EXISTS choices (
    observation_id TEXT PRIMARY KEY, user_id TEXT NOT NULL, name TEXT NOT NULL,
    value_json TEXT NOT NULL, at_ms INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS choices_by_name ON choices (user_id, name);
CREATE TABLE IF NOT EXISTS items (
    user_id TEXT NOT NULL, key TEXT NOT NULL, value_json TEXT NOT NULL, importance REAL NOT NULL,
    created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL, expires_at_ms INTEGER,
    confirmed_by TEXT, PRIMARY KEY (user_id, key));
"""
_GRAPH = """
CREATE TABLE IF NOT EXISTS nodes (
    entity TEXT PRIMARY KEY, trust INTEGER NOT NULL, verified_tool TEXT NOT NULL,
    verified_at_ms INTEGER NOT NULL, deprecated INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS edges (
    subject TEXT NOT NULL, relation TEXT NOT NULL, object TEXT NOT NULL, trust INTEGER NOT NULL,
    verified_tool TEXT NOT NULL, verified_at_ms INTEGER NOT NULL, deprecated INTEGER NOT NULL,
    PRIMARY KEY (subject, relation, object));
CREATE INDEX IF NOT EXISTS edges_by_object ON edges (object);
CREATE TABLE IF NOT EXISTS reviews (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, review_id TEXT NOT NULL UNIQUE, item TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS graph_changes (change_id TEXT PRIMARY KEY, plan TEXT NOT NULL);
"""
_LEVELS = {rank: level for level, rank in TRUST_RANK.items()}
_ITEM = (
    "user_id, key, value_json, importance, created_at_ms, updated_at_ms, expires_at_ms, "
    "confirmed_by"
)
_EDGE = "subject, relation, object, trust, verified_tool, verified_at_ms, deprecated"
_LIVE = "(expires_at_ms IS NULL OR ? IS NULL OR expires_at_ms > ?)"


class SqlitePreferenceStore(SqliteFile):
    """The embedded :class:`~hermesbus.processors.memory.PreferenceStore`."""

    schema = _MID_TERM
    what = "mid-term memory store"
    mark_name = "memory"
    held = "memory's confirmed preferences, choice observations and items"

    async def put_preference(self, preference: Preference) -> None:
        p = preference
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO preferences VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    p.key,
                    p.user_id,
                    p.name,
                    p.value_json,
                    p.updated_at_ms,
                    p.confirmed_by,
                    p.expires_at_ms,
                ),
            )

    async def preference(
        self, user_id: str, name: str, now_ms: int | None = None
    ) -> Preference | None:
        rows = self._rows(
            "SELECT user_id, name, value_json, updated_at_ms, confirmed_by, expires_at_ms "  # noqa: S608 - constant text, placeholders only
            f"FROM preferences WHERE key=? AND {_LIVE}",
            (f"pref:{user_id}:{name}", now_ms, now_ms),
        )
        if not rows:
            return None
        u, n, value, updated, confirmed, expires = rows[0]
        return Preference(
            user_id=u,
            name=n,
            value_json=value,
            updated_at_ms=updated,
            confirmed_by=confirmed,
            expires_at_ms=expires,
        )

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
        with self._write() as db:
            db.execute(
                "INSERT OR IGNORE INTO choices VALUES (?, ?, ?, ?, ?)",
                (observation_id, user_id, name, value_json, at_ms),
            )
            db.execute(
                "DELETE FROM choices WHERE user_id=? AND name=? AND observation_id NOT IN ("
                "SELECT observation_id FROM choices WHERE user_id=? AND name=? "
                "ORDER BY at_ms DESC, rowid DESC LIMIT ?)",
                (user_id, name, user_id, name, keep),
            )

    async def choices(self, user_id: str, name: str) -> tuple[ChoiceCount, ...]:
        rows = self._rows(
            "SELECT value_json, COUNT(*) AS n, MAX(at_ms) AS last FROM choices "
            "WHERE user_id=? AND name=? GROUP BY value_json "
            "ORDER BY n DESC, last DESC, value_json",
            (user_id, name),
        )
        return tuple(ChoiceCount(value_json=v, count=n, last_at_ms=last) for v, n, last in rows)

    async def put_item(self, item: MidTermItem) -> None:
        i = item
        with self._write() as db:
            db.execute(
                f"INSERT INTO items ({_ITEM}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "  # noqa: S608
                "ON CONFLICT (user_id, key) DO UPDATE SET value_json=excluded.value_json, "
                "importance=excluded.importance, updated_at_ms=excluded.updated_at_ms, "
                "expires_at_ms=excluded.expires_at_ms, confirmed_by=excluded.confirmed_by",
                (
                    i.user_id,
                    i.key,
                    i.value_json,
                    i.importance,
                    i.created_at_ms,
                    i.updated_at_ms,
                    i.expires_at_ms,
                    i.confirmed_by,
                ),
            )

    async def item(self, user_id: str, key: str, now_ms: int | None = None) -> MidTermItem | None:
        rows = self._rows(
            f"SELECT {_ITEM} FROM items WHERE user_id=? AND key=? AND {_LIVE}",  # noqa: S608
            (user_id, key, now_ms, now_ms),
        )
        return _item(rows[0]) if rows else None

    async def items(self, user_id: str, now_ms: int | None = None) -> tuple[MidTermItem, ...]:
        rows = self._rows(
            f"SELECT {_ITEM} FROM items WHERE user_id=? AND {_LIVE} ORDER BY key",  # noqa: S608
            (user_id, now_ms, now_ms),
        )
        return tuple(_item(row) for row in rows)

    async def purge_expired(self, user_id: str, now_ms: int) -> tuple[str, ...]:
        with self._write() as db:
            keys = [
                row[0]
                for row in db.execute(
                    "SELECT key FROM items WHERE user_id=? AND expires_at_ms<=? ORDER BY key",
                    (user_id, now_ms),
                )
            ]
            db.executemany(
                "DELETE FROM items WHERE user_id=? AND key=?", [(user_id, k) for k in keys]
            )
        return tuple(keys)

    async def evict(self, user_id: str, keep: int) -> tuple[str, ...]:
        with self._write() as db:
            keys = [
                row[0]
                for row in db.execute(
                    "SELECT key FROM items WHERE user_id=? ORDER BY importance, updated_at_ms, key",
                    (user_id,),
                )
            ]
            doomed = keys[: max(0, len(keys) - keep)]
            db.executemany(
                "DELETE FROM items WHERE user_id=? AND key=?", [(user_id, k) for k in doomed]
            )
        return tuple(doomed)


def _item(row: Sequence[Any]) -> MidTermItem:
    user_id, key, value, importance, created, updated, expires, confirmed = row
    return MidTermItem(
        user_id=user_id,
        key=key,
        value_json=value,
        importance=importance,
        created_at_ms=created,
        updated_at_ms=updated,
        expires_at_ms=expires,
        confirmed_by=confirmed,
    )


class SqliteGraphStore(SqliteFile):
    """The embedded :class:`~hermesbus.processors.memory.GraphStore`."""

    schema = _GRAPH
    what = "graph store"
    mark_name = "graph"
    held = "memory's long-term graph (entities, facts, reviews, its change ledger)"

    async def node(self, entity: str) -> Node | None:
        rows = self._rows(
            "SELECT entity, trust, verified_tool, verified_at_ms, deprecated FROM nodes "
            "WHERE entity=?",
            (entity,),
        )
        if not rows:
            return None
        name, trust, tool, at, deprecated = rows[0]
        return Node(
            entity=name,
            trust_level=_LEVELS[trust],
            verified_tool=tool,
            verified_at_ms=at,
            deprecated=bool(deprecated),
        )

    async def edge(self, subject: str, relation: str, object_: str) -> Edge | None:
        rows = self._rows(
            f"SELECT {_EDGE} FROM edges WHERE subject=? AND relation=? AND object=?",  # noqa: S608
            (subject, relation, object_),
        )
        return _edge(rows[0]) if rows else None

    async def edges_from(self, subject: str, relation: str) -> tuple[Edge, ...]:
        rows = self._rows(
            f"SELECT {_EDGE} FROM edges WHERE subject=? AND relation=? ORDER BY object",  # noqa: S608
            (subject, relation),
        )
        return tuple(_edge(row) for row in rows)

    async def facts(
        self, entity: str, minimum: TrustLevel, *, include_deprecated: bool = False
    ) -> tuple[Edge, ...]:
        rows = self._rows(
            f"SELECT {_EDGE} FROM edges WHERE (subject=? OR object=?) AND trust>=? "  # noqa: S608
            "AND (deprecated=0 OR ?) ORDER BY subject, relation, object",
            (entity, entity, TRUST_RANK[minimum], include_deprecated),
        )
        return tuple(_edge(row) for row in rows)

    async def apply(self, plan: GraphPlan, *, keep_changes: int = CHANGE_LEDGER) -> GraphPlan:
        with self._write() as db:
            seen = _recorded(db, plan.change_id)
            if seen is not None:
                return seen
            _apply(db, plan, keep_changes)
        return plan

    async def decide(
        self, change_id: str, planner: Planner[T], *, lock: str, keep_changes: int = CHANGE_LEDGER
    ) -> GraphPlan | T:
        """``BEGIN IMMEDIATE`` serialises every writer of the file, so the planner's reads
        (on this connection, inside the transaction) and the write are one; ``lock`` needs
        nothing more here. The planner's reads never yield to the event loop."""
        del lock
        with self._write() as db:
            seen = _recorded(db, change_id)
            if seen is not None:
                return seen
            decided = await planner(self)
            if isinstance(decided, GraphPlan):
                _apply(db, decided, keep_changes)
        return decided

    async def review_queue(self) -> tuple[ReviewItem, ...]:
        rows = self._rows("SELECT item FROM reviews ORDER BY seq")
        return tuple(ReviewItem.model_validate_json(row[0]) for row in rows)


def _recorded(db: sqlite3.Connection, change_id: str) -> GraphPlan | None:
    seen = db.execute("SELECT plan FROM graph_changes WHERE change_id=?", (change_id,)).fetchone()
    return None if seen is None else GraphPlan.model_validate_json(seen[0])


def _apply(db: sqlite3.Connection, plan: GraphPlan, keep_changes: int) -> None:
    db.executemany(
        "INSERT OR REPLACE INTO nodes VALUES (?, ?, ?, ?, ?)",
        [
            (
                n.entity,
                TRUST_RANK[n.trust_level],
                n.verified_tool,
                n.verified_at_ms,
                int(n.deprecated),
            )
            for n in plan.nodes
        ],
    )
    db.executemany(
        f"INSERT OR REPLACE INTO edges ({_EDGE}) VALUES (?, ?, ?, ?, ?, ?, ?)",  # noqa: S608
        [_edge_row(e) for e in plan.edges],
    )
    db.executemany(
        "INSERT OR IGNORE INTO reviews (review_id, item) VALUES (?, ?)",
        [(r.review_id, r.model_dump_json()) for r in plan.reviews],
    )
    db.execute("INSERT INTO graph_changes VALUES (?, ?)", (plan.change_id, plan.model_dump_json()))
    # rowids grow by one per insert and only the oldest rows are ever deleted
    db.execute(
        "DELETE FROM graph_changes WHERE rowid <= (SELECT MAX(rowid) FROM graph_changes) - ?",
        (keep_changes,),
    )


def _edge_row(e: Edge) -> tuple[Any, ...]:
    return (
        e.subject,
        e.relation,
        e.object,
        TRUST_RANK[e.trust_level],
        e.verified_tool,
        e.verified_at_ms,
        int(e.deprecated),
    )


def _edge(row: Sequence[Any]) -> Edge:
    subject, relation, object_, trust, tool, at, deprecated = row
    return Edge(
        subject=subject,
        relation=relation,
        object=object_,
        trust_level=_LEVELS[trust],
        verified_tool=tool,
        verified_at_ms=at,
        deprecated=bool(deprecated),
    )
