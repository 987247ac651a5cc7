"""A backend outage inside a handler (a port's store, the schema registry) holds the record
in place, in order, and is never dead-lettered; only a handler's own bug, or a store that
refuses the request itself, follows the retry policy to the dead-letter topic.

A real SQLite state store; no broker: what would be produced is kept by the worker below.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from hermesbus import Envelope
from hermesbus.base.storemark import MarkBook
from hermesbus.codec import Codec
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.contract.payloads import ErrorReport
from hermesbus.errors import BrokerError, RegistryError, StoreError, StoreLost
from hermesbus.runtime import HandlerInput, Outcome, OutRecord, Pause, RuntimeSettings
from hermesbus.runtime._partition import Partition, ProcessorStats
from hermesbus.runtime._records import Records, outage
from tests import signing

from .test_records import record, turn


class Kept(Records):
    """Records whose produced records are kept here instead of sent to a broker."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.sent: list[OutRecord] = []

    async def produce(self, records: Sequence[OutRecord]) -> None:
        self.sent.extend(records)


def failing(errors: list[Exception]):  # type: ignore[no-untyped-def]
    """A handler whose port fails with each of ``errors`` in turn, then answers."""

    async def handler(inp: HandlerInput) -> Outcome:
        if errors:
            raise errors.pop(0)
        return Outcome(state={"n": inp.state.data.get("n", 0) + 1})

    return handler


def notice(envelope: Envelope, pause: Pause) -> Envelope:
    """Tells the turn's sender: the same envelope, re-dated, numbered in its id."""
    return envelope.model_copy(update={"message_id": f"paused-{pause.number}"})


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStateStore]:
    async with SqliteStateStore(tmp_path / "s.sqlite3", book=MarkBook(tmp_path)) as store:
        yield store


def worker(
    store: SqliteStateStore,
    errors: list[Exception],
    *,
    told: bool = False,
    kind: type[Kept] = Kept,
) -> Kept:
    return kind(
        "conv",
        failing(errors),
        store=store,
        codec=Codec(),
        settings=RuntimeSettings(infra_retry_ms=1, pause_notice_ms=1),
        ports={},
        prefix="",
        stats=ProcessorStats(),
        guard=signing.guard("conversation", "conv"),
        paused=notice if told else None,
    )


async def run(w: Kept) -> Partition:
    part = Partition(TopicPartition("in", 0))
    part.tracker.add(0)
    await w.guarded(part, record(turn("m1"), 0))
    return part


@pytest.mark.parametrize(
    "error",
    [
        StoreError("Redis at redis://127.0.0.1:1/0: preference failed (ConnectionError)"),
        StoreError("Neo4j at bolt://127.0.0.1:1: query failed (ServiceUnavailable)"),
        StoreError("memory write failed (m.sqlite3): database or disk is full"),
        RegistryError("GET /schemas/ids/7: ConnectError: refused"),
        RegistryError("GET /schemas/ids/7: HTTP 503: unavailable", status_code=503),
    ],
    ids=["redis", "neo4j", "sqlite-full", "registry-gone", "registry-503"],
)
async def test_an_outage_in_a_handler_is_retried_in_place_and_never_dead_lettered(
    store: SqliteStateStore, error: Exception
) -> None:
    w = worker(store, [error, error, error])
    part = await run(w)
    assert (w.stats.processed, w.stats.dead_letters, w.stats.retries) == (1, 0, 0)
    assert w.sent == []  # no dead letter, no retry timer
    assert part.tracker.committable() == 1
    assert (await store.load("conv", "s1")).data == {"n": 1}


async def test_the_sender_is_told_while_an_outage_holds_its_record(
    store: SqliteStateStore,
) -> None:
    w = worker(store, [StoreError("Redis away")] * 3, told=True)
    await run(w)
    assert w.stats.processed == 1
    assert len(w.sent) == 3  # one notice per failed try (the notice gap is 1 ms here)
    assert [r.topic for r in w.sent] == ["hermes.conversation.in"] * 3


@pytest.mark.parametrize(
    "error",
    [
        StoreError("conversation state of session 's1' is invalid", retriable=False),
        RegistryError("POST /subjects/x/versions: HTTP 422: incompatible", status_code=422),
        KeyError("a bug"),
    ],
    ids=["refused-by-the-store", "registry-422", "bug"],
)
async def test_a_bug_or_a_refusal_follows_the_retry_policy_to_the_dead_letter_topic(
    store: SqliteStateStore, error: Exception
) -> None:
    w = worker(store, [error])
    part = await run(w)
    assert (w.stats.processed, w.stats.dead_letters) == (0, 1)
    (letter,) = w.sent
    assert letter.topic == "hermes.dlq"
    assert part.tracker.committable() == 1  # the partition moves on


def test_what_counts_as_an_outage() -> None:
    assert outage(StoreError("gone"))
    assert not outage(StoreError("refused", retriable=False))
    assert outage(RegistryError("down"))
    assert outage(RegistryError("busy", status_code=429))
    assert not outage(RegistryError("no such id", status_code=404))
    assert not outage(ValueError("a bug"))


async def test_a_notice_that_fails_never_drops_the_held_record(store: SqliteStateStore) -> None:
    def broken(envelope: Envelope, pause: Pause) -> Envelope:
        raise ValueError("a notice that cannot be made")

    w = worker(store, [StoreError("Redis away")] * 2)
    w.paused = broken
    part = await run(w)
    assert (w.stats.processed, w.stats.held, w.stats.dead_letters) == (1, 1, 0)
    assert part.tracker.committable() == 1


def lost_store(epoch: str = "e1") -> StoreLost:
    return StoreLost(
        "the state store is lost",
        store="redis redis://127.0.0.1:1/0 prefix p",
        epoch=epoch,
        said="STORE LOST: the state store came back empty: its mark is gone",
    )


async def test_a_lost_store_raises_one_alert_however_many_workers_it_holds(
    store: SqliteStateStore,
) -> None:
    lost = lost_store()
    first, second = worker(store, [lost] * 3), worker(store, [lost] * 2)
    await run(first)
    await run(second)
    (alert,) = first.sent  # the second worker met the same loss: no second alert
    assert second.sent == []
    assert (first.stats.processed, first.stats.dead_letters) == (1, 0)  # held, then done
    assert alert.topic == "hermes.alerts"
    envelope = Codec().decode(alert.value)
    assert envelope.target == "alerts:store"
    assert envelope.source == "conversation:conv"
    body = envelope.payload.body
    assert isinstance(body, ErrorReport)
    assert (body.code, body.retryable) == ("store_lost", True)
    assert body.message == lost.said and "stores adopt" in body.advice
    context = envelope.payload.context
    assert context["store"] == lost.store and context["lost_mark"] == "e1"
    assert (context["held_topic"], context["held_offset"]) == ("in", 0)


async def test_every_process_raises_the_same_alert_for_one_loss_and_a_new_one_for_the_next(
    tmp_path: Path,
) -> None:
    """Two processes (two StoreLost for one loss) give one id, so the index keeps one; the
    loss after an adoption (another mark) is another alert."""
    sent = []
    for n, lost in enumerate((lost_store("e1"), lost_store("e1"), lost_store("e2"))):
        own = SqliteStateStore(tmp_path / f"{n}.sqlite3", book=MarkBook(tmp_path))
        async with own as store:  # a process's own
            w = worker(store, [lost])
            await run(w)
        (alert,) = w.sent
        sent.append(Codec().decode(alert.value).message_id)
    assert sent[0] == sent[1] != sent[2]


async def test_an_alert_that_cannot_be_sent_is_tried_again_and_never_drops_the_record(
    store: SqliteStateStore,
) -> None:
    class Refusing(Kept):
        tries = 0

        async def produce(self, records: Sequence[OutRecord]) -> None:
            self.tries += 1
            if self.tries == 1:
                raise BrokerError("the broker is away")
            await super().produce(records)

    lost = lost_store()
    w = worker(store, [lost, lost], kind=Refusing)
    assert isinstance(w, Refusing)
    await run(w)
    assert w.tries == 2 and len(w.sent) == 1  # claimed again on the next retry, sent once
    assert (w.stats.processed, w.stats.dead_letters) == (1, 0)
