"""How the commands log: one line per condition per window, however often it recurs.

A condition is a logger, a level and the message's format string (its ``%s`` left open),
so "store failed for session %s" is one condition over every session. While the disk was
full one condition logged 92 lines a second; the Neo4j driver logs every notification
the server sends with its query (each of the bus's queries on a graph without that label
yet, for instance): there the condition is also the notification's GQL status. The first
line of a condition is logged, then none for :data:`WINDOW_S`; the next one says how many
were left out, and so does a line per condition at exit.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["WINDOW_S", "RepeatFilter", "configure"]

WINDOW_S = 30.0
"""Seconds after a condition's line during which its repeats are counted, not logged."""
_MAX_CONDITIONS = 4096
"""Conditions remembered at most; past it those whose window is over are forgotten."""
_NEO4J_NOTIFICATIONS = "neo4j.notifications"

Condition = tuple[str, int, str, str]


@dataclass
class _Seen:
    shown_at: float
    left_out: int = 0


class RepeatFilter(logging.Filter):
    """A handler filter: a condition's first line passes, its repeats within ``window_s``
    are counted; the next line after the window carries the count."""

    def __init__(
        self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.window_s = window_s
        self._clock = clock
        self._seen: dict[Condition, _Seen] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        condition, now = _condition(record), self._clock()
        with self._lock:
            seen = self._seen.get(condition)
            if seen is not None and now - seen.shown_at < self.window_s:
                seen.left_out += 1
                return False
            left_out = seen.left_out if seen is not None else 0
            self._seen[condition] = _Seen(now)
            if len(self._seen) > _MAX_CONDITIONS:
                self._forget(now)
        if left_out:
            record.msg = f"{record.getMessage()} ({_more(left_out)} since the last one shown)"
            record.args = None
        return True

    def left_out(self) -> list[tuple[Condition, int]]:
        """Each condition with repeats not logged since its last line, and how many."""
        with self._lock:
            return [(c, seen.left_out) for c, seen in self._seen.items() if seen.left_out]

    def _forget(self, now: float) -> None:
        over = [c for c, seen in self._seen.items() if now - seen.shown_at >= self.window_s]
        for condition in over:
            del self._seen[condition]


def _condition(record: logging.LogRecord) -> Condition:
    detail = ""
    if record.name == _NEO4J_NOTIFICATIONS and isinstance(record.args, tuple) and record.args:
        notification = getattr(record.args[0], "notification", None)
        detail = str(getattr(notification, "gql_status", None) or getattr(notification, "code", ""))
    return record.name, record.levelno, str(record.msg), detail


def _more(count: int) -> str:
    return f"{count} more like this not logged" if count > 1 else "1 more like this not logged"


def configure(level: int = logging.WARNING) -> RepeatFilter:
    """The commands' logging: ``LEVEL name: message`` on stderr, each condition once per
    :data:`WINDOW_S`, quiet third-party loggers; the filter installed (for tests)."""
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # we report its failures once
    # elastic_transport logs a traceback per retry: the index reports its failures once
    logging.getLogger("elastic_transport").setLevel(logging.CRITICAL)
    repeats = RepeatFilter()
    for handler in logging.getLogger().handlers:
        handler.addFilter(repeats)
    atexit.register(_report, repeats)
    return repeats


def _report(repeats: RepeatFilter) -> None:
    """At exit: what each condition left out since its last line."""
    log = logging.getLogger(__name__)
    for (name, level, message, detail), count in repeats.left_out():
        what = f"{message} [{detail}]" if detail else message
        log.log(level, "%s more lines of %s like %r were not logged", count, name, what)
