"""The runtime's state cache lets go of a burst: states unused for ``state_cache_idle_s``
are dropped, least recently used first (#25, item 8)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from hermesbus.base.storemark import MarkBook
from hermesbus.codec import Codec
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.runtime import HandlerInput, Outcome, RuntimeSettings, SessionState
from hermesbus.runtime._partition import Partition, ProcessorStats
from hermesbus.runtime._records import Records
from tests import signing


async def nothing(inp: HandlerInput) -> Outcome:
    return Outcome()


@pytest.fixture
async def records(tmp_path: Path) -> AsyncIterator[Records]:
    async with SqliteStateStore(tmp_path / "s.sqlite3", book=MarkBook(tmp_path)) as store:
        yield Records(
            "conv",
            nothing,
            store=store,
            codec=Codec(),
            settings=RuntimeSettings(state_cache_idle_s=60),
            ports={},
            prefix="",
            stats=ProcessorStats(),
            guard=signing.guard("conversation", "conv"),
        )


def cached(records: Records, part: Partition, *sessions: str) -> None:
    """``sessions`` cached in this order, used at 100 s, 200 s, ... on the clock."""
    for n, session in enumerate(sessions, start=1):
        records.remember(part, session, SessionState(1))
        records.used[session] = 100.0 * n


async def test_states_unused_for_the_idle_time_are_dropped_oldest_first(
    records: Records,
) -> None:
    part = Partition(TopicPartition("in", 0))
    cached(records, part, "s1", "s2", "s3")
    assert records.expire(100.0 + 59) == 0  # none unused for 60 s yet
    assert records.expire(200.0 + 60) == 2
    assert list(records.cache) == ["s3"] and set(records.used) == {"s3"}
    assert records.expire(300.0 + 60) == 1
    assert not records.cache and not records.used


async def test_a_state_used_again_is_kept(records: Records) -> None:
    part = Partition(TopicPartition("in", 0))
    cached(records, part, "s1", "s2")
    await records.state(part, "s1")  # from the cache: used now, moved to the end
    assert list(records.cache) == ["s2", "s1"]
    assert records.expire(200.0 + 60) == 1
    assert list(records.cache) == ["s1"]


async def test_states_forgotten_elsewhere_leave_no_use_times(records: Records) -> None:
    part = Partition(TopicPartition("in", 0))
    cached(records, part, "s1", "s2")
    records.forget([part])  # revoked
    assert records.expire(0.0) == 0
    assert not records.used
