"""SQLite tool store (``$HERMES_HOME/tools.sqlite3``): specs, results, call samples, probes,
and the calls admitted per user (rate limits and quotas).

Implements :class:`hermesbus.processors.tool.ToolStore`. WAL mode, short inline calls,
parameterised SQL only; as :mod:`.store`, a local file needs no thread pool.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.sqlite.client import SqliteFile
from hermesbus.contract.payloads import ToolResult
from hermesbus.processors.tool import (
    KEEP_ADMITTED_MS,
    CallStats,
    Probe,
    StoredResult,
    ToolSettings,
    ToolSpec,
    Window,
    spec_from_json,
)

__all__ = ["SqliteToolStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS specs (name TEXT PRIMARY KEY, spec TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY, tool TEXT NOT NULL, digest TEXT NOT NULL, at_ms INTEGER NOT NULL,
    result TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS results_by_args ON results (tool, digest, at_ms);
CREATE INDEX IF NOT EXISTS results_by_time ON results (at_ms);
CREATE TABLE IF NOT EXISTS calls (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, tool TEXT NOT NULL, at_ms INTEGER NOT NULL,
    latency_ms REAL NOT NULL, ok INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS calls_by_tool ON calls (tool, seq);
CREATE TABLE IF NOT EXISTS admitted (
    tool TEXT NOT NULL, user TEXT NOT NULL, key TEXT NOT NULL, at_ms INTEGER NOT NULL,
    kept_ms INTEGER NOT NULL, PRIMARY KEY (tool, user, key));
CREATE INDEX IF NOT EXISTS admitted_by_user ON admitted (tool, user, at_ms);
CREATE INDEX IF NOT EXISTS admitted_by_keeping ON admitted (kept_ms);
CREATE TABLE IF NOT EXISTS probes (
    tool TEXT PRIMARY KEY, latency_ms REAL NOT NULL, success_rate REAL NOT NULL,
    quota_remaining INTEGER, checked_at_ms INTEGER NOT NULL, error TEXT NOT NULL);
"""
_KEEP_CALLS = 1000
"""Call samples kept per tool; older ones are pruned on write: the first and then every
``_PRUNE_EVERY``-th sample this store writes for a tool (the samples read are the newest
ones, so a few more kept a while change nothing)."""
_PRUNE_EVERY = 32


class SqliteToolStore(SqliteFile):
    """The embedded tool store; ``path`` defaults to ``$HERMES_HOME/tools.sqlite3``."""

    schema = _SCHEMA
    what = "tool store"
    mark_name = "tools"
    held = "the tool registry (every registered tool), released results, call samples and probes"

    def __init__(
        self,
        path: Path | str | None = None,
        settings: ToolSettings | None = None,
        *,
        book: MarkBook | None = None,
    ) -> None:
        """The file at ``path``, else where ``settings`` (the program's) say; its mark
        expected in ``book`` (none given: it refuses to start, unless in memory)."""
        if path is None and settings is None:
            raise TypeError("SqliteToolStore needs its path or its settings")
        super().__init__(
            path if path is not None else settings.tools_path,  # type: ignore[union-attr]
            home=settings.home if settings else None,
            book=book,
        )
        self._samples_written: dict[str, int] = {}

    @property
    def where(self) -> str:
        return str(self.path)

    async def save_spec(self, spec: ToolSpec) -> None:
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO specs VALUES (?, ?)", (spec.name, spec.model_dump_json())
            )

    async def replace_spec(self, expected: ToolSpec, spec: ToolSpec) -> bool:
        with self._write() as db:
            done = db.execute(
                "UPDATE specs SET spec=? WHERE name=? AND spec=?",
                (spec.model_dump_json(), spec.name, expected.model_dump_json()),
            )
            return done.rowcount == 1

    async def get_spec(self, name: str) -> ToolSpec | None:
        rows = self._rows("SELECT spec FROM specs WHERE name=?", (name,))
        return spec_from_json(rows[0][0]) if rows else None

    async def list_specs(self) -> list[ToolSpec]:
        rows = self._rows("SELECT spec FROM specs ORDER BY name", ())
        return [spec_from_json(row[0]) for row in rows]

    async def put_result(
        self, key: str, digest: str, stored: StoredResult, prune_before_ms: int | None = None
    ) -> None:
        with self._write() as db:
            if prune_before_ms is not None:
                db.execute("DELETE FROM results WHERE at_ms < ?", (prune_before_ms,))
            db.execute(
                "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?)",
                (key, stored.result.tool, digest, stored.at_ms, stored.result.model_dump_json()),
            )

    async def get_result(self, key: str) -> StoredResult | None:
        rows = self._rows("SELECT result, at_ms, digest FROM results WHERE key=?", (key,))
        return _stored(rows)

    async def last_result(self, tool: str, digest: str) -> StoredResult | None:
        rows = self._rows(
            "SELECT result, at_ms, digest FROM results WHERE tool=? AND digest=? "
            "ORDER BY at_ms DESC LIMIT 1",
            (tool, digest),
        )
        return _stored(rows)

    async def record_call(self, tool: str, at_ms: int, latency_ms: float, ok: bool) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO calls (tool, at_ms, latency_ms, ok) VALUES (?, ?, ?, ?)",
                (tool, at_ms, latency_ms, int(ok)),
            )
            written = self._samples_written[tool] = self._samples_written.get(tool, 0) + 1
            if written % _PRUNE_EVERY != 1:  # the first, then every _PRUNE_EVERY-th
                return
            db.execute(
                "DELETE FROM calls WHERE tool=? AND seq <= "
                "(SELECT seq FROM calls WHERE tool=? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                (tool, tool, _KEEP_CALLS),
            )

    async def call_stats(self, tool: str, window: int) -> CallStats | None:
        rows = self._rows(
            "SELECT COUNT(*), AVG(ok), AVG(latency_ms) FROM "
            "(SELECT ok, latency_ms FROM calls WHERE tool=? ORDER BY seq DESC LIMIT ?)",
            (tool, window),
        )
        count, success, latency = rows[0]
        return CallStats(count, float(success), float(latency)) if count else None

    async def admit_call(
        self, tool: str, user: str, key: str, at_ms: int, windows: Sequence[Window]
    ) -> str | None:
        now_ms = int(time.time() * 1000)  # pruned by this store's clock, never an envelope's
        with self._write() as db:
            known = "SELECT 1 FROM admitted WHERE tool=? AND user=? AND key=?"
            if db.execute(known, (tool, user, key)).fetchone():
                return None
            db.execute("DELETE FROM admitted WHERE kept_ms<?", (now_ms - KEEP_ADMITTED_MS,))
            for window in windows:
                (count,) = db.execute(
                    "SELECT COUNT(*) FROM admitted WHERE tool=? AND user=? AND at_ms>=? "
                    "AND at_ms<?",
                    (tool, user, window.since_ms, window.until_ms),
                ).fetchone()
                if count >= window.limit:
                    return window.name
            db.execute(
                "INSERT INTO admitted VALUES (?, ?, ?, ?, ?)", (tool, user, key, at_ms, now_ms)
            )
        return None

    async def save_probe(self, tool: str, probe: Probe) -> None:
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO probes VALUES (?, ?, ?, ?, ?, ?)",
                (
                    tool,
                    probe.latency_ms,
                    probe.success_rate,
                    probe.quota_remaining,
                    probe.checked_at_ms,
                    probe.error,
                ),
            )

    async def get_probe(self, tool: str) -> Probe | None:
        rows = self._rows(
            "SELECT latency_ms, success_rate, quota_remaining, checked_at_ms, error "
            "FROM probes WHERE tool=?",
            (tool,),
        )
        return Probe(*rows[0]) if rows else None


def _stored(rows: list[tuple[Any, ...]]) -> StoredResult | None:
    if not rows:
        return None
    result, at_ms, digest = rows[0]
    return StoredResult(ToolResult.model_validate_json(result), at_ms, digest)
