"""What several integration suites start the same way: the demo stack, the catalog's topics,
an indexer."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from hermesbus.client import Client
from hermesbus.codec import Codec
from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import Stack, stack
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.contract.envelope import Envelope
from hermesbus.runtime import RuntimeSettings
from hermesbus.topics import CONVERSATION_IN, CONVERSATION_OUT, Catalog
from hermesbus.trace.index import Indexer, TraceIndex
from tests import signing


@asynccontextmanager
async def demo_stack(
    bootstrap: str, prefix: str, home: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    """The stack ``hermesbus up --demo`` runs (SQLite stores in ``home``, the demo tools in
    worker processes) on ``bootstrap``, its topics under ``prefix``."""
    monkeypatch.setenv("HERMES_HOME", str(home))
    async with stack(
        settings=Settings.from_environment(),
        kafka=KafkaConfig(bootstrap=bootstrap),
        prefix=prefix,
        demo=True,
    ) as running:
        yield running


async def conversation_topics(bootstrap: str, prefix: str) -> str:
    """The conversation's two topics under ``prefix``, as the catalog declares them; the prefix."""
    catalog = Catalog.load().with_overrides(prefix=prefix)
    async with KafkaAdmin(KafkaConfig(bootstrap=bootstrap)) as admin:
        await admin.create(
            [catalog.get(prefix + CONVERSATION_IN), catalog.get(prefix + CONVERSATION_OUT)]
        )
    return prefix


Answer = Callable[[Client, Envelope, bytes], Awaitable[None]]
"""What a stand-in does with a turn: the client it sends with (as the conversation), the
turn, its bytes as they were on the log."""


async def answer_turns(broker: str, prefix: str, codec: Codec, answer: Answer) -> None:
    """The conversation processor's stand-in, until cancelled: every turn on the prefix's
    ingress topic (its 6 partitions, from the start), decoded with ``codec``, handed to
    ``answer``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=broker, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(prefix + CONVERSATION_IN, p) for p in range(6)])
        async with Client(
            bootstrap=broker, topic_prefix=prefix, codec=codec, identity="conversation"
        ) as out:
            async for record in consumer:
                raw = record.value or b""
                await answer(out, codec.decode(raw), raw)
    finally:
        await consumer.stop()


async def catalog_topics(bootstrap: str, prefix: str) -> KafkaConfig:
    """Every topic of the catalog under ``prefix`` on ``bootstrap``; the config reaching them."""
    kafka = KafkaConfig(bootstrap=bootstrap)
    async with KafkaAdmin(kafka) as admin:
        await admin.create(list(Catalog.load().with_overrides(prefix=prefix)))
    return kafka


def broker_settings(bootstrap: str, settings: RuntimeSettings | None = None) -> RuntimeSettings:
    """``settings`` (the defaults if none) as ``up`` runs them on that broker: the embedded
    broker's group timings when ``bootstrap`` is the embedded one the tests share."""
    settings = settings or RuntimeSettings()
    if bootstrap == os.environ.get("HERMES_TEST_EMBEDDED_BOOTSTRAP"):
        return settings.for_embedded_broker()
    return settings


def indexer_on(
    index: TraceIndex, bootstrap: str, prefix: str, settings: RuntimeSettings | None = None
) -> Indexer:
    """The indexer ``up`` runs, into ``index``, over the topics under ``prefix``: the tests'
    keys, the broker's timings, a group of the prefix's own."""
    return Indexer(
        index,
        kafka=KafkaConfig(bootstrap=bootstrap),
        prefix=prefix,
        settings=broker_settings(bootstrap, settings),
        keyring=signing.keys,
        group_id=prefix,
    )
