"""The indexer: its own consumer group over every hermes topic, writing the trace index.

One loop: fetch a batch, turn each record into a document, write the batch, and only
once the index acknowledged every document commit the batch's offsets. An outage of
the index is retried in place with back-off (nothing is fetched or committed meanwhile),
so the indexer pauses and catches up afterwards. Document ids are the records' places
in the log and times, so a batch written twice (after a crash or a rebalance) is stored
once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError, UnknownTopicOrPartitionError

from hermesbus.base.lifecycle import Service, cancel_and_wait, logged_task
from hermesbus.codec import Codec, default_codec
from hermesbus.connectors.kafka import (
    KafkaConfig,
    absent,
    commit_as_member,
    start_or_close,
)
from hermesbus.contract.envelope import Envelope
from hermesbus.errors import ConfigError, HermesError, TraceIndexError
from hermesbus.identity import Keyring, Verifier
from hermesbus.runtime import (
    CLOSE_TIMEOUT_S,
    Producer,
    RebalanceListener,
    RuntimeSettings,
    close_within,
    dead_letter,
    member_consumer,
)
from hermesbus.topics import DLQ, Catalog

from ._ecs import DocumentSettings, decode, document, refused_document
from ._model import ArchivedRecord, Document, TraceIndex, WriteResult
from ._signature import check, mark

__all__ = ["INDEXER_GROUP", "Indexer", "IndexerStats"]

log = logging.getLogger(__name__)

NAME = "indexer"
INDEXER_GROUP = NAME
"""The indexer's consumer group (``hermesbus doctor`` reads how far behind it is)."""
_CAUSES = 50_000
"""Log times of recent message ids kept in memory, for ``event.duration``."""
_MAX_PAUSE_S = 10.0
_IN_FLIGHT = 2
"""Batches written to the index at once (Elasticsearch indexes them in parallel)."""
_REPORT_EVERY_S = 30.0


class _Unstored(Exception):
    """A batch the index did not take before the stop: it is left uncommitted."""


@dataclass(frozen=True, slots=True)
class _Storing:
    """A batch being stored: the write, and the records to commit once it is done."""

    task: asyncio.Task[None]
    batch: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]
    logs: dict[TopicPartition, int]
    """Which log of each partition the batch was fetched from (see ``logs_made_again``)."""


@dataclass
class IndexerStats:
    """What the indexer did (printed by ``hermesbus up`` on exit)."""

    indexed: int = 0
    existing: int = 0
    """Documents already stored (a batch written again after a crash or rebalance)."""
    undecodable: int = 0
    unverified: int = 0
    """Records whose signature did not prove their source (marked so in the index)."""
    refused: int = 0
    """Documents the index refused: dead-lettered with the reason, a stripped copy kept."""
    outages: int = 0
    """Times a write failed and was retried in place."""


class Indexer(Service):
    """Indexes every record of the catalog's topics (dead letters included) into ``index``.

    Each record's signature is checked with ``keys``, else with what ``keyring()`` loads
    (the bus's keys, as the processors load them; loaded again for an unknown key id): one
    of the two is required. One that does not prove its source is marked (see
    ``_signature``).
    """

    def __init__(
        self,
        index: TraceIndex,
        *,
        kafka: KafkaConfig,
        prefix: str = "",
        settings: RuntimeSettings,
        codec: Codec | None = None,
        group_id: str = NAME,
        documents: DocumentSettings | None = None,
        keys: Keyring | None = None,
        keyring: Callable[[], Keyring] | None = None,
    ) -> None:
        self.name = NAME  # what it is called in metrics, dead letters and messages
        self.group_id = group_id
        self.index = index
        self.stats = IndexerStats()
        self.joined = asyncio.Event()
        self._kafka = kafka
        self._settings = settings
        self._codec = codec or default_codec()
        self._topics = Catalog.load().with_overrides(prefix=prefix).indexed_names()
        self._documents = documents or DocumentSettings(dlq_topic=prefix + DLQ)
        if keys is None:
            if keyring is None:
                raise ConfigError(f"indexer {group_id}: give it keys= or keyring= (the bus's keys)")
            keys = keyring()
        self._verifier = Verifier(keys, keyring)
        self._causes: OrderedDict[str, int] = OrderedDict()
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: Producer | None = None
        self._task: asyncio.Task[None] | None = None
        self._committer: asyncio.Task[None] | None = None
        self._done_to: dict[TopicPartition, int] = {}
        """Per partition, the offset after the last record stored: what may be committed."""
        self._committed: dict[TopicPartition, int] = {}
        self._gone: set[TopicPartition] = set()
        """Partitions the broker refused a commit of for an unknown topic: their log is gone,
        and nothing of it is committed until a new one is read (their offsets went back,
        or they were read afresh: ``_forget``)."""
        self._logs: dict[TopicPartition, int] = {}
        """Per partition, how often ``logs_made_again`` reset it: a batch fetched before
        finishes without making its old offsets the new log's to commit."""
        self._stopping = False
        self._stop_asked = asyncio.Event()
        """Set by ``stop``: an outage's retry pause ends at once, and its retries with it."""

    async def start(self) -> None:
        """Join the group and start indexing; safe to call twice."""
        if self._consumer is not None:
            return
        settings = self._settings
        producer = Producer(self._kafka, self.group_id)  # dead letters of refused documents
        await producer.start()
        # the indexer never runs exactly-once: its settings say read_uncommitted, as before
        consumer = member_consumer(
            self._kafka, self.group_id, settings.model_copy(update={"exactly_once": False})
        )
        consumer.subscribe(self._topics, listener=RebalanceListener(self._adopt, self._release))
        try:
            await start_or_close(consumer.start, consumer.stop, "indexer: cannot reach Kafka")
        except BaseException:  # also cancelled while joining (Ctrl-C): nothing left unclosed
            await producer.stop()  # bounded, never raises
            raise
        self._consumer, self._producer, self._stopping = consumer, producer, False
        self._stop_asked.clear()
        self._task = logged_task(self._run(consumer), f"{self.name}-loop")
        self._committer = logged_task(self._commit_loop(consumer), f"{self.name}-commit")

    async def stop(self) -> None:
        """Index what the topics hold by now and commit it (bounded), leave the group.

        Called after the processors stopped, so their last outputs are indexed too. An
        index that is away (full, down) is not waited for: what it did not store is left
        uncommitted, for the next start to index; one that is slow gets the bound.
        """
        consumer, producer, task = self._consumer, self._producer, self._task
        if consumer is None or producer is None or task is None:
            return
        self._stopping = True
        self._stop_asked.set()  # an index that is away is not waited for
        await asyncio.wait({task}, timeout=self._settings.revoke_timeout_ms / 1000)
        committer, self._committer = self._committer, None
        # an index still away: what was not stored is not committed
        await cancel_and_wait([task, *([committer] if committer else [])], f"indexer {self.name}")
        await self._commit(consumer)  # the last stored batches
        refresh = getattr(self.index, "refresh", None)
        if refresh is not None:  # searchable at once for the commands run next
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await refresh()
            except (TimeoutError, HermesError) as exc:
                log.warning("indexer: the last refresh failed: %s", exc)
        self._consumer = self._producer = self._task = None
        await close_within(consumer.stop, "indexer: the consumer")
        await producer.stop()

    def _adopt(self, _assigned: Sequence[TopicPartition]) -> None:
        self.joined.set()

    async def _release(self, revoked: Sequence[TopicPartition]) -> None:
        """Commit what is stored of the revoked partitions, then forget them."""
        if self._consumer is not None:
            await self._commit(self._consumer)
        self._forget(revoked)

    async def _run(self, consumer: AIOKafkaConsumer) -> None:
        """Fetch, make documents, store, commit. Up to ``_IN_FLIGHT`` batches are being
        stored while the next is fetched and made into documents; they finish (and become
        committable) in order."""
        storing: deque[_Storing] = deque()
        try:
            while True:
                batch = await self._fetch(consumer)
                logs = {tp: self._logs.get(tp, 0) for tp in batch}  # no await since the fetch
                if not batch:
                    while storing:
                        await self._finish(storing.popleft())
                    if self._stopping:
                        return  # drained: everything appended before the stop is indexed
                    continue
                records = [_archived(r) for rs in batch.values() for r in rs]
                decoded = [decode(record, self._codec) for record in records]
                causes = await self._cause_times(records, decoded)
                docs = [self._document(r, d, causes) for r, d in zip(records, decoded, strict=True)]
                while len(storing) >= _IN_FLIGHT:
                    await self._finish(storing.popleft())
                work = self._stored(records, decoded, docs)
                storing.append(_Storing(asyncio.create_task(work), batch, logs))
                await asyncio.sleep(0)  # the write starts now (a fetch of buffered records
                # does not yield), so the index works while the next batch is prepared
        except _Unstored as exc:
            log.warning(
                "indexer: stopped while the index is away (%s): the batches it did not "
                "store are not committed, and are indexed at the next start",
                exc,
            )
        finally:
            for left in storing:  # not stored, so not committed: indexed again next time
                left.task.cancel()
            await asyncio.gather(*(left.task for left in storing), return_exceptions=True)

    async def _fetch(
        self, consumer: AIOKafkaConsumer
    ) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
        try:
            batch: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]
            batch = await consumer.getmany(timeout_ms=200)
        except KafkaError as exc:
            log.warning("indexer: fetch failed (retrying): %s", exc)
            await asyncio.sleep(self._settings.infra_retry_ms / 1000)
            return {}
        return batch

    async def _finish(self, storing: _Storing) -> None:
        """Wait for the batch to be stored; its offsets may then be committed."""
        await storing.task
        owned = self._consumer.assignment() if self._consumer is not None else set()
        for tp, records in storing.batch.items():
            if storing.logs[tp] != self._logs.get(tp, 0):
                continue  # fetched from a log since made again: not the new log's to commit
            if records and tp in owned:  # a revoked one is the new owner's to commit
                done_to = records[-1].offset + 1
                if done_to < self._done_to.get(tp, 0):  # went back: a log made again
                    self._committed.pop(tp, None)  # its offsets are the new log's to commit
                    self._gone.discard(tp)
                self._done_to[tp] = done_to

    def lag(self) -> dict[TopicPartition, int]:
        """Per partition held, the records past the last one stored in the index: the log's
        end as the last fetch saw it, less the offset after the last record stored. A
        partition none of whose records was stored yet by this indexer is left out."""
        consumer = self._consumer
        if consumer is None:
            return {}
        lags: dict[TopicPartition, int] = {}
        for tp in consumer.assignment():
            end, at = consumer.highwater(tp), self._done_to.get(tp)
            if end is not None and at is not None:
                lags[tp] = max(0, end - at)
        return lags

    async def logs_made_again(self, topics: Collection[str]) -> list[TopicPartition]:
        """``topics`` were created again (``up`` saw the broker lose them): the partitions of
        them this indexer holds are read from the new logs' beginning (one that never saw
        them missing would go on at its old positions, past the new logs' first records).
        Which partitions were reset."""
        consumer = self._consumer
        if consumer is None:
            return []
        reset = sorted(
            (tp for tp in consumer.assignment() if tp.topic in topics),
            key=lambda tp: (tp.topic, tp.partition),
        )
        for tp in reset:
            self._logs[tp] = self._logs.get(tp, 0) + 1
        self._forget(reset)
        if reset:
            try:
                await consumer.seek_to_beginning(*reset)
            except IllegalStateError:  # a rebalance took them meanwhile: read afresh anyway
                return []
        return reset

    def _forget(self, partitions: Sequence[TopicPartition]) -> None:
        """Forget what was stored and committed of ``partitions``: none of it is for the
        next owner, or the next log, to commit."""
        for tp in partitions:
            self._done_to.pop(tp, None)
            self._committed.pop(tp, None)
            self._gone.discard(tp)

    async def _stored(
        self,
        records: Sequence[ArchivedRecord],
        decoded: Sequence[Envelope | HermesError],
        docs: Sequence[Document],
    ) -> None:
        """Write the documents until the index has them all (the batch may then commit)."""
        while True:
            try:
                result = await self._written(docs)
                if result.refused:
                    await self._refused(records, result.refused)
                break
            except HermesError as exc:  # e.g. the dead-letter topic refused a write
                log.warning("indexer: batch not indexed, trying again: %s", exc)
                await self._pause(self._settings.infra_retry_ms / 1000, exc)
        self.stats.indexed += len(result.stored)
        self.stats.existing += len(result.existing)
        self.stats.undecodable += sum(isinstance(d, HermesError) for d in decoded)

    def _document(
        self, record: ArchivedRecord, decoded: Envelope | HermesError, causes: dict[str, int]
    ) -> Document:
        try:
            checked = check(record, decoded, self._verifier, self._documents.dlq_topic)
            self.stats.unverified += not checked.verified
            return mark(document(record, decoded, self._documents, causes), checked)
        except Exception as exc:  # a bug must not stop the indexer: keep what can be kept
            log.exception("indexer: no document for %s", record.id)
            return refused_document(record, f"no document could be made: {exc!r}")

    async def _cause_times(
        self, records: Sequence[ArchivedRecord], decoded: Sequence[Envelope | HermesError]
    ) -> dict[str, int]:
        """Log times of the batch's messages and of their causes (memory, else the index)."""
        for record, envelope in zip(records, decoded, strict=True):
            if isinstance(envelope, Envelope):
                self._causes.setdefault(envelope.message_id, record.timestamp_ms)
        while len(self._causes) > _CAUSES:
            self._causes.popitem(last=False)
        wanted = {e.causation_id for e in decoded if isinstance(e, Envelope) and e.causation_id}
        found = {cause: at for cause in wanted if (at := self._causes.get(cause)) is not None}
        missing = sorted(wanted - found.keys())
        if missing:
            try:
                found |= await self.index.appended(missing)
            except TraceIndexError as exc:  # only durations are lost: the write will tell
                log.debug("indexer: cause times not read: %s", exc)
        return found

    async def _written(self, docs: Sequence[Document]) -> WriteResult:
        """``index.write``, retried in place with back-off while the index is away."""
        pause = self._settings.infra_retry_ms / 1000
        failing_since: float | None = None
        reported = 0.0
        loop = asyncio.get_running_loop()
        while True:
            try:
                result = await self.index.write(docs)
            except TraceIndexError as exc:
                if not exc.retriable:  # the request, not the index: find the documents at fault
                    return await self._one_by_one(docs, exc)
                now = loop.time()
                if failing_since is None:
                    failing_since = now
                    self.stats.outages += 1
                if now - reported >= _REPORT_EVERY_S:
                    log.warning("indexer paused, nothing committed past the stored: %s", exc)
                    reported = now
                await self._pause(pause, exc)
                pause = min(pause * 2, _MAX_PAUSE_S)
                continue
            if failing_since is not None:
                log.warning(
                    "indexer: %s answers again after %.1f s; catching up",
                    self.index.where,
                    loop.time() - failing_since,
                )
            return result

    async def _pause(self, seconds: float, failed: HermesError) -> None:
        """The pause before a write is tried again; at the stop, none: _Unstored ends the
        loop (otherwise ``stop`` waited its whole bound on an index that was away)."""
        if not self._stopping:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._stop_asked.wait()
        if self._stopping:
            raise _Unstored(str(failed))

    async def _one_by_one(self, docs: Sequence[Document], error: TraceIndexError) -> WriteResult:
        """A batch refused as a whole: each document alone, so only the bad ones are refused."""
        if len(docs) == 1:
            return WriteResult(refused={docs[0]["_id"]: str(error)})
        log.warning("indexer: a batch was refused (%s); writing it one by one", error)
        result = WriteResult()
        for doc in docs:
            one = await self._written([doc])
            result.stored += one.stored
            result.existing += one.existing
            result.refused |= one.refused
        return result

    async def _refused(self, records: Sequence[ArchivedRecord], refused: dict[str, str]) -> None:
        """Dead-letter each refused record with the reason, and keep a stripped copy."""
        by_id = {record.id: record for record in records}
        stripped = []
        for doc_id, reason in refused.items():
            record = by_id[doc_id]
            log.error("indexer: the index refused %s: %s", doc_id, reason)
            self.stats.refused += 1
            stripped.append(refused_document(record, reason))
            if record.topic == self._documents.dlq_topic:
                continue  # a dead letter is not dead-lettered again: logged and counted
            error = TraceIndexError(f"the trace index refused the document: {reason}")
            letter = dead_letter(
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                key=record.key,
                value=record.value,
                headers=record.headers,
                error=error,
                processor=self.name,
                attempt=1,
                dlq_topic=self._documents.dlq_topic,
            )
            if self._producer is not None:
                await self._producer.send_all([letter])
        again = await self._written(stripped)
        self.stats.indexed += len(again.stored)
        for doc_id, reason in again.refused.items():
            log.error("indexer: even the stripped copy of %s was refused: %s", doc_id, reason)

    async def _commit_loop(self, consumer: AIOKafkaConsumer) -> None:
        """Commit what is stored every ``commit_interval_ms`` (a commit per batch would put a
        broker round trip between every two batches)."""
        while True:
            await asyncio.sleep(self._settings.commit_interval_ms / 1000)
            await self._commit(consumer)

    async def _commit(self, consumer: AIOKafkaConsumer) -> None:
        offsets = {
            tp: o
            for tp, o in self._done_to.items()
            if o > self._committed.get(tp, -1) and tp not in self._gone
        }
        if not offsets:
            return
        logs = {tp: self._logs.get(tp, 0) for tp in offsets}  # which log each offset is of
        # aiokafka waits for a lost coordinator for ever: bound it, the last one tightly
        timeout_s = CLOSE_TIMEOUT_S if self._stopping else self._kafka.request_timeout_ms / 1000
        try:
            async with asyncio.timeout(timeout_s):
                if not await commit_as_member(consumer, offsets):
                    return  # it lost its group (the broker came back empty?): commits nothing
        except UnknownTopicOrPartitionError as exc:
            try:
                async with asyncio.timeout(timeout_s):
                    missing = await absent(consumer, offsets)
            except TimeoutError:
                missing = set(offsets)  # unanswered: none committed, which is safe
            # a log made again while the commit was refused is a new log: not gone
            gone = {tp for tp in missing if logs[tp] == self._logs.get(tp, 0)}
            if not gone:
                log.warning("indexer: commit failed (the batch is stored): %s", exc)
                return
            self._gone |= gone
            log.warning(
                "indexer: commit refused (%s): the log of %s is gone; none of its offsets is "
                "committed, what was stored of it is indexed again, and stored once",
                exc,
                ", ".join(sorted(f"{tp.topic}-{tp.partition}" for tp in gone)),
            )
            return
        except (TimeoutError, KafkaError) as exc:  # stored already: indexed again, stored once
            log.warning("indexer: commit failed (the batch is stored): %s", exc)
            return
        self._committed.update(offsets)


def _archived(record: ConsumerRecord) -> ArchivedRecord:
    headers = tuple([(k, v if type(v) is bytes else bytes(v)) for k, v in record.headers or ()])
    value = record.value or b""
    return ArchivedRecord(
        record.topic, record.partition, record.offset, record.timestamp, record.key, value, headers
    )
