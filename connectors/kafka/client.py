"""Starting an aiokafka client the same way everywhere (close it again if it cannot start),
and never letting one create a topic by naming it."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import aiokafka.admin.client
import aiokafka.client
import aiokafka.cluster
from aiokafka.conn import CloseReason, create_conn
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    SaslAuthenticationFailed,
)
from aiokafka.protocol.metadata import MetadataRequest

from hermesbus.connectors.kafka.config import KafkaConfig
from hermesbus.errors import BrokerError

__all__ = [
    "CANCEL_CLOSE_S",
    "NO_TOPIC_HINT",
    "UNREACHABLE_HINT",
    "NoAutoCreate",
    "kafka_reason",
    "login_refused",
    "require_topic",
    "start_or_close",
]

_PROBE_S = 10.0
"""How long asking one server why it refused a login may take."""
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
    start: Callable[[], Awaitable[None]],
    close: Callable[[], Awaitable[None]],
    what: str,
    config: KafkaConfig | None = None,
) -> None:
    """``await start()``; on a Kafka error ``await close()`` and raise BrokerError(``what``...).

    When no broker answered, the message also says what to check; with the client's
    ``config`` given, and its login or TLS handshake refused, it says that instead, with
    the principal (aiokafka reports a refused login as "Unable to bootstrap"). Cancelled while it
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
        refused = await login_refused(config) if hint and config is not None else None
        if refused is not None:
            raise BrokerError(f"{what}: {refused}") from exc
        raise BrokerError(
            f"{what}: {kafka_reason(exc)}" + (f"; {UNREACHABLE_HINT}" if hint else "")
        ) from exc


async def login_refused(config: KafkaConfig) -> str | None:
    """The refusal of ``config``'s login or TLS handshake by a bootstrap server, said with
    the principal; None when they accept it, when it speaks PLAINTEXT, or when none answers
    (that is no refusal). The servers are asked at once, within one bound."""
    if config.security_protocol == "PLAINTEXT" or not config.bootstrap:
        return None
    kwargs = config.client_kwargs()

    async def refusal(entry: str) -> str | None:
        host, _, port = entry.rpartition(":")
        try:
            conn = await create_conn(
                host.strip("[]"),
                int(port),
                ssl_context=kwargs.get("ssl_context"),
                security_protocol=config.security_protocol,
                sasl_mechanism=kwargs.get("sasl_mechanism"),
                sasl_plain_username=kwargs.get("sasl_plain_username"),
                sasl_plain_password=kwargs.get("sasl_plain_password"),
            )
        except SaslAuthenticationFailed as exc:
            return (
                f"the cluster refused the login of {config.principal} ({config.sasl_mechanism}"
                f" at {entry}): {_said(exc)}; check HERMES_KAFKA_SASL_USERNAME and "
                "HERMES_KAFKA_SASL_PASSWORD"
            )
        except ssl.SSLError as exc:
            return (
                f"the TLS handshake with {entry} failed: {exc.reason or exc}; check "
                "HERMES_KAFKA_SSL_CAFILE (the CA that signed the brokers' certificates) and "
                "that the bootstrap names the host in their certificates"
            )
        except (KafkaError, OSError):
            return None
        conn.close()
        return None

    try:
        async with asyncio.timeout(_PROBE_S):
            said = await asyncio.gather(*(refusal(e) for e in config.bootstrap.split(",")))
    except TimeoutError:
        return None
    return next((why for why in said if why is not None), None)


def _said(exc: BaseException) -> str:
    """A broker's error without aiokafka's ``[Error N] Name:`` in front."""
    text = kafka_reason(exc)
    return text.split(": ", 1)[1] if text.startswith("[Error") and ": " in text else text


async def _close_cancelled(close: Callable[[], Awaitable[None]]) -> None:
    """Close a client whose start was cancelled; the close runs as a task of its own, so a
    second cancellation (or its failure, the start having failed half-way) does not stop it."""
    closing = asyncio.ensure_future(close())
    closing.add_done_callback(_seen)
    await asyncio.wait([closing], timeout=CANCEL_CLOSE_S)


def _seen(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()
