"""What every store suite here opens its store with: a mark book in the test's folder and,
for Redis, a key prefix of the test's own on the run's server."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.redis import RedisConfig


@pytest.fixture
def book(tmp_path: Path) -> MarkBook:
    """Where the stores keep their marks (the test's folder: no other test sees them)."""
    return MarkBook(tmp_path)


@pytest.fixture
def redis_config(redis_url: str, unique: str) -> RedisConfig:
    """The run's Redis, under keys no other test writes (``t<unique>``)."""
    return RedisConfig(url=redis_url, prefix=f"t{unique}")
