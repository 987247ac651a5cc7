"""SQLite state store: one file shared by every worker process on this machine.

WAL mode lets readers run beside the one writer; ``BEGIN IMMEDIATE`` makes each
commit a short exclusive write, and the version compare-and-set inside it fences
a worker that lost its partition. Calls are short and local, so they run inline.

State is saved as JSON with its keys in the order the handler gave them, not sorted:
a session loaded from the file then reads exactly as the runtime's cached copy of it,
so a handler that walks a dict in order behaves the same whether or not its worker
restarted in between.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

import orjson

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.sqlite.client import BUSY_TIMEOUT_MS, SqliteFile
from hermesbus.connectors.sqlite.config import SqliteConfig
from hermesbus.errors import StoreError
from hermesbus.runtime import OutRecord, SessionState, StateChange, StoredTimer

__all__ = ["SqliteStateStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS state (
    processor TEXT NOT NULL, session_id TEXT NOT NULL, version INTEGER NOT NULL,
    data TEXT NOT NULL, applied TEXT NOT NULL, PRIMARY KEY (processor, session_id));
CREATE TABLE IF NOT EXISTS outbox (
    processor TEXT NOT NULL, session_id TEXT NOT NULL, message_id TEXT NOT NULL,
    seq INTEGER NOT NULL, topic TEXT NOT NULL, partition INTEGER, key BLOB, value BLOB NOT NULL,
    headers TEXT NOT NULL, PRIMARY KEY (processor, session_id, message_id, seq));
CREATE TABLE IF NOT EXISTS timers (
    timer_id TEXT PRIMARY KEY, processor TEXT NOT NULL, session_id TEXT NOT NULL,
    purpose TEXT NOT NULL, due_at_ms INTEGER NOT NULL, topic TEXT NOT NULL,
    partition INTEGER, key BLOB, value BLOB NOT NULL, headers TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS timers_due ON timers (processor, topic, partition, due_at_ms);
CREATE INDEX IF NOT EXISTS timers_purpose ON timers (processor, session_id, purpose);
CREATE TABLE IF NOT EXISTS alive (
    processor TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    at_ms INTEGER NOT NULL, PRIMARY KEY (processor, topic, partition));
"""
_TIMER_COLUMNS = (
    "timer_id, processor, session_id, purpose, due_at_ms, topic, partition, key, value, headers"
)


class _Queued(NamedTuple):
    """A commit waiting for the next group transaction (one per record: a cheap tuple)."""

    processor: str
    session_id: str
    change: StateChange
    data: str
    applied: str
    future: asyncio.Future[bool]


class SqliteStateStore(SqliteFile):
    """The embedded :class:`~hermesbus.runtime.StateStore` (``$HERMES_HOME/state.sqlite3``)."""

    schema = _SCHEMA
    what = "state store"
    mark_name = "state"
    held = "every session's state, outboxes and timers (sessions in flight cannot go on)"

    def __init__(
        self,
        path: Path | str | None = None,
        config: SqliteConfig | None = None,
        *,
        book: MarkBook | None = None,
    ) -> None:
        """The file at ``path``, else where ``config`` (the program's settings) says; its
        mark expected in ``book`` (none given: it refuses to start, unless in memory)."""
        if path is None and config is None:
            raise TypeError("SqliteStateStore needs its path or its config")
        super().__init__(
            path if path is not None else config.path,  # type: ignore[union-attr]
            busy_timeout_ms=config.busy_timeout_ms if config else BUSY_TIMEOUT_MS,
            home=config.home if config else None,
            book=book,
        )
        self._queued: list[_Queued] = []

    @property
    def where(self) -> str:
        return f"SQLite {self.path}"

    async def close(self) -> None:
        await self.stop()

    async def load(self, processor: str, session_id: str) -> SessionState:
        rows = self._rows(
            "SELECT version, data, applied FROM state WHERE processor=? AND session_id=?",
            (processor, session_id),
        )
        if not rows:
            return SessionState()
        row = rows[0]
        data = MappingProxyType(json.loads(row[1]))  # handlers get read-only state
        return SessionState(row[0], data, tuple(json.loads(row[2])))

    async def commit(self, processor: str, session_id: str, change: StateChange) -> bool:
        """Queue the change; every commit queued in the same loop turn shares one transaction.

        Each change keeps its own compare-and-set: one that loses writes nothing, the others
        in the batch are unaffected. Group commit is what lets SQLite keep up with dozens of
        sessions in flight.
        """
        keep = not change.data_changed and change.expected_version > 0
        data = "" if keep else json.dumps(dict(change.data), separators=(",", ":"))
        applied = orjson.dumps(change.applied).decode()  # up to applied_window ids, each commit
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._queued.append(_Queued(processor, session_id, change, data, applied, future))
        if len(self._queued) == 1:
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        batch, self._queued = self._queued, []
        try:
            with self._write() as db:
                results = [self._commit_one(db, q) for q in batch]
        except Exception as exc:  # every waiter hears of it; none is left hanging
            failure = exc if isinstance(exc, StoreError) else StoreError(f"group commit: {exc}")
            for queued in batch:
                if not queued.future.done():
                    queued.future.set_exception(failure)
            return
        for queued, ok in zip(batch, results, strict=True):
            if not queued.future.done():
                queued.future.set_result(ok)

    def _commit_one(self, db: sqlite3.Connection, q: _Queued) -> bool:
        if q.change.expected_version == 0:
            moved = db.execute(
                "INSERT OR IGNORE INTO state VALUES (?, ?, 1, ?, ?)",
                (q.processor, q.session_id, q.data, q.applied),
            ).rowcount
        elif not q.data:  # the data did not change: only the version and the applied ids
            moved = db.execute(
                "UPDATE state SET version=version+1, applied=? "
                "WHERE processor=? AND session_id=? AND version=?",
                (q.applied, q.processor, q.session_id, q.change.expected_version),
            ).rowcount
        else:
            moved = db.execute(
                "UPDATE state SET version=version+1, data=?, applied=? "
                "WHERE processor=? AND session_id=? AND version=?",
                (q.data, q.applied, q.processor, q.session_id, q.change.expected_version),
            ).rowcount
        if moved != 1:
            return False  # nothing of this change was written
        self._apply(db, q.processor, q.session_id, q.change)
        return True

    def _apply(
        self, db: sqlite3.Connection, processor: str, session_id: str, change: StateChange
    ) -> None:
        if change.clear_previous:
            db.execute(
                "DELETE FROM outbox WHERE processor=? AND session_id=?", (processor, session_id)
            )
        if change.outbox:
            db.executemany(
                "INSERT OR REPLACE INTO outbox VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (processor, session_id, change.message_id, seq, *_record_row(r))
                    for seq, r in enumerate(change.outbox)
                ],
            )
        if change.cancel:
            db.executemany(
                "DELETE FROM timers WHERE processor=? AND session_id=? AND purpose=?",
                [(processor, session_id, purpose) for purpose in change.cancel],
            )
        for timer in change.timers:
            _insert_timer(db, timer)

    async def outbox(self, processor: str, session_id: str, message_id: str) -> list[OutRecord]:
        rows = self._rows(
            "SELECT topic, partition, key, value, headers FROM outbox "
            "WHERE processor=? AND session_id=? AND message_id=? ORDER BY seq",
            (processor, session_id, message_id),
        )
        return [_record(*row) for row in rows]

    async def clear_outbox(self, processor: str, session_id: str, message_id: str) -> None:
        with self._write() as db:
            db.execute(
                "DELETE FROM outbox WHERE processor=? AND session_id=? AND message_id=?",
                (processor, session_id, message_id),
            )

    async def schedule(self, timer: StoredTimer) -> None:
        with self._write() as db:
            _insert_timer(db, timer)

    async def due(
        self, processor: str, partitions: Sequence[tuple[str, int]], now_ms: int, limit: int
    ) -> list[StoredTimer]:
        if not partitions:
            return []
        owned = " OR ".join("(topic=? AND partition=?)" for _ in partitions)
        args: list[Any] = [processor, now_ms]
        for topic, partition in partitions:
            args += [topic, partition]
        rows = self._rows(
            f"SELECT {_TIMER_COLUMNS} FROM timers WHERE processor=? AND due_at_ms<=? "  # noqa: S608 - placeholders only
            f"AND ({owned}) ORDER BY due_at_ms LIMIT ?",
            [*args, limit],
        )
        return [
            StoredTimer(r[0], r[1], r[2], r[3], r[4], _record(r[5], r[6], r[7], r[8], r[9]))
            for r in rows
        ]

    async def delete_timer(self, timer_id: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM timers WHERE timer_id=?", (timer_id,))

    async def heartbeat(
        self, processor: str, partitions: Sequence[tuple[str, int]], now_ms: int
    ) -> None:
        if not partitions:
            return
        with self._write() as db:
            db.executemany(
                "INSERT OR REPLACE INTO alive (processor, topic, partition, at_ms) "
                "VALUES (?, ?, ?, ?)",
                [(processor, topic, partition, now_ms) for topic, partition in partitions],
            )

    async def resume(self, processor: str, topic: str, partition: int, now_ms: int) -> int:
        with self._write() as db:
            row = db.execute(
                "SELECT at_ms FROM alive WHERE processor=? AND topic=? AND partition=?",
                (processor, topic, partition),
            ).fetchone()
            gap = max(0, now_ms - int(row[0])) if row is not None else 0
            if gap:
                db.execute(
                    "UPDATE timers SET due_at_ms = due_at_ms + ? WHERE processor=? AND topic=? "
                    "AND partition=? AND due_at_ms > ?",
                    (gap, processor, topic, partition, int(row[0])),
                )
            db.execute(
                "INSERT OR REPLACE INTO alive (processor, topic, partition, at_ms) "
                "VALUES (?, ?, ?, ?)",
                (processor, topic, partition, now_ms),
            )
        return gap


def _record_row(record: OutRecord) -> tuple[Any, ...]:
    headers = json.dumps([[k, v.hex()] for k, v in record.headers])
    return (record.topic, record.partition, record.key, record.value, headers)


def _record(
    topic: str, partition: int | None, key: bytes | None, value: bytes, headers: str
) -> OutRecord:
    pairs = tuple((k, bytes.fromhex(v)) for k, v in json.loads(headers))
    return OutRecord(topic, key, value, pairs, partition)


def _insert_timer(db: sqlite3.Connection, timer: StoredTimer) -> None:
    db.execute(  # one timer per session and purpose: a new one replaces the old
        "DELETE FROM timers WHERE processor=? AND session_id=? AND purpose=? AND timer_id<>?",
        (timer.processor, timer.session_id, timer.purpose, timer.timer_id),
    )
    db.execute(
        f"INSERT OR REPLACE INTO timers ({_TIMER_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",  # noqa: S608
        (
            timer.timer_id,
            timer.processor,
            timer.session_id,
            timer.purpose,
            timer.due_at_ms,
            *_record_row(timer.record),
        ),
    )
