"""A pool of warm workers per python tool: up to ``ToolSpec.workers`` calls run at once.

A call takes a free worker or waits for one, in arrival order; a verify or a probe waits
ahead of calls (a call's verification finishes a call already under way, and a probe that
queued behind a burst would mark a busy tool unhealthy). Workers start only when every
started one is busy, so a quiet tool keeps one. A call that finds no free worker within
its timeout answers 503 saying the tool is busy, never that it failed; how many calls
wait now is :attr:`WorkerPool.queued`, which the tool's health reports to the dispatcher.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from hermesbus.processors.protocol import BUSY_PREFIX, UNAVAILABLE
from hermesbus.processors.tool._executor import Execution, Progress, PythonWorker

__all__ = ["BUSY_PREFIX", "WorkerPool"]

log = logging.getLogger(__name__)

_URGENT = frozenset({"verify", "probe"})


class WorkerPool:
    """``size`` lazily started :class:`PythonWorker` s of one tool; an ``Executor``."""

    def __init__(self, name: str, size: int, make: Callable[[int], PythonWorker]) -> None:
        self.name = name
        self.size = size
        self._workers = [make(n) for n in range(size)]
        self._idle = list(reversed(self._workers))  # a stack: the first worker is reused
        self._waiters: tuple[deque[asyncio.Future[PythonWorker]], ...] = (deque(), deque())
        self.running = 0

    @property
    def queued(self) -> int:
        """Calls (and verifies, probes) waiting for a free worker now."""
        return sum(len(queue) for queue in self._waiters)

    @property
    def started(self) -> int:
        """Workers running now."""
        return sum(1 for worker in self._workers if worker.pid is not None)

    @property
    def pid(self) -> int | None:
        """The pid of the first live worker (None: none is running)."""
        return next((w.pid for w in self._workers if w.pid is not None), None)

    @property
    def pids(self) -> tuple[int, ...]:
        """The pids of every live worker."""
        return tuple(w.pid for w in self._workers if w.pid is not None)

    async def run(
        self,
        role: str,
        arguments: Any,
        timeout_s: float,
        key: str = "",
        *,
        progress: Progress | None = None,
    ) -> Execution:
        del progress  # a python tool reports none
        start = time.perf_counter()
        try:
            async with asyncio.timeout(timeout_s):
                worker = await self._acquire(urgent=role in _URGENT)
        except TimeoutError:
            return Execution(UNAVAILABLE, error=self._busy(timeout_s))
        queued_ms = (time.perf_counter() - start) * 1000
        self.running += 1
        try:
            execution = await worker.run(role, arguments, timeout_s, key)
        finally:
            self.running -= 1
            self._release(worker)
        return dataclasses.replace(execution, queued_ms=queued_ms)

    def _busy(self, timeout_s: float) -> str:
        return (
            f"{BUSY_PREFIX} {self.name} had none of its {self.size} within "
            f"{timeout_s:g} s ({self.queued} calls waiting)"
        )

    async def _acquire(self, *, urgent: bool) -> PythonWorker:
        if self._idle and not any(self._waiters):
            return self._idle.pop()
        waiter: asyncio.Future[PythonWorker] = asyncio.get_running_loop().create_future()
        queue = self._waiters[0 if urgent else 1]
        queue.append(waiter)
        try:
            return await waiter
        except BaseException:  # timed out or cancelled: a worker handed over goes back
            if waiter.done() and not waiter.cancelled():
                self._release(waiter.result())
            elif waiter in queue:
                queue.remove(waiter)
            raise

    def _release(self, worker: PythonWorker) -> None:
        for queue in self._waiters:
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(worker)
                    return
        self._idle.append(worker)

    async def warm(self) -> None:
        """Start every worker not running yet (idle ones only; one that fails is logged)."""
        idle = [worker for worker in self._idle if worker.pid is None]
        for worker, outcome in zip(
            idle,
            await asyncio.gather(*(w.start() for w in idle), return_exceptions=True),
            strict=True,
        ):
            if isinstance(outcome, Exception):
                log.warning("tool %s: a worker did not start: %s", worker.name, outcome)

    async def close(self) -> None:
        for queue in self._waiters:
            for waiter in queue:
                waiter.cancel()
            queue.clear()
        await asyncio.gather(*(worker.close() for worker in self._workers))
