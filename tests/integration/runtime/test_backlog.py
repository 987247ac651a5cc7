"""What waits for a processor: records fetched and not yet started, and, while it paused
fetching, those in its partitions' logs past what it fetched (``backlog``, in all or per
partition). The dispatcher asks it when a round's deadline passes: behind a backlog on the
session's partition, the user is told the bus is busy, not that memory or a tool failed
(#25, item 8); ``finished_at`` tells a busy processor from a stuck one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.runtime import HandlerInput, Outcome, Processor, RuntimeSettings

from .support import IN, ConversationProcessor, counting, produce, turn

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


@pytest.mark.parametrize("poll", [500, 2], ids=["all-fetched", "two-per-poll"])
async def test_backlog_counts_what_waits_fetched_or_not(
    broker: str, prefix: str, store: SqliteStateStore, unique: str, poll: int
) -> None:
    """Ten turns of one session, the first held in its handler: nine wait, whether the
    processor fetched them (all at once) or most are still past what it fetched (two per
    poll, the consumer paused at two buffered)."""
    entered, release = asyncio.Event(), asyncio.Event()

    async def held(inp: HandlerInput) -> Outcome:
        entered.set()
        await release.wait()
        return await counting(inp)

    await produce(broker, prefix + IN, [turn("s", seq) for seq in range(10)])
    settings = RuntimeSettings(max_poll_records=poll, max_buffered=2 if poll == 2 else 2000)
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
        await _until(lambda: processor.backlog() == 9, "nine wait behind the held turn", processor)
        if poll == 2:  # paused at two buffered: one fetched and waiting, eight not fetched
            assert processor.waiting == 1
        else:
            await _until(lambda: processor.waiting == 9, "all nine fetched", processor)
        per_partition = {
            tp.partition: processor.backlog(tp.partition) for tp in processor.assignment
        }
        (session,) = [p for p, n in per_partition.items() if n]  # all on the session's
        assert per_partition[session] == 9
        assert processor.finished_at == started  # none finished while the first is held
        release.set()
        await _until(lambda: processor.stats.processed >= 10, "all ten run", processor)
        assert processor.waiting == 0
        assert processor.backlog() == 0
        assert processor.finished_at > started
        # drained, but they waited lately: a round that ran then waited behind them
        assert processor.waited_within(WITHIN_S, session)
        assert not any(processor.waited_within(WITHIN_S, p) for p in per_partition if p != session)
