"""Fixtures of the runtime tests: a fresh topic prefix and SQLite store per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermesbus.connectors.sqlite import SqliteStateStore

from .support import provision


@pytest.fixture
async def prefix(broker: str, unique: str) -> str:
    prefix = f"rt{unique}."
    await provision(broker, prefix)
    return prefix


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStateStore]:
    async with SqliteStateStore(tmp_path / "state.sqlite3") as store:
        yield store
