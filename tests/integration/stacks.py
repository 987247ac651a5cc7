"""What several integration suites start the same way: the demo stack, the conversation topics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import Stack, stack
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.topics import CONVERSATION_IN, CONVERSATION_OUT, Catalog


@asynccontextmanager
async def demo_stack(
    bootstrap: str, prefix: str, home: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    """The stack ``hermesbus up --demo`` runs (SQLite stores in ``home``, the demo tools in
    worker processes) on ``bootstrap``, its topics under ``prefix``."""
    monkeypatch.setenv("HERMES_HOME", str(home))
    async with stack(
        settings=Settings.from_environment(),
        kafka=KafkaConfig(bootstrap=bootstrap),
        prefix=prefix,
        demo=True,
    ) as running:
        yield running


async def conversation_topics(bootstrap: str, prefix: str) -> str:
    """The conversation's two topics under ``prefix``, as the catalog declares them; the prefix."""
    catalog = Catalog.load().with_overrides(prefix=prefix)
    async with KafkaAdmin(KafkaConfig(bootstrap=bootstrap)) as admin:
        await admin.create(
            [catalog.get(prefix + CONVERSATION_IN), catalog.get(prefix + CONVERSATION_OUT)]
        )
    return prefix
