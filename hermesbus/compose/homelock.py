"""One bus per state folder: an exclusive lock on ``HERMES_HOME/bus.lock`` while it runs.

Two buses on one ``HERMES_HOME`` would write the same SQLite stores and keys. The lock
is ``flock`` on that file, held by an open descriptor for the life of the bus, so the
kernel releases it when the process ends in any way (``kill -9`` too): no stale lock
is ever left. The file says who holds it (pid, command, since when), for the next
``up`` to name and for ``doctor``; reading it takes no lock, so the read-only commands
(trace, tail, doctor, ...) work while a bus runs.

On NFS, Linux emulates ``flock`` with POSIX locks held per process and kept by the server
until a dead client's lease ends (about 90 s): keep ``HERMES_HOME`` on a local disk. A
second bus on one host takes a folder of its own (with Redis and Neo4j configured, only
its keys file, ``HERMES_KEYS_FILE``, needs to be shared).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hermesbus.base.config import HOME_ENV, unwritable_home
from hermesbus.errors import ConfigError

__all__ = ["LOCK_FILE", "Holder", "held_by", "home_lock"]

LOCK_FILE = "bus.lock"
_COMMAND_CHARS = 200


@dataclass(frozen=True)
class Holder:
    """The process that holds a state folder's lock, as it wrote itself into the file."""

    pid: int | None
    command: str
    started: float | None
    """Seconds since the epoch."""

    def describe(self) -> str:
        """``pid 4242 (hermesbus up --demo), since 2025-01-31 14:02:07``."""
        who = f"pid {self.pid}" if self.pid is not None else "another process"
        what = f" ({self.command})" if self.command else ""
        since = ""
        if self.started is not None:
            since = f", since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.started))}"
        return who + what + since


@contextlib.contextmanager
def home_lock(home: Path) -> Iterator[Path]:
    """Hold ``home``'s lock for the ``with`` block (creating ``home`` if needed); its path.

    Another process holding it: a ConfigError naming that process and what to do.
    """
    path = home / LOCK_FILE
    fd = _open(home, path)
    try:
        if not _exclusive(fd):
            holder = _read(fd)
            raise ConfigError(
                f"a bus already runs on {home}: {holder.describe()} holds {path}. Stop it "
                f"(Ctrl-C where it runs, or kill {holder.pid or 'it'}), or set {HOME_ENV} "
                "to another folder"
            ) from None
        _write(fd)
        yield path
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


_PATIENCE_S = 0.5
"""How long a held lock is tried again: ``held_by`` (doctor) holds it shared for an instant."""


def _exclusive(fd: int) -> bool:
    """The exclusive lock, tried again for up to :data:`_PATIENCE_S` (False: still held)."""
    deadline = time.monotonic() + _PATIENCE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        else:
            return True


def held_by(home: Path) -> Holder | None:
    """Who holds ``home``'s lock now (None: nobody); takes no lock that stays, writes nothing."""
    try:
        fd = os.open(home / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)  # free: what the file says is a bus that ended
        return None
    finally:
        os.close(fd)


def _open(home: Path, path: Path) -> int:
    """The lock file's descriptor; the folder not writable: the SettingError of every command."""
    try:
        home.mkdir(parents=True, exist_ok=True)
        # O_CLOEXEC: the broker and the tool workers must not inherit it (and keep the lock)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise unwritable_home(home, exc) from exc  # said as every command says it


def _write(fd: int) -> None:
    said = {"pid": os.getpid(), "command": _command(), "started": time.time()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(said) + "\n").encode(), 0)


def _read(fd: int) -> Holder:
    """What the holder wrote (it may not have written yet: then no pid)."""
    try:
        said = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        said = {}
    said = said if isinstance(said, dict) else {}
    pid, started = said.get("pid"), said.get("started")
    return Holder(
        pid if isinstance(pid, int) else None,
        str(said.get("command", "")),
        float(started) if isinstance(started, int | float) else None,
    )


def _command() -> str:
    """``hermesbus up --demo``: the program's name (not its path) and its arguments."""
    if Path(sys.argv[0]).name in {"hermesbus", "__main__.py"}:  # or python -m hermesbus.cli
        words = ["hermesbus", *sys.argv[1:]]
    else:  # a program that runs a stack itself: what started it
        argv = getattr(sys, "orig_argv", sys.argv)
        words = [Path(argv[0]).name, *argv[1:]]
    return " ".join(" ".join(words).split())[:_COMMAND_CHARS]
