"""Helpers for runtime tests: topics per test, envelopes with sequence numbers, readers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord

from hermesbus import Envelope, Payload, Reply, UserTurn
from hermesbus.base.storemark import MarkBook
from hermesbus.codec import decode, encode
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.connectors.redis import RedisConfig, RedisStateStore
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.contract.envelope import Metadata, RetryPolicy
from hermesbus.runtime import HandlerInput, Outcome, Processor, RuntimeSettings, StateStore
from hermesbus.topics import Catalog
from tests import signing

IN = "hermes.conversation.in"
OUT = "hermes.conversation.out"
DLQ = "hermes.dlq"
T0 = datetime(2024, 5, 16, 9, 30, tzinfo=UTC)


@asynccontextmanager
async def open_store(spec: str) -> AsyncIterator[StateStore]:
    """The state store ``spec`` names: ``sqlite:PATH`` (its marks in the book of PATH's
    folder) or ``redis:URL PREFIX FOLDER`` (in FOLDER's book): every process given the
    spec shares the book."""
    kind, _, where = spec.partition(":")
    if kind == "redis":
        url, prefix, folder = where.split(" ")
        config = RedisConfig(url=url, prefix=prefix)
        async with RedisStateStore(config, book=MarkBook(Path(folder))) as redis:
            yield redis
        return
    async with SqliteStateStore(where, book=MarkBook(Path(where).parent)) as sqlite:
        yield sqlite


async def counts(store: StateStore, name: str, sessions: int) -> list[dict[str, int]]:
    """The counting handler's state of sessions ``s000``... as ``name`` saved it."""
    return [dict((await store.load(name, f"s{s:03d}")).data) for s in range(sessions)]


async def applied(store: StateStore, name: str, sessions: int) -> int:
    """Inputs the counting handler has applied over those sessions."""
    return sum(c.get("count", 0) for c in await counts(store, name, sessions))


async def until_applied(
    store: StateStore, name: str, sessions: int, at_least: int, *, within_s: float
) -> int:
    """Polls :func:`applied` every 0.1 s until ``at_least`` or ``within_s`` is up; the last."""
    done = await applied(store, name, sessions)
    for _ in range(int(within_s * 10)):
        if done >= at_least:
            break
        await asyncio.sleep(0.1)
        done = await applied(store, name, sessions)
    return done


async def provision(bootstrap: str, prefix: str, partitions: int = 6) -> None:
    catalog = Catalog.load().with_overrides(prefix=prefix, partitions=partitions)
    async with KafkaAdmin(KafkaConfig(bootstrap=bootstrap)) as admin:
        await admin.create(catalog.topics)


def turn(
    session: str, seq: int, *, text: str | None = None, attempts: int = 1, backoff_ms: int = 50
) -> Envelope:
    """A user turn carrying its per-session sequence number in ``payload.context``."""
    return Envelope(
        message_id=f"{session}-m{seq}",
        timestamp=T0 + timedelta(seconds=seq),
        source="app:test",
        target="conversation:in",
        session_id=session,
        user_id="u1",
        trace_id=f"trace-{session}",
        payload=Payload(task="t", context={"seq": seq}, body=UserTurn(text=text or str(seq))),
        metadata=Metadata(retry_policy=RetryPolicy(max_attempts=attempts, backoff_ms=backoff_ms)),
    )


def reply_to(envelope: Envelope, text: str) -> Envelope:
    return envelope.model_copy(
        update={
            "source": "conversation:test",
            "target": "user:app",
            "payload": Payload(task=envelope.payload.task, body=Reply(text=text)),
        }
    )


async def counting(inp: HandlerInput) -> Outcome:
    """Counts turns per session, checks their order, replies ``"<seq>"``."""
    seq = inp.envelope.payload.context["seq"]
    assert isinstance(seq, int)
    last = inp.state.data.get("last", -1)
    violations = inp.state.data.get("violations", 0) + (seq != last + 1)
    state = {"last": seq, "count": inp.state.data.get("count", 0) + 1, "violations": violations}
    return Outcome(emit=(reply_to(inp.envelope, str(seq)),), state=state)


DEFAULTS = RuntimeSettings.model_construct()
"""The runtime's defaults, whatever the environment says."""


class ConversationProcessor(Processor):
    """A processor of these tests: it reads user turns, so it signs as the conversation,
    with the run's keys; ``settings`` are the runtime's defaults unless given."""

    def __init__(
        self,
        *args: Any,
        identity: str = "conversation",
        settings: RuntimeSettings = DEFAULTS,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("keyring", signing.keys)
        super().__init__(*args, identity=identity, settings=settings, **kwargs)


async def produce(
    bootstrap: str, topic: str, envelopes: Iterable[Envelope], *, identity: str = "app"
) -> None:
    """Write ``envelopes`` as an app would: keyed by session, signed by ``identity``."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False)
    await producer.start()
    try:
        for envelope in envelopes:
            key, value = envelope.session_id.encode(), encode(envelope)
            headers = signing.signed(topic, key, value, identity=identity)
            await producer.send(topic, value, key=key, headers=headers)
        await producer.flush()
    finally:
        await producer.stop()


async def produce_raw(
    bootstrap: str,
    topic: str,
    key: bytes | None,
    value: bytes,
    *,
    identity: str | None = "app",
    partition: int | None = None,
) -> None:
    """Write raw bytes, signed by ``identity`` (None: unsigned), to ``partition`` if given."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False)
    await producer.start()
    try:
        headers = signing.signed(topic, key, value, identity=identity) if identity else None
        await producer.send_and_wait(topic, value, key=key, headers=headers, partition=partition)
    finally:
        await producer.stop()


async def read(
    bootstrap: str, topic: str, *, until: int, timeout: float = 60.0, quiet: float = 0.0
) -> list[ConsumerRecord[bytes, bytes]]:
    """Records of ``topic`` from the start, until ``until`` arrived (then ``quiet`` s more)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    records: list[ConsumerRecord[bytes, bytes]] = []
    try:
        deadline = time.monotonic() + timeout
        while len(records) < until and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            records += [r for part in batch.values() for r in part]
        end = time.monotonic() + quiet
        while time.monotonic() < end:
            batch = await consumer.getmany(timeout_ms=100)
            records += [r for part in batch.values() for r in part]
    finally:
        await consumer.stop()
    return records


def replies(records: Iterable[ConsumerRecord[bytes, bytes]]) -> list[Envelope]:
    return [decode(r.value or b"") for r in records]


async def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``predicate`` until true or ``timeout``; the caller asserts what it needs."""
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def processed(processor: Processor, count: int) -> Callable[[], bool]:
    return lambda: processor.stats.processed >= count
