"""Reading the log without a consumer group: a slice of partitions, record by record.

:class:`LogReader` reads by plain assignment (no group is joined, no offset is read,
moved or committed), from a start to an end given as the beginning, the end, an offset
or an append time, or on for ever (``end=None``). ``trace --from-log``, ``tail``, replay,
export and a redrive's sandbox check read the log through it.

An end is a fetch's high watermark, never the end ListOffsets reports as it is: tansu
answers the first offset of a partition's last batch plus one, short of the batch's
other records (Kafka answers the end), so the records of the last batch were missed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final, Literal, Self, TypeAlias

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from hermesbus.base.lifecycle import Service
from hermesbus.connectors.kafka.admin import KafkaAdmin
from hermesbus.connectors.kafka.client import kafka_reason, start_or_close
from hermesbus.connectors.kafka.clients import log_consumer
from hermesbus.connectors.kafka.config import KafkaConfig
from hermesbus.errors import BrokerError

__all__ = ["BEGINNING", "END", "LogReader", "Position", "Record", "partition_counts"]

Record: TypeAlias = ConsumerRecord[bytes, bytes]
"""A record as the broker has it."""
_POLL_MS: Final = 250


@dataclass(frozen=True, slots=True)
class Position:
    """Where a slice starts or ends in each partition: ``beginning``, ``end``, an
    ``offset`` (the same in every partition) or a ``time`` (epoch ms: the first record
    appended at or after it)."""

    kind: Literal["beginning", "end", "offset", "time"]
    value: int = 0


BEGINNING: Final = Position("beginning")
END: Final = Position("end")


async def partition_counts(kafka: KafkaConfig, topics: Sequence[str]) -> dict[str, int]:
    """How many partitions each of ``topics`` has; a topic that does not exist is left out."""
    async with KafkaAdmin(kafka) as admin:
        return {name: topic.partitions for name, topic in (await admin.describe(topics)).items()}


class LogReader(Service):
    """The records of ``parts`` from ``start`` to ``end`` (excluded; None: for ever), in
    batches as fetched, each partition's records in offset order.

    ``start()`` fixes the slice: the ends as they are then, the offsets of the times.
    ``what`` begins every error's message (``tail``, ``trace T``): a broker that cannot
    be reached, a Kafka error, or one that answers no fetch within the request timeout
    is a BrokerError saying so. No partition to read: nothing is connected, nothing read.
    """

    def __init__(
        self,
        kafka: KafkaConfig,
        parts: Sequence[TopicPartition],
        *,
        start: Position = BEGINNING,
        end: Position | None = END,
        what: str = "read",
    ) -> None:
        self._kafka, self._parts, self._what = kafka, list(parts), what
        self._start, self._end = start, end
        self._consumer: AIOKafkaConsumer | None = None
        self._stops: dict[TopicPartition, int | None] = {}
        self._left: set[TopicPartition] = set()

    async def start(self) -> None:
        if self._consumer is not None or not self._parts:
            return
        kafka = self._kafka
        consumer = log_consumer(kafka)
        where = f"{self._what}: cannot reach Kafka at {kafka.address}"
        await start_or_close(consumer.start, consumer.stop, where, kafka)
        self._consumer = consumer
        try:
            with self._translated():
                consumer.assign(self._parts)
                firsts, self._stops = await self._bounds(consumer)
                for tp, at in firsts.items():
                    consumer.seek(tp, at)
        except BaseException:
            await self.stop()
            raise
        self._left = {tp for tp, at in firsts.items() if (s := self._stops[tp]) is None or at < s}

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        self._left = set()
        if consumer is not None:
            await consumer.stop()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> list[Record]:
        """The next fetched batch; the iteration ends when every partition reached its stop
        (with ``end=None``, never; or when the reader is stopped)."""
        while self._left and (consumer := self._consumer) is not None:
            batch = await self._fetch(consumer)
            if batch:
                return batch
        raise StopAsyncIteration

    async def _fetch(self, consumer: AIOKafkaConsumer) -> list[Record]:
        """One fetch's records before the partitions' stops. A time range's bounds are
        checked on each record's own time too: tansu's offset for a time can be a
        millisecond off (it rounds the record's time)."""
        after = self._start.value if self._start.kind == "time" else None
        before = self._end.value if self._end is not None and self._end.kind == "time" else None
        with self._translated():
            fetched = await consumer.getmany(*self._left, timeout_ms=_POLL_MS)
        taken = [
            record
            for tp, records in fetched.items()
            for record in self._within(tp, records)
            if (after is None or record.timestamp >= after)
            and (before is None or record.timestamp < before)
        ]
        with self._translated():
            for tp in list(self._left):
                stop = self._stops[tp]
                if stop is not None and await consumer.position(tp) >= stop:
                    self._left.discard(tp)
        await asyncio.sleep(0)
        return taken

    def _within(self, tp: TopicPartition, records: Sequence[Record]) -> Iterator[Record]:
        """The records before ``tp``'s stop; at the stop, ``tp`` is done."""
        if tp not in self._left:
            return
        stop = self._stops[tp]
        for record in records:
            if stop is not None and record.offset >= stop:
                self._left.discard(tp)
                return
            yield record

    async def _bounds(
        self, consumer: AIOKafkaConsumer
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int | None]]:
        """Per partition, the first offset to read and the one to stop before (None: never)."""
        parts = self._parts
        beginnings = await consumer.beginning_offsets(parts)
        ends = await self._ends(consumer, beginnings)
        firsts = await _offsets(consumer, self._start, beginnings, ends)
        if self._end is None:
            return firsts, dict.fromkeys(parts)
        return firsts, dict(await _offsets(consumer, self._end, beginnings, ends))

    async def _ends(
        self, consumer: AIOKafkaConsumer, beginnings: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """Each partition's end: the offset its next record will get.

        Each partition with a record is fetched once from its last reported record, and
        its end is the high watermark that fetch reports (the end on both brokers). The
        consumer is left where that fetch left it: seek before reading."""
        parts, within_s = self._parts, self._kafka.request_timeout_ms / 1000
        reported = await consumer.end_offsets(parts)
        fetched = [tp for tp in parts if reported[tp] > beginnings[tp]]
        for tp in fetched:
            consumer.seek(tp, reported[tp] - 1)  # a record there: the fetch answers at once
        try:
            async with asyncio.timeout(within_s):
                while any(consumer.highwater(tp) is None for tp in fetched):
                    await consumer.getmany(*fetched, timeout_ms=_POLL_MS)
        except TimeoutError:
            unanswered = sorted(
                f"{tp.topic}/{tp.partition}" for tp in fetched if consumer.highwater(tp) is None
            )
            raise BrokerError(
                f"{self._what}: no fetch of {', '.join(unanswered)} was answered within "
                f"{within_s:g} s"
            ) from None
        return {tp: max(reported[tp], consumer.highwater(tp) or 0) for tp in parts}

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except KafkaError as exc:
            raise BrokerError(f"{self._what}: {kafka_reason(exc)}") from exc


async def _offsets(
    consumer: AIOKafkaConsumer,
    where: Position,
    beginnings: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
) -> dict[TopicPartition, int]:
    if where.kind == "beginning":
        return dict(beginnings)
    if where.kind == "end":
        return dict(ends)
    if where.kind == "offset":
        return {tp: min(max(where.value, first), ends[tp]) for tp, first in beginnings.items()}
    found = await consumer.offsets_for_times(dict.fromkeys(beginnings, where.value))
    # no record at or after the time: the end. Kafka answers None; tansu answers an
    # earlier record (offset 0 with timestamp -1, or the last one): so the time decides
    return {
        tp: at.offset if at is not None and at.timestamp >= where.value else ends[tp]
        for tp, at in found.items()
    }
