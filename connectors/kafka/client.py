"""Starting an aiokafka client the same way everywhere (close it again if it cannot start),
and never letting one create a topic by naming it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiokafka.admin.client
import aiokafka.client
import aiokafka.cluster
from aiokafka.conn import CloseReason
from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from aiokafka.protocol.metadata import MetadataRequest

from hermesbus.errors import BrokerError

__all__ = [
    "CANCEL_CLOSE_S",
    "NO_TOPIC_HINT",
    "UNREACHABLE_HINT",
    "NoAutoCreate",
    "kafka_reason",
    "require_topic",
    "start_or_close",
]

CANCEL_CLOSE_S = 10.0
"""How long a client cancelled while starting is waited for to close (a consumer's stop
can take seconds on a busy machine; past this, it is left to the loop's shutdown)."""

UNREACHABLE_HINT = (
    "is the broker running, and is the address right? "
    "Set HERMES_KAFKA_BOOTSTRAP or pass --bootstrap HOST:PORT"
)
"""What to check when no broker answers, for every message that says so."""

NO_TOPIC_HINT = (
    "hermesbus clients never create topics: `hermesbus up` creates the catalog's "
    "(again when the broker comes back empty), or run `hermesbus topics apply`"
)
"""What to do about a topic that does not exist, for every message that says so."""


class NoAutoCreate(MetadataRequest):  # type: ignore[misc]  # aiokafka is untyped
    """A Metadata request that never asks the broker to create the topics it names.

    aiokafka asks for creation in every request (v4+: ``allow_auto_topic_creation`` is
    always True), so a producer's send, a consumer's subscription or assignment would
    create a missing topic on a broker with ``auto.create.topics.enable`` (tansu does),
    with the broker's default partition count instead of the catalog's.
    """

    def __init__(self, topics: list[str] | None = None, allow_auto_topic_creation: Any = None):
        super().__init__(topics, allow_auto_topic_creation=False)


def _forbid_auto_create() -> None:
    """Make every aiokafka client of this process send :class:`NoAutoCreate` (producer,
    consumer and admin; done when the connector is imported, before any client exists).
    A broker older than Kafka 1.0 (Metadata < v4) cannot be told: there ``require_topic``
    is what keeps a send from creating one."""
    aiokafka.client.MetadataRequest = NoAutoCreate
    aiokafka.admin.client.MetadataRequest = NoAutoCreate


_forbid_auto_create()


def _forget_leaders_on_disconnect() -> None:
    """Make every aiokafka client of this process forget its partitions' leaders when a
    connection breaks, until a Metadata response comes (aiokafka asks for one then).

    A broker that comes back empty (the embedded broker restarted) has none of the topics
    its clients still know: a producer sending with that stale knowledge had its batches
    taken (tansu acknowledges a Produce to a topic it does not have, and after ``up``
    made the topic again refused or lost that partition's later records). With no
    leader known a producer holds its batches, and a consumer its fetches, until the
    broker says which topics it has: a missing one is waited for, and written to only
    once it exists again. While no broker answers, clients that know no leader ask for
    metadata after aiokafka's retry back-off, as they retried their requests before,
    rather than in a busy loop.
    """
    closed = aiokafka.client.AIOKafkaClient._on_connection_closed
    ask = aiokafka.client.AIOKafkaClient._metadata_update
    leader = aiokafka.cluster.ClusterMetadata.leader_for_partition
    update = aiokafka.cluster.ClusterMetadata.update_metadata

    def on_connection_closed(self: Any, conn: Any, reason: Any) -> None:
        if reason in (CloseReason.CONNECTION_BROKEN, CloseReason.CONNECTION_TIMEOUT):
            self.cluster.hermes_stale = True
        closed(self, conn, reason)

    async def metadata_update(self: Any, cluster_metadata: Any, topics: Any) -> Any:
        answered = await ask(self, cluster_metadata, topics)
        if not answered:  # no broker: the next ask after the usual back-off, not at once
            await asyncio.sleep(self._retry_backoff)
        return answered

    def leader_for_partition(self: Any, partition: Any) -> Any:
        return None if getattr(self, "hermes_stale", False) else leader(self, partition)

    def update_metadata(self: Any, metadata: Any) -> Any:
        if metadata.brokers:  # else aiokafka ignores the response
            self.hermes_stale = False
        return update(self, metadata)

    aiokafka.client.AIOKafkaClient._on_connection_closed = on_connection_closed
    aiokafka.client.AIOKafkaClient._metadata_update = metadata_update
    aiokafka.cluster.ClusterMetadata.leader_for_partition = leader_for_partition
    aiokafka.cluster.ClusterMetadata.update_metadata = update_metadata


_forget_leaders_on_disconnect()


async def require_topic(client: Any, topic: str, where: str) -> None:
    """BrokerError unless ``topic`` exists: asked of the whole cluster (a Metadata request
    for every topic creates none) when ``client`` (an ``AIOKafkaClient``, a producer's
    ``.client``) does not know it yet. ``where`` names the broker in the message."""
    if client.cluster.partitions_for_topic(topic):
        return
    try:
        metadata = await client.fetch_all_metadata()
    except KafkaError as exc:
        raise BrokerError(f"cannot list the topics at {where}: {kafka_reason(exc)}") from exc
    if topic not in metadata.topics():
        raise BrokerError(f"topic {topic} does not exist at {where}; {NO_TOPIC_HINT}")


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
