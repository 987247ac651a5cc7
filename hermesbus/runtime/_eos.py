"""Exactly-once mode: a Kafka transaction per fetched batch of a partition.

The transaction holds the batch's outputs and its offsets and is produced with
the stable transactional id ``<group>.<topic>.<partition>``; a new owner of the
partition fences an old one's unfinished transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import IllegalOperation, KafkaError, ProducerFenced

from hermesbus.errors import BrokerError, RegistryError, StoreError

from ._offsets import OffsetTracker
from ._partition import Partition, Record
from ._records import Records

__all__ = ["Transactions"]

log = logging.getLogger(__name__)


class Transactions:
    """Runs each fetched batch of a partition inside one transaction."""

    def __init__(self, records: Records, group: str, slots: asyncio.Semaphore) -> None:
        self.records = records
        self.group = group
        self.slots = slots
        self.consumer: AIOKafkaConsumer | None = None

    async def transaction(self, part: Partition, records: Sequence[Record]) -> None:
        """One transaction per fetched batch of a partition: its outputs and its offsets.

        A handler failure aborts the transaction, so no output of the batch becomes
        visible; a new one then carries the batch's other outputs again (from memory,
        as saved in their outboxes) and the failure's retry or dead letter.
        """
        producer = self.records.producer
        if producer is None or not records:
            return
        part.active += 1
        part.idle.clear()
        part.sent, part.failed, part.settled = [], [], []
        try:
            txn = await producer.transactional(part.tp)
            await txn.begin_transaction()
            sessions: dict[bytes, list[Record]] = {}
            if not part.tracker.follows(records[0].offset):  # the log was made again
                log.warning(
                    "processor=%s %s-%d: offsets went back from %s to %d with no "
                    "rebalance: its log was made again; the new one is read from there",
                    self.records.name,
                    part.tp.topic,
                    part.tp.partition,
                    part.tracker.next,
                    records[0].offset,
                )
                part.tracker, part.committed = OffsetTracker(), -1
                self.records.forget([part])
            for record in records:
                part.tracker.add(record.offset)
                sessions.setdefault(record.key or b"", []).append(record)
            async with asyncio.TaskGroup() as group:  # one failure cancels the others
                for session_records in sessions.values():
                    group.create_task(self.in_order(part, session_records))
            if part.closed:  # fenced or revoked meanwhile: nothing of this batch may count
                await txn.abort_transaction()
                return
            if part.failed:
                await self.abort_and_redo(part, txn)
            position = records[-1].offset + 1
            await txn.send_offsets_to_transaction({part.tp: position}, self.group)
            await txn.commit_transaction()
            part.committed = position
            for session_id, message_id in part.settled:
                await self.records.store.clear_outbox(self.records.name, session_id, message_id)
        except* ProducerFenced:
            part.closed = True  # a newer owner of this partition took over: we are a zombie
            log.warning("processor=%s fenced out of %s", self.records.name, part.tp)
        except* (KafkaError, IllegalOperation, BrokerError, StoreError, RegistryError) as failures:
            log.warning(
                "processor=%s transaction of %s failed: %s", self.records.name, part.tp, failures
            )
            await self.rewind(part)
        finally:
            part.sent, part.failed, part.settled = [], [], []
            part.active -= 1
            if not part.active:
                part.idle.set()

    async def rewind(self, part: Partition) -> None:
        """After a failed transaction: a fresh producer, and back to the committed offset."""
        consumer, producer = self.consumer, self.records.producer
        if consumer is None or producer is None:
            return
        await producer.release(part.tp)  # aborts what was open; the next one starts clean
        position = part.committed if part.committed >= 0 else await consumer.committed(part.tp)
        if position is None:
            await consumer.seek_to_beginning(part.tp)  # nothing committed: auto_offset_reset
        else:
            consumer.seek(part.tp, position)
        part.tracker = OffsetTracker()
        self.records.forget([part])  # commits of the failed batch may or may not have landed
        await asyncio.sleep(self.records.settings.infra_retry_ms / 1000)

    async def in_order(self, part: Partition, records: Sequence[Record]) -> None:
        for record in records:
            if part.closed:
                return
            async with self.slots:
                await self.records.guarded(part, record)

    async def abort_and_redo(self, part: Partition, txn: AIOKafkaProducer) -> None:
        await txn.abort_transaction()
        self.records.stats.aborted += 1
        await txn.begin_transaction()
        sent, part.sent = part.sent, []
        await self.records.emit(part, sent)
        for record, envelope, error in part.failed:
            await self.records.retry_or_dead_letter(part, record, envelope, error)
