"""Redis stops answering for 10 s mid-flow: work pauses in place, no offset is committed
past an envelope that was not processed, and every session is answered exactly once, in
order, when Redis is back.

The outage is a Redis of the test's own (the run's server is shared) frozen with SIGSTOP
and thawed with SIGCONT: connections hang and time out as they do when a server or its
network is gone, and nothing it held is lost (an in-memory Redis restarted would come
back empty, which is not an outage but a lost store).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.kafka.groups import committed
from hermesbus.connectors.redis import RedisConfig, RedisStateStore
from hermesbus.runtime import HandlerInput, Outcome, RuntimeSettings
from tests.services import need

from .support import IN, ConversationProcessor, counting, produce, turn, until_applied, wait_for
from .test_crash import check_everything_once_in_order

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[3]
OUTAGE_S = 10.0
SETTLE_S = 3.0
"""Into the outage, what was in flight has failed (0.5 s timeouts) and been committed."""


@pytest.fixture
def own_redis(tmp_path: Path, redis_url: str) -> Iterator[tuple[str, int]]:
    """A Redis of this test's own, started like the run's; its URL and process id."""
    del redis_url  # the run has Redis: the same script starts this one from the cache
    env = {**os.environ, "HERMES_REDIS_RUN_DIR": str(tmp_path / "redis"), "TMPDIR": str(tmp_path)}
    script = str(ROOT / "deploy" / "local" / "redis.sh")
    started = subprocess.run(
        ["bash", script, "start"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    if started.returncode != 0:
        need("Redis", f"deploy/local/redis.sh start failed: {started.stderr[-400:]}", None)
    url = started.stdout.strip().partition("=")[2]
    pid = int((tmp_path / "redis" / "redis.pid").read_text())
    try:
        yield url, pid
    finally:
        os.kill(pid, signal.SIGCONT)
        subprocess.run(["bash", script, "stop"], env=env, timeout=60, check=False)


async def test_a_redis_outage_pauses_work_in_place_and_loses_nothing(
    broker: str, prefix: str, own_redis: tuple[str, int], tmp_path: Path
) -> None:
    url, pid = own_redis
    sessions, per = 40, 10
    await produce(
        broker, prefix + IN, [turn(f"s{s:03d}", q) for q in range(per) for s in range(sessions)]
    )
    kafka = KafkaConfig(bootstrap=broker)

    async def handler(inp: HandlerInput) -> Outcome:
        await asyncio.sleep(0.01)  # slow enough that the outage lands mid-flow
        return await counting(inp)

    config = RedisConfig(url=url, prefix="outage", timeout_s=0.5)
    async with RedisStateStore(config, book=MarkBook(tmp_path)) as store:
        processor = ConversationProcessor(
            "outage",
            handler,
            [IN],
            store=store,
            kafka=kafka,
            topic_prefix=prefix,
            settings=RuntimeSettings(max_in_flight=8),
        )
        async with processor:
            await wait_for(lambda: processor.stats.processed >= sessions * per // 4, 60)
            os.kill(pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(SETTLE_S)
                done = processor.stats.processed
                offsets = await committed(kafka, "outage", prefix + IN)
                assert 0 < done < sessions * per, "the outage did not land mid-flow"
                await asyncio.sleep(OUTAGE_S - SETTLE_S)
                assert processor.stats.processed == done  # paused: nothing done without Redis
                assert await committed(kafka, "outage", prefix + IN) == offsets
                assert sum(offsets.values()) <= done  # nothing committed it did not process
            finally:
                os.kill(pid, signal.SIGCONT)
            await until_applied(store, "outage", sessions, sessions * per, within_s=60)
        await check_everything_once_in_order(
            broker, prefix, store, name="outage", sessions=sessions, per=per
        )
    assert processor.stats.dead_letters == 0
