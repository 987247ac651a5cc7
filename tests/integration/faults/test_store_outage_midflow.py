"""Redis connections killed and Neo4j taken away mid-flow: the demo finishes as it would
have, nothing is dead-lettered, no user is told of a timeout.

The stores are the run's real Redis and Neo4j, each reached through a relay of the test's
own (the servers are shared by the run's other tests): cutting the relay's connections is
what ``CLIENT KILL TYPE normal`` does to the bus's clients, and keeping it down refuses
every connection as a stopped Neo4j does. What the servers hold is untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import Stack, stack
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.demo.expense import missing, reply_text, run
from hermesbus.topics import DLQ
from tests.integration.index.proxy import Relay

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(420)]

BUDGET_SCALE = 3
"""Cycle budgets 3x the product's (S1: 15 s), so a slow, busy machine decides nothing."""
NEO4J_AWAY_S = 20.0
"""How long Neo4j refuses connections, once, from a second into the first conversation:
longer than the scaled S1 budget, so only the downtime not being charged keeps the round."""
KILL_EVERY_S = 3.0
REDIS_AWAY_S = 1.0
"""Each time memory gets a record through (its held one, once Neo4j is back, first), every
Redis connection of the bus is cut and new ones are refused for REDIS_AWAY_S, then not
again for KILL_EVERY_S: the flow is at work right then (the dispatcher takes memory's
answer), so a record is held in place however quick the machine. Faults timed by the
clock missed it on CI: the flow after Neo4j's return took under 2 s, between two of them,
and a bare cut between two commands is absorbed by redis-py's reconnect. More often, a
tool call longer than the gap, whose attempt is cut each time, would never finish."""
SLOW_NOTICE = "处理中，约 30 秒"
PATH = ["conversation:S2", "conversation:S3.1", "conversation:S4", "conversation:S5"]
"""Each conversation's answers, one per user turn, as without any outage."""


async def relay_to(url: str) -> Relay:
    parts = urlsplit(url)
    relay = Relay(parts.hostname or "127.0.0.1", parts.port or 0)
    await relay.start()
    return relay


@pytest.fixture
async def running(
    broker: str,
    unique: str,
    *,
    tmp_path: Path,
    redis_url: str,
    neo4j_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[Stack, Relay, Relay]]:
    redis, neo4j = await relay_to(redis_url), await relay_to(neo4j_url)
    monkeypatch.setenv("HERMES_REDIS_URL", f"redis://127.0.0.1:{redis.port}/0")
    monkeypatch.setenv("HERMES_REDIS_PREFIX", f"fault{unique}")
    monkeypatch.setenv("HERMES_NEO4J_URL", f"bolt://127.0.0.1:{neo4j.port}")
    monkeypatch.setenv("HERMES_NEO4J_NAMESPACE", f"fault{unique}")
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HERMES_CONVERSATION_BUDGET_SCALE", str(BUDGET_SCALE))
    try:  # groups of its own (they take the prefix): another test's members would rebalance
        async with stack(
            settings=Settings.from_environment(),
            kafka=KafkaConfig(bootstrap=broker),
            prefix=f"fault-{unique}.",
            demo=True,
        ) as s:
            yield s, redis, neo4j
    finally:
        await redis.stop()
        await neo4j.stop()


async def faults(redis: Relay, neo4j: Relay, bus: Stack) -> None:
    """Neo4j away once for NEO4J_AWAY_S, from a second in; Redis away REDIS_AWAY_S each
    time memory gets a record through, KILL_EVERY_S apart at least, until cancelled."""
    memory = next(p for p in bus.processors if p.name == "memory")

    async def neo4j_away() -> None:
        await asyncio.sleep(1.0)
        await neo4j.stop()
        await asyncio.sleep(NEO4J_AWAY_S)
        await neo4j.start()

    async def redis_away() -> None:
        done = memory.stats.processed
        while True:
            while memory.stats.processed == done:
                await asyncio.sleep(0.02)
            await redis.stop()
            await asyncio.sleep(REDIS_AWAY_S)
            await redis.start()
            await asyncio.sleep(KILL_EVERY_S)
            done = memory.stats.processed

    await asyncio.gather(neo4j_away(), redis_away())


async def dead_letters(bootstrap: str, topic: str) -> int:
    """How many records ``topic`` holds (the sum of its partitions' end offsets)."""
    kafka = KafkaConfig(bootstrap=bootstrap)
    async with KafkaAdmin(kafka) as admin:  # a plain consumer's metadata may lack it
        count = (await admin.describe([topic]))[topic].partitions
    parts = [TopicPartition(topic, p) for p in range(count)]
    consumer = AIOKafkaConsumer(**kafka.client_kwargs(), group_id=None)
    await consumer.start()
    try:
        consumer.assign(parts)
        return sum((await consumer.end_offsets(parts)).values())
    finally:
        await consumer.stop()


def _quiet(kind: str, item: object) -> None:
    """The demo's printer, silenced: the test reads what was said instead."""


async def test_the_demo_finishes_through_redis_kills_and_a_neo4j_outage(
    running: tuple[Stack, Relay, Relay],
) -> None:
    bus, redis, neo4j = running
    breaking = asyncio.create_task(faults(redis, neo4j, bus))
    try:
        submitted, held = await run(bus.bootstrap, bus.prefix, _quiet)
    finally:
        breaking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await breaking
    for said, ending in ((submitted, "已提交"), (held, "未完成报销流程")):
        texts = "\n".join(f"{r.source}: {reply_text(r)}" for _, r in said.replies)
        # every figure and ending of the walkthrough; not the "ocr_tool is slow" notice,
        # which comes from the live health probes the Redis kills may cut (a probe that
        # fails is no health, and no notice): health, not the flow
        assert [m for m in missing(said, ending) if SLOW_NOTICE not in m] == [], texts
        answers = [r.source for _, r in said.replies if r.source.startswith("conversation:")]
        assert answers == PATH, texts
        assert "timeout" not in texts
        assert "暂时无法完成" not in texts
    in_place = {p.name: p.stats.held for p in bus.processors}
    assert in_place["memory"] >= 1, in_place  # the outages did hit the flow, held in place
    assert sum(in_place.values()) >= 2, in_place
    assert sum(p.stats.dead_letters for p in bus.processors) == 0
    assert await dead_letters(bus.bootstrap, bus.prefix + DLQ) == 0
