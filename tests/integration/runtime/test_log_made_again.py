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
from dataclasses import dataclass
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

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]  # several WITHIN_S steps a test

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


def partition_of(prefix: str, session: str) -> TopicPartition:
    """The partition of the prefix's IN topic that ``session``'s records go to."""
    every = list(range(PARTITIONS))
    return TopicPartition(prefix + IN, DefaultPartitioner()(session.encode(), every, every))


@dataclass(frozen=True)
class Bed:
    """What each test here runs on: Apache Kafka, the catalog's topics under a prefix of
    the test's own (PARTITIONS each), a state store, the group coordinator's log."""

    bootstrap: str
    prefix: str
    store: SqliteStateStore
    unique: str
    caplog: pytest.LogCaptureFixture

    def rebalances(self) -> list[str]:
        return [r.getMessage() for r in self.caplog.records if "Revoking" in r.getMessage()]


@pytest.fixture
async def bed(
    kafka_bootstrap: str, unique: str, store: SqliteStateStore, caplog: pytest.LogCaptureFixture
) -> Bed:
    prefix = f"again{unique}."
    await provision(kafka_bootstrap, prefix, partitions=PARTITIONS)
    caplog.set_level(logging.INFO, logger="aiokafka.consumer.group_coordinator")
    return Bed(kafka_bootstrap, prefix, store, unique, caplog)


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


def held_processor(bed: Bed, name: str, handler: HeldEach, buffered: int) -> ConversationProcessor:
    """A processor named ``name`` running ``handler`` on the bed's IN topic, which fetches
    ``buffered`` records before it pauses, and asks for metadata only when a request fails."""
    return ConversationProcessor(
        name,
        handler,
        [IN],
        store=bed.store,
        kafka=KafkaConfig(bootstrap=bed.bootstrap, metadata_max_age_ms=QUIET_METADATA_MS),
        topic_prefix=bed.prefix,
        settings=RuntimeSettings(max_buffered=buffered),
    )


@contextlib.asynccontextmanager
async def paused_on_old_log(
    bed: Bed, name: str, *, old: int
) -> AsyncIterator[tuple[ConversationProcessor, HeldEach, TopicPartition]]:
    """A processor that fetched ``old`` records of session ``old`` (the first held, the
    rest waiting, so many that its consumer is paused) when its topic is made again; the
    partition they were on."""
    handler = HeldEach("old")
    processor = held_processor(bed, name, handler, buffered=old)  # all fetched: paused
    async with processor:
        try:
            await produce(bed.bootstrap, bed.prefix + IN, [turn("old", n) for n in range(old)])
            async with asyncio.timeout(WITHIN_S):
                await handler.entered["old"].wait()
                while processor.waiting != old - 1:  # fetched to its position, and paused
                    await asyncio.sleep(0.05)
            await made_again(bed.bootstrap, bed.prefix)
            yield processor, handler, partition_of(bed.prefix, "old")
        finally:
            handler.release["old"].set()


async def until_committed(bootstrap: str, group: str, tp: TopicPartition, offset: int) -> None:
    async with asyncio.timeout(WITHIN_S):
        while await committed(bootstrap, group, tp) != offset:
            await asyncio.sleep(0.2)


async def new_log_read_once(bed: Bed, name: str, tp: TopicPartition, **expected: int) -> None:
    """Each new session applied once, the new log's end committed, and the old log's
    ``old`` fetched records all run (``expected``: ``new`` and ``old`` counts)."""
    sessions = on_partition_of("old", expected["new"])
    assert await counted(bed.store, name, sessions) == [1] * len(sessions)
    await until_committed(bed.bootstrap, name, tp, len(sessions))
    assert await counted(bed.store, name, ["old"], each=expected["old"]) == [expected["old"]]


async def test_offsets_that_go_back_are_a_new_log_read_from_its_start(bed: Bed) -> None:
    name = f"again{bed.unique}"
    async with paused_on_old_log(bed, name, old=4) as (_, handler, tp):
        joined = len(bed.rebalances())
        sessions = on_partition_of("old", 2)
        await produce(bed.bootstrap, bed.prefix + IN, [turn(s, 0) for s in sessions])
        handler.release["old"].set()  # fetched again: at offset 4 of a log that ends at 2

        await new_log_read_once(bed, name, tp, new=2, old=4)
        assert len(bed.rebalances()) == joined  # none: only the offsets said it
        assert f"{tp.topic}-{tp.partition}: offsets went back from 4 to 0" in bed.caplog.text


async def test_a_processor_told_its_topic_was_made_again_reads_it_from_its_start(
    bed: Bed,
) -> None:
    name = f"again{bed.unique}"
    async with paused_on_old_log(bed, name, old=2) as (processor, handler, tp):
        joined = len(bed.rebalances())
        sessions = on_partition_of("old", 3)  # the new log passes the old position (2)
        await produce(bed.bootstrap, bed.prefix + IN, [turn(s, 0) for s in sessions])
        assert await processor.logs_made_again({bed.prefix + IN}) == [
            t for t in processor.assignment if t.topic == bed.prefix + IN
        ]
        handler.release["old"].set()

        await new_log_read_once(bed, name, tp, new=3, old=2)
        assert len(bed.rebalances()) == joined


async def settled(consumer: AIOKafkaConsumer) -> None:
    """Once a consumer's partitions are all paused, until the fetch it has in flight (if
    any) is answered: none fails on the topic deleted next and makes it refresh its
    metadata, which would tell it of the loss (aiokafka shows this only privately)."""
    async with asyncio.timeout(WITHIN_S):
        while consumer._fetcher._in_flight:
            await asyncio.sleep(0.01)


def refused(caplog: pytest.LogCaptureFixture, who: str) -> bool:
    """Whether the broker refused a commit of ``who`` (how its log lines start, e.g.
    ``processor=NAME``) for an unknown topic."""
    return any(
        who in r.getMessage() and "UnknownTopicOrPartitionError" in r.getMessage()
        for r in caplog.records
    )


@contextlib.asynccontextmanager
async def topic_lost_under(
    bed: Bed, name: str, *sessions: str
) -> AsyncIterator[tuple[HeldEach, TopicPartition]]:
    """A processor holding the first record of each of ``sessions`` (on one partition, so
    many fetched that its consumer is paused: no rebalance tells it of the topic's loss)
    when the topic is deleted; then the first of them finishes, and the broker refuses
    to commit it. The processor stops (its last commit) when the block ends."""
    handler = HeldEach(*sessions)
    processor = held_processor(bed, name, handler, buffered=len(sessions))
    async with processor:
        try:
            await produce(bed.bootstrap, bed.prefix + IN, [turn(s, 0) for s in sessions])
            async with asyncio.timeout(WITHIN_S):
                await asyncio.gather(*(e.wait() for e in handler.entered.values()))
            assert processor._consumer is not None  # paused: all fetched are held
            await settled(processor._consumer)
            await deleted(bed.bootstrap, bed.prefix)
            handler.release[sessions[0]].set()
            async with asyncio.timeout(WITHIN_S):
                while not refused(bed.caplog, f"processor={name} "):
                    await asyncio.sleep(0.05)
            yield handler, partition_of(bed.prefix, sessions[0])
        finally:
            for release in handler.release.values():
                release.set()


async def test_a_commit_refused_while_the_topic_is_missing_is_not_sent_once_it_is_back(
    bed: Bed,
) -> None:
    name = f"lost{bed.unique}"
    async with topic_lost_under(bed, name, "old") as (_, tp):
        joined = len(bed.rebalances())
        await created(bed.bootstrap, bed.prefix)
    assert len(bed.rebalances()) == joined  # the processor never saw the topic missing
    # its last commit (the stop's) had the refused offset to send again, into a new log
    assert await committed(bed.bootstrap, name, tp) is None


async def test_a_record_of_the_lost_log_finishing_once_the_topic_is_back_is_not_committed(
    bed: Bed,
) -> None:
    # its outputs could not be produced while the topics were gone, say: it finishes late
    name = f"lost{bed.unique}"
    late = on_partition_of("old", 1)[0]
    async with topic_lost_under(bed, name, "old", late) as (handler, tp):
        joined = len(bed.rebalances())
        await created(bed.bootstrap, bed.prefix)
        handler.release[late].set()
        assert await counted(bed.store, name, ["old", late]) == [1, 1]
    assert len(bed.rebalances()) == joined
    assert await committed(bed.bootstrap, name, tp) is None


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
    bed: Bed, tmp_path: Path
) -> None:
    group = f"lostindex{bed.unique}"
    index = HeldIndex(tmp_path / "index.sqlite3")
    indexer = Indexer(
        index,
        kafka=KafkaConfig(bootstrap=bed.bootstrap, metadata_max_age_ms=QUIET_METADATA_MS),
        prefix=bed.prefix,
        settings=RuntimeSettings(),
        keyring=signing.keys,
        group_id=group,
    )
    tp = partition_of(bed.prefix, "old")
    async with index, indexer:
        await produce(bed.bootstrap, bed.prefix + IN, [turn("old", 0)])
        async with asyncio.timeout(WITHIN_S):
            await index.entered.wait()  # its batch is being stored
        consumer = indexer._consumer
        assert consumer is not None  # fetching nothing more, it never sees the topic missing
        consumer.pause(*consumer.assignment())
        await settled(consumer)
        joined = len(bed.rebalances())
        await deleted(bed.bootstrap, bed.prefix)
        index.release.set()  # stored: its offset is committed, and refused
        async with asyncio.timeout(WITHIN_S):
            while not refused(bed.caplog, "indexer: "):
                await asyncio.sleep(0.05)
        await created(bed.bootstrap, bed.prefix)
    assert len(bed.rebalances()) == joined
    # its last commit (the stop's) had the refused offset to send again, into a new log
    assert await committed(bed.bootstrap, group, tp) is None
