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

from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.demo import missing, reply_text, run
from hermesbus.stack import Stack, stack
from hermesbus.topics import DLQ
from tests.integration.index.proxy import Relay

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(420)]

BUDGET_SCALE = 3
"""Cycle budgets 3x the product's (S1: 15 s), so a slow, busy machine decides nothing."""
NEO4J_AWAY_S = 20.0
"""How long Neo4j refuses connections, once, from a second into the first conversation:
longer than the scaled S1 budget, so only the downtime not being charged keeps the round."""
KILL_EVERY_S = 4.0
KILLS = 5
"""Every Redis connection of the bus is cut KILLS times, KILL_EVERY_S apart (more often, a
tool call longer than the gap, whose attempt is cut each time, would never finish)."""
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
    try:  # groups of its own: another test's members joining "memory" would rebalance it
        async with stack(
            kafka=KafkaConfig(bootstrap=broker),
            prefix=f"fault-{unique}.",
            demo=True,
            group_prefix=f"fault{unique}-",
        ) as s:
            yield s, redis, neo4j
    finally:
        await redis.stop()
        await neo4j.stop()


async def faults(redis: Relay, neo4j: Relay) -> None:
    """Neo4j away once for NEO4J_AWAY_S; then Redis connections cut KILLS times (redis-py
    finds its connection closed on its next command).

    The kills follow the outage: while Neo4j is away the flow waits on memory, and a cut
    then finds only the idle connections of timers and heartbeats, no record to hold."""
    await asyncio.sleep(1.0)
    await neo4j.stop()
    await asyncio.sleep(NEO4J_AWAY_S)
    await neo4j.start()
    await asyncio.sleep(1.0)
    for _ in range(KILLS):
        await redis.stop()
        await redis.start()
        await asyncio.sleep(KILL_EVERY_S)


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
    breaking = asyncio.create_task(faults(redis, neo4j))
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
