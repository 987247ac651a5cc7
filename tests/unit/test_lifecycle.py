"""Process-level tuning of a long-running bus process (what ``hermesbus up`` applies), and
stopping background tasks that do not end at the first cancellation."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys

import pytest

from hermesbus.base.lifecycle import COLLECTOR_THRESHOLDS, cancel_and_wait

_PROBE = """
import gc
from hermesbus.base.lifecycle import tune_collector
before = gc.get_freeze_count()
tune_collector()
print(before, gc.get_freeze_count() > before, gc.get_threshold())
"""


def test_tune_collector_freezes_what_start_up_built_and_makes_collections_rare() -> None:
    """In a process of its own: the collector's settings are the whole process's."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    before, frozen, thresholds = done.stdout.strip().split(" ", 2)
    assert before == "0" and frozen == "True"
    assert thresholds == str(COLLECTOR_THRESHOLDS)
    assert COLLECTOR_THRESHOLDS[0] > 700  # above Python's default first generation


async def test_cancelled_cancels_again_a_task_that_dropped_the_first_cancellation() -> None:
    """The task goes on after its first cancellation, as one does whose ``wait_for`` (in
    redis-py, on Python 3.11) returned a result the moment it was cancelled."""
    dropped: list[bool] = []

    async def loop() -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if dropped:
                    raise
                dropped.append(True)

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    await cancel_and_wait([task], "the test")
    assert dropped == [True]
    assert task.cancelled()


async def test_cancelled_leaves_a_task_that_will_not_end_and_names_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(stubborn(), name="stubborn-loop")
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="hermesbus.base.lifecycle"):
        await cancel_and_wait([task], "processor p", within_s=0.3)
    assert not task.done()  # bounded: the stop goes on without it
    assert "processor p: still running 0.3 s after being cancelled: stubborn-loop" in caplog.text
    release.set()
    await task


async def test_cancelled_ends_every_task_and_raises_none_of_their_failures() -> None:
    async def fails() -> None:
        raise RuntimeError("boom")

    async def waits() -> None:
        await asyncio.Event().wait()

    failing, waiting = asyncio.create_task(fails()), asyncio.create_task(waits())
    await asyncio.sleep(0)
    await cancel_and_wait([failing, waiting], "the test")
    assert isinstance(failing.exception(), RuntimeError)
    assert waiting.cancelled()
