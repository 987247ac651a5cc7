"""One WAL connection to one SQLite file: what every embedded store shares.

Calls are short and local, so they run inline; ``BEGIN IMMEDIATE`` makes each write a
short exclusive transaction, and every sqlite error becomes a :class:`StoreError`
naming the store and its file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from hermesbus.config import HermesSettings, unwritable_home, why_unwritable
from hermesbus.errors import HermesError, StoreError
from hermesbus.lifecycle import Service

__all__ = ["BUSY_TIMEOUT_MS", "SqliteFile"]

BUSY_TIMEOUT_MS = 1_500
"""How long a write waits for another process's lock by default. The wait blocks the event
loop, heartbeats included, so it stays under the embedded broker's 2 s session timeout."""


class SqliteFile(Service):
    """A store's connection: opened by ``start()`` (schema applied), closed by ``stop()``."""

    schema: ClassVar[str] = ""
    what: ClassVar[str] = "store"
    """How errors name the store, e.g. ``state store``."""

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        self.path = Path(path)
        self._timeout_s = busy_timeout_ms / 1000
        self._db: sqlite3.Connection | None = None

    async def start(self) -> None:
        if self._db is not None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._unmade(exc) from exc
        try:
            db = sqlite3.connect(self.path, timeout=self._timeout_s, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(self.schema)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the {self.what} {self.path}: {exc}") from exc
        self._db = db

    def _unmade(self, exc: OSError) -> HermesError:
        """The store's folder cannot be made: the state folder's SettingError when it is
        the state folder (HERMES_HOME), else a StoreError naming the store."""
        folder = self.path.parent
        if folder.absolute() == HermesSettings().home:
            return unwritable_home(folder, exc)
        why = why_unwritable(folder, exc)
        return StoreError(f"cannot open the {self.what} {self.path}: {why}")

    async def stop(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError(f"the SQLite {self.what} is not started")
        return self._db

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        try:
            return self.db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.what} read failed ({self.path}): {exc}") from exc

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One exclusive write transaction; rolled back if the block raises."""
        db = self.db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"{self.what} write failed ({self.path}): {exc}") from exc
