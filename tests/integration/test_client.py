"""hermesbus.Client against each real broker: send, say, replies, ask (and its timeout)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

import hermesbus as h
from hermesbus.client import Client, partition_for_key
from hermesbus.codec import Codec
from hermesbus.contract.headers import traceparent
from hermesbus.errors import ReplyTimeout
from hermesbus.identity import SIGNATURE
from hermesbus.topics import CONVERSATION_IN, CONVERSATION_OUT
from tests.builders import reply_to
from tests.integration.stacks import answer_turns, conversation_topics

pytestmark = pytest.mark.kafka

CODEC = Codec()
WAIT_S = 20.0


@pytest.fixture
async def prefix(broker: str, unique: str) -> str:
    """Fresh conversation topics (as the catalog declares them) under a unique prefix."""
    return await conversation_topics(broker, f"c{unique}.")


@pytest.fixture
async def client(broker: str, prefix: str) -> AsyncIterator[Client]:
    async with Client(bootstrap=broker, topic_prefix=prefix, codec=CODEC, name="tests") as c:
        yield c


@pytest.fixture
async def conversation(broker: str, prefix: str) -> AsyncIterator[Client]:
    """A client holding the conversation's key: it writes the replies an app reads."""
    async with Client(
        bootstrap=broker, topic_prefix=prefix, codec=CODEC, identity="conversation"
    ) as c:
        yield c


async def read(broker: str, topic: str, count: int = 1) -> list[Any]:
    """The first ``count`` records of ``topic`` (all partitions), with a plain consumer."""
    consumer = AIOKafkaConsumer(bootstrap_servers=broker, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(6)])
        records: list[Any] = []
        async with asyncio.timeout(WAIT_S):
            while len(records) < count:
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    records.extend(batch)
        return records[:count]
    finally:
        await consumer.stop()


async def test_send_lands_on_the_target_topic_with_headers_and_decodes_back(
    broker: str, client: Client, conversation: Client, prefix: str
) -> None:
    envelope = reply_to(client.turn("s-send", "u", "x"), "hello")
    await conversation.send(envelope)
    (record,) = await read(broker, prefix + CONVERSATION_OUT)
    assert record.key == b"s-send"
    assert record.partition == partition_for_key(b"s-send", range(6))
    headers = dict(record.headers)
    assert headers["trace_id"] == envelope.trace_id.encode()
    assert headers["message_id"] == envelope.message_id.encode()
    assert headers["traceparent"] == traceparent(envelope).encode()
    assert headers[SIGNATURE].startswith(b"v1:conversation:")
    assert CODEC.decode(record.value) == envelope


async def test_say_writes_a_user_turn_keyed_by_session(
    broker: str, client: Client, prefix: str
) -> None:
    message_id = await client.say("s-say", "u-1", "I want to file an expense report")
    (record,) = await read(broker, prefix + CONVERSATION_IN)
    assert record.key == b"s-say"
    turn = CODEC.decode(record.value)
    assert (turn.message_id, turn.source, turn.target) == (
        message_id,
        "app:tests",
        "conversation:in",
    )
    assert turn.payload.body == h.UserTurn(text="I want to file an expense report")


async def test_replies_yield_only_the_sessions_replies_from_when_they_start(
    broker: str, client: Client, conversation: Client, prefix: str
) -> None:
    mine = "s-mine"
    other = next(  # another session on the same partition: only the key tells them apart
        f"s-other-{i}"
        for i in range(1000)
        if partition_for_key(f"s-other-{i}".encode(), range(6))
        == partition_for_key(mine.encode(), range(6))
    )
    turn, theirs = client.turn(mine, "u", "x"), client.turn(other, "u", "x")
    await conversation.send(reply_to(turn, "too early"))
    async with client.replies(mine) as replies:
        raw = AIOKafkaProducer(bootstrap_servers=broker)
        await raw.start()
        try:
            await raw.send_and_wait(prefix + CONVERSATION_OUT, b"not avro", key=mine.encode())
        finally:
            await raw.stop()
        for text, envelope in [("a", theirs), ("1", turn), ("b", theirs), ("2", turn)]:
            await conversation.send(reply_to(envelope, text))
        async with asyncio.timeout(WAIT_S):
            got = [await anext(replies), await anext(replies)]
    assert [r.payload.body.text for r in got] == ["1", "2"]  # type: ignore[union-attr]
    assert {r.session_id for r in got} == {mine}


async def echo(broker: str, prefix: str) -> None:
    """The conversation processor's stand-in: answer every turn, after a decoy of another trace."""

    async def answer(out: Client, turn: h.Envelope, _: bytes) -> None:
        text = turn.payload.body.text  # type: ignore[union-attr]
        await out.send(reply_to(turn, "decoy", trace_id=uuid.uuid4().hex))
        await out.send(reply_to(turn, f"echo: {text}"))

    await answer_turns(broker, prefix, CODEC, answer)


async def test_ask_returns_the_reply_of_its_trace(broker: str, client: Client, prefix: str) -> None:
    task = asyncio.create_task(echo(broker, prefix))
    try:
        reply = await client.ask("s-ask", "u-1", "hello", timeout=WAIT_S)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert reply.payload.body == h.Reply(text="echo: hello")
    assert reply.session_id == "s-ask"
    (record,) = await read(broker, prefix + CONVERSATION_IN)
    assert reply.causation_id == CODEC.decode(record.value).message_id


async def test_ask_times_out_when_nobody_answers(client: Client) -> None:
    with pytest.raises(ReplyTimeout, match="of session 's-silent' within 1 s"):
        await client.ask("s-silent", "u", "anyone?", timeout=1.0)
