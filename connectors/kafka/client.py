"""Starting an aiokafka client the same way everywhere: close it again if it cannot start."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiokafka.errors import KafkaError

from hermesbus.errors import BrokerError

__all__ = ["start_or_close"]


async def start_or_close(
    start: Callable[[], Awaitable[None]], close: Callable[[], Awaitable[None]], what: str
) -> None:
    """``await start()``; on a Kafka error ``await close()`` and raise BrokerError(``what``...)."""
    try:
        await start()
    except KafkaError as exc:
        await close()
        raise BrokerError(f"{what}: {type(exc).__name__}: {exc}") from exc
