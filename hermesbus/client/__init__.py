"""The client SDK for apps: send envelopes, say a user turn, read replies, ask and wait.

async with Client(bootstrap="localhost:9092") as client:
    reply = await client.ask("session-1", "user-1", "I want to file an expense report")
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from aiokafka import ConsumerStoppedError, TopicPartition
from aiokafka.errors import KafkaError, TopicAuthorizationFailedError
from pydantic import ValidationError

from hermesbus.base.lifecycle import Service
from hermesbus.codec import Codec, Framing, codec_for
from hermesbus.connectors.kafka import (
    KafkaConfig,
    kafka_reason,
    log_consumer,
    partition_of,
    plain_producer,
    require_topic,
    start_or_close,
)
from hermesbus.connectors.kafka.refusals import ACLS_HINT
from hermesbus.contract.envelope import Envelope, check_session_id
from hermesbus.contract.headers import envelope_headers
from hermesbus.contract.payloads import Payload, Reply, UserTurn
from hermesbus.errors import (
    BrokerError,
    ConfigError,
    EncodeError,
    HermesError,
    IdentityError,
    ReplyTimeout,
)
from hermesbus.identity import APP, Keyring, PublicKeys, Signer
from hermesbus.topics import CONVERSATION_IN, CONVERSATION_OUT, identity_of, topic_for

from ._once import Delivered, Seen
from ._settings import ClientSettings, from_environment, invalid, kafka_from_environment

__all__ = [
    "CONVERSATION_TARGET",
    "Client",
    "ClientSettings",
    "Replies",
    "Unverified",
    "partition_for_key",
    "says_more",
]

log = logging.getLogger(__name__)

CONVERSATION_TARGET = "conversation:in"
"""Where ``say`` addresses user turns (routed to ``hermes.conversation.in``)."""

_INSTANCE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def says_more(reply: Envelope) -> bool:
    """Whether a flow's reply is followed by more replies to the same turn
    (``context["more"]``): the turn's answer is its first reply that does not say so."""
    return reply.payload.context.get("more") is True


def partition_for_key(key: bytes, partitions: Iterable[int]) -> int:
    """The partition aiokafka's producer picks for ``key``: murmur2, as the Java client."""
    ordered = sorted(partitions)
    if not ordered:
        raise BrokerError("the topic has no partitions")
    return ordered[partition_of(key, len(ordered))]


def _known(overrides: Mapping[str, Any]) -> None:
    unknown = sorted(set(overrides) - set(KafkaConfig.model_fields))
    if unknown:
        known = ", ".join(KafkaConfig.model_fields)
        raise ConfigError(f"unknown Kafka setting {', '.join(unknown)}: use one of {known}")


def _kafka_config(config: KafkaConfig, overrides: Mapping[str, Any]) -> KafkaConfig:
    """``config`` with keyword overrides; needs a bootstrap."""
    _known(overrides)
    try:
        if overrides:
            config = KafkaConfig.model_validate({**config.model_dump(), **overrides})
    except ValidationError as exc:
        raise invalid("Kafka settings", exc) from exc
    if not config.bootstrap:
        raise ConfigError(
            "no Kafka bootstrap: set HERMES_KAFKA_BOOTSTRAP or pass Client(bootstrap='HOST:PORT')"
        )
    return config


@dataclass(frozen=True, slots=True)
class Unverified:
    """A record of the replies topic the client dropped: its place, why, what it claimed."""

    topic: str
    partition: int
    offset: int
    reason: str
    claimed: Envelope | None
    """Its envelope if it decodes; not to be believed."""


_FETCH_MAX_WAIT_MS = 50
"""How long the broker may hold a replies fetch (the embedded broker always waits it out)."""


class Client(Service):
    """An app's side of the bus; an async context manager whose start/stop are idempotent.

    ``settings`` are what it is configured by (a program's
    :class:`~hermesbus.compose.settings.Settings`, or any :class:`ClientSettings`); given
    none, it reads the ``HERMES_*`` variables once, here, for whatever the other arguments
    leave open. ``config`` replaces the settings' Kafka part; keyword ``overrides`` are
    :class:`KafkaConfig` fields (``bootstrap=...``, ...). ``name`` is the instance part of
    the ``app:<name>`` source address; ``topic_prefix`` is put in front of every topic
    name (default: the settings', ``HERMES_TOPIC_PREFIX``, else none).

    Every record is signed. An app signs as ``app`` (``HERMES_KEY_APP`` or the keyring
    file) and may send only user turns to the ingress topic; ``identity=`` a component
    (whose key it must hold) lets it speak as that component, e.g. in tests or tools.

    Every reply is checked (``replies``, ``ask``): only one whose Ed25519 signature
    verifies with ``trust`` (a :class:`PublicKeys` or the path of ``public-keys.json``;
    default ``HERMES_PUBLIC_KEYS_FILE``, else the file beside the keyring), signed by
    the conversation or dispatcher its ``source`` names, is returned. Anything else is
    dropped: logged as a warning, counted in ``unverified``, and passed to
    ``on_unverified`` if given. With no public keys to check with, reading replies
    raises ConfigError saying where to get them: nothing unchecked is ever returned.

    Each reply is returned once: a copy under a message id already handed over (an
    outbox's re-send after a crash) is dropped and counted in ``repeated`` (see
    ``_once``).
    """

    def __init__(
        self,
        config: KafkaConfig | None = None,
        *,
        settings: ClientSettings | None = None,
        name: str = "client",
        topic_prefix: str | None = None,
        codec: Codec | None = None,
        framing: Framing = "single-object",
        identity: str = APP,
        keys: Keyring | None = None,
        trust: PublicKeys | Path | str | None = None,
        on_unverified: Callable[[Unverified], None] | None = None,
        **overrides: Any,
    ) -> None:
        if not _INSTANCE.match(name):
            raise ConfigError(f"client name {name!r}: use letters, digits, '_', '.' or '-'")
        self._settings = settings
        if config is None and settings is None:  # an app's start: HERMES_KAFKA_* but overrides
            _known(overrides)
            config, overrides = kafka_from_environment(dict(overrides)), {}
        self.config = _kafka_config(config or self._given().kafka, overrides)
        self.identity = identity
        self._signer = Signer(identity, keys if keys is not None else self._given().keys.load())
        self.source = f"app:{name}"
        self.topic_prefix = (
            topic_prefix if topic_prefix is not None else self._given().bus.topic_prefix
        )
        self.config.client_kwargs()  # incomplete SASL settings are refused here, not at start
        self._codec = codec
        self._framing: Framing = framing
        self._producer: Any = None
        self._replies: set[Replies] = set()
        self._trust = trust
        self.on_unverified = on_unverified
        self.unverified = 0
        """Replies-topic records dropped because their signature did not verify."""
        self.repeated = 0
        """Replies dropped as copies of one already delivered (an outbox's re-send)."""
        self._delivered = Delivered()

    def _given(self) -> ClientSettings:
        """The settings given, else the environment's, read on first need (then kept). Only
        given settings are read before ``self.config`` is set (see ``__init__``)."""
        if self._settings is None:
            self._settings = from_environment(self.config)
        return self._settings

    async def start(self) -> None:
        if self._producer is not None:
            return
        # acks=all without idempotence: the embedded broker has no idempotent producers.
        producer = plain_producer(self.config, acks="all", enable_idempotence=False)
        where = f"cannot reach Kafka at {self.config.address}"
        await start_or_close(producer.start, producer.stop, where, self.config)
        self._producer = producer

    async def stop(self) -> None:
        """Stop the producer and end every open ``replies`` iterator."""
        for replies in list(self._replies):
            await replies.stop()
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    @property
    def codec(self) -> Codec:
        """The codec given to the constructor, else the one for the settings' registry."""
        if self._codec is None:
            self._codec = codec_for(self._given().bus)
        return self._codec

    async def send(self, envelope: Envelope, *, headers: Sequence[tuple[str, bytes]] = ()) -> None:
        """Write ``envelope`` to its target's topic, keyed by session, signed; wait for acks.
        ``headers`` go out with the envelope's own (a redrive's origin, e.g.).

        IdentityError if this client may not send it: an app sends only user turns from
        ``app:*`` to the ingress topic; a component only envelopes of its own ``source``.
        """
        topic = self.check(envelope)
        value = self.codec.encode(envelope, self._framing)
        key = envelope.session_id.encode()
        own = (*envelope_headers(envelope), *headers)
        signed = self._signer.sign(topic, key, value, own)
        producer = self._started()
        await require_topic(producer.client, topic, self.config.address)  # never created here
        try:
            await producer.send_and_wait(topic, value, key=key, headers=list(signed))
        except TopicAuthorizationFailedError as exc:
            raise BrokerError(
                f"cannot send {envelope.message_id}: the cluster does not let "
                f"{self.config.principal} write {topic}: no ACL allows it; {ACLS_HINT}"
            ) from exc
        except KafkaError as exc:
            raise BrokerError(
                f"cannot send {envelope.message_id} to {topic}: {kafka_reason(exc)}"
            ) from exc

    def check(self, envelope: Envelope) -> str:
        """The topic ``send`` would write ``envelope`` to; what ``send`` raises if it would not.

        ConfigError for a target no topic serves, IdentityError as ``send`` says. Nothing
        is sent, so a batch can be checked whole before any of it goes out.
        """
        check_session_id(envelope.session_id)  # a model_construct'ed envelope too
        topic = topic_for(envelope.target, self.topic_prefix)
        claimed = identity_of(envelope.source)
        if self.identity != APP:
            if claimed != self.identity:
                raise IdentityError(
                    "identity.impersonation",
                    f"source {envelope.source!r} speaks for {claimed!r}; this client signs "
                    f"as {self.identity!r}",
                )
            return topic
        ingress = self.topic_prefix + CONVERSATION_IN
        if topic != ingress or claimed != APP or not isinstance(envelope.payload.body, UserTurn):
            body = type(envelope.payload.body).__name__
            raise IdentityError(
                "identity.forbidden",
                f"an app sends only user turns (UserTurn from 'app:*') to {ingress}; this is "
                f"{body} from {envelope.source!r} to {envelope.target!r} ({topic}). Internal "
                "targets need a component's key: Client(identity=...)",
            )
        return topic

    def turn(
        self,
        session_id: str,
        user_id: str,
        text: str,
        *,
        trace_id: str | None = None,
        flow: str | None = None,
    ) -> Envelope:
        """The envelope ``say`` sends: a user turn from this app, in a new trace by default;
        ``flow``: the registered flow a new session starts in (else its intent chooses).
        EncodeError for a session id no envelope may carry (``SESSION_ID_RULE``) or a
        flow id no flow may have."""
        check_session_id(session_id)
        try:
            return Envelope(
                message_id=str(uuid.uuid4()),
                timestamp=datetime.now(UTC),
                source=self.source,
                target=CONVERSATION_TARGET,
                session_id=session_id,
                user_id=user_id,
                trace_id=uuid.uuid4().hex if trace_id is None else trace_id,
                span_id=uuid.uuid4().hex[:16],
                payload=Payload(body=UserTurn(text=text, flow=flow)),
            )
        except ValidationError as exc:
            raise EncodeError(f"invalid user turn: {exc}") from exc

    async def say(
        self,
        session_id: str,
        user_id: str,
        text: str,
        *,
        trace_id: str | None = None,
        flow: str | None = None,
    ) -> str:
        """Send ``text`` as a user turn of the session (``flow``: the registered flow a new
        session starts in); returns its message id."""
        envelope = self.turn(session_id, user_id, text, trace_id=trace_id, flow=flow)
        await self.send(envelope)
        return envelope.message_id

    def replies(self, session_id: str) -> Replies:
        """Reply envelopes of the session from the moment the iterator starts."""
        return Replies(self, session_id)

    async def ask(
        self,
        session_id: str,
        user_id: str,
        text: str,
        timeout: float = 30.0,  # noqa: ASYNC109 - ask owns its deadline and raises ReplyTimeout
        *,
        flow: str | None = None,
    ) -> Envelope:
        """Say ``text`` (``flow``: as for :meth:`say`), return the answer: the first reply of
        its trace after which no more follow (a flow's earlier replies to the same turn say
        ``context["more"]``; when its last has no text, the one before is returned);
        ReplyTimeout ``timeout`` s after."""
        turn = self.turn(session_id, user_id, text, flow=flow)
        async with self.replies(session_id) as replies:  # listen first: fast replies count
            await self.send(turn)
            try:
                async with asyncio.timeout(timeout):
                    said: Envelope | None = None
                    async for reply in replies:
                        if reply.trace_id != turn.trace_id:
                            continue
                        if says_more(reply):
                            said = reply
                            continue
                        body = reply.payload.body
                        empty = isinstance(body, Reply) and not body.text
                        return said if empty and said is not None else reply
            except TimeoutError as exc:
                raise ReplyTimeout(
                    f"no reply to trace {turn.trace_id} of session {session_id!r}"
                    f" within {timeout:g} s"
                ) from exc
        raise BrokerError("the client stopped before a reply arrived")

    def trusted(self) -> PublicKeys:
        """The public keys replies are checked with, loaded once; ConfigError if none."""
        if not isinstance(self._trust, PublicKeys):
            named = self._trust
            self._trust = PublicKeys.load(Path(named) if named else self._given().keys.public)
        return self._trust

    def _started(self) -> Any:
        if self._producer is None:
            raise BrokerError("the client is not started: use `async with Client(...)` or start()")
        return self._producer

    async def _partition(self, topic: str, key: bytes) -> int:
        """The partition the producer writes ``key`` to on ``topic``."""
        await require_topic(self._started().client, topic, self.config.address)
        try:
            partitions = await self._started().partitions_for(topic)
        except KafkaError as exc:
            raise BrokerError(
                f"no partitions for topic {topic} (is it created? `hermesbus topics apply`):"
                f" {kafka_reason(exc)}"
            ) from exc
        return partition_for_key(key, partitions)


class Replies(Service):
    """Reply envelopes of one session from ``hermes.conversation.out``, as they arrive.

    Reads just the session's partition, without a consumer group, from the end offset
    taken at ``start()`` (``async with`` or the first ``__anext__``). Records of other
    sessions are passed over; undecodable ones are logged and skipped; unverified ones
    are dropped and reported (see :class:`Client`).
    """

    def __init__(self, client: Client, session_id: str) -> None:
        self.session_id = session_id
        self.topic = client.topic_prefix + CONVERSATION_OUT
        self._key = check_session_id(session_id).encode()
        self._client = client
        self._consumer: Any = None
        self._partition: Any = None
        self._stopped = False
        self._since = 0  # the client's deliveries before start(): not this iterator's
        self._mine = Seen()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Envelope:
        if self._stopped:
            raise StopAsyncIteration
        await self.start()
        while not self._stopped:
            envelope = self._decode(await self._next_record())
            if envelope is not None and self._first(envelope):
                return envelope
        raise StopAsyncIteration

    def _first(self, envelope: Envelope) -> bool:
        """Whether ``envelope`` is this iterator's to deliver: not a copy of one it
        delivered, nor of one the client delivered before it started."""
        delivered, message_id = self._client._delivered, envelope.message_id
        at = delivered.at(self.session_id, message_id)
        if message_id in self._mine or (at is not None and at <= self._since):
            self._client.repeated += 1
            log.info("reply dropped: already delivered message_id=%s", message_id)
            return False
        delivered.add(self.session_id, message_id)
        self._mine.add(message_id, delivered.tick)
        return True

    async def start(self) -> None:
        """Assign the session's partition and fix the start at its current end offset."""
        if self._stopped:
            raise BrokerError("these replies are stopped: call Client.replies() again")
        if self._consumer is not None:
            return
        self._client.trusted()  # no keys to check replies with: refuse to read them
        self._since = self._client._delivered.tick
        partition = TopicPartition(self.topic, await self._client._partition(self.topic, self._key))
        consumer = log_consumer(
            self._client.config,
            fetch_max_wait_ms=_FETCH_MAX_WAIT_MS,  # a reply is waited for: don't sit on it
        )
        self._consumer, self._partition = consumer, partition
        self._client._replies.add(self)  # from here on, the client's stop() closes it
        try:
            await consumer.start()
            consumer.assign([partition])
            await consumer.seek_to_end(partition)
            await consumer.position(partition)
        except KafkaError as exc:
            await self.stop()
            raise BrokerError(f"cannot read {self.topic}: {kafka_reason(exc)}") from exc

    async def stop(self) -> None:
        """Close the consumer; iteration ends."""
        self._stopped = True
        self._client._replies.discard(self)
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def _next_record(self) -> Any:
        if self._consumer is None:
            raise StopAsyncIteration
        try:
            return await self._consumer.getone(self._partition)
        except ConsumerStoppedError as exc:
            raise StopAsyncIteration from exc
        except KafkaError as exc:
            raise BrokerError(f"cannot read {self.topic}: {kafka_reason(exc)}") from exc

    def _decode(self, record: Any) -> Envelope | None:
        """The record's envelope if it is a reply of this session, else None (logged if bad)."""
        if record.key != self._key:
            return None
        try:
            signer = self._client.trusted().verify(
                record.topic, record.key, record.value or b"", list(record.headers or ())
            )
        except IdentityError as exc:
            self._unverified(record, str(exc))
            return None
        try:
            envelope = self._client.codec.decode(record.value or b"")
        except HermesError as exc:  # DecodeError, or RegistryError when the registry is down
            log.warning(
                "reply skipped: undecodable topic=%s partition=%s offset=%s error=%s",
                record.topic,
                record.partition,
                record.offset,
                exc,
            )
            return None
        if envelope.session_id != self.session_id:
            log.warning(
                "reply skipped: key and session_id differ topic=%s offset=%s session_id=%s",
                record.topic,
                record.offset,
                envelope.session_id,
            )
            return None
        if identity_of(envelope.source) != signer:
            reason = f"signed by {signer!r}, but its source {envelope.source!r} is not"
            self._unverified(record, reason, envelope)
            return None
        return envelope

    def _unverified(self, record: Any, reason: str, claimed: Envelope | None = None) -> None:
        """Drop a record whose signature does not prove it: log, count, report."""
        if claimed is None:
            try:
                claimed = self._client.codec.decode(record.value or b"")
            except HermesError:
                claimed = None
        log.warning(
            "reply dropped: unverified topic=%s partition=%s offset=%s: %s",
            record.topic,
            record.partition,
            record.offset,
            reason,
        )
        self._client.unverified += 1
        report = self._client.on_unverified
        if report is not None:
            report(Unverified(record.topic, record.partition, record.offset, reason, claimed))
