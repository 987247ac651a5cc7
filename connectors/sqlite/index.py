"""The embedded trace index: every envelope's document in ``$HERMES_HOME/index.sqlite3``.

A file of its own, so indexing never waits for the state store's lock. The columns are
the fields the commands filter on; the whole document (raw bytes included) is kept as
JSON, so every query answers with the same documents Elasticsearch would.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from hermesbus.connectors.sqlite.client import BUSY_TIMEOUT_MS, SqliteFile
from hermesbus.connectors.sqlite.config import SqliteConfig
from hermesbus.trace.index import Document, Search, WriteResult

__all__ = ["SqliteTraceIndex"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS envelopes (
    id TEXT PRIMARY KEY, ts_ms INTEGER NOT NULL, topic TEXT NOT NULL,
    partition INTEGER NOT NULL, offset INTEGER NOT NULL, trace_id TEXT, session_id TEXT,
    message_id TEXT, service TEXT, action TEXT, outcome TEXT, text TEXT, doc TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS envelopes_trace ON envelopes (trace_id, ts_ms);
CREATE INDEX IF NOT EXISTS envelopes_session ON envelopes (session_id, ts_ms);
CREATE INDEX IF NOT EXISTS envelopes_message ON envelopes (message_id);
CREATE INDEX IF NOT EXISTS envelopes_time ON envelopes (ts_ms);
"""
_ORDER = "ORDER BY ts_ms, topic, partition, offset"
_BY_TRACE = "SELECT doc FROM envelopes WHERE trace_id = ? ORDER BY ts_ms, topic, partition, offset"
_BY_SESSION = (
    "SELECT doc FROM envelopes WHERE session_id = ? ORDER BY ts_ms, topic, partition, offset"
)
_INSERT = (
    "INSERT OR IGNORE INTO envelopes (id, ts_ms, topic, partition, offset, trace_id, "
    "session_id, message_id, service, action, outcome, text, doc) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class SqliteTraceIndex(SqliteFile):
    """The embedded :class:`~hermesbus.trace.index.TraceIndex`."""

    schema = _SCHEMA
    what = "trace index"

    def __init__(self, path: Path | str | None = None, config: SqliteConfig | None = None) -> None:
        """The file at ``path``, else ``index.sqlite3`` in ``config``'s state folder."""
        if path is None and config is None:
            raise TypeError("SqliteTraceIndex needs its path or its config")
        super().__init__(
            path if path is not None else config.home / "index.sqlite3",  # type: ignore[union-attr]
            busy_timeout_ms=config.busy_timeout_ms if config else BUSY_TIMEOUT_MS,
            home=config.home if config else None,
        )
        self.where = str(self.path)

    async def write(self, docs: Sequence[Document]) -> WriteResult:
        rows = [_row(doc) for doc in docs]
        ids = [row[0] for row in rows]
        with self._write() as db:
            there = set()
            for start in range(0, len(ids), 500):  # which are stored already, then one insert
                chunk = ids[start : start + 500]
                marks = ", ".join("?" * len(chunk))
                sql = f"SELECT id FROM envelopes WHERE id IN ({marks})"  # noqa: S608 - marks
                there |= {found for (found,) in db.execute(sql, chunk)}
            db.executemany(_INSERT, [row for row in rows if row[0] not in there])
        stored = [i for i in ids if i not in there]
        return WriteResult(stored=stored, existing=[i for i in ids if i in there])

    async def by_trace(self, trace_id: str) -> list[Document]:
        return self._docs(_BY_TRACE, [trace_id])

    async def by_session(self, session_id: str) -> list[Document]:
        return self._docs(_BY_SESSION, [session_id])

    async def search(self, query: Search) -> list[Document]:
        where, args = _filters(query)
        sql = f"SELECT doc FROM envelopes {where} {_ORDER} LIMIT ?"  # noqa: S608 - fixed columns
        return self._docs(sql, [*args, query.limit])

    async def appended(self, message_ids: Sequence[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for start in range(0, len(message_ids), 500):
            chunk = list(message_ids[start : start + 500])
            marks = ", ".join("?" * len(chunk))
            sql = (
                f"SELECT message_id, MIN(ts_ms) FROM envelopes "  # noqa: S608 - marks only
                f"WHERE message_id IN ({marks}) GROUP BY message_id"
            )
            found |= dict(self._rows(sql, chunk))
        return found

    async def count(self) -> int:
        return int(self._rows("SELECT COUNT(*) FROM envelopes")[0][0])

    def _docs(self, sql: str, args: Sequence[Any]) -> list[Document]:
        return [json.loads(text) for (text,) in self._rows(sql, args)]


def _row(doc: Document) -> tuple[Any, ...]:
    messaging = doc["messaging"]
    kafka = messaging["kafka"]
    hermes = doc.get("hermes", {})
    text = " ".join(filter(None, [doc.get("message"), hermes.get("payload_text")]))
    error = doc.get("error") or {}
    text = " ".join(filter(None, [text, error.get("message")]))
    return (
        doc["_id"],
        hermes["kafka"]["timestamp_ms"],
        messaging["destination"]["name"],
        kafka["destination"]["partition"],
        kafka["message"]["offset"],
        (doc.get("trace") or {}).get("id"),
        (doc.get("gen_ai") or {}).get("conversation", {}).get("id"),
        doc["event"].get("id"),
        (doc.get("service") or {}).get("name"),
        doc["event"].get("action"),
        doc["event"].get("outcome"),
        text,
        orjson.dumps(doc).decode(),
    )


def _filters(query: Search) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    args: list[Any] = []
    for column, value in (
        ("service", query.component),
        ("outcome", query.outcome),
        ("session_id", query.session_id),
        ("trace_id", query.trace_id),
        ("topic", query.topic),
        ("action", query.action),
    ):
        if value is not None:
            clauses.append(f"{column} = ?")
            args.append(value)
    if query.since_ms is not None:
        clauses.append("ts_ms >= ?")
        args.append(query.since_ms)
    if query.until_ms is not None:
        clauses.append("ts_ms < ?")
        args.append(query.until_ms)
    if query.text:
        clauses.append("instr(lower(text), lower(?)) > 0")
        args.append(query.text)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", args
