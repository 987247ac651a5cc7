"""A topic deleted and created again under a processor that never saw it missing.

The processor's consumer is paused (its handler holds the old log's records, more of
them buffered than ``max_buffered``) and refreshes no metadata on its own while the
topic goes and comes back, so no rebalance tells it: when it fetches again, it does so
at its old position in a new log. Two outcomes follow, each shown here:

* the new log is shorter than the old position: the broker says out of range, the
  consumer starts the new log at its beginning, and the offsets the processor sees go
  back (before: each batch below the old position was lost to the consume loop's error);
* the new log already reached the old position: nothing says anything, and the records
  before it are skipped unless the processor is told the topic was made again (``up``
  does, when it creates the topics a broker lost: ``Processor.logs_made_again``).

And while its topic is missing, the broker refuses the processor's commits (unknown
topic): none of those offsets, nor any later one of the old log, may be committed into
the topic once made again (before, the refused commit was sent again every round until
the topic was back, and a record of the old log finishing later moved it on too).

The same holds for the trace indexer, the other consumer group ``up`` runs.

Apache Kafka only: the embedded broker loses topics by dying (its group goes with them,
so the members join again and read afresh), which ``faults/test_broker_empty`` covers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.partitioner import DefaultPartitioner

from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.errors import BrokerError
from hermesbus.runtime import HandlerInput, Outcome, RuntimeSettings
from hermesbus.topics import Catalog
from hermesbus.trace.index import Document, Indexer, WriteResult
from tests import signing

from .support import IN, ConversationProcessor, counting, produce, provision, turn

pytestmark = pytest.mark.kafka

PARTITIONS = 6
WITHIN_S = 120.0
"""How long a step may take on a slow, busy machine (polled: a quick one takes ~1 s)."""
QUIET_METADATA_MS = 3_600_000
"""The processor's consumer asks for metadata only when a request fails."""


def on_partition_of(session: str, count: int) -> list[str]:
    """``count`` session ids that Kafka's default partitioner puts where ``session`` is."""
    partition = DefaultPartitioner()
    every = list(range(PARTITIONS))
    wanted = partition(session.encode(), every, every)
    found = (f"new-{n}" for n in range(10_000))
    return [s for s in found if partition(s.encode(), every, every) == wanted][:count]


@pytest.fixture
async def topic_prefix(kafka_bootstrap: str, unique: str) -> str:
    prefix = f"again{unique}."
    await provision(kafka_bootstrap, prefix, partitions=PARTITIONS)
    return prefix


async def made_again(bootstrap: str, prefix: str) -> None:
    """Delete the prefix's IN topic and create it again (see ``deleted``, ``created``)."""
    await deleted(bootstrap, prefix)
    await created(bootstrap, prefix)


async def deleted(bootstrap: str, prefix: str) -> None:
    """Delete the prefix's IN topic, and wait until the broker no longer has it."""
    async with KafkaAdmin(KafkaConfig(bootstrap=bootstrap)) as admin:
        await admin.client.delete_topics([prefix + IN])
        async with asyncio.timeout(WITHIN_S):
            while not await admin.missing([prefix + IN]):
                await asyncio.sleep(0.1)


async def created(bootstrap: str, prefix: str) -> None:
    """Create the prefix's IN topic as the catalog says (retried while the broker still
    finishes its deletion)."""
    topic = prefix + IN
    spec = Catalog.load().with_overrides(prefix=prefix, partitions=PARTITIONS).get(topic)
    async with KafkaAdmin(KafkaConfig(bootstrap=bootstrap)) as admin:
        async with asyncio.timeout(WITHIN_S):
            while await admin.missing([topic]):
                with contextlib.suppress(BrokerError):
                    await admin.create([spec])
                await asyncio.sleep(0.1)


async def committed(bootstrap: str, group: str, tp: TopicPartition) -> int | None:
    async with KafkaAdmin(KafkaConfig(bootstrap=bootstrap)) as admin:
        offsets = await admin.client.list_consumer_group_offsets(group, partitions=[tp])
    found = offsets.get(tp)
    return found.offset if found is not None and found.offset >= 0 else None


async def counted(
    store: SqliteStateStore, name: str, sessions: list[str], *, each: int = 1
) -> list[int]:
    """How many turns of each of ``sessions`` ``name`` applied, once each applied ``each``
    or WITHIN_S passed."""
    counts: list[int] = []
    for _ in range(int(WITHIN_S * 10)):
        counts = [(await store.load(name, s)).data.get("count", 0) for s in sessions]
        if counts == [each] * len(sessions):
            break
        await asyncio.sleep(0.1)
    return counts


class Held:
    """A handler that holds session ``old``'s first record until released."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, inp: HandlerInput) -> Outcome:
        if inp.envelope.session_id == "old":
            self.entered.set()
            await self.release.wait()
        return await counting(inp)


@contextlib.asynccontextmanager
async def paused_on_old_log(
    bootstrap: str, prefix: str, store: SqliteStateStore, name: str, *, old: int
) -> AsyncIterator[tuple[ConversationProcessor, Held, TopicPartition]]:
    """A processor that fetched ``old`` records of session ``old`` (the first held, the
    rest waiting, so many that its consumer is paused) when its topic is made again; the
    partition they were on."""
    handler = Held()
    processor = ConversationProcessor(
        name,
        handler,
        [IN],
        store=store,
        kafka=KafkaConfig(bootstrap=bootstrap, metadata_max_age_ms=QUIET_METADATA_MS),
        topic_prefix=prefix,
        settings=RuntimeSettings(max_buffered=old),  # all of them fetched: paused
    )
    async with processor:
        try:
            await produce(bootstrap, prefix + IN, [turn("old", seq) for seq in range(old)])
            async with asyncio.timeout(WITHIN_S):
                await handler.entered.wait()
                while processor.waiting != old - 1:  # fetched to its position, and paused
                    await asyncio.sleep(0.05)
            every = list(range(PARTITIONS))
            tp = TopicPartition(prefix + IN, DefaultPartitioner()(b"old", every, every))
            await made_again(bootstrap, prefix)
            yield processor, handler, tp
        finally:
            handler.release.set()


def rebalances(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "Revoking" in r.getMessage()]


async def until_committed(bootstrap: str, group: str, tp: TopicPartition, offset: int) -> None:
    async with asyncio.timeout(WITHIN_S):
        while await committed(bootstrap, group, tp) != offset:
            await asyncio.sleep(0.2)


async def new_log_read_once(
    bootstrap: str, store: SqliteStateStore, name: str, tp: TopicPartition, **expected: int
) -> None:
    """Each new session applied once, the new log's end committed, and the old log's
    ``old`` fetched records all run (``expected``: ``new`` and ``old`` counts)."""
    sessions = on_partition_of("old", expected["new"])
    assert await counted(store, name, sessions) == [1] * len(sessions)
    await until_committed(bootstrap, name, tp, len(sessions))
    assert await counted(store, name, ["old"], each=expected["old"]) == [expected["old"]]


async def test_offsets_that_go_back_are_a_new_log_read_from_its_start(
    kafka_bootstrap: str,
    topic_prefix: str,
    store: SqliteStateStore,
    unique: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="aiokafka.consumer.group_coordinator")
    name = f"again{unique}"
    async with paused_on_old_log(kafka_bootstrap, topic_prefix, store, name, old=4) as (
        _,
        handler,
        tp,
    ):
        joined = len(rebalances(caplog))
        sessions = on_partition_of("old", 2)
        await produce(kafka_bootstrap, topic_prefix + IN, [turn(s, 0) for s in sessions])
        handler.release.set()  # fetched again: at offset 4 of a log that ends at 2

        await new_log_read_once(kafka_bootstrap, store, name, tp, new=2, old=4)
        assert len(rebalances(caplog)) == joined  # none: only the offsets said it
        assert f"{tp.topic}-{tp.partition}: offsets went back from 4 to 0" in caplog.text


async def test_a_processor_told_its_topic_was_made_again_reads_it_from_its_start(
    kafka_bootstrap: str,
    topic_prefix: str,
    store: SqliteStateStore,
    unique: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="aiokafka.consumer.group_coordinator")
    name = f"again{unique}"
    async with paused_on_old_log(kafka_bootstrap, topic_prefix, store, name, old=2) as (
        processor,
        handler,
        tp,
    ):
        joined = len(rebalances(caplog))
        sessions = on_partition_of("old", 3)  # the new log passes the old position (2)
        await produce(kafka_bootstrap, topic_prefix + IN, [turn(s, 0) for s in sessions])
        assert await processor.logs_made_again({topic_prefix + IN}) == [
            t for t in processor.assignment if t.topic == topic_prefix + IN
        ]
        handler.release.set()

        await new_log_read_once(kafka_bootstrap, store, name, tp, new=3, old=2)
        assert len(rebalances(caplog)) == joined


async def settled(consumer: AIOKafkaConsumer) -> None:
    """Once a consumer's partitions are all paused, until the fetch it has in flight (if
    any) is answered: none fails on the topic deleted next and makes it refresh its
    metadata, which would tell it of the loss (aiokafka shows this only privately)."""
    async with asyncio.timeout(WITHIN_S):
        while consumer._fetcher._in_flight:
            await asyncio.sleep(0.01)


class HeldEach:
    """A handler that holds the first record of each of ``sessions`` until it is released."""

    def __init__(self, *sessions: str) -> None:
        self.entered = {session: asyncio.Event() for session in sessions}
        self.release = {session: asyncio.Event() for session in sessions}

    async def __call__(self, inp: HandlerInput) -> Outcome:
        session = inp.envelope.session_id
        if session in self.entered:
            self.entered[session].set()
            await self.release[session].wait()
        return await counting(inp)


def refused(caplog: pytest.LogCaptureFixture, who: str) -> bool:
    """Whether the broker refused a commit of ``who`` (how its log lines start, e.g.
    ``processor=NAME``) for an unknown topic."""
    return any(
        who in r.getMessage() and "UnknownTopicOrPartitionError" in r.getMessage()
        for r in caplog.records
    )


@contextlib.asynccontextmanager
async def topic_lost_under(
    bootstrap: str,
    prefix: str,
    store: SqliteStateStore,
    name: str,
    caplog: pytest.LogCaptureFixture,
    *sessions: str,
) -> AsyncIterator[tuple[HeldEach, TopicPartition]]:
    """A processor holding the first record of each of ``sessions`` (on one partition, so
    many fetched that its consumer is paused: no rebalance tells it of the topic's loss)
    when the topic is deleted; then the first of them finishes, and the broker refuses
    to commit it. The processor stops (its last commit) when the block ends."""
    handler = HeldEach(*sessions)
    processor = ConversationProcessor(
        name,
        handler,
        [IN],
        store=store,
        kafka=KafkaConfig(bootstrap=bootstrap, metadata_max_age_ms=QUIET_METADATA_MS),
        topic_prefix=prefix,
        settings=RuntimeSettings(max_buffered=len(sessions)),
    )
    every = list(range(PARTITIONS))
    tp = TopicPartition(prefix + IN, DefaultPartitioner()(sessions[0].encode(), every, every))
    async with processor:
        try:
            await produce(bootstrap, prefix + IN, [turn(s, 0) for s in sessions])
            async with asyncio.timeout(WITHIN_S):
                await asyncio.gather(*(e.wait() for e in handler.entered.values()))
            assert processor._consumer is not None  # paused: all fetched are held
            await settled(processor._consumer)
            await deleted(bootstrap, prefix)
            handler.release[sessions[0]].set()
            async with asyncio.timeout(WITHIN_S):
                while not refused(caplog, f"processor={name} "):
                    await asyncio.sleep(0.05)
            yield handler, tp
        finally:
            for release in handler.release.values():
                release.set()


async def test_a_commit_refused_while_the_topic_is_missing_is_not_sent_once_it_is_back(
    kafka_bootstrap: str,
    topic_prefix: str,
    store: SqliteStateStore,
    unique: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="aiokafka.consumer.group_coordinator")
    name = f"lost{unique}"
    async with topic_lost_under(kafka_bootstrap, topic_prefix, store, name, caplog, "old") as (
        _,
        tp,
    ):
        joined = len(rebalances(caplog))
        await created(kafka_bootstrap, topic_prefix)
    assert len(rebalances(caplog)) == joined  # the processor never saw the topic missing
    # its last commit (the stop's) had the refused offset to send again, into a new log
    assert await committed(kafka_bootstrap, name, tp) is None


async def test_a_record_of_the_lost_log_finishing_once_the_topic_is_back_is_not_committed(
    kafka_bootstrap: str,
    topic_prefix: str,
    store: SqliteStateStore,
    unique: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # its outputs could not be produced while the topics were gone, say: it finishes late
    caplog.set_level(logging.INFO, logger="aiokafka.consumer.group_coordinator")
    name = f"lost{unique}"
    late = on_partition_of("old", 1)[0]
    async with topic_lost_under(
        kafka_bootstrap, topic_prefix, store, name, caplog, "old", late
    ) as (handler, tp):
        joined = len(rebalances(caplog))
        await created(kafka_bootstrap, topic_prefix)
        handler.release[late].set()
        assert await counted(store, name, ["old", late]) == [1, 1]
    assert len(rebalances(caplog)) == joined
    assert await committed(kafka_bootstrap, name, tp) is None


class HeldIndex(SqliteTraceIndex):
    """A trace index whose writes wait until released."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def write(self, docs: Sequence[Document]) -> WriteResult:
        self.entered.set()
        await self.release.wait()
        return await super().write(docs)


async def test_the_indexer_commits_nothing_of_a_log_whose_topic_was_lost(
    kafka_bootstrap: str,
    topic_prefix: str,
    tmp_path: Path,
    unique: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="aiokafka.consumer.group_coordinator")
    group = f"lostindex{unique}"
    index = HeldIndex(tmp_path / "index.sqlite3")
    indexer = Indexer(
        index,
        kafka=KafkaConfig(bootstrap=kafka_bootstrap, metadata_max_age_ms=QUIET_METADATA_MS),
        prefix=topic_prefix,
        settings=RuntimeSettings(),
        keyring=signing.keys,
        group_id=group,
    )
    every = list(range(PARTITIONS))
    tp = TopicPartition(topic_prefix + IN, DefaultPartitioner()(b"old", every, every))
    async with index, indexer:
        await produce(kafka_bootstrap, topic_prefix + IN, [turn("old", 0)])
        async with asyncio.timeout(WITHIN_S):
            await index.entered.wait()  # its batch is being stored
        consumer = indexer._consumer
        assert consumer is not None  # fetching nothing more, it never sees the topic missing
        consumer.pause(*consumer.assignment())
        await settled(consumer)
        joined = len(rebalances(caplog))
        await deleted(kafka_bootstrap, topic_prefix)
        index.release.set()  # stored: its offset is committed, and refused
        async with asyncio.timeout(WITHIN_S):
            while not refused(caplog, "indexer: "):
                await asyncio.sleep(0.05)
        await created(kafka_bootstrap, topic_prefix)
    assert len(rebalances(caplog)) == joined
    # its last commit (the stop's) had the refused offset to send again, into a new log
    assert await committed(kafka_bootstrap, group, tp) is None
