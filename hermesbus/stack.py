"""``hermesbus up``: the broker (embedded unless one is configured), the topics, the processors.

Until the four processors land, the stack runs the echo processor on the
conversation topic, so an app can say something and get a reply.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from hermesbus.broker import EmbeddedBroker
from hermesbus.client import Client
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.envelope import Envelope
from hermesbus.processors.echo import NAME as ECHO
from hermesbus.processors.echo import echo
from hermesbus.runtime import Processor, RuntimeSettings, StateStore
from hermesbus.topics import CONVERSATION_IN, Catalog, plan

__all__ = ["DEMO_TURNS", "Stack", "demo", "stack"]

log = logging.getLogger(__name__)

DEMO_TURNS = (
    "我要报上个月去深圳的差旅费",
    "[上传两张图片]",
    "不用，就这三张",
    "等等，住宿费超标了，先不提交",
)
"""The expense-report conversation of seed 000 §2, as the user types it."""


@dataclass
class Stack:
    """What ``stack()`` started: where the broker is, and the running processors."""

    bootstrap: str
    embedded: bool
    prefix: str
    created: list[str] = field(default_factory=list)
    processors: list[Processor] = field(default_factory=list)


@asynccontextmanager
async def stack(
    *,
    kafka: KafkaConfig | None = None,
    prefix: str = "",
    settings: RuntimeSettings | None = None,
    store: StateStore | None = None,
) -> AsyncIterator[Stack]:
    """Start the broker if none is configured, create missing topics, run the processors."""
    kafka = kafka or KafkaConfig()
    async with contextlib.AsyncExitStack() as exits:
        embedded = not kafka.bootstrap
        if embedded:
            broker = await exits.enter_async_context(EmbeddedBroker())
            kafka = kafka.model_copy(update={"bootstrap": broker.bootstrap})
        states: StateStore = (
            store if store is not None else await exits.enter_async_context(SqliteStateStore())
        )
        running = Stack(str(kafka.bootstrap), embedded, prefix)
        running.created = await _provision(kafka, prefix)
        processor = Processor(
            ECHO,
            echo,
            [CONVERSATION_IN],
            store=states,
            kafka=kafka,
            topic_prefix=prefix,
            settings=settings,
        )
        await exits.enter_async_context(processor)
        running.processors.append(processor)
        yield running


async def _provision(kafka: KafkaConfig, prefix: str) -> list[str]:
    catalog = Catalog.load().with_overrides(prefix=prefix)
    async with KafkaAdmin(kafka) as admin:
        topics = plan(catalog, await admin.describe(catalog.names()))
        for drift in topics.drift:
            log.warning("topic drift: %s", drift)
        return await admin.create(topics.create)


async def demo(
    running: Stack, session_id: str = "sess_456", turns: Sequence[str] = DEMO_TURNS
) -> list[tuple[str, Envelope]]:
    """Say each turn of the expense-report conversation and wait for its reply."""
    answers = []
    async with Client(bootstrap=running.bootstrap, topic_prefix=running.prefix, name="demo") as app:
        for text in turns:
            reply = await app.ask(session_id, "u_5e884898", text, timeout=60)
            answers.append((text, reply))
    return answers
