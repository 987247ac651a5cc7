"""hermesbus.Client without a broker: records, envelopes, configuration, reply filtering.

aiokafka's producer and consumer are replaced by fakes that keep records in memory;
tests/integration/test_client.py runs the same client against real brokers.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

import hermesbus as h
from hermesbus.client import Client, partition_for_key
from hermesbus.codec import Codec
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.kafka import clients as clients_module
from hermesbus.contract.headers import traceparent
from hermesbus.errors import (
    BrokerError,
    ConfigError,
    EncodeError,
    HermesError,
    IdentityError,
    ReplyTimeout,
)
from hermesbus.identity import SIGNATURE, Keyring, Signer, Verifier
from tests import signing
from tests.builders import reply_to

CODEC = Codec()
IN = "p.hermes.conversation.in"
OUT = "p.hermes.conversation.out"
PARTITIONS = {0, 1, 2, 3, 4, 5}


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] = field(default_factory=list)


class FakeKafka:
    """An in-memory log per topic partition, shared by the fake producers and consumers."""

    def __init__(self) -> None:
        self.producers: list[FakeProducer] = []
        self.consumers: list[FakeConsumer] = []
        self.sent: list[Record] = []
        self.queues: dict[tuple[str, int], asyncio.Queue[Record]] = {}
        self.fail_start = False
        self.on_send: Any = None

    def queue(self, topic: str, partition: int) -> asyncio.Queue[Record]:
        return self.queues.setdefault((topic, partition), asyncio.Queue())

    def append(self, topic: str, key: bytes | None, value: bytes | None, headers: Any = ()) -> None:
        partition = partition_for_key(key or b"", PARTITIONS)
        record = Record(topic, partition, len(self.sent), key, value, list(headers))
        self.sent.append(record)
        self.queue(topic, partition).put_nowait(record)


class FakeCluster:
    """What the client asks of the producer's metadata: every topic exists."""

    def partitions_for_topic(self, topic: str) -> set[int]:
        return PARTITIONS


class FakeProducer:
    def __init__(self, kafka: FakeKafka, **kwargs: Any) -> None:
        self.kafka, self.kwargs = kafka, kwargs
        self.started = self.stopped = False
        self.client = SimpleNamespace(cluster=FakeCluster())
        kafka.producers.append(self)

    async def start(self) -> None:
        if self.kafka.fail_start:
            raise KafkaConnectionError("connection refused")
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    async def partitions_for(self, topic: str) -> set[int]:
        return PARTITIONS

    async def send_and_wait(self, topic: str, value: bytes, key: bytes, headers: Any) -> None:
        self.kafka.append(topic, key, value, headers)
        if self.kafka.on_send is not None:
            self.kafka.on_send(topic, CODEC.decode(value))


class FakeConsumer:
    def __init__(self, kafka: FakeKafka, **kwargs: Any) -> None:
        self.kafka, self.kwargs = kafka, kwargs
        self.assigned: list[Any] = []
        self.stopped = False
        kafka.consumers.append(self)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True

    def assign(self, partitions: list[Any]) -> None:
        self.assigned = partitions

    async def seek_to_end(self, partition: Any) -> bool:
        queue = self.kafka.queue(partition.topic, partition.partition)
        while not queue.empty():
            queue.get_nowait()
        return True

    async def position(self, partition: Any) -> int:
        return len(self.kafka.sent)

    async def getone(self, partition: Any) -> Record:
        return await self.kafka.queue(partition.topic, partition.partition).get()


@pytest.fixture
def kafka(monkeypatch: pytest.MonkeyPatch) -> FakeKafka:
    fake = FakeKafka()
    monkeypatch.setattr(clients_module, "AIOKafkaProducer", lambda **kw: FakeProducer(fake, **kw))
    monkeypatch.setattr(clients_module, "AIOKafkaConsumer", lambda **kw: FakeConsumer(fake, **kw))
    return fake


def make_client(**kwargs: Any) -> Client:
    return Client(bootstrap="broker.invalid:9092", topic_prefix="p.", codec=CODEC, **kwargs)


def put(kafka: FakeKafka, envelope: h.Envelope) -> None:
    """A reply written by the conversation (not by the app under test)."""
    as_conversation(kafka, envelope.session_id.encode(), CODEC.encode(envelope))


def as_conversation(kafka: FakeKafka, key: bytes, value: bytes | None) -> None:
    """Bytes on the replies topic signed as the conversation signs them (apps check that)."""
    headers = Signer("conversation", signing.keys()).sign(OUT, key, value or b"", ())
    kafka.append(OUT, key, value, headers)


# -- the envelope say() builds ------------------------------------------------------------


def test_turn_is_a_valid_user_turn_from_the_app_to_the_conversation() -> None:
    before = datetime.now(UTC) - timedelta(milliseconds=1)
    turn = make_client(name="expenses").turn("s-1", "u-1", "file my taxi receipt")
    assert turn.source == "app:expenses"
    assert turn.target == "conversation:in"
    assert (turn.session_id, turn.user_id) == ("s-1", "u-1")
    assert turn.payload.body == h.UserTurn(text="file my taxi receipt")
    assert before <= turn.timestamp <= datetime.now(UTC)
    assert turn.timestamp.tzinfo is UTC
    assert turn.timestamp.microsecond % 1000 == 0
    assert re.fullmatch(r"[0-9a-f]{32}", turn.trace_id)
    assert re.fullmatch(r"[0-9a-f]{16}", turn.span_id)
    assert CODEC.decode(CODEC.encode(turn)) == turn


def test_turns_get_fresh_ids_unless_a_trace_is_given() -> None:
    client = make_client()
    one, two = client.turn("s", "u", "a"), client.turn("s", "u", "a")
    assert one.message_id != two.message_id
    assert one.trace_id != two.trace_id
    assert client.turn("s", "u", "a", trace_id="t-42").trace_id == "t-42"
    assert make_client().source == "app:client"


def test_an_invalid_turn_is_a_hermes_error() -> None:
    with pytest.raises(EncodeError, match="session_id"):
        make_client().turn("", "u", "text")


# -- send and say ---------------------------------------------------------------------------


async def test_send_writes_the_target_topic_session_key_and_trace_headers(
    kafka: FakeKafka,
) -> None:
    async with make_client() as client, make_client(identity="conversation") as conversation:
        turn = client.turn("s-1", "u-1", "hello")
        await client.send(turn)
        await conversation.send(reply_to(turn, "hi"))
    producer, _ = kafka.producers
    assert producer.kwargs["bootstrap_servers"] == "broker.invalid:9092"
    assert producer.kwargs["acks"] == "all"
    assert producer.kwargs["enable_idempotence"] is False
    assert producer.stopped
    sent, replied = kafka.sent
    assert (sent.topic, replied.topic) == (IN, OUT)
    assert sent.key == b"s-1"
    assert sent.value is not None
    assert CODEC.decode(sent.value) == turn
    headers = dict(sent.headers)
    assert headers.pop(SIGNATURE).startswith(b"v1:app:")
    assert headers == {
        "trace_id": turn.trace_id.encode(),
        "message_id": turn.message_id.encode(),
        "traceparent": f"00-{turn.trace_id}-{turn.span_id}-01".encode(),
    }
    verifier = Verifier(signing.keys())
    assert verifier.signer(sent.topic, sent.key, sent.value, sent.headers) == "app"
    assert replied.value is not None
    assert verifier.signer(replied.topic, replied.key, replied.value, replied.headers) == (
        "conversation"
    )


async def test_an_app_sends_only_user_turns_to_the_ingress_topic(kafka: FakeKafka) -> None:
    """Internal targets, other bodies or another component's source need that component's key."""
    async with make_client() as client:
        turn = client.turn("s-1", "u-1", "hello")
        forged = [
            reply_to(turn, "hi"),  # conversation:S1 -> the replies topic
            turn.model_copy(update={"target": "mcp:dispatcher"}),
            turn.model_copy(update={"target": "tool:finance_tool"}),
            turn.model_copy(update={"target": "memory:long_term"}),
            turn.model_copy(update={"source": "conversation:S4"}),  # right topic, wrong source
            turn.model_copy(update={"payload": h.Payload(body=h.Reply(text="x"))}),
        ]
        for envelope in forged:
            with pytest.raises(IdentityError, match="identity.forbidden: an app sends only"):
                await client.send(envelope)
    assert kafka.sent == []  # nothing reached the broker


async def test_a_component_client_speaks_only_for_itself(kafka: FakeKafka) -> None:
    async with make_client(identity="conversation") as conversation:
        turn = conversation.turn("s-1", "u-1", "hello")
        with pytest.raises(IdentityError, match="identity.impersonation: source 'app:client'"):
            await conversation.send(turn)
        with pytest.raises(IdentityError, match="speaks for 'dispatcher'"):
            await conversation.send(reply_to(turn, "x").model_copy(update={"source": "mcp:x"}))
    assert kafka.sent == []


def test_check_names_the_topic_send_would_write_or_raises_what_send_would() -> None:
    """A batch can be checked whole before any of it is sent (``hermesbus send`` does)."""
    client, conversation = make_client(), make_client(identity="conversation")
    turn = client.turn("s-1", "u-1", "hello")
    assert client.check(turn) == IN
    assert conversation.check(reply_to(turn, "hi")) == OUT
    with pytest.raises(IdentityError, match="identity.forbidden"):
        client.check(reply_to(turn, "hi"))
    with pytest.raises(IdentityError, match="identity.impersonation"):
        conversation.check(turn)
    with pytest.raises(ConfigError, match="no topic for target 'nowhere:x'"):
        client.check(turn.model_copy(update={"target": "nowhere:x"}))


def test_a_client_without_its_key_says_how_to_get_one() -> None:
    with pytest.raises(ConfigError, match="no signing key for identity 'app'.*HERMES_KEY_APP"):
        make_client(keys=Keyring({}))


def test_traceparent_of_non_hex_ids_is_derived_and_w3c_shaped() -> None:
    turn = make_client().turn("s", "u", "x", trace_id="order-7")
    value = traceparent(turn)
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", value)
    assert value == traceparent(turn.model_copy())  # deterministic


async def test_say_sends_the_turn_and_returns_its_message_id(kafka: FakeKafka) -> None:
    async with make_client(name="web") as client:
        message_id = await client.say("s-9", "u-9", "hi there", trace_id="trace-9")
    (record,) = kafka.sent
    assert record.value is not None
    turn = CODEC.decode(record.value)
    assert turn.message_id == message_id
    assert (turn.trace_id, turn.source, record.topic) == ("trace-9", "app:web", IN)
    assert turn.payload.body == h.UserTurn(text="hi there")


async def test_start_and_stop_are_idempotent(kafka: FakeKafka) -> None:
    client = make_client()
    await client.start()
    await client.start()
    await client.stop()
    await client.stop()
    assert len(kafka.producers) == 1


async def test_send_before_start_is_a_broker_error(kafka: FakeKafka) -> None:
    client = make_client()
    with pytest.raises(BrokerError, match="not started"):
        await client.say("s", "u", "x")


async def test_an_unreachable_broker_is_a_broker_error(kafka: FakeKafka) -> None:
    kafka.fail_start = True
    with pytest.raises(BrokerError, match=r"cannot reach Kafka at broker.invalid:9092") as info:
        await make_client().start()
    assert isinstance(info.value.__cause__, KafkaConnectionError)
    assert kafka.producers[0].stopped


async def test_a_refused_connection_with_real_aiokafka_is_a_broker_error() -> None:
    client = Client(bootstrap="127.0.0.1:1", request_timeout_ms=2000)
    with pytest.raises(BrokerError, match="cannot reach Kafka at 127.0.0.1:1"):
        await client.start()


# -- configuration --------------------------------------------------------------------------


def test_no_bootstrap_names_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HERMES_KAFKA_BOOTSTRAP", raising=False)
    with pytest.raises(ConfigError, match="HERMES_KAFKA_BOOTSTRAP"):
        Client()


def test_settings_come_from_the_environment_and_keywords_override_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HERMES_KAFKA_BOOTSTRAP", "env-host:9092")
    monkeypatch.setenv("HERMES_KAFKA_REQUEST_TIMEOUT_MS", "1234")
    assert Client().config.bootstrap == "env-host:9092"
    client = Client(bootstrap="kw-host:9092")
    assert (client.config.bootstrap, client.config.request_timeout_ms) == ("kw-host:9092", 1234)
    config = KafkaConfig(bootstrap="cfg:1", request_timeout_ms=5)
    assert Client(config, bootstrap="cfg:2").config.model_dump() == {
        **config.model_dump(),
        "bootstrap": "cfg:2",
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bootstrap_servers": "x:1"}, "unknown Kafka setting bootstrap_servers"),
        ({"security_protocol": "TLS"}, "invalid Kafka settings"),
        ({"security_protocol": "SASL_PLAINTEXT"}, "HERMES_KAFKA_SASL_USERNAME"),
        ({"name": "app:web"}, "client name 'app:web'"),
    ],
)
def test_bad_settings_are_config_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Client(bootstrap="x:1", **kwargs)


# -- replies and ask ------------------------------------------------------------------------


async def test_replies_read_the_session_partition_and_skip_others_and_garbage(
    kafka: FakeKafka, caplog: pytest.LogCaptureFixture
) -> None:
    async with make_client() as client:
        turn = client.turn("s-1", "u", "x")
        put(kafka, reply_to(turn, "before"))  # sent before listening: not seen
        async with client.replies("s-1") as replies:
            (consumer,) = kafka.consumers
            (assigned,) = consumer.assigned
            assert (assigned.topic, assigned.partition) == (
                OUT,
                partition_for_key(b"s-1", range(6)),
            )
            assert consumer.kwargs["group_id"] is None
            as_conversation(kafka, b"s-1", b"\xc3\x01garbage")
            as_conversation(kafka, b"s-1", None)
            put(kafka, reply_to(turn, "first"))
            with caplog.at_level(logging.WARNING, logger="hermesbus.client"):
                first = await anext(replies)
            assert first.payload.body == h.Reply(text="first")
        assert consumer.stopped
    assert sum("undecodable" in r.getMessage() for r in caplog.records) == 2


async def test_replies_pass_over_other_sessions_on_the_same_partition(kafka: FakeKafka) -> None:
    other = next(
        f"other-{i}"
        for i in range(1000)
        if partition_for_key(f"other-{i}".encode(), PARTITIONS)
        == partition_for_key(b"s-1", PARTITIONS)
    )
    async with make_client() as client:
        replies = client.replies("s-1")
        await replies.start()
        put(kafka, reply_to(client.turn(other, "u", "x"), "not yours"))
        put(kafka, reply_to(client.turn("s-1", "u", "x"), "yours"))
        mine = await anext(replies)
    assert mine.payload.body == h.Reply(text="yours")
    assert [r async for r in replies] == []  # the client's stop ended the iterator


async def test_ask_returns_the_first_reply_of_its_trace(kafka: FakeKafka) -> None:
    def echo(topic: str, envelope: h.Envelope) -> None:
        if topic == IN:  # a reply of another trace first, then the answer
            for reply in (reply_to(envelope, "other", "t-other"), reply_to(envelope, "echo")):
                put(kafka, reply)

    kafka.on_send = echo
    async with make_client() as client:
        reply = await client.ask("s-1", "u", "hello", timeout=5)
    assert reply.payload.body == h.Reply(text="echo")
    (sent, *_) = kafka.sent
    assert sent.value is not None
    assert reply.trace_id == CODEC.decode(sent.value).trace_id


async def test_ask_without_an_answer_raises_reply_timeout(kafka: FakeKafka) -> None:
    async with make_client() as client:
        with pytest.raises(ReplyTimeout, match=r"no reply to trace [0-9a-f]{32} of session 's-1'"):
            await client.ask("s-1", "u", "anyone?", timeout=0.05)
    assert isinstance(ReplyTimeout("x"), HermesError)
    assert all(c.stopped for c in kafka.consumers)
