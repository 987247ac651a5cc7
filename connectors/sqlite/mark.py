"""A SQLite store's mark (:mod:`hermesbus.base.storemark`): a row of ``hermes_mark`` in its file.

A file deleted or replaced under a running store is noticed by its identity (device and
inode) changing, read at the same times as the mark: every ``CHECK_EVERY_S`` and after an
error, so never a system call per record beyond SQLite's own.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from hermesbus.base.storemark import Mark

__all__ = ["MARK_SCHEMA", "file_id", "peek", "read_mark", "write_mark"]

MARK_SCHEMA = """
CREATE TABLE IF NOT EXISTS hermes_mark (name TEXT PRIMARY KEY, mark TEXT NOT NULL);
"""


def file_id(path: Path) -> tuple[int, int] | None:
    """The file's device and inode (None: no file there)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino)


def read_mark(db: sqlite3.Connection, name: str) -> Mark | None:
    rows = db.execute("SELECT mark FROM hermes_mark WHERE name=?", (name,)).fetchall()
    return Mark.loads(rows[0][0]) if rows else None


def write_mark(db: sqlite3.Connection, name: str, mark: Mark, *, replace: bool) -> Mark | None:
    """Write ``mark`` (``replace``: over the one there, else only if none); the mark now there."""
    verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
    db.execute(f"{verb} INTO hermes_mark VALUES (?, ?)", (name, mark.dumps().decode()))
    return read_mark(db, name)


def peek(path: Path, name: str) -> Mark | None:
    """The mark in the file at ``path``, opened read-only (None: no file, no mark)."""
    if not path.exists():
        return None
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        return read_mark(db, name)
    except sqlite3.Error:
        return None  # no mark table: a file the bus never marked
    finally:
        db.close()
