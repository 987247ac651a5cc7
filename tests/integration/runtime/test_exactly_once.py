"""Exactly-once mode: read-process-write transactions (Apache Kafka only)."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord

from hermesbus.base.storemark import MarkBook
from hermesbus.codec import decode
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.contract import headers as h
from hermesbus.errors import ConfigError
from hermesbus.runtime import HandlerInput, Outcome, RuntimeSettings

from .support import (
    DLQ,
    IN,
    OUT,
    ConversationProcessor,
    counting,
    produce,
    provision,
    turn,
    wait_for,
)

pytestmark = pytest.mark.kafka

EOS = RuntimeSettings(exactly_once=True)


async def read_all(
    bootstrap: str, topic: str, isolation: str, settle: float = 2.0
) -> list[ConsumerRecord[bytes, bytes]]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", isolation_level=isolation
    )
    await consumer.start()
    records: list[ConsumerRecord[bytes, bytes]] = []
    try:
        idle = 0.0
        while idle < settle:
            batch = await consumer.getmany(timeout_ms=250)
            got = [r for part in batch.values() for r in part]
            records += got
            idle = 0.0 if got else idle + 0.25
    finally:
        await consumer.stop()
    return records


@pytest.fixture
async def kafka_prefix(kafka_bootstrap: str, unique: str) -> str:
    prefix = f"eos{unique}."
    await provision(kafka_bootstrap, prefix)
    return prefix


async def test_outputs_and_offsets_commit_together(
    kafka_bootstrap: str, kafka_prefix: str, store: SqliteStateStore
) -> None:
    envelopes = [turn(f"s{s}", q) for q in range(10) for s in range(20)]
    await produce(kafka_bootstrap, kafka_prefix + IN, envelopes)
    kafka = KafkaConfig(bootstrap=kafka_bootstrap)
    processor = ConversationProcessor(
        "eos", counting, [IN], store=store, kafka=kafka, topic_prefix=kafka_prefix, settings=EOS
    )
    async with processor:
        await wait_for(lambda: processor.stats.processed == 200)
    out = await read_all(kafka_bootstrap, kafka_prefix + OUT, "read_committed")
    ids = [decode(r.value or b"").message_id for r in out]
    assert len(ids) == len(set(ids)) == 200
    for s in range(20):
        assert (await store.load("eos", f"s{s}")).data == {"last": 9, "count": 10, "violations": 0}


async def test_a_handler_failure_aborts_the_transaction(
    kafka_bootstrap: str, kafka_prefix: str, store: SqliteStateStore
) -> None:
    async def handler(inp: HandlerInput) -> Outcome:
        if inp.envelope.payload.body.text == "boom":  # type: ignore[union-attr]
            raise RuntimeError("boom")
        return await counting(inp)

    good, bad, later = turn("s1", 0), turn("s1", 1, text="boom"), turn("s1", 2)
    await produce(kafka_bootstrap, kafka_prefix + IN, [good, bad, later])
    kafka = KafkaConfig(bootstrap=kafka_bootstrap)
    processor = ConversationProcessor(
        "eos", handler, [IN], store=store, kafka=kafka, topic_prefix=kafka_prefix, settings=EOS
    )
    async with processor:
        await wait_for(lambda: processor.stats.processed == 2 and processor.stats.dead_letters == 1)
    assert processor.stats.aborted == 1

    committed = await read_all(kafka_bootstrap, kafka_prefix + OUT, "read_committed")
    assert [decode(r.value or b"").payload.body.text for r in committed] == ["0", "2"]  # type: ignore[union-attr]
    # the aborted transaction's outputs are in the log, but only read_uncommitted sees them
    everything = await read_all(kafka_bootstrap, kafka_prefix + OUT, "read_uncommitted")
    assert len(everything) > len(committed)
    (letter,) = await read_all(kafka_bootstrap, kafka_prefix + DLQ, "read_committed")
    assert h.header(list(letter.headers), h.DLQ_ERROR_MESSAGE) == "boom"


async def test_exactly_once_is_refused_on_the_embedded_broker(
    embedded_bootstrap: str, tmp_path: Path
) -> None:
    async with SqliteStateStore(tmp_path / "s.sqlite3", book=MarkBook(tmp_path)) as store:
        processor = ConversationProcessor(
            "eos",
            counting,
            [IN],
            store=store,
            kafka=KafkaConfig(bootstrap=embedded_bootstrap),
            settings=EOS,
        )
        with pytest.raises(ConfigError, match="needs a broker with transactions"):
            await processor.start()
