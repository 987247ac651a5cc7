"""A worker killed with SIGKILL mid-stream and restarted; two workers rebalancing; each
with SQLite and with Redis as the state store.

Zero lost (every input has its output), zero duplicated effects (each session's
counter equals its number of inputs), order kept (no session saw a gap).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.runtime import HandlerInput, Outcome, Processor, RuntimeSettings, StateStore

from .support import (
    IN,
    OUT,
    ConversationProcessor,
    applied,
    counting,
    counts,
    open_store,
    produce,
    read,
    replies,
    turn,
    until_applied,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[3]


def start_worker(broker: str, prefix: str, spec: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.runtime.worker", broker, prefix, spec],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


async def check_everything_once_in_order(
    broker: str, prefix: str, store: StateStore, *, name: str, sessions: int, per: int
) -> None:
    for state in await counts(store, name, sessions):
        assert state == {"last": per - 1, "count": per, "violations": 0}
    out = replies(await read(broker, prefix + OUT, until=sessions * per, quiet=1.0))
    first_seen: dict[str, list[int]] = defaultdict(list)
    seen: set[str] = set()
    for envelope in out:
        if envelope.message_id not in seen:  # consumers drop duplicate ids
            seen.add(envelope.message_id)
            first_seen[envelope.session_id].append(int(envelope.payload.body.text))  # type: ignore[union-attr]
    assert len(seen) == sessions * per
    assert all(seqs == list(range(per)) for seqs in first_seen.values())


async def test_a_worker_killed_mid_stream_loses_and_repeats_nothing(
    broker: str, prefix: str, store_spec: str
) -> None:
    sessions, per = 100, 30
    await produce(
        broker, prefix + IN, [turn(f"s{s:03d}", q) for q in range(per) for s in range(sessions)]
    )
    async with open_store(store_spec) as store:
        worker = start_worker(broker, prefix, store_spec)
        try:
            await until_applied(store, "crash", sessions, sessions * per // 4, within_s=60)
            worker.send_signal(signal.SIGKILL)
            worker.wait(10)
            killed_at = await applied(store, "crash", sessions)
            assert 0 < killed_at < sessions * per, "the kill did not land mid-stream"

            worker = start_worker(broker, prefix, store_spec)
            await until_applied(store, "crash", sessions, sessions * per, within_s=120)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(30) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)
        await check_everything_once_in_order(
            broker, prefix, store, name="crash", sessions=sessions, per=per
        )


async def test_one_of_two_workers_killed_the_other_takes_over(
    broker: str, prefix: str, store_spec: str
) -> None:
    """Two worker processes in one group; one is killed with SIGKILL mid-stream and the
    other takes its partitions over: nothing lost, nothing applied twice."""
    sessions, per = 100, 20
    await produce(
        broker, prefix + IN, [turn(f"s{s:03d}", q) for q in range(per) for s in range(sessions)]
    )
    async with open_store(store_spec) as store:
        survivor, victim = start_worker(broker, prefix, store_spec), None
        try:
            victim = start_worker(broker, prefix, store_spec)
            await until_applied(store, "crash", sessions, sessions * per // 3, within_s=60)
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            killed_at = await applied(store, "crash", sessions)
            assert 0 < killed_at < sessions * per, "the kill did not land mid-stream"
            # the survivor waits out the victim's session first
            await until_applied(store, "crash", sessions, sessions * per, within_s=180)
            survivor.send_signal(signal.SIGTERM)
            # its stop may wait out a rebalance the victim's death began (tansu answers a
            # JoinGroup only after half the session timeout): a clean exit, not a fast one
            assert survivor.wait(60) == 0
        finally:
            for worker in (survivor, victim):
                if worker is not None and worker.poll() is None:
                    worker.kill()
                    worker.wait(10)  # reaped: no "still running" warning in a later test
        await check_everything_once_in_order(
            broker, prefix, store, name="crash", sessions=sessions, per=per
        )


async def test_two_workers_rebalancing_while_processing(
    broker: str, prefix: str, any_store: StateStore
) -> None:
    store = any_store
    sessions, per = 300, 10

    async def handler(inp: HandlerInput) -> Outcome:
        await asyncio.sleep(0.001)
        return await counting(inp)

    await produce(
        broker, prefix + IN, [turn(f"s{s:03d}", q) for q in range(per) for s in range(sessions)]
    )
    kafka = KafkaConfig(bootstrap=broker)
    settings = RuntimeSettings(max_in_flight=8)

    def worker() -> Processor:
        return ConversationProcessor(
            "rebalance",
            handler,
            [IN],
            store=store,
            kafka=kafka,
            topic_prefix=prefix,
            settings=settings,
        )

    a, b = worker(), worker()
    total = sessions * per

    async with a:
        await wait_for(lambda: a.stats.processed >= total // 10, timeout=60)
        async with b:  # joins: partitions move from a to b while a is busy
            await wait_for(lambda: a.stats.processed + b.stats.processed >= total // 2, timeout=60)
            await a.stop()  # leaves: everything moves to b
            await wait_for(lambda: len(b.assignment) == 6, timeout=60)
            await until_applied(store, "rebalance", sessions, total, within_s=90)
    assert a.stats.processed > 0
    assert b.stats.processed > 0
    assert a.stats.fenced == b.stats.fenced == 0
    await check_everything_once_in_order(
        broker, prefix, store, name="rebalance", sessions=sessions, per=per
    )
