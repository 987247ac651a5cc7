"""Stores for the memory tests, parametrised over every implementation (only SQLite now)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermesbus.processors.memory import GraphStore, MemoryStores, PreferenceStore

from .helpers import GRAPH_STORES, PREFERENCE_STORES, Session, stores_for


@pytest.fixture(params=sorted(PREFERENCE_STORES))
async def preference_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[PreferenceStore]:
    store = PREFERENCE_STORES[request.param](tmp_path)
    await store.start()
    yield store
    await store.stop()


@pytest.fixture(params=sorted(GRAPH_STORES))
async def graph_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[GraphStore]:
    store = GRAPH_STORES[request.param](tmp_path)
    await store.start()
    yield store
    await store.stop()


@pytest.fixture(params=sorted(set(PREFERENCE_STORES) & set(GRAPH_STORES)))
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryStores]:
    async with stores_for(tmp_path, request.param, budget_items=3) as opened:
        yield opened


@pytest.fixture
def session(stores: MemoryStores) -> Session:
    return Session(stores)
