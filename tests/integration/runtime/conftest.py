"""Fixtures of the runtime tests: a fresh topic prefix and state store per test.

``store`` is SQLite; ``any_store`` is each backend in turn (SQLite, then a real Redis):
the crash, fencing and order tests take it, so they hold for both."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.runtime import StateStore

from .support import open_store, provision


@pytest.fixture
async def prefix(broker: str, unique: str) -> str:
    prefix = f"rt{unique}."
    await provision(broker, prefix)
    return prefix


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStateStore]:
    async with SqliteStateStore(tmp_path / "state.sqlite3", book=MarkBook(tmp_path)) as store:
        yield store


@pytest.fixture(params=["sqlite", "redis"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> str:
    """Where a test's state lives, as a worker process is told: ``sqlite:PATH`` or
    ``redis:URL PREFIX FOLDER`` (a key prefix of its own on the run's server, its marks in
    the test's folder's book)."""
    if request.param == "redis":
        return f"redis:{request.getfixturevalue('redis_url')} t{unique} {tmp_path}"
    return f"sqlite:{tmp_path / 'state.sqlite3'}"


@pytest.fixture
async def any_store(store_spec: str) -> AsyncIterator[StateStore]:
    async with open_store(store_spec) as store:
        yield store
