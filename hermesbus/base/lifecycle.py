"""The one lifecycle every client, store and processor shares: ``start()``/``stop()``.

Both are safe to call twice; ``async with`` starts on entry and stops on exit.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Coroutine, Iterable
from types import TracebackType
from typing import Any, Self

__all__ = [
    "CANCEL_WITHIN_S",
    "COLLECTOR_THRESHOLDS",
    "RECANCEL_S",
    "Service",
    "cancel_and_wait",
    "logged_task",
    "return_freed_memory",
    "tune_collector",
]

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


def logged_task(work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    """A background task whose failure is logged, not left for the garbage collector."""
    task = asyncio.create_task(work, name=name)
    task.add_done_callback(_log_failure)
    return task


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        log.error("task %s failed", task.get_name(), exc_info=error)


RECANCEL_S = 0.5
"""How long a cancelled task may go on before it is cancelled again."""
CANCEL_WITHIN_S = 10.0
"""How long :func:`cancel_and_wait` waits in all before it leaves a task running, with a warning."""


async def cancel_and_wait(
    tasks: Iterable[asyncio.Task[Any]], what: str, *, within_s: float = CANCEL_WITHIN_S
) -> None:
    """Cancel ``tasks`` and wait until each has ended, cancelling again any still running.

    One ``cancel()`` does not always end a task: a library may drop it (Python 3.11's
    ``asyncio.wait_for`` returns the result instead of raising when the cancellation
    arrives as the awaited call completes; redis-py did that around every send until the
    Redis connector stopped giving it a socket timeout, and a stopping processor's timer
    loop ran on). So a task still running is cancelled again every RECANCEL_S, and one
    still running after ``within_s`` is left, with a warning naming it and ``what`` it
    belongs to: a stop stays bounded and says what would not end.

    What a task failed with is its own to report (:func:`logged_task` logs it); here it is
    only marked retrieved.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    every = list(tasks)
    pending = set(every)
    while True:
        for task in pending:
            task.cancel()
        left = deadline - loop.time()
        if left <= 0 or not pending:
            break
        _done, pending = await asyncio.wait(pending, timeout=min(RECANCEL_S, left))
    for task in every:
        if task.done() and not task.cancelled():
            task.exception()
    if pending:
        names = ", ".join(sorted(task.get_name() for task in pending))
        log.warning("%s: still running %g s after being cancelled: %s", what, within_s, names)


def tune_collector(thresholds: tuple[int, int, int] = COLLECTOR_THRESHOLDS) -> None:
    """For a long-running bus process (``hermesbus up``), once start-up is done: what was
    built so far (modules, schemas, compiled codecs) is frozen out of the collector's
    scans, and collections are rarer. Reference counting still frees nearly everything
    at once; only cycles wait for the next collection."""
    gc.freeze()
    gc.set_threshold(*thresholds)


def return_freed_memory() -> None:
    """Hand memory freed since to the OS (glibc ``malloc_trim``; elsewhere nothing), once a
    burst's states are dropped. Only wholly free pages go back: the few objects a burst
    leaves alive are spread over its peak's pages and pymalloc arenas, so a large burst
    leaves the process near its peak, which the next burst reuses (``bench/burst.py
    --repeat``; neither ``PYTHONMALLOC=malloc`` nor ``MALLOC_ARENA_MAX`` changed that,
    ``bench/README.md``)."""
    import ctypes  # noqa: PLC0415 - only a long-running bus process needs it

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)
