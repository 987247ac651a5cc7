"""Durable timers: fired as timer_fired envelopes on the session's partition, across restarts."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hermesbus import TimerFired
from hermesbus.codec import decode
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.runtime import HandlerInput, Outcome, RuntimeSettings, TimerRequest

from .support import (
    IN,
    OUT,
    ConversationProcessor,
    produce,
    read,
    replies,
    reply_to,
    turn,
    wait_for,
)

pytestmark = pytest.mark.kafka

FAST = RuntimeSettings(timer_interval_ms=20)


async def waiting(inp: HandlerInput) -> Outcome:
    """A turn sets a 'user gave up' timer; a second turn cancels it; the timer replies."""
    body = inp.envelope.payload.body
    if isinstance(body, TimerFired):
        return Outcome(emit=(reply_to(inp.envelope, f"fired {body.purpose} {body.data_json}"),))
    if inp.envelope.payload.context.get("seq") == 0:
        # due two seconds after the envelope's own time; the envelopes here are from 2024
        due = inp.envelope.timestamp + timedelta(seconds=2)
        timer = TimerRequest(due_at=due, purpose="gave-up", data_json='{"state": "S2"}')
        return Outcome(emit=(reply_to(inp.envelope, "waiting"),), timers=(timer,))
    return Outcome(emit=(reply_to(inp.envelope, "cancelled"),), cancel=("gave-up",))


async def test_a_timer_scheduled_before_a_restart_fires_after_it(
    broker: str, prefix: str, store: SqliteStateStore
) -> None:
    kafka = KafkaConfig(bootstrap=broker)
    # stopped before it can fire: a timer loop that never polls
    slow = RuntimeSettings(timer_interval_ms=3_600_000)
    first = ConversationProcessor(
        "timers", waiting, [IN], store=store, kafka=kafka, topic_prefix=prefix, settings=slow
    )
    await produce(broker, prefix + IN, [turn("s1", 0)])
    async with first:
        await wait_for(lambda: first.stats.processed == 1)
    assert first.stats.timers_fired == 0
    pending = await store.due("timers", [(prefix + IN, p) for p in range(6)], 2**62, 10)
    assert [t.purpose for t in pending] == ["gave-up"]

    second = ConversationProcessor(
        "timers", waiting, [IN], store=store, kafka=kafka, topic_prefix=prefix, settings=FAST
    )
    async with second:
        await wait_for(lambda: second.stats.processed == 1)
    assert second.stats.timers_fired == 1
    out = replies(await read(broker, prefix + OUT, until=2))
    assert [e.payload.body.text for e in out] == ["waiting", 'fired gave-up {"state": "S2"}']  # type: ignore[union-attr]
    fired = out[1]
    assert fired.causation_id is not None  # caused by the timer_fired envelope
    records = await read(broker, prefix + IN, until=2)
    (fired_record,) = [
        r for r in records if isinstance(decode(r.value or b"").payload.body, TimerFired)
    ]
    assert fired_record.partition == records[0].partition  # the session's own partition
    assert fired_record.key == b"s1"
    assert not await store.due("timers", [(prefix + IN, p) for p in range(6)], 2**62, 10)


async def test_a_cancelled_timer_never_fires(
    broker: str, prefix: str, store: SqliteStateStore
) -> None:
    kafka = KafkaConfig(bootstrap=broker)
    processor = ConversationProcessor(
        "timers", waiting, [IN], store=store, kafka=kafka, topic_prefix=prefix, settings=FAST
    )
    now = datetime.now(UTC)  # due 2 s from now, so the cancelling turn certainly comes first
    first = turn("s1", 0).model_copy(update={"timestamp": now})
    second = turn("s1", 1).model_copy(update={"timestamp": now})
    await produce(broker, prefix + IN, [first, second])
    async with processor:
        await wait_for(lambda: processor.stats.processed == 2)
        await asyncio.sleep(3)
    assert processor.stats.timers_fired == 0
    assert not await store.due("timers", [(prefix + IN, p) for p in range(6)], 2**62, 10)
    out = replies(await read(broker, prefix + OUT, until=3, timeout=3))
    assert [e.payload.body.text for e in out] == ["waiting", "cancelled"]  # type: ignore[union-attr]


class Clock:
    """The processors' clock, moved by the test (seconds since the epoch)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def fires_a_second_after(
    processor: ConversationProcessor,
    store: SqliteStateStore,
    partitions: list[tuple[str, int]],
    clock: Clock,
) -> None:
    """The processor's wait has not fired, is due 1 s after its ``clock``'s time now, and
    fires once the clock gets there."""
    await asyncio.sleep(0.5)
    assert processor.stats.timers_fired == 0
    (pending,) = await store.due(processor.name, partitions, 2**62, 10)
    assert pending.due_at_ms == int((clock.now + 1) * 1000)
    clock.now += 1
    await wait_for(lambda: processor.stats.timers_fired == 1)


def waiting_on_a_clock(
    name: str, broker: str, prefix: str, store: SqliteStateStore, clock: Clock, **options: Any
) -> ConversationProcessor:
    """A processor that sets a 2 s wait per turn, its time read from ``clock``."""
    kafka = KafkaConfig(bootstrap=broker)
    return ConversationProcessor(
        name, waiting, [IN], store=store, kafka=kafka, topic_prefix=prefix, settings=FAST,
        clock=clock, **options,
    )  # fmt: skip


async def test_the_time_nobody_ran_a_partition_is_not_charged_to_its_timers(
    broker: str, prefix: str, store: SqliteStateStore
) -> None:
    """A 2 s wait with 1 s left at a stop still has 1 s once the processors are all back."""
    clock = Clock(1_000.0)
    partitions = [(prefix + IN, p) for p in range(6)]

    def processor(gate: asyncio.Event | None = None) -> ConversationProcessor:
        return waiting_on_a_clock("waits", broker, prefix, store, clock, timers_gate=gate)

    await produce(broker, prefix + IN, [turn("s1", 0)])  # sets the 2 s timer: due at 1002
    first = processor()
    async with first:
        await wait_for(lambda: first.stats.processed == 1)
        await asyncio.sleep(0.5)  # heartbeats at 1000
        clock.now = 1_001.0  # 1 s passes with the partition running: it counts
        await asyncio.sleep(0.5)
    assert first.stats.timers_fired == 0  # stopped at 1001: its last heartbeat

    clock.now = 1_101.0  # 100 s of downtime
    gate = asyncio.Event()  # the rest of the bus is not back yet
    second = processor(gate)
    async with second:
        await wait_for(second.joined.is_set)
        await asyncio.sleep(0.5)
        (pending,) = await store.due("waits", partitions, 2**62, 10)
        assert pending.due_at_ms == 1_102_000  # due 1 s after the partition was taken over
        clock.now = 1_110.0  # start-up takes 9 s more: the gate is still shut
        await asyncio.sleep(0.5)
        assert second.stats.timers_fired == 0
        gate.set()  # everyone runs: the wait gets its remaining 1 s from here
        await fires_a_second_after(second, store, partitions, clock)  # at 1111
    assert second.stats.timers_fired == 1
    out = replies(await read(broker, prefix + OUT, until=2))
    assert [e.payload.body.text for e in out] == ["waiting", 'fired gave-up {"state": "S2"}']  # type: ignore[union-attr]


async def test_the_time_the_broker_is_away_is_not_charged_to_timers(
    broker: str, prefix: str, store: SqliteStateStore
) -> None:
    """A 2 s wait, 1 s run down when the broker goes away for 30 s: nothing fires while it
    is away, and once it answers again the wait still has its 1 s (a deadline waiting for
    a tool's answer is not spent on a broker nobody could answer through)."""
    clock = Clock(1_000.0)
    partitions = [(prefix + IN, p) for p in range(6)]
    answers = [True]
    waits = waiting_on_a_clock(
        "away", broker, prefix, store, clock, broker_answers=lambda: answers[0]
    )
    await produce(broker, prefix + IN, [turn("s1", 0)])  # sets the 2 s timer: due at 1002
    async with waits:
        await wait_for(lambda: waits.stats.processed == 1)
        clock.now = 1_001.0  # 1 s with the broker there: it counts
        await wait_for(lambda: waits._beat_ms == 1_001_000)  # its heartbeat at 1001
        answers[0] = False  # the broker is away ...
        clock.now = 1_031.0  # ... for 30 s, long past the timer's due time
        await asyncio.sleep(0.5)
        assert waits.stats.timers_fired == 0
        answers[0] = True  # back: the wait gets its remaining 1 s from here
        await fires_a_second_after(waits, store, partitions, clock)  # at 1032
    out = replies(await read(broker, prefix + OUT, until=2))
    assert [e.payload.body.text for e in out] == ["waiting", 'fired gave-up {"state": "S2"}']  # type: ignore[union-attr]
