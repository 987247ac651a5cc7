"""The one lifecycle every client, store and processor shares: ``start()``/``stop()``.

Both are safe to call twice; ``async with`` starts on entry and stops on exit.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["Service"]


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
