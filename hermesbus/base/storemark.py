"""Store marks: every store carries a mark of its identity, so one that comes back empty is
noticed instead of being used as if it still held what it held.

A mark is an epoch id and when it was made, written into the store (a Redis key, a SQLite
row, a Neo4j node) when the bus first uses it, and remembered outside the store in the
state folder's ``store-marks.json`` (the :class:`MarkBook`), one entry per store: its
backend, address (no secret) and namespace. The book outlives the store and the
processes, so a Redis restarted empty is noticed by the running ``up`` and by the next one.

When the store's mark is gone or differs from the book's, the store is *lost*
(:class:`MarkGuard`): every operation raises :class:`~hermesbus.errors.StoreLost`, which
the runtime retries in place (nothing is committed past it, no session moves on), with one
ERROR line naming the store and what it held, and one alert on ``hermes.alerts`` (raised
by the first processor the loss holds). Only ``hermesbus stores adopt`` resumes: it writes
a new mark and records it; a running bus sees the book change and goes on. A store whose
own mark comes back (its data restored) resumes by itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import orjson

from hermesbus.errors import ConfigError, StoreError, StoreLost

__all__ = [
    "BOOK_NAME",
    "CHECK_EVERY_S",
    "Mark",
    "MarkBook",
    "MarkGuard",
    "MarkedStore",
    "adopt_hint",
]

BOOK_NAME = "store-marks.json"
"""The book's file in the state folder (``HERMES_HOME``)."""
CHECK_EVERY_S = 5.0
"""How often a store in use reads its mark back, besides on every (re)connect and after
an error: one cheap read per store per interval, never one per record."""


def adopt_hint() -> str:
    """What the operator runs to resume (said by the log line, the error and ``doctor``)."""
    return (
        "if the loss is accepted, run `hermesbus stores adopt` (it writes a new mark; a "
        "running bus then resumes, its sessions starting afresh); or restore the store's "
        "data and the bus resumes by itself"
    )


@dataclass(frozen=True, slots=True)
class Mark:
    """A store's identity: a random epoch id and when it was made (epoch ms)."""

    epoch: str
    created_at_ms: int

    @classmethod
    def new(cls) -> Mark:
        return cls(secrets.token_hex(8), int(time.time() * 1000))

    def dumps(self) -> bytes:
        return orjson.dumps({"epoch": self.epoch, "created_at_ms": self.created_at_ms})

    @classmethod
    def loads(cls, raw: bytes | str | None) -> Mark | None:
        """The mark in ``raw`` (None: no mark, or not one of ours: it is not the mark)."""
        if raw is None:
            return None
        try:
            found = orjson.loads(raw)
            return cls(str(found["epoch"]), int(found["created_at_ms"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None

    def __str__(self) -> str:
        made = datetime.fromtimestamp(self.created_at_ms / 1000, UTC)
        return f"epoch {self.epoch} of {made:%Y-%m-%d %H:%M:%S} UTC"


class MarkBook:
    """The marks the bus expects, by store: ``store-marks.json`` in the state folder ``home``
    (written under a lock beside it, replaced atomically, so ``up`` and ``stores adopt`` can
    share). The composition gives each store the book of its settings' state folder."""

    def __init__(self, home: Path) -> None:
        self.path = home / BOOK_NAME

    def read(self) -> dict[str, Mark]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StoreError(f"cannot read the store marks {self.path}: {exc}") from exc
        try:
            found = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise StoreError(f"the store marks {self.path} are not JSON: {exc}") from exc
        marks = {store: Mark.loads(orjson.dumps(mark)) for store, mark in found.items()}
        return {store: mark for store, mark in marks.items() if mark is not None}

    def expected(self, store: str) -> Mark | None:
        return self.read().get(store)

    def record(self, store: str, mark: Mark) -> None:
        """Remember ``mark`` as ``store``'s."""
        try:
            with self._locked():
                marks = self.read()
                marks[store] = mark
                body = {name: orjson.loads(m.dumps()) for name, m in sorted(marks.items())}
                part = self.path.with_name(f".{BOOK_NAME}.{os.getpid()}")
                part.write_bytes(orjson.dumps(body, option=orjson.OPT_INDENT_2))
                part.replace(self.path)
        except OSError as exc:
            raise StoreError(f"cannot write the store marks {self.path}: {exc}") from exc

    def stamp(self) -> tuple[int, int]:
        """Changes whenever the book is rewritten (cheap: one stat)."""
        try:
            found = self.path.stat()
        except OSError:
            return (0, 0)
        return (found.st_mtime_ns, found.st_ino)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(f".{BOOK_NAME}.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield


class MarkGuard:
    """One store's mark, checked: ``store`` is its entry in ``book`` (backend, address,
    namespace), ``where`` and ``held`` say it in messages (e.g. ``the session state store
    (Redis at ...)`` and ``every session's state, outbox and timers``). ``book`` None: the
    store was given none, and :meth:`require_book` and :meth:`settle` refuse it (ConfigError).

    The backend reads and writes the mark; the guard decides. :meth:`settle` at start,
    :meth:`verify` whenever the backend read the mark (on a reconnect, when :meth:`due`,
    after :meth:`suspect`), :meth:`raise_if_lost` before every operation.
    """

    def __init__(
        self,
        store: str,
        where: str,
        held: str,
        *,
        book: MarkBook | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.where, self.held = store, where, held
        parts = store.split()
        # a logger per backend and store: the commands' once-per-30-s filter keys on it, so
        # the state, tool and memory stores lost together each get their own line
        self._log = logging.getLogger(f"{__name__}.{parts[0]}.{parts[-1]}")
        self._book = book
        self._clock = clock
        self.expected: Mark | None = None
        self.lost: StoreLost | None = None
        self._next_check = 0.0
        self._stamp: tuple[int, int] = (0, 0)

    @property
    def book(self) -> MarkBook:
        """Where the expected mark is kept: the book given (the composition gives the one of
        the program's state folder). A guard given none cannot check its store: ConfigError
        (at the store's start), never a book found elsewhere."""
        if self._book is None:
            raise ConfigError(
                f"no book of store marks given: {self.where} cannot check its mark (give the "
                "store the MarkBook of its state folder: hermesbus.compose.backends does)"
            )
        return self._book

    def require_book(self) -> None:
        """ConfigError unless a book was given: a store asks first thing at start, before
        it opens or writes anything."""
        _ = self.book

    @property
    def watching(self) -> bool:
        """Whether a mark is expected (settled and not lost): a read must match it."""
        return self.expected is not None and self.lost is None

    def settle(self, found: Mark | None) -> Mark | None:
        """At start, the store's mark ``found``: the mark to write when neither the store nor
        the book has one (first use: the caller writes it and calls :meth:`made`), else
        None. A book that knows none takes the store's; one that differs is a loss."""
        self._stamp = self.book.stamp()
        expected = self.book.expected(self.store)
        if expected is None and found is None:
            return Mark.new()
        if expected is None:
            self.made(found)
            return None
        self.expected = expected
        self.verify(found)
        return None

    def made(self, mark: Mark | None) -> None:
        """``mark`` is now the store's (written at first use, or by adoption): remembered."""
        if mark is None:
            raise StoreError(f"{self.where}: its mark could not be written")
        self.book.record(self.store, mark)
        self._stamp = self.book.stamp()
        self.expected, self.lost = mark, None
        self._next_check = self._clock() + CHECK_EVERY_S

    def due(self) -> bool:
        """Whether the mark should be read now: the interval passed, or after
        :meth:`suspect`; while lost, when the book changed (an adoption) too."""
        if self.expected is None:
            return False
        if self.lost is not None and self.book.stamp() != self._stamp:
            return True
        return self._clock() >= self._next_check

    def suspect(self) -> None:
        """An error or a reconnect: read the mark before the next operation."""
        self._next_check = 0.0

    def verify(self, found: Mark | None) -> None:
        """The store's mark as just read: a loss is noted (logged once) and raised; the mark
        back as expected (or adopted meanwhile) ends a loss."""
        self._next_check = self._clock() + CHECK_EVERY_S
        if found is None or found != self.expected:
            self._reread()  # an adoption may have recorded a new mark meanwhile
        if found is not None and found == self.expected:
            if self.lost is not None:
                self._log.warning("%s: its mark is back (%s): resuming", self.where, found)
            self.lost = None
            return
        if self.lost is None:  # said in full once; each retry raises the short form
            said = self._said(found)
            self._log.error("%s", said)
            self.lost = StoreLost(
                f"{self.where} is lost (its mark is {'gone' if found is None else 'another'}): "
                "paused until `hermesbus stores adopt` (see the STORE LOST error logged)",
                store=self.store,
                epoch=self.expected.epoch if self.expected is not None else "",
                said=said,
            )
        raise self.lost

    def raise_if_lost(self) -> None:
        if self.lost is not None:
            raise self.lost

    def _reread(self) -> None:
        self._stamp = self.book.stamp()
        self.expected = self.book.expected(self.store) or self.expected

    def _said(self, found: Mark | None) -> str:
        what = (
            "came back empty: its mark is gone"
            if found is None
            else f"is not the store the bus used: its mark is {found}"
        )
        return (
            f"STORE LOST: {self.where} {what} (expected {self.expected}, recorded in "
            f"{self.book.path}). Lost with it: {self.held}. Processing of everything that uses "
            f"it is paused in place (retried, nothing committed past it); {adopt_hint()}"
        )


class MarkedStore(Protocol):
    """A store that carries a mark (Redis, SQLite, Neo4j): what ``doctor`` and ``stores
    adopt`` use. ``marks`` is None for a store that carries none (SQLite in memory)."""

    @property
    def marks(self) -> MarkGuard | None: ...

    async def peek(self) -> Mark | None:
        """The mark in the store now, read without writing (the store need not be open)."""
        ...

    async def adopt(self) -> Mark:
        """Write a new mark into the open store and record it (the store is accepted as is)."""
        ...
