"""The indexer stops at once while its index is full, however long the revoke bound
(``up`` took 22.3 s to stop while the disk was full: the indexer retried its write until
the bound passed, after the processors had had theirs). What it did not store is not
committed: a next start, with room again, indexes every record.

The full disk is SQLite's own: ``PRAGMA max_page_count`` at the file's size makes every
write that needs a page fail with SQLITE_FULL, "database or disk is full", as a full disk
does."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from hermesbus.codec import default_codec
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.contract.headers import envelope_headers
from hermesbus.runtime import RuntimeSettings
from hermesbus.topics import CONVERSATION_IN
from tests.builders import turn
from tests.integration.stacks import catalog_topics, indexer_on

pytestmark = pytest.mark.kafka

RECORDS = 20
STOP_BUDGET_S = 120.0
"""Generous for a busy machine; the revoke bound below is five times longer."""
REVOKE_MS = 600_000


async def _send(bootstrap: str, topic: str) -> None:
    codec = default_codec()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for n in range(RECORDS):
            envelope = turn(message_id=f"m{n}", session_id="s1", trace_id=f"t{n}")
            await producer.send_and_wait(
                topic, codec.encode(envelope), key=b"s1", headers=envelope_headers(envelope)
            )
    finally:
        await producer.stop()


async def test_a_full_index_does_not_hold_the_stop_and_nothing_is_lost(
    broker: str, unique: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = f"full-{unique}."
    await catalog_topics(broker, prefix)
    await _send(broker, prefix + CONVERSATION_IN)
    settings = RuntimeSettings(revoke_timeout_ms=REVOKE_MS)
    path = tmp_path / "index.sqlite3"

    caplog.set_level(logging.WARNING, logger="hermesbus.trace.index")
    async with SqliteTraceIndex(path) as index:
        (pages,) = index.db.execute("PRAGMA page_count").fetchone()
        index.db.execute(f"PRAGMA max_page_count = {pages}")  # full: no page more
        indexer = indexer_on(index, broker, prefix, settings)
        await indexer.start()
        try:
            async with asyncio.timeout(STOP_BUDGET_S):
                while "trace index write failed" not in caplog.text:
                    await asyncio.sleep(0.05)
        finally:
            async with asyncio.timeout(STOP_BUDGET_S):  # not REVOKE_MS: the index is away
                await indexer.stop()
        assert await index.count() == 0
    assert "stopped while the index is away" in caplog.text

    async with SqliteTraceIndex(path) as roomy:  # a new connection: no page limit
        again = indexer_on(roomy, broker, prefix, settings)
        async with again:
            async with asyncio.timeout(STOP_BUDGET_S):
                while await roomy.count() < RECORDS:
                    await asyncio.sleep(0.1)
        assert await roomy.count() == RECORDS
