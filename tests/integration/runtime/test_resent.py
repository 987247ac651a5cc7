"""A captured signed record re-sent raw is never applied again, however late it comes.

One session gets 3,000 turns through a real broker and processor; its first turn (and
one from the middle) is read back from the topic and re-sent byte for byte after 300
and after 3,000 turns, far past the applied window of ids (see ``runtime._applied``).
"""

from __future__ import annotations

from collections import Counter

import pytest
from aiokafka import AIOKafkaProducer, ConsumerRecord

from hermesbus.codec import decode
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.runtime import HandlerInput, Outcome, RuntimeSettings

from .support import IN, ConversationProcessor, produce, read, turn, wait_for

pytestmark = pytest.mark.kafka

SESSION = "resent"


async def resend(bootstrap: str, records: list[ConsumerRecord[bytes, bytes]]) -> None:
    """What an attacker holding captured records does: the same key, bytes and headers."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False)
    await producer.start()
    try:
        for r in records:
            await producer.send_and_wait(r.topic, r.value, key=r.key, headers=list(r.headers))
    finally:
        await producer.stop()


async def test_a_resent_turn_is_not_applied_after_300_nor_after_3000_turns(
    broker: str, prefix: str, store: SqliteStateStore
) -> None:
    applications: Counter[str] = Counter()

    async def handler(inp: HandlerInput) -> Outcome:
        applications[inp.envelope.message_id] += 1
        return Outcome(state={"n": inp.state.data.get("n", 0) + 1})

    topic = prefix + IN
    await produce(broker, topic, [turn(SESSION, q) for q in range(300)])
    processor = ConversationProcessor(
        "resent",
        handler,
        [IN],
        store=store,
        kafka=KafkaConfig(bootstrap=broker),
        topic_prefix=prefix,
        settings=RuntimeSettings(),  # the default window of 256 ids
    )
    async with processor:
        await wait_for(lambda: processor.stats.processed == 300, timeout=120)
        captured = await read(broker, topic, until=300)
        by_id = {decode(r.value or b"").message_id: r for r in captured}
        first, middle = by_id[f"{SESSION}-m0"], by_id[f"{SESSION}-m150"]

        await resend(broker, [first, middle])  # 300 turns later
        await wait_for(lambda: processor.stats.duplicates == 2, timeout=60)
        assert processor.stats.duplicates == 2

        await produce(broker, topic, [turn(SESSION, q) for q in range(300, 3000)])
        await wait_for(lambda: processor.stats.processed == 3000, timeout=600)
        await resend(broker, [first, middle, by_id[f"{SESSION}-m299"]])  # 3,000 turns later
        await produce(broker, topic, [turn(SESSION, 3000)])  # and a new turn still runs
        await wait_for(lambda: processor.stats.processed == 3001, timeout=60)
        assert processor.stats.duplicates == 5

    assert processor.stats.processed == 3001
    assert sorted(applications.values()) == [1] * 3001
    assert (await store.load("resent", SESSION)).data == {"n": 3001}
