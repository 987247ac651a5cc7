"""A processor whose broker is gone: it stops in time, closes every client, raises nothing."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import time
from pathlib import Path

import pytest

from hermesbus.base.storemark import MarkBook
from hermesbus.compose.broker import EmbeddedBroker
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.runtime import CLOSE_TIMEOUT_S, HandlerInput, Outcome, RuntimeSettings

from .support import IN, ConversationProcessor, counting, produce, provision, turn, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.usefixtures("broker_binary")]

REVOKE_MS = 1_500


async def test_a_processor_stops_in_time_when_its_broker_is_gone(
    tmp_path: Path, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    """In-flight work is given the revoke timeout, the commit and the close theirs."""
    entered, stuck = asyncio.Event(), asyncio.Event()

    async def handler(inp: HandlerInput) -> Outcome:
        if inp.envelope.session_id == "stuck":  # in flight when the broker goes
            entered.set()
            await stuck.wait()
        return await counting(inp)

    prefix = f"gone{unique}."
    async with (
        EmbeddedBroker(home=tmp_path / "broker") as broker,
        SqliteStateStore(tmp_path / "state.sqlite3", book=MarkBook(tmp_path)) as store,
    ):
        await provision(broker.bootstrap, prefix)
        await produce(broker.bootstrap, prefix + IN, [turn("done", 0), turn("stuck", 0)])
        processor = ConversationProcessor(
            "gone",
            handler,
            [IN],
            store=store,
            kafka=KafkaConfig(bootstrap=broker.bootstrap),
            topic_prefix=prefix,
            settings=RuntimeSettings(revoke_timeout_ms=REVOKE_MS),
        )
        await processor.start()
        try:
            await wait_for(lambda: entered.is_set() and processor.stats.processed >= 1, 60)
            assert entered.is_set(), "the stuck record never ran"
            assert broker.pid is not None
            os.kill(broker.pid, signal.SIGKILL)
            await asyncio.sleep(1.0)  # fetches fail meanwhile and wait to retry
            started = time.monotonic()
            await processor.stop()
            took = time.monotonic() - started
        finally:
            stuck.set()
            await processor.stop()
    gc.collect()  # an unclosed aiokafka client would warn now (and the warning fail the test)
    assert took < REVOKE_MS / 1000 + 2 * CLOSE_TIMEOUT_S + 1.0
    assert "processor=gone in-flight work outlived revoke_timeout" in caplog.text
