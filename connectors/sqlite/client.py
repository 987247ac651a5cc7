"""One WAL connection to one SQLite file: what every embedded store shares.

Calls are short and local, so they run inline; ``BEGIN IMMEDIATE`` makes each write a
short exclusive transaction, and every sqlite error becomes a :class:`StoreError`
naming the store and its file.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Final

from hermesbus.base.config import unwritable_home, why_unwritable
from hermesbus.base.lifecycle import Service
from hermesbus.base.storemark import Mark, MarkBook, MarkGuard
from hermesbus.connectors.sqlite.mark import MARK_SCHEMA, file_id, peek, read_mark, write_mark
from hermesbus.errors import HermesError, StoreError

__all__ = ["BUSY_TIMEOUT_MS", "SqliteFile"]

BUSY_TIMEOUT_MS = 1_500
"""How long a write waits for another process's lock by default. The wait blocks the event
loop, heartbeats included, so it stays under the embedded broker's 2 s session timeout."""


class SqliteFile(Service):
    """A store's connection: opened by ``start()`` (schema applied), closed by ``stop()``."""

    schema: ClassVar[str] = ""
    what: ClassVar[str] = "store"
    """How errors name the store, e.g. ``state store``."""
    mark_name: ClassVar[str | None] = None
    """The store's mark's name in ``hermes_mark`` (:mod:`.mark`); None: not marked."""
    held: ClassVar[str] = "what it held"
    """What is lost with the store, for the log line that says so."""

    def __init__(
        self,
        path: Path | str,
        *,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
        home: Path | None = None,
        book: MarkBook | None = None,
    ) -> None:
        """``book``: where the store's mark is expected (the composition gives the state
        folder's); a marked store given none refuses to start (ConfigError)."""
        self.path = Path(path)
        self._home = home
        """The state folder the file is in by the settings (for how a failure is said)."""
        self._timeout_s = busy_timeout_ms / 1000
        self._db: sqlite3.Connection | None = None
        self._file: tuple[int, int] | None = None
        self.marks: MarkGuard | None = None
        if self.mark_name is not None and str(path) != ":memory:":
            store = f"sqlite {self.path.absolute()} {self.mark_name}"
            where = f"the SQLite {self.what} {self.path}"
            self.marks = MarkGuard(store, where, self.held, book=book)

    async def start(self) -> None:
        if self._db is not None:
            return
        if self.marks is not None:
            self.marks.require_book()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._unmade(exc) from exc
        self._db = self._open()
        if self.marks is not None:
            with contextlib.suppress(StoreError):  # a loss: raised by the operations
                first = self.marks.settle(read_mark(self._db, str(self.mark_name)))
                if first is not None:
                    with self._write(checked=False) as db:
                        self.marks.made(write_mark(db, str(self.mark_name), first, replace=False))

    def _open(self) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(self.path, timeout=self._timeout_s, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(self.schema + (MARK_SCHEMA if self.marks is not None else ""))
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the {self.what} {self.path}: {exc}") from exc
        self._file = file_id(self.path)
        return db

    def _check_mark(self) -> None:
        """The mark read back when due (every CHECK_EVERY_S, after an error): a file deleted
        or replaced under the store, or without its mark, is a loss (``StoreLost``). While
        lost or not, a file replaced by one with the expected mark (``stores adopt``, a restored
        copy) is opened in its place."""
        marks = self.marks
        if marks is None or not marks.due():
            return
        now = file_id(self.path)
        if now == self._file:
            marks.verify(read_mark(self.db, str(self.mark_name)))
            return
        marks.verify(peek(self.path, str(self.mark_name)) if now is not None else None)
        self.db.close()  # the file there now carries the mark (adopted, or restored): use it
        self._db = self._open()

    async def adopt(self) -> Mark:
        """Accept the store as it is now (``stores adopt``): a new mark, written and recorded."""
        if self.marks is None:
            raise StoreError(f"the SQLite {self.what} {self.path} carries no mark")
        if file_id(self.path) != self._file:
            self.db.close()
            self._db = self._open()
        with self._write(checked=False) as db:
            mark = write_mark(db, str(self.mark_name), Mark.new(), replace=True)
        if mark is None:
            raise StoreError(f"the SQLite {self.what} {self.path}: its mark was not written")
        self.marks.made(mark)
        return mark

    async def peek(self) -> Mark | None:
        """The mark in the file now, opened read-only (``doctor``)."""
        return peek(self.path, str(self.mark_name))

    def _unmade(self, exc: OSError) -> HermesError:
        """The store's folder cannot be made: the state folder's SettingError when it is
        the state folder (HERMES_HOME), else a StoreError naming the store."""
        folder = self.path.parent
        if self._home is not None and folder.absolute() == self._home:
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
        self._checked()
        try:
            return self.db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(
                f"{self.what} read failed ({self.path}): {exc}", retriable=_outage(exc)
            ) from exc

    def _checked(self) -> None:
        """Raise ``StoreLost`` while the store's mark is gone (read when due)."""
        if self.marks is not None:
            try:
                self._check_mark()
            except sqlite3.Error as exc:
                self.marks.suspect()
                raise StoreError(f"{self.what} mark read failed ({self.path}): {exc}") from exc
            self.marks.raise_if_lost()

    @contextmanager
    def _write(self, *, checked: bool = True) -> Iterator[sqlite3.Connection]:
        """One exclusive write transaction; rolled back if the block raises. ``checked``:
        refused while the store's mark is gone (every operation's write)."""
        if checked:
            self._checked()
        db = self.db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                if db.in_transaction:  # SQLite rolled back itself on e.g. SQLITE_FULL
                    db.execute("ROLLBACK")
                raise
            try:
                db.execute("COMMIT")
            except sqlite3.Error:  # e.g. busy: the next write must not find it still open
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StoreError(
                f"{self.what} write failed ({self.path}): {exc}", retriable=_outage(exc)
            ) from exc


_OUTAGE_CODES: Final = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_PROTOCOL,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_NOTADB,
    }
)
"""SQLite's primary result codes of a database that is busy, locked, full, read-only, failing
on the disk or damaged: outages (held in place, never a reason to dead-letter a record).
Every other code is a statement SQLite refuses (a bug)."""


def _outage(exc: sqlite3.Error) -> bool:
    """Busy, locked, full, read-only or an I/O error (the disk or another process): an
    outage. A constraint or a statement SQLite refuses is a bug: trying again cannot help."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:  # raised by the module itself (e.g. a closed database): not SQLite's
        return False
    return code & 0xFF in _OUTAGE_CODES
