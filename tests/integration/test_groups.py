"""A new consumer group starts where another left off on a topic (a tool's own group)."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.connectors.kafka.groups import committed, hand_over
from hermesbus.topics import Catalog, plan

pytestmark = pytest.mark.kafka


async def _commit(bootstrap: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit(offsets)
    finally:
        await consumer.stop()


async def test_a_new_group_takes_over_the_old_groups_offsets(broker: str, unique: str) -> None:
    kafka = KafkaConfig(bootstrap=broker)
    prefix = f"groups-{unique}."
    topic = prefix + "hermes.tool"
    catalog = Catalog.load().with_overrides(prefix=prefix)
    async with KafkaAdmin(kafka) as admin:
        await admin.create(plan(catalog, await admin.describe(catalog.names())).create)
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:
        for n in range(5):
            await producer.send_and_wait(topic, b"call", partition=n % 2)
    finally:
        await producer.stop()
    old, new = f"tool-{unique}", f"tool-own-{unique}"
    await _commit(broker, old, {TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 1})

    assert await hand_over(kafka, topic, old, new) == {0: 3, 1: 1}
    assert await committed(kafka, new, topic) == {0: 3, 1: 1}
    # once the new group has offsets of its own, they are never overwritten
    await _commit(broker, new, {TopicPartition(topic, 0): 5})
    assert await hand_over(kafka, topic, old, new) == {}
    assert (await committed(kafka, new, topic))[0] == 5
    # a source with nothing committed leaves a new group to start from the earliest
    assert await hand_over(kafka, topic, f"nobody-{unique}", f"fresh-{unique}") == {}
