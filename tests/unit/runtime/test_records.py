"""One record through the runtime, with a real SQLite store and no broker.

The races here are the ones a rebalance produces: a worker that kept running after its
partition was revoked (a zombie) saves a session before the partition's new owner.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiokafka import ConsumerRecord, TopicPartition

from hermesbus import Envelope
from hermesbus.base.storemark import MarkBook
from hermesbus.codec import Codec, encode
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.errors import BrokerError, StoreError
from hermesbus.runtime import (
    Handler,
    HandlerInput,
    HandlerRun,
    Outcome,
    OutRecord,
    RuntimeSettings,
    StateChange,
)
from hermesbus.runtime._partition import Partition, ProcessorStats
from hermesbus.runtime._producer import Producer
from hermesbus.runtime._records import Records
from tests import builders, signing

T0 = datetime(2024, 5, 16, 9, 30, tzinfo=UTC)


def turn(message_id: str) -> Envelope:
    return builders.turn(message_id=message_id)


def record(envelope: Envelope, offset: int) -> ConsumerRecord[bytes, bytes]:
    value = encode(envelope)
    headers = tuple(signing.signed("in", b"s1", value))  # an app's user turn
    return ConsumerRecord("in", 0, offset, 0, 0, b"s1", value, None, 2, len(value), headers)


async def count(inp: HandlerInput) -> Outcome:  # state only: no producer needed
    return Outcome(state={"n": inp.state.data.get("n", 0) + 1})


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStateStore]:
    async with SqliteStateStore(tmp_path / "s.sqlite3", book=MarkBook(tmp_path)) as store:
        yield store


def records(
    store: SqliteStateStore, handler: Handler = count, runs: list[HandlerRun] | None = None
) -> Records:
    """The conversation's records on ``store``; each run told to ``runs`` when given (the
    observer a span exporter is)."""
    return Records(
        "conv",
        handler,
        store=store,
        codec=Codec(),
        settings=RuntimeSettings(infra_retry_ms=1),
        ports={},
        prefix="",
        stats=ProcessorStats(),
        guard=signing.guard("conversation", "conv"),
        observe=runs.append if runs is not None else None,
    )


async def test_the_owner_that_loses_to_a_zombie_on_the_same_envelope_moves_on(
    store: SqliteStateStore,
) -> None:
    owner, part = records(store), Partition(TopicPartition("in", 0))
    await owner.state(part, "s1")  # cached at version 0
    # the zombie applies m1 first (same input, same state: the same change)
    assert await store.commit("conv", "s1", StateChange(0, "m1", {"n": 1}, ("m1",)))
    part.tracker.add(0)
    await owner.guarded(part, record(turn("m1"), 0))
    assert owner.stats.fenced == 1
    assert owner.stats.processed == 0  # nothing applied or emitted twice
    assert not part.closed  # it still owns the partition and goes on
    assert part.tracker.committable() == 1
    assert (await store.load("conv", "s1")).data == {"n": 1}


async def test_the_owner_retries_with_the_saved_state_when_the_zombie_applied_another(
    store: SqliteStateStore,
) -> None:
    owner, part = records(store), Partition(TopicPartition("in", 0))
    await owner.state(part, "s1")  # cached at version 0
    assert await store.commit("conv", "s1", StateChange(0, "m0", {"n": 1}, ("m0",)))
    part.tracker.add(5)
    await owner.guarded(part, record(turn("m1"), 5))
    assert owner.stats.fenced == 1
    assert owner.stats.processed == 1
    state = await store.load("conv", "s1")
    assert (state.version, state.data, state.applied[1:]) == (2, {"n": 2}, ("m0", "m1"))
    assert part.tracker.committable() == 6


async def test_a_revoked_partition_saves_nothing(store: SqliteStateStore) -> None:
    worker, part = records(store), Partition(TopicPartition("in", 0))
    part.tracker.add(0)
    part.closed = True  # revoked while the handler ran
    await worker.guarded(part, record(turn("m1"), 0))
    assert (await store.load("conv", "s1")).version == 0
    assert part.tracker.committable() == 0  # not finished: the new owner redoes it


async def test_a_store_outage_is_retried_in_place_then_succeeds(
    store: SqliteStateStore, tmp_path: Path
) -> None:
    worker, part = records(store), Partition(TopicPartition("in", 0))
    failures = iter([StoreError("disk on fire"), StoreError("still on fire")])
    real = store.load

    async def flaky(processor: str, session_id: str):  # type: ignore[no-untyped-def]
        error = next(failures, None)
        if error is not None:
            raise error
        return await real(processor, session_id)

    store.load = flaky  # type: ignore[method-assign]
    part.tracker.add(0)
    await worker.guarded(part, record(turn("m1"), 0))
    assert worker.stats.processed == 1
    assert part.tracker.committable() == 1


async def test_a_released_partition_gets_no_new_transactional_producer() -> None:
    producer = Producer(KafkaConfig(bootstrap="127.0.0.1:9"), "g", exactly_once=True)
    with pytest.raises(BrokerError, match="no open transaction"):
        await producer.send_in_transaction(TopicPartition("in", 0), [OutRecord("out", b"k", b"v")])


async def test_handlers_get_read_only_state(store: SqliteStateStore) -> None:
    worker, part = records(store), Partition(TopicPartition("in", 0))
    assert await store.commit("conv", "s1", StateChange(0, "m0", {"n": 1}, ("m0",)))
    state = await worker.state(part, "s1")
    with pytest.raises(TypeError):
        state.data["n"] = 99  # type: ignore[index]
    part.tracker.add(0)
    await worker.guarded(part, record(turn("m1"), 0))
    cached = await worker.state(part, "s1")
    assert dict(cached.data) == {"n": 2}
    with pytest.raises(TypeError):
        cached.data["n"] = 99  # type: ignore[index]


async def test_an_unreachable_broker_is_not_mistaken_for_one_without_transactions() -> None:
    producer = Producer(KafkaConfig(bootstrap="127.0.0.1:9"), "g", exactly_once=True)
    with pytest.raises(BrokerError, match=r"cannot reach Kafka at 127\.0\.0\.1:9"):
        await producer.start()


async def test_a_group_sharing_its_topic_skips_undecodable_bytes_instead_of_dead_lettering(
    store: SqliteStateStore,
) -> None:
    """Each tool's own group skips them; the ``tool`` group dead-letters them, once."""
    sharing = Records(
        "tool-org_tool",
        count,
        store=store,
        codec=Codec(),
        settings=RuntimeSettings(),
        ports={},
        prefix="",
        stats=ProcessorStats(),
        guard=signing.guard("tool", "tool-org_tool"),
        dead_letter_undecodable=False,
    )  # no producer: a dead letter would raise
    part = Partition(TopicPartition("in", 0))
    part.tracker.add(0)
    garbage = b"\xc3\x01garbage"
    headers = tuple(signing.signed("in", b"s1", garbage, identity="dispatcher"))
    bad = ConsumerRecord("in", 0, 0, 0, 0, b"s1", garbage, None, 2, 9, headers)
    await sharing.guarded(part, bad)
    unsigned = ConsumerRecord("in", 0, 1, 0, 0, b"s1", garbage, None, 2, 9, ())
    part.tracker.add(1)
    await sharing.guarded(part, unsigned)
    assert sharing.stats.undecodable == 1
    assert sharing.stats.refused == 1
    assert sharing.stats.dead_letters == 0
    assert part.tracker.committable() == 2  # the partition moves on


async def test_the_run_that_took_effect_is_timed_counted_and_told_once(
    store: SqliteStateStore,
) -> None:
    runs: list[HandlerRun] = []
    worker, part = records(store, count, runs), Partition(TopicPartition("in", 0))
    part.tracker.add(0)
    await worker.guarded(part, record(turn("m1"), 0))
    (run,) = runs
    assert (run.processor, run.envelope.message_id, run.error) == ("conv", "m1", None)
    assert (run.topic, run.partition, run.offset) == ("in", 0, 0)
    assert run.began_ns <= run.ended_ns
    assert worker.stats.handler_ms.count == 1
    assert worker.stats.processed_by == {("in", 0): 1}


async def test_another_groups_envelope_is_neither_timed_counted_nor_told(
    store: SqliteStateStore,
) -> None:
    async def pass_on(_inp: HandlerInput) -> Outcome:
        return Outcome(others=True)

    runs: list[HandlerRun] = []
    worker, part = records(store, pass_on, runs), Partition(TopicPartition("in", 0))
    part.tracker.add(0)
    await worker.guarded(part, record(turn("m1"), 0))
    assert (runs, worker.stats.processed, worker.stats.handler_ms.count) == ([], 0, 0)
    assert worker.stats.processed_by == {}
    assert part.tracker.committable() == 1  # passed over, and committed past


async def test_a_failed_attempt_is_told_with_its_error_and_a_failing_observer_harms_nothing(
    store: SqliteStateStore, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(_inp: HandlerInput) -> Outcome:
        raise ValueError("no")

    runs: list[HandlerRun] = []
    worker, part = records(store, broken, runs), Partition(TopicPartition("in", 0))
    failed: list[Exception] = []

    async def retried(_part: object, _record: object, _envelope: object, error: Exception) -> None:
        failed.append(error)  # the retry's producer is not under test here

    worker.retry_or_dead_letter = retried  # type: ignore[method-assign,assignment]
    part.tracker.add(0)
    await worker.guarded(part, record(turn("m1"), 0))
    (run,) = runs
    assert isinstance(run.error, ValueError) and worker.stats.handler_ms.count == 1
    assert failed == [run.error] and worker.stats.processed == 0

    def raising(_run: HandlerRun) -> None:
        raise RuntimeError("exporter down")

    calm = records(store, count, [])
    calm.observe = raising
    part = Partition(TopicPartition("in", 0))
    part.tracker.add(1)
    await calm.guarded(part, record(turn("m2"), 1))
    assert calm.stats.processed == 1  # the record went on
    assert "its observer failed (1 times so far" in caplog.text
