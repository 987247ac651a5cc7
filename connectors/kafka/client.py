"""Starting an aiokafka client the same way everywhere: close it again if it cannot start."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

from hermesbus.errors import BrokerError

__all__ = ["UNREACHABLE_HINT", "kafka_reason", "start_or_close"]

UNREACHABLE_HINT = (
    "is the broker running, and is the address right? "
    "Set HERMES_KAFKA_BOOTSTRAP or pass --bootstrap HOST:PORT"
)
"""What to check when no broker answers, for every message that says so."""


def kafka_reason(exc: BaseException) -> str:
    """The error's class and text, the class named once (aiokafka's text already holds it)."""
    text, name = str(exc), type(exc).__name__
    return text if name in text else f"{name}: {text}"  # "[Error 3] UnknownTopic...Error"


async def start_or_close(
    start: Callable[[], Awaitable[None]], close: Callable[[], Awaitable[None]], what: str
) -> None:
    """``await start()``; on a Kafka error ``await close()`` and raise BrokerError(``what``...).

    When no broker answered, the message also says what to check.
    """
    try:
        await start()
    except KafkaError as exc:
        await close()
        hint = isinstance(exc, KafkaConnectionError | KafkaTimeoutError)
        raise BrokerError(
            f"{what}: {kafka_reason(exc)}" + (f"; {UNREACHABLE_HINT}" if hint else "")
        ) from exc
