"""The one lifecycle every client, store and processor shares: ``start()``/``stop()``.

Both are safe to call twice; ``async with`` starts on entry and stops on exit.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self

__all__ = ["COLLECTOR_THRESHOLDS", "Service", "background", "tune_collector"]

log = logging.getLogger(__name__)

COLLECTOR_THRESHOLDS = (50_000, 20, 10)
"""Python's cyclic collector runs its young generation every 50,000 allocations, not 700.

A bus process allocates a few dozen objects per envelope and keeps few of them, so
Python's default collects after every handful of envelopes and, scanning ever more
live objects, costs the indexer about a third of its time (``bench/index.py``)."""


class Service:
    """Base of everything with a connection to open and close."""

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


def background(work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    """A background task whose failure is logged, not left for the garbage collector."""
    task = asyncio.create_task(work, name=name)
    task.add_done_callback(_log_failure)
    return task


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        log.error("task %s failed", task.get_name(), exc_info=error)


def tune_collector(thresholds: tuple[int, int, int] = COLLECTOR_THRESHOLDS) -> None:
    """For a long-running bus process (``hermesbus up``), once start-up is done: what was
    built so far (modules, schemas, compiled codecs) is frozen out of the collector's
    scans, and collections are rarer. Reference counting still frees nearly everything
    at once; only cycles wait for the next collection."""
    gc.freeze()
    gc.set_threshold(*thresholds)
