"""What waits in a processor for the bus: sessions none of its workers took (all busy) and,
while it paused fetching, records past what it fetched (``backlog``); whether that happened
lately (``waited_within``); when a record last finished (``finished_at``). The dispatcher
asks them when a round's deadline passes: behind such a backlog the user is told the bus
is busy, not that memory or a tool failed (#25, item 8). Records queued behind their own
session wait for it, as per-session order requires, not for the bus."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.runtime import HandlerInput, Outcome, Processor, RuntimeSettings

from .support import IN, ConversationProcessor, counting, produce, provision, turn

pytestmark = pytest.mark.kafka

WITHIN_S = 120.0
"""How long a step may take on a slow, busy machine (polled)."""


async def _until(check: Callable[[], bool], what: str, processor: Processor) -> None:
    try:
        async with asyncio.timeout(WITHIN_S):
            while not check():
                await asyncio.sleep(0.05)
    except TimeoutError:
        seen = f"backlog {processor.backlog()}, waiting {processor.waiting}"
        pytest.fail(f"not within {WITHIN_S:g} s: {what} ({seen})")


CASES = {
    # ten sessions, one worker: nine wait for it (all fetched at once)
    "one-worker": (10, RuntimeSettings(max_in_flight=1), 9),
    # the same, two per poll and paused at two buffered: one fetched, eight not
    "one-worker-paused": (
        10,
        RuntimeSettings(max_in_flight=1, max_poll_records=2, max_buffered=2),
        9,
    ),
    # one session, many workers: nine wait behind their own session, none for the bus
    "own-session": (1, RuntimeSettings(), 0),
}


@pytest.fixture
async def one_partition(broker: str, unique: str) -> str:
    """Topics of one partition: every session's records in one log, so what a paused
    worker did not fetch is known from that log's end."""
    prefix = f"bl{unique}."
    await provision(broker, prefix, partitions=1)
    return prefix


@pytest.mark.parametrize("case", list(CASES))
async def test_backlog_counts_what_waits_for_the_bus(
    broker: str, one_partition: str, store: SqliteStateStore, unique: str, case: str
) -> None:
    prefix = one_partition
    sessions, settings, waiting_for_the_bus = CASES[case]
    entered, release = asyncio.Event(), asyncio.Event()

    async def held(inp: HandlerInput) -> Outcome:
        entered.set()
        await release.wait()
        return await counting(inp)

    turns = [turn(f"s{n % sessions}", n // sessions) for n in range(10)]
    await produce(broker, prefix + IN, turns)
    processor = ConversationProcessor(
        f"backlog{unique}",
        held,
        [IN],
        store=store,
        kafka=KafkaConfig(bootstrap=broker),
        topic_prefix=prefix,
        settings=settings,
    )
    assert processor.backlog() == 0  # not started: nothing known to wait
    async with processor:
        async with asyncio.timeout(WITHIN_S):
            await entered.wait()
        started = processor.finished_at
        if waiting_for_the_bus:
            await _until(lambda: processor.backlog() == 9, "nine wait for the worker", processor)
            assert processor.waited_within(WITHIN_S)
        else:
            await _until(lambda: processor.waiting == 9, "nine fetched", processor)
            assert processor.backlog() == 0
            assert not processor.waited_within(WITHIN_S)
        assert processor.finished_at == started  # none finished while the first is held
        release.set()
        await _until(lambda: processor.stats.processed >= 10, "all ten run", processor)
        assert processor.backlog() == 0
        assert processor.finished_at > started
        # drained, but it waited lately (or never did): a round of that time waited behind it
        assert processor.waited_within(WITHIN_S) == bool(waiting_for_the_bus)
