"""Properties of the conflict rule and of budget eviction over random write sequences."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hermesbus.contract.payloads import MemoryTier, MemoryWrite, TrustLevel
from hermesbus.processors.memory import MemoryStores

from .helpers import USER, Session, at, fact_write, ms, stores_for

WINDOW_S = 300
# (object, seconds of its verification): a few rival departments, times around the window
verifications = st.lists(
    st.tuples(st.sampled_from(["dept:a", "dept:b", "dept:c"]), st.integers(0, 3_000)),
    min_size=1,
    max_size=12,
)


def run(check: Callable[[MemoryStores], Awaitable[None]], **settings: Any) -> None:
    async def go() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            async with stores_for(Path(tmp), **settings) as stores:
                await check(stores)

    asyncio.run(go())


@given(verifications)
def test_one_live_edge_and_it_holds_the_newest_verification(writes: list[tuple[str, int]]) -> None:
    async def check(stores: MemoryStores) -> None:
        session = Session(stores)
        for i, (obj, seconds) in enumerate(writes):
            before = await stores.facts("user:u", TrustLevel.RAW, include_deprecated=True)
            live = [e for e in before if not e.deprecated]
            reviews = len(await stores.review_queue())
            out = await session.write(fact_write("user:u", "belongs_to", obj, when=at(seconds)))
            tasks = [e.payload.task for e in out.emit]
            new_ms = ms(at(seconds))
            close = [
                e
                for e in live
                if e.object != obj and abs(new_ms - e.verified_at_ms) < WINDOW_S * 1000
            ]
            after = await stores.facts("user:u", TrustLevel.RAW, include_deprecated=True)
            if close:  # a rival verified within the window: review, nothing changes
                assert tasks == ["graph.review"], i
                assert after == before
                assert len(await stores.review_queue()) == reviews + 1
            else:
                assert "graph.review" not in tasks
                assert len(after) >= len(before)  # edges are never deleted
            now_live = [e for e in after if not e.deprecated]
            assert len(now_live) == 1  # single-valued: exactly one live object
            newest_deprecated = max((e.verified_at_ms for e in after if e.deprecated), default=0)
            assert now_live[0].verified_at_ms >= newest_deprecated

    run(check)


items = st.lists(
    st.tuples(st.sampled_from([0.1, 0.5, 0.8, 0.9]), st.integers(0, 5)),
    min_size=1,
    max_size=15,
)


@given(items, st.integers(1, 5))
def test_the_budget_keeps_the_most_important_then_newest(
    writes: list[tuple[float, int]], budget: int
) -> None:
    async def check(stores: MemoryStores) -> None:
        session = Session(stores)
        written = []
        clock = 0
        for n, (importance, step) in enumerate(writes):
            clock += step
            key = f"k{n:02d}"
            write = MemoryWrite(
                tier=MemoryTier.MID_TERM, key=key, value_json="1", importance=importance
            )
            await session.write(write, when=at(clock))
            written.append((importance, clock, key))
        expected = sorted(written, reverse=True)[:budget]  # importance, then time, then key
        kept = [i.key for i in await stores.items(USER)]
        assert kept == sorted(k for _, _, k in expected)

    run(check, budget_items=budget)
