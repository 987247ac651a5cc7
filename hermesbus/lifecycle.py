"""The one lifecycle every client, store and processor shares: ``start()``/``stop()``.

Both are safe to call twice; ``async with`` starts on entry and stops on exit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self

__all__ = ["Service", "background"]

log = logging.getLogger(__name__)


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
