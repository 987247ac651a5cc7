"""Per-session order under concurrency, effectively-once on redelivery, fencing."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path

import pytest

from hermesbus.base.storemark import MarkBook
from hermesbus.codec import decode
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.runtime import HandlerInput, Outcome, RuntimeSettings, StateStore

from .support import (
    IN,
    OUT,
    ConversationProcessor,
    counting,
    processed,
    produce,
    read,
    replies,
    turn,
    wait_for,
)

pytestmark = pytest.mark.kafka

SESSIONS = 500
PER_SESSION = 4


async def test_500_sessions_keep_their_order_while_running_concurrently(
    broker: str, prefix: str, any_store: StateStore
) -> None:
    store = any_store
    running = 0
    peak = 0

    async def handler(inp: HandlerInput) -> Outcome:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        seq = inp.envelope.payload.context["seq"]
        assert isinstance(seq, int)
        await asyncio.sleep((hash(inp.envelope.session_id) + seq) % 4 / 1000)
        running -= 1
        return await counting(inp)

    envelopes = [turn(f"s{s:03d}", q) for q in range(PER_SESSION) for s in range(SESSIONS)]
    await produce(broker, prefix + IN, envelopes)
    processor = ConversationProcessor(
        "order",
        handler,
        [IN],
        store=store,
        kafka=KafkaConfig(bootstrap=broker),
        topic_prefix=prefix,
        settings=RuntimeSettings(max_in_flight=32),
    )
    async with processor:
        await wait_for(lambda: processor.stats.processed >= len(envelopes), timeout=90)
    out = replies(await read(broker, prefix + OUT, until=len(envelopes)))

    by_session: dict[str, list[int]] = defaultdict(list)
    for envelope in out:
        by_session[envelope.session_id].append(int(envelope.payload.body.text))  # type: ignore[union-attr]
    assert len(by_session) == SESSIONS
    assert all(seqs == list(range(PER_SESSION)) for seqs in by_session.values())
    for s in range(SESSIONS):
        state = await store.load("order", f"s{s:03d}")
        assert state.data == {"last": PER_SESSION - 1, "count": PER_SESSION, "violations": 0}
    assert peak > 1, "sessions never ran concurrently"
    assert peak <= 32
    assert len({e.message_id for e in out}) == len(out)


async def test_redelivered_envelopes_are_acknowledged_without_rerunning(
    broker: str, prefix: str, store: SqliteStateStore
) -> None:
    calls = 0

    async def handler(inp: HandlerInput) -> Outcome:
        nonlocal calls
        calls += 1
        return await counting(inp)

    envelopes = [turn(f"s{s}", q) for q in range(3) for s in range(10)]
    await produce(broker, prefix + IN, envelopes)
    kafka = KafkaConfig(bootstrap=broker)
    first = ConversationProcessor(
        "dedupe", handler, [IN], store=store, kafka=kafka, topic_prefix=prefix
    )
    async with first:
        await wait_for(lambda: first.stats.processed == 30)
    # A second consumer group has no committed offsets: every envelope is redelivered.
    again = ConversationProcessor(
        "dedupe", handler, [IN], store=store, kafka=kafka, topic_prefix=prefix, group_id="other"
    )
    async with again:
        await wait_for(lambda: again.stats.duplicates == 30)
    assert calls == 30
    assert again.stats.processed == 0
    out = await read(broker, prefix + OUT, until=40, timeout=3)
    by_id: dict[str, set[bytes]] = defaultdict(set)
    for record in out:
        by_id[decode(record.value or b"").message_id].add(record.value or b"")
    assert len(by_id) == 30  # no new effect: every output id is one of the first run's
    assert all(len(values) == 1 for values in by_id.values())  # re-sends are exact copies
    # only a session's last outbox may be re-sent (the next commit drops the previous one)
    assert len(out) <= 30 + 10


async def test_the_same_input_emits_the_same_ids(broker: str, prefix: str, tmp_path: Path) -> None:
    """Replaying a topic into an empty store mints the same output ids (derived, not random)."""
    await produce(broker, prefix + IN, [turn("s1", 0), turn("s1", 1)])
    kafka = KafkaConfig(bootstrap=broker)
    for run in ("a", "b"):
        async with SqliteStateStore(tmp_path / f"{run}.sqlite3", book=MarkBook(tmp_path)) as store:
            processor = ConversationProcessor(
                "replay",
                counting,
                [IN],
                store=store,
                kafka=kafka,
                topic_prefix=prefix,
                group_id=f"replay-{run}",
            )
            async with processor:
                await wait_for(processed(processor, 2))
    out = await read(broker, prefix + OUT, until=4)
    first, second = out[:2], out[2:]
    assert [r.value for r in first] == [r.value for r in second]


async def test_a_zombie_that_lost_the_race_is_fenced_and_emits_nothing(
    broker: str, prefix: str, any_store: StateStore
) -> None:
    store = any_store
    release = asyncio.Event()
    entered = asyncio.Event()

    async def slow(inp: HandlerInput) -> Outcome:
        entered.set()
        await release.wait()
        return await counting(inp)

    await produce(broker, prefix + IN, [turn("s1", 0)])
    kafka = KafkaConfig(bootstrap=broker)
    zombie = ConversationProcessor(
        "fence", slow, [IN], store=store, kafka=kafka, topic_prefix=prefix
    )
    owner = ConversationProcessor(
        "fence", counting, [IN], store=store, kafka=kafka, topic_prefix=prefix, group_id="new"
    )
    async with zombie:
        await asyncio.wait_for(entered.wait(), 30)
        async with owner:  # took over the session while the zombie was still working on it
            await wait_for(lambda: owner.stats.processed == 1)
        release.set()
        await wait_for(lambda: zombie.stats.fenced == 1)
    assert zombie.stats.processed == 0
    out = await read(broker, prefix + OUT, until=2, timeout=3)
    assert len(out) == 1
    assert (await store.load("fence", "s1")).data["count"] == 1


async def test_a_handler_gets_its_records_kafka_timestamp(
    broker: str, prefix: str, store: StateStore
) -> None:
    """``HandlerInput.appended_ms`` is the record's timestamp as the broker holds it (what
    the dispatcher measures memory's time with, and what a replay gives back)."""
    seen: dict[str, int] = {}

    async def handler(inp: HandlerInput) -> Outcome:
        seen[inp.envelope.message_id] = inp.appended_ms
        return await counting(inp)

    envelopes = [turn("s-time", q) for q in range(3)]
    await produce(broker, prefix + IN, envelopes)
    records = await read(broker, prefix + IN, until=len(envelopes))
    stamped = {decode(r.value).message_id: r.timestamp for r in records}
    processor = ConversationProcessor(
        "stamps",
        handler,
        [IN],
        store=store,
        kafka=KafkaConfig(bootstrap=broker),
        topic_prefix=prefix,
    )
    async with processor:
        await wait_for(processed(processor, len(envelopes)), timeout=90)
    assert seen == stamped
    assert all(ms > 1_700_000_000_000 for ms in seen.values())  # a wall-clock time, not -1
