"""Starting an aiokafka client the same way everywhere: close it again if it cannot start."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

from hermesbus.errors import BrokerError

__all__ = ["CANCEL_CLOSE_S", "UNREACHABLE_HINT", "kafka_reason", "start_or_close"]

CANCEL_CLOSE_S = 10.0
"""How long a client cancelled while starting is waited for to close (a consumer's stop
can take seconds on a busy machine; past this, it is left to the loop's shutdown)."""

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

    When no broker answered, the message also says what to check. Cancelled while it
    starts (Ctrl-C mid start-up), the client is closed too, within CANCEL_CLOSE_S, and the
    cancellation goes on: a half-started client is never left unclosed.
    """
    try:
        await start()
    except asyncio.CancelledError:
        await _close_cancelled(close)
        raise
    except KafkaError as exc:
        await close()
        hint = isinstance(exc, KafkaConnectionError | KafkaTimeoutError)
        raise BrokerError(
            f"{what}: {kafka_reason(exc)}" + (f"; {UNREACHABLE_HINT}" if hint else "")
        ) from exc


async def _close_cancelled(close: Callable[[], Awaitable[None]]) -> None:
    """Close a client whose start was cancelled; the close runs as a task of its own, so a
    second cancellation (or its failure, the start having failed half-way) does not stop it."""
    closing = asyncio.ensure_future(close())
    closing.add_done_callback(_seen)
    await asyncio.wait([closing], timeout=CANCEL_CLOSE_S)


def _seen(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()
