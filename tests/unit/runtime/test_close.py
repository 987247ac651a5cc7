"""Closing a Kafka client when the broker may be gone: bounded, logged, never raised."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from aiokafka.errors import KafkaConnectionError

from hermesbus.runtime._producer import close_within


async def test_a_close_that_waits_for_a_lost_broker_is_left_behind_in_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gone = asyncio.Event()
    started = time.monotonic()
    await close_within(gone.wait, "the producer of g", timeout_s=0.2)
    assert time.monotonic() - started < 1.0
    assert "the producer of g did not close within 0.2 s; left behind" in caplog.text


async def test_a_kafka_error_while_closing_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fails() -> None:
        raise KafkaConnectionError("the broker is gone")

    await close_within(fails, "the consumer of g")
    assert "the consumer of g: closing failed: KafkaConnectionError" in caplog.text


async def test_a_cancelled_error_of_the_close_itself_is_swallowed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def leaks() -> None:  # what aiokafka's fetcher does: it awaits a task it cancelled
        task = asyncio.create_task(asyncio.sleep(10))
        await asyncio.sleep(0)
        task.cancel()
        await task

    with caplog.at_level(logging.DEBUG, logger="hermesbus.runtime._producer"):
        await close_within(leaks, "the consumer of g")
    assert "cancelled one of its own tasks" in caplog.text


async def test_the_callers_own_cancellation_goes_through() -> None:
    gone = asyncio.Event()
    closing = asyncio.create_task(close_within(gone.wait, "the producer of g", timeout_s=10))
    await asyncio.sleep(0.05)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    gone.set()  # the close left running ends too
    await asyncio.sleep(0)
