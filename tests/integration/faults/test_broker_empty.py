"""A broker that comes back empty under a running ``up``, and clients that never create topics.

The embedded broker (tansu, in memory; what ``hermesbus broker`` runs) is this test's own,
SIGKILLed and started again on its port: it comes back with no topic, no group, no
offset. Apache Kafka (shared) cannot be restarted empty, so there the run's own topics
(a unique prefix) are deleted under ``up``, which is what an emptied broker looks like
to it. Either way ``up`` creates the catalog's topics again with the catalog's
partitions, the next turn is answered, and nothing is dead-lettered.

Turns are still being worked on when the broker empties (as the demo's were in a busy CI
run): the processors must not commit what they finished of the lost log into the new one
(their group would start the new log at those offsets and skip the turns written there).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import NewPartitions, NewTopic
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import KafkaError

from hermesbus.client import Client
from hermesbus.compose.broker import EmbeddedBroker, free_port
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.errors import BrokerError, ReplyTimeout
from hermesbus.identity import KEYS_FILE_ENV
from hermesbus.topics import CONVERSATION_IN, CONVERSATION_OUT, Catalog
from tests.cli_process import Background, clean_env

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

START_S = 300.0
"""How long ``up --demo`` (or a broker) may take to start on a slow, busy machine."""
RECREATE_S = 120.0
"""How long ``up`` may take to see the emptied broker and create the topics again."""
ANSWER_S = 120.0
"""How long the turn after that may take to be answered."""
STOP_S = 90.0
"""How long ``up`` may take to stop once signalled."""
POLL_S = 0.1
IN_FLIGHT = 12
"""Turns of as many sessions sent just before the broker empties: work in flight, on
every partition, when it does."""


class _Process(Background):
    """A ``hermesbus`` command in a session of its own."""

    def stop(self) -> None:
        """Ctrl-C (SIGINT to its group), so it stops its tool workers too; else SIGKILL."""
        if self.process.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.interrupt(STOP_S)
        self.kill()


@contextlib.contextmanager
def _running(folder: Path, *args: str, env: dict[str, str]) -> Iterator[_Process]:
    process = _Process(folder, *args, env=env, name="hermesbus")
    try:
        yield process
    finally:
        process.stop()


async def _killed(broker: EmbeddedBroker) -> None:
    """SIGKILL the broker's process and wait until it is gone: its topics with it."""
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGKILL)
    while broker.running:
        await asyncio.sleep(POLL_S)


async def _partitions(bootstrap: str, prefix: str) -> dict[str, int]:
    catalog = Catalog.load().with_overrides(prefix=prefix)
    async with KafkaAdmin(KafkaConfig(bootstrap=bootstrap)) as admin:
        existing = await admin.describe(catalog.names())
    return {name: topic.partitions for name, topic in existing.items()}


async def _delete_topics(bootstrap: str, prefix: str) -> None:
    catalog = Catalog.load().with_overrides(prefix=prefix)
    async with KafkaAdmin(KafkaConfig(bootstrap=bootstrap)) as admin:
        await admin.client.delete_topics(catalog.names())
        while len(await admin.missing(catalog.names())) < len(catalog.names()):
            await asyncio.sleep(POLL_S)


async def _records(bootstrap: str, topic: str) -> list[bytes]:
    """Every record of ``topic`` from its start to its current end."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        partitions = consumer.assignment()
        while not partitions:
            await asyncio.sleep(POLL_S)
            partitions = consumer.assignment()
        ends = await consumer.end_offsets(list(partitions))
        found: list[bytes] = []
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            batches = await consumer.getmany(timeout_ms=1000)
            found += [r.value or b"" for records in batches.values() for r in records]
        return found
    finally:
        await consumer.stop()


async def _in_flight(bootstrap: str, prefix: str) -> None:
    """A first turn of IN_FLIGHT sessions, not waited for: work in flight for a while."""
    async with Client(bootstrap=bootstrap, topic_prefix=prefix) as client:
        for n in range(IN_FLIGHT):
            await client.say(
                f"busy-{n}-{uuid.uuid4().hex[:6]}", "u-1", "我要报上个月去深圳的差旅费"
            )


async def _groups(bootstrap: str, prefix: str) -> str:
    """Each of up's consumer groups as the broker has it: state, members' partitions of the
    prefix's topics, committed offsets, against the topics' ends (why a turn is stuck)."""
    counts = await _partitions(bootstrap, prefix)
    parts = [TopicPartition(t, p) for t, n in counts.items() for p in range(n)]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        consumer.assign(parts)
        ends = await consumer.end_offsets(parts)
    finally:
        await consumer.stop()
    shown = [f"{tp.topic[len(prefix) :]}-{tp.partition}={o}" for tp, o in ends.items() if o]
    lines = ["ends: " + ", ".join(shown)]
    async with KafkaAdmin(KafkaConfig(bootstrap=bootstrap)) as admin:
        client = admin.client
        names = sorted({g[0] for g in await client.list_consumer_groups()})
        for group in names:
            offsets = await client.list_consumer_group_offsets(group)
            mine = {tp: o.offset for tp, o in offsets.items() if tp.topic.startswith(prefix)}
            described = await client.describe_consumer_groups([group])
            held, state = [], "not described"
            for response in described:
                for g in response.groups:  # error, id, state, protocol type, protocol, members
                    for member in g[5]:
                        raw = member[-1]
                        if raw:
                            decoded = ConsumerProtocolMemberAssignment.decode(raw)
                            held += [
                                f"{t[len(prefix) :]}{sorted(ps)}"
                                for t, ps in decoded.assignment
                                if t.startswith(prefix)
                            ]
                    state = f"{g[2]}, {len(g[5])} members"
            committed = ", ".join(
                f"{tp.topic[len(prefix) :]}-{tp.partition}={o}" for tp, o in sorted(mine.items())
            )
            if mine or held:
                lines.append(f"group {group} ({state}): holds {held}; committed {committed}")
    return "\n".join(lines)


async def _answered(bootstrap: str, prefix: str) -> str:
    """The reply to a first turn of a new session (kept trying while up re-creates)."""
    session = f"after-{uuid.uuid4().hex[:8]}"
    async with Client(bootstrap=bootstrap, topic_prefix=prefix) as client:
        reply = await client.ask(session, "u-1", "我要报上个月去深圳的差旅费", timeout=ANSWER_S)
    return str(reply.payload.body)


@pytest.mark.timeout(START_S * 2 + RECREATE_S + ANSWER_S + 120)
@pytest.mark.parametrize("kind", ["embedded", "apache-kafka"])
async def test_up_creates_the_topics_again_when_the_broker_comes_back_empty(
    kind: str, tmp_path: Path, unique: str, request: pytest.FixtureRequest
) -> None:
    env = clean_env(tmp_path / "home", **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]})
    prefix = f"empty-{unique}."
    async with contextlib.AsyncExitStack() as stack:
        if kind == "embedded":
            request.getfixturevalue("broker_binary")
            broker = EmbeddedBroker(home=tmp_path / "broker", port=free_port())
            await stack.enter_async_context(broker)
            bootstrap = broker.bootstrap
        else:
            bootstrap = str(request.getfixturevalue("kafka_bootstrap"))
        up = stack.enter_context(
            _running(
                tmp_path / "up",
                "up",
                "--demo",
                "--bootstrap",
                bootstrap,
                "--prefix",
                prefix,
                env=env,
            )
        )
        up.wait_for("serving; Ctrl-C stops", within_s=START_S)
        catalog = {
            spec.name: spec.partitions for spec in Catalog.load().with_overrides(prefix=prefix)
        }
        assert await _partitions(bootstrap, prefix) == catalog

        await _in_flight(bootstrap, prefix)
        if kind == "embedded":  # killed, and started again on its port: empty
            await _killed(broker)
            await asyncio.to_thread(broker.stop)  # reaps the killed process
            await asyncio.to_thread(broker.start)
        else:
            await _delete_topics(bootstrap, prefix)
        up.wait_for("created again:", within_s=RECREATE_S)
        assert f"{len(catalog)} of the catalog's topics were missing" in up.stderr()
        assert await _partitions(bootstrap, prefix) == catalog

        try:
            assert await _answered(bootstrap, prefix)
        except ReplyTimeout:
            said = up.stderr()
            notable = [
                line
                for line in said.splitlines()
                if line.startswith(("ERROR", "broker:")) or "processor=" in line
            ]
            groups = await _groups(bootstrap, prefix)
            # the notable lines last: a report that keeps only the output's end keeps them
            pytest.fail(
                f"no answer after the topics came back; up said:\n{said}\n"
                "-- of which, errors, broker news and processors' lines:\n"
                + "\n".join(notable)
                + f"\n-- the groups:\n{groups}"
            )
        assert await _records(bootstrap, prefix + "hermes.dlq") == []
        assert "misrouted" not in up.stderr()
        assert "consume loop" not in up.stderr()  # no batch lost to an error
        assert up.process.poll() is None


@pytest.mark.timeout(START_S + RECREATE_S + STOP_S + 60)
async def test_up_stops_saying_why_when_it_cannot_make_the_lost_topics_as_at_start(
    kafka_bootstrap: str, tmp_path: Path, unique: str
) -> None:
    """Apache Kafka: one session topic grown to 8 partitions, then another topic lost. Made
    again, the lost one would disagree with one of the session topics: up stops (exit 3)
    saying so, rather than serve sessions split over two partition counts."""
    env = clean_env(tmp_path / "home", **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]})
    prefix = f"odd-{unique}."
    args = ("up", "--bootstrap", kafka_bootstrap, "--prefix", prefix)
    with _running(tmp_path / "up", *args, env=env) as up:
        up.wait_for("serving; Ctrl-C stops", within_s=START_S)
        async with KafkaAdmin(KafkaConfig(bootstrap=kafka_bootstrap)) as admin:
            await admin.client.create_partitions({prefix + CONVERSATION_IN: NewPartitions(8)})
            await admin.client.delete_topics([prefix + CONVERSATION_OUT])
        code = await asyncio.to_thread(up.process.wait, RECREATE_S + STOP_S)
        said = up.stderr()
    assert code == 3, said
    assert f"the topics at {kafka_bootstrap} changed under up: topics keyed by session" in said
    assert f"{prefix}{CONVERSATION_IN}=8" in said and "stopping (exit code 3)" in said


async def test_a_client_never_creates_a_missing_topic(broker: str, unique: str) -> None:
    """Client.say, Client.replies, and aiokafka's own producer and consumer in this
    process: a missing topic is an error (the client's names it), never created."""
    prefix = f"none-{unique}."
    ingress, replies = prefix + CONVERSATION_IN, prefix + CONVERSATION_OUT
    async with Client(bootstrap=broker, topic_prefix=prefix) as client:
        with pytest.raises(BrokerError) as said:
            await client.say("s-1", "u-1", "你好")
        with pytest.raises(BrokerError) as read:
            await client.replies("s-1").start()
    assert f"topic {ingress} does not exist at {broker}" in str(said.value)
    assert "hermesbus clients never create topics" in str(said.value)
    assert f"topic {replies} does not exist at {broker}" in str(read.value)

    raw = prefix + "raw"
    producer = AIOKafkaProducer(bootstrap_servers=broker, request_timeout_ms=3000)
    await producer.start()
    try:
        with pytest.raises(KafkaError):
            await producer.send_and_wait(raw, b"x")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        raw, bootstrap_servers=broker, group_id=None, request_timeout_ms=3000
    )
    try:  # its start waits for the topic, then gives up: UnknownTopicOrPartitionError
        with pytest.raises(KafkaError):
            await consumer.start()
    finally:
        await consumer.stop()
    async with KafkaAdmin(KafkaConfig(bootstrap=broker)) as admin:
        assert await admin.missing([ingress, replies, raw]) == [ingress, replies, raw]


async def test_a_producer_writes_to_a_topic_the_broker_lost_only_once_it_is_made_again(
    broker_binary: str, tmp_path: Path
) -> None:
    """The embedded broker acknowledges a Produce to a topic it does not have, and then
    refuses or loses that partition's records once the topic is made: a producer that
    knew the topic before the broker came back empty holds its record until the topic
    exists again, and the record is the new log's first."""
    async with EmbeddedBroker(home=tmp_path / "broker", port=free_port()) as broker:
        bootstrap, topic = broker.bootstrap, "lost"
        async with KafkaAdmin(KafkaConfig(bootstrap=bootstrap)) as admin:
            await admin.client.create_topics([NewTopic(topic, 2, 1)])
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"before", partition=1)
            await _killed(broker)
            await asyncio.to_thread(broker.stop)
            await asyncio.to_thread(broker.start)
            sent = asyncio.ensure_future(producer.send_and_wait(topic, b"after", partition=1))
            # until the producer has heard from the new broker that the topic is gone
            while topic in producer.client.cluster.topics() and not sent.done():
                await asyncio.sleep(POLL_S)
            assert not sent.done(), sent  # nothing written to the topic that is not there
            async with KafkaAdmin(KafkaConfig(bootstrap=bootstrap)) as admin:
                await admin.client.create_topics([NewTopic(topic, 2, 1)])
            assert (await sent).offset == 0
            assert (await producer.send_and_wait(topic, b"next", partition=1)).offset == 1
        finally:
            await producer.stop()
        assert await _records(bootstrap, topic) == [b"after", b"next"]


async def test_a_group_that_joined_while_its_topic_was_missing_gets_it_once_made(
    broker_binary: str, tmp_path: Path
) -> None:
    """The embedded broker answers a member that joins again with the group's first
    assignment: a lone member that joined while one of its topics was missing (the broker
    back empty, up not done yet) still gets that topic's partitions once it is made."""
    async with EmbeddedBroker(home=tmp_path / "broker", port=free_port()) as broker:
        config = KafkaConfig(bootstrap=broker.bootstrap, metadata_max_age_ms=1000)
        async with KafkaAdmin(config) as admin:
            await admin.client.create_topics([NewTopic("here", 1, 1)])
        consumer = AIOKafkaConsumer(**config.client_kwargs(), group_id="late")
        await consumer.start()
        try:
            consumer.subscribe(["here", "back"])
            while not consumer.assignment():
                await asyncio.sleep(POLL_S)
            assert consumer.assignment() == {TopicPartition("here", 0)}
            async with KafkaAdmin(config) as admin:
                await admin.client.create_topics([NewTopic("back", 2, 1)])
            expected = {
                TopicPartition(topic, p) for topic, p in [("here", 0), ("back", 0), ("back", 1)]
            }
            async with asyncio.timeout(RECREATE_S):
                while consumer.assignment() != expected:
                    await asyncio.sleep(POLL_S)
        finally:
            await consumer.stop()


async def test_an_admin_client_cancelled_while_it_closes_is_cancelled(broker: str) -> None:
    """up's watch opens an admin client every 10 s to check the topics; Ctrl-C while one
    closed was swallowed by aiokafka's close, the watch ran on and up hung until killed."""
    admin = KafkaAdmin(KafkaConfig(bootstrap=broker))
    await admin.start()
    closing = asyncio.ensure_future(admin.stop())
    await asyncio.sleep(0)  # closing: waiting for its metadata task to end
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
