"""The group-less log reader against a broker that behaves as tansu does: ends reported
short of the last batch, offsets for times that point at earlier records, record times a
millisecond off. No broker: a fake consumer stands in for aiokafka's (the integration
tests of tail, trace --from-log, replay and export run it on both real brokers)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError, NotLeaderForPartitionError
from aiokafka.structs import ConsumerRecord, OffsetAndTimestamp

from hermesbus.connectors.kafka import BEGINNING, END, KafkaConfig, LogReader, Position, Record
from hermesbus.connectors.kafka import clients as clients_module
from hermesbus.errors import BrokerError

A, B, EMPTY = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
KAFKA = KafkaConfig(bootstrap="127.0.0.1:9", request_timeout_ms=300)


def _record(tp: TopicPartition, offset: int, timestamp: int) -> Record:
    return ConsumerRecord(
        tp.topic, tp.partition, offset, timestamp, 0, None, b"v%d" % offset, None, 0, 0, ()
    )


class Log:
    """What the fake broker holds: records in batches, per partition."""

    def __init__(self) -> None:
        self.batches: dict[TopicPartition, list[list[Record]]] = {A: [], B: [], EMPTY: []}
        self.answers = True
        self.fails: Exception | None = None
        self.cannot_start: Exception | None = None
        self.consumers: list[FakeConsumer] = []

    def append(self, tp: TopicPartition, *timestamps: int) -> None:
        """One batch of records with these append times."""
        first = len(self.records(tp))
        batch = [_record(tp, first + n, ts) for n, ts in enumerate(timestamps)]
        self.batches[tp].append(batch)

    def records(self, tp: TopicPartition) -> list[Record]:
        return [record for batch in self.batches[tp] for record in batch]


class FakeConsumer:
    """The part of ``AIOKafkaConsumer`` the reader uses, answering as tansu does."""

    per_fetch = 2

    def __init__(self, log: Log, **kwargs: Any) -> None:
        assert kwargs["group_id"] is None and kwargs["enable_auto_commit"] is False
        self.log, self.kwargs = log, kwargs
        self.positions: dict[TopicPartition, int] = {}
        self.highwaters: dict[TopicPartition, int] = {}
        self.started = self.stopped = False
        log.consumers.append(self)

    async def start(self) -> None:
        if self.log.cannot_start is not None:
            raise self.log.cannot_start
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    def assign(self, parts: Sequence[TopicPartition]) -> None:
        self.positions = dict.fromkeys(parts, 0)

    async def beginning_offsets(self, parts: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(parts, 0)

    async def end_offsets(self, parts: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """tansu's answer: the first offset of the last batch plus one."""
        return {tp: self.log.batches[tp][-1][0].offset + 1 if self.log.batches[tp] else 0
                for tp in parts}  # fmt: skip

    async def offsets_for_times(
        self, times: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """tansu's answer: the first record at or after the time, else the last one (or
        offset 0 timed -1 when there is none)."""
        found: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, at in times.items():
            records = self.log.records(tp)
            later = [r for r in records if r.timestamp >= at]
            last = records[-1] if records else None
            hit = later[0] if later else last
            found[tp] = OffsetAndTimestamp(hit.offset, hit.timestamp) if hit else None
            if not records:
                found[tp] = OffsetAndTimestamp(0, -1)
        return found

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.highwaters.get(tp)

    async def getmany(
        self, *parts: TopicPartition, timeout_ms: int = 0
    ) -> dict[TopicPartition, list[Record]]:
        if self.log.fails is not None:
            raise self.log.fails
        if not self.log.answers:
            await asyncio.sleep(timeout_ms / 1000)
            return {}
        fetched = {}
        for tp in parts:
            records = self.log.records(tp)
            self.highwaters[tp] = len(records)
            got = records[self.positions[tp] : self.positions[tp] + self.per_fetch]
            if got:
                fetched[tp] = got
                self.positions[tp] = got[-1].offset + 1
        await asyncio.sleep(0)
        return fetched


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> Log:
    made = Log()
    monkeypatch.setattr(
        clients_module, "AIOKafkaConsumer", lambda **kwargs: FakeConsumer(made, **kwargs)
    )
    return made


async def _read(
    parts: Sequence[TopicPartition],
    start: Position = BEGINNING,
    end: Position | None = END,
) -> list[tuple[int, int]]:
    """(partition, offset) of every record read, batch by batch."""
    found: list[tuple[int, int]] = []
    async with LogReader(KAFKA, parts, start=start, end=end, what="test") as reader:
        async for batch in reader:
            assert batch  # an empty fetch is not a batch
            found += [(r.partition, r.offset) for r in batch]
    return found


async def test_each_partition_is_read_in_order_to_the_end_past_a_short_reported_one(
    log: Log,
) -> None:
    log.append(A, 10, 11, 12)  # tansu reports the end 1: two records of this batch after it
    log.append(A, 20, 21)
    log.append(B, 15)
    read = await _read([A, B, EMPTY])
    assert [o for p, o in read if p == 0] == [0, 1, 2, 3, 4]
    assert [o for p, o in read if p == 1] == [0]
    assert all(consumer.stopped for consumer in log.consumers)


async def test_the_end_is_the_one_the_log_had_when_the_read_started(log: Log) -> None:
    log.append(A, 10, 11, 12)
    async with LogReader(KAFKA, [A], what="test") as reader:
        log.append(A, 30)  # appended after the start: past the end
        got = [r.offset async for batch in reader for r in batch]
    assert got == [0, 1, 2]


async def test_empty_partitions_and_no_partitions_read_nothing(log: Log) -> None:
    assert await _read([EMPTY]) == []  # no fetch waited for: nothing is there
    assert await _read([]) == []
    assert len(log.consumers) == 1  # no partition: no consumer at all


async def test_offsets_are_clamped_to_the_log_and_the_end_is_excluded(log: Log) -> None:
    log.append(A, 10, 11, 12, 13, 14)
    assert await _read([A], Position("offset", 1), Position("offset", 3)) == [(0, 1), (0, 2)]
    assert await _read([A], Position("offset", 99)) == []
    assert await _read([A], END) == []
    assert await _read([A], BEGINNING, Position("offset", 0)) == []


async def test_times_go_by_each_record_s_own_time(log: Log) -> None:
    log.append(A, 10, 20, 30, 40)
    assert await _read([A], Position("time", 20), Position("time", 40)) == [(0, 1), (0, 2)]
    # no record at or after the time: tansu answers the last one; the time decides
    assert await _read([A], Position("time", 41)) == []
    assert await _read([EMPTY], Position("time", 5)) == []


async def test_a_time_off_by_a_millisecond_is_not_read(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    log.append(A, 10, 20, 30)

    async def rounded(self: FakeConsumer, times: dict[TopicPartition, int]) -> dict[Any, Any]:
        return dict.fromkeys(times, OffsetAndTimestamp(0, 21))  # tansu rounds the record's time

    monkeypatch.setattr(FakeConsumer, "offsets_for_times", rounded)
    assert await _read([A], Position("time", 21)) == [(0, 2)]


async def test_without_an_end_new_records_are_read_as_they_come(log: Log) -> None:
    log.append(A, 10)
    got: list[int] = []
    async with LogReader(KAFKA, [A], start=BEGINNING, end=None, what="test") as reader:
        async for batch in reader:
            got += [r.offset for r in batch]
            if got == [0]:
                log.append(A, 20, 21)
            if got == [0, 1, 2]:
                break
        await reader.stop()
        assert [b async for b in reader] == []  # stopped: the iteration ends
    assert got == [0, 1, 2]


async def test_a_broker_that_answers_no_fetch_is_named_with_the_partitions(log: Log) -> None:
    log.append(A, 10, 11)
    log.append(B, 10)
    log.answers = False
    with pytest.raises(BrokerError, match=r"^test: no fetch of t/0, t/1 was answered within 0.3 s"):
        await _read([A, B, EMPTY])
    assert log.consumers[0].stopped


async def test_a_kafka_error_while_reading_is_a_broker_error(log: Log) -> None:
    log.append(A, 10)
    reader = LogReader(KAFKA, [A], what="trace t1")
    async with reader:
        log.fails = NotLeaderForPartitionError()
        with pytest.raises(BrokerError, match=r"^trace t1: .*NotLeaderForPartitionError") as info:
            await anext(aiter(reader))
    assert isinstance(info.value.__cause__, NotLeaderForPartitionError)
    assert log.consumers[0].stopped


async def test_an_unreachable_broker_is_named_with_what_to_check(log: Log) -> None:
    log.cannot_start = KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 9)]")
    with pytest.raises(BrokerError) as info:
        await _read([A])
    said = str(info.value)
    assert said.startswith("test: cannot reach Kafka at 127.0.0.1:9: KafkaConnectionError")
    assert "is the broker running, and is the address right?" in said
    assert log.consumers[0].stopped
