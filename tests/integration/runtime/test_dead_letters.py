"""Poison bytes, contract breaks and failing handlers reach the DLQ; the partition moves on."""

from __future__ import annotations

import io

import fastavro
import pytest

from hermesbus.codec import Codec, decode, encode
from hermesbus.codec._convert import to_record
from hermesbus.connectors.kafka import KafkaConfig, partition_of
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.contract import headers as h
from hermesbus.runtime import HandlerInput, Outcome, RuntimeSettings
from hermesbus.topics import ALERTS

from .support import (
    DLQ,
    IN,
    OUT,
    ConversationProcessor,
    counting,
    produce,
    produce_raw,
    read,
    replies,
    reply_to,
    turn,
    wait_for,
)

pytestmark = pytest.mark.kafka

FAST = RuntimeSettings(timer_interval_ms=20)


def contract_breaking() -> bytes:
    """Valid Avro for the envelope schema whose ``source`` is not ``component:instance``."""
    codec = Codec()
    record = to_record(turn("s1", 1))
    record["source"] = "Not An Address"
    buffer = io.BytesIO()
    buffer.write(b"\xc3\x01" + codec.fingerprint)
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(codec.schema), record)
    return buffer.getvalue()


async def test_a_record_on_another_partition_than_its_key_is_refused(
    broker: str, prefix: str, store: SqliteStateStore
) -> None:
    """A producer with another partitioner (librdkafka's CRC32) would break session order."""
    right = partition_of(b"s1", 6)
    wrong = (right + 1) % 6
    stray = turn("s1", 1)
    await produce(broker, prefix + IN, [turn("s1", 0)])
    await produce_raw(broker, prefix + IN, b"s1", encode(stray), partition=wrong)
    await produce_raw(broker, prefix + IN, b"s1", encode(turn("s1", 2)), partition=right)
    await produce(broker, prefix + IN, [turn("s1", 3)])
    kafka = KafkaConfig(bootstrap=broker)
    processor = ConversationProcessor(
        "route", counting, [IN], store=store, kafka=kafka, topic_prefix=prefix
    )
    async with processor:
        await wait_for(lambda: processor.stats.processed == 3 and processor.stats.dead_letters == 1)
    assert (processor.stats.processed, processor.stats.misrouted) == (3, 1)
    (letter,) = await read(broker, prefix + DLQ, until=1)
    assert letter.value == encode(stray)
    found = list(letter.headers)
    assert h.header(found, h.DLQ_ORIGIN_PARTITION) == str(wrong)
    message = h.header(found, h.DLQ_ERROR_MESSAGE) or ""
    assert f"is on partition {wrong} of {prefix + IN}" in message
    assert f"maps to partition {right} of 6" in message
    assert "murmur2" in message  # the partitioner to configure
    assert "murmur2_random" in message  # what librdkafka-based producers must set
    assert h.header(found, h.DLQ_ERROR_CLASS) == "hermesbus.errors.ContractError"


async def test_unsigned_and_impersonating_records_are_refused_and_alerted(
    broker: str, prefix: str, store: SqliteStateStore
) -> None:
    """Any processor, not only the stack's: the signer must be the source it claims."""
    await produce_raw(broker, prefix + IN, b"s1", encode(turn("s1", 0)), identity=None)
    await produce_raw(broker, prefix + IN, b"s1", encode(turn("s1", 1)), identity="tool")
    await produce(broker, prefix + IN, [turn("s1", 2)])
    kafka = KafkaConfig(bootstrap=broker)
    processor = ConversationProcessor(
        "guard", counting, [IN], store=store, kafka=kafka, topic_prefix=prefix
    )
    async with processor:
        await wait_for(lambda: processor.stats.processed == 1 and processor.stats.refused == 2)
    assert (processor.stats.processed, processor.stats.refused) == (1, 2)
    letters = await read(broker, prefix + DLQ, until=2)
    reasons = sorted(h.header(list(r.headers), h.DLQ_ERROR_MESSAGE) or "" for r in letters)
    assert [reason.split(":")[0] for reason in reasons] == [
        "identity.impersonation",
        "identity.unsigned",
    ]
    assert "signed by 'tool', but source 'app:test' speaks for 'app'" in reasons[0]
    alerts = [decode(r.value or b"") for r in await read(broker, prefix + ALERTS, until=2)]
    assert sorted(a.payload.body.code for a in alerts) == [  # type: ignore[union-attr]
        "identity.impersonation",
        "identity.unsigned",
    ]
    assert {a.source for a in alerts} == {"conversation:guard"}
    assert {a.payload.context["refused"] for a in alerts} == {"s1-m0", "s1-m1"}


async def test_undecodable_and_contract_breaking_records_are_dead_lettered(
    broker: str, prefix: str, store: SqliteStateStore
) -> None:
    poison = b"\x00\x00\x00\x00\x07not avro"
    await produce(broker, prefix + IN, [turn("s1", 0)])
    await produce_raw(broker, prefix + IN, b"s1", poison)
    await produce_raw(broker, prefix + IN, b"s1", contract_breaking())
    await produce_raw(broker, prefix + IN, b"someone-else", encode(turn("s1", 1)))
    await produce(broker, prefix + IN, [turn("s1", 1)])  # after the bad ones, same partition

    kafka = KafkaConfig(bootstrap=broker)
    processor = ConversationProcessor(
        "dlq", counting, [IN], store=store, kafka=kafka, topic_prefix=prefix
    )
    async with processor:
        await wait_for(lambda: processor.stats.processed == 2 and processor.stats.dead_letters == 3)
    assert processor.stats.processed == 2
    assert processor.stats.dead_letters == 3

    letters = await read(broker, prefix + DLQ, until=3)
    by_value = {r.value: r for r in letters}
    assert set(by_value) == {poison, contract_breaking(), encode(turn("s1", 1))}
    for record in letters:
        assert h.header(list(record.headers), h.DLQ_ORIGIN_TOPIC) == prefix + IN
        assert h.header(list(record.headers), h.DLQ_PROCESSOR) == "dlq"
        assert h.header(list(record.headers), h.DLQ_ATTEMPT) == "1"
        partition = h.header(list(record.headers), h.DLQ_ORIGIN_PARTITION)
        offset = h.header(list(record.headers), h.DLQ_ORIGIN_OFFSET)
        assert partition is not None
        assert offset is not None
        assert offset.isdigit()
    poisoned = list(by_value[poison].headers)
    assert h.header(poisoned, h.DLQ_ERROR_CLASS) == "hermesbus.errors.DecodeError"
    assert "schema id 7" in (h.header(poisoned, h.DLQ_ERROR_MESSAGE) or "")
    broken = list(by_value[contract_breaking()].headers)
    assert h.header(broken, h.DLQ_ERROR_CLASS) == "hermesbus.errors.ContractError"
    assert "source" in (h.header(broken, h.DLQ_ERROR_MESSAGE) or "")
    wrong_key = list(by_value[encode(turn("s1", 1))].headers)
    assert "someone-else" in (h.header(wrong_key, h.DLQ_ERROR_MESSAGE) or "")

    out = replies(await read(broker, prefix + OUT, until=2))
    assert [e.payload.body.text for e in out] == ["0", "1"]  # type: ignore[union-attr]
    # the poison did not hold the partition: everything up to the last record is committed
    assert (await store.load("dlq", "s1")).data["count"] == 2


async def test_a_failing_handler_is_retried_by_timer_then_dead_lettered(
    broker: str, prefix: str, store: SqliteStateStore
) -> None:
    calls: list[tuple[str, int]] = []

    async def handler(inp: HandlerInput) -> Outcome:
        calls.append((inp.envelope.message_id, inp.envelope.metadata.attempt))
        text = inp.envelope.payload.body.text  # type: ignore[union-attr]
        if text == "boom" or (text == "flaky" and inp.envelope.metadata.attempt == 1):
            raise RuntimeError(f"handler failed on {text}")
        return await counting(inp)

    boom = turn("s1", 0, text="boom", attempts=3, backoff_ms=50)
    flaky = turn("s2", 0, text="flaky", attempts=2, backoff_ms=50)
    after = turn("s1", 1)
    await produce(broker, prefix + IN, [boom, flaky, after])
    kafka = KafkaConfig(bootstrap=broker)
    processor = ConversationProcessor(
        "retry", handler, [IN], store=store, kafka=kafka, topic_prefix=prefix, settings=FAST
    )
    async with processor:
        await wait_for(lambda: processor.stats.dead_letters == 1 and processor.stats.processed == 2)
    assert processor.stats.retries == 3  # boom twice, flaky once
    expected = [(boom.message_id, n) for n in (1, 2, 3)]
    expected += [(flaky.message_id, 1), (flaky.message_id, 2), (after.message_id, 1)]
    assert sorted(calls) == sorted(expected)
    (letter,) = await read(broker, prefix + DLQ, until=1)
    headers = list(letter.headers)
    assert h.header(headers, h.DLQ_ATTEMPT) == "3"
    assert h.header(headers, h.DLQ_ERROR_CLASS) == "builtins.RuntimeError"
    assert h.header(headers, h.DLQ_ERROR_MESSAGE) == "handler failed on boom"
    # the envelope as it was consumed on its last attempt, bytes unchanged
    retried = boom.model_copy(update={"metadata": boom.metadata.model_copy(update={"attempt": 3})})
    assert letter.value == encode(retried)
    texts = [e.payload.body.text for e in replies(await read(broker, prefix + OUT, until=2))]  # type: ignore[union-attr]
    assert sorted(texts) == ["0", "1"]


async def test_a_state_the_store_cannot_save_is_a_handler_failure(
    broker: str, prefix: str, store: SqliteStateStore
) -> None:
    async def unsavable(inp: HandlerInput) -> Outcome:
        return Outcome(state={"when": object()})

    await produce(broker, prefix + IN, [turn("s1", 0), turn("s1", 1)])
    kafka = KafkaConfig(bootstrap=broker)
    processor = ConversationProcessor(
        "bad", unsavable, [IN], store=store, kafka=kafka, topic_prefix=prefix
    )
    async with processor:
        await wait_for(lambda: processor.stats.dead_letters == 2)
    letters = await read(broker, prefix + DLQ, until=2)
    assert {h.header(list(r.headers), h.DLQ_ERROR_CLASS) for r in letters} == {"builtins.TypeError"}
    assert (await store.load("bad", "s1")).version == 0


async def test_an_output_the_broker_can_never_take_dead_letters_its_input(
    broker: str, prefix: str, store: SqliteStateStore
) -> None:
    """A reply larger than a Kafka record may be: no retry can fix it, the partition moves on."""

    async def huge(inp: HandlerInput) -> Outcome:
        if inp.envelope.payload.context.get("seq") == 0:
            return Outcome(emit=(reply_to(inp.envelope, "x" * 2_000_000),))
        return await counting(inp)

    await produce(broker, prefix + IN, [turn("s1", 0), turn("s1", 1)])
    kafka = KafkaConfig(bootstrap=broker)
    processor = ConversationProcessor(
        "huge", huge, [IN], store=store, kafka=kafka, topic_prefix=prefix
    )
    async with processor:
        await wait_for(lambda: processor.stats.dead_letters == 1 and processor.stats.processed == 1)
    assert (processor.stats.dead_letters, processor.stats.processed) == (1, 1)
    (letter,) = await read(broker, prefix + DLQ, until=1)
    assert letter.value == encode(turn("s1", 0))
    assert h.header(list(letter.headers), h.DLQ_ERROR_CLASS) == "hermesbus.errors.BrokerError"
    assert "MessageSizeTooLarge" in (h.header(list(letter.headers), h.DLQ_ERROR_MESSAGE) or "")
    out = replies(await read(broker, prefix + OUT, until=1))
    assert [e.payload.body.text for e in out] == ["1"]  # type: ignore[union-attr]
