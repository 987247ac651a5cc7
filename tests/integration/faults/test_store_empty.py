"""Redis restarted empty (no persistence, as ``deploy/local/redis.sh`` runs it) under a
session sitting in S4: nothing is processed and the session is not moved on, one ERROR line
names the store and what it held, ``doctor`` names it, and only ``hermesbus stores adopt``
resumes the running bus; one alert per lost store on ``hermes.alerts`` (issue 25, item 2).

The Redis is the test's own (``redis.sh`` with a run folder of its own, on a free port), so
restarting it empty disturbs no other test.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer

from hermesbus.base.storemark import MarkBook
from hermesbus.client import Client
from hermesbus.codec import default_codec
from hermesbus.compose.stack import Stack
from hermesbus.connectors.redis import RedisConfig, RedisStateStore
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import ErrorReport
from hermesbus.demo.expense import Said, Turn, conversations, reply_text, talk
from hermesbus.errors import StoreLost
from hermesbus.identity import KEYS_FILE_ENV
from hermesbus.runtime import StateChange
from hermesbus.topics import ALERTS, CONVERSATION_IN
from tests.cli_process import Ran, clean_env, hermesbus
from tests.integration.stacks import demo_stack
from tests.services import need

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[3]
REDIS_SH = ROOT / "deploy" / "local" / "redis.sh"
TURN_S = 120.0
"""How long one turn may take to be answered (a slow, busy machine)."""
SEEN_S = 120.0
"""How long the bus may take to notice the store came back empty (it reads the mark on the
next connection; a timer every 5 s besides)."""


class OwnRedis:
    """A Redis of the test's own, from ``deploy/local/redis.sh`` (no persistence)."""

    def __init__(self, run_dir: Path) -> None:
        self.env = {**os.environ, "HERMES_REDIS_RUN_DIR": str(run_dir)}
        self.url = ""

    def _sh(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(REDIS_SH), *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    async def start(self, port: str = "") -> None:
        done = await asyncio.to_thread(self._sh, "start", *([port] if port else []))
        if done.returncode != 0:
            need("Redis", f"deploy/local/redis.sh start failed: {done.stderr.strip()}", None)
        self.url = done.stdout.strip().removeprefix("HERMES_REDIS_URL=")

    async def stop(self) -> None:
        await asyncio.to_thread(self._sh, "stop")

    async def restart_empty(self) -> None:
        port = self.url.rsplit(":", 1)[1].split("/")[0]
        await self.stop()
        await self.start(port)


@pytest.fixture
async def own_redis(tmp_path: Path) -> AsyncIterator[OwnRedis]:
    redis = OwnRedis(tmp_path / "redis-run")
    await redis.start()
    try:
        yield redis
    finally:
        await redis.stop()


class Lines(logging.Handler):
    """The ERROR lines logged while the test runs."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def naming(self, text: str) -> list[str]:
        return [line for line in self.lines if text in line]


@pytest.fixture
def errors_logged() -> Iterator[Lines]:
    lines = Lines()
    logging.getLogger().addHandler(lines)
    try:
        yield lines
    finally:
        logging.getLogger().removeHandler(lines)


@pytest.fixture
async def running(
    broker: str,
    unique: str,
    own_redis: OwnRedis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Stack]:
    monkeypatch.setenv("HERMES_REDIS_URL", own_redis.url)
    monkeypatch.setenv("HERMES_REDIS_PREFIX", f"empty{unique}")
    monkeypatch.delenv("HERMES_NEO4J_URL", raising=False)
    monkeypatch.setenv("HERMES_CONVERSATION_BUDGET_SCALE", "6")  # a busy machine: no timeouts
    async with demo_stack(broker, f"empty-{unique}.", tmp_path / "home", monkeypatch) as s:
        yield s


def _cli(*args: str, home: Path) -> Ran:
    env = clean_env(
        home,
        HERMES_REDIS_URL=os.environ["HERMES_REDIS_URL"],
        HERMES_REDIS_PREFIX=os.environ["HERMES_REDIS_PREFIX"],
        HERMES_KEYS_FILE=os.environ[KEYS_FILE_ENV],
    )
    return hermesbus(*args, env=env, cwd=home, timeout=240)


async def _until(what: str, check: Callable[[], object], within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, f"not within {within_s:g} s: {what}"
        await asyncio.sleep(0.2)


async def test_redis_back_empty_under_a_session_in_s4_pauses_until_adopted(
    running: Stack, own_redis: OwnRedis, errors_logged: Lines, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    first, _ = conversations()
    opening = dataclasses.replace(first, turns=first.turns[:-1])
    confirm = dataclasses.replace(first, turns=first.turns[-1:])  # 确认
    async with Client(bootstrap=running.bootstrap, topic_prefix=running.prefix) as app:
        said = await talk(app, opening, _quiet, timeout=TURN_S)
        assert said.last is not None and said.last.source == "conversation:S4", _texts(said)
        # memory writes what the opening said after its last reply: done before Redis goes,
        # so the loss is met by the conversation's 确认 (the alert names its topic)
        await _settled(running)

        await own_redis.restart_empty()
        answered: list[tuple[float, Envelope]] = []  # each reply to 确认 as it arrives
        answering = asyncio.create_task(talk(app, confirm, _noting(answered), timeout=600))
        try:
            state = "Redis state store at " + own_redis.url
            state_store = f"redis {own_redis.url} {os.environ['HERMES_REDIS_PREFIX']} state"
            await _until(
                "the state store's loss logged", lambda: errors_logged.naming(state), SEEN_S
            )
            lost = errors_logged.naming(state)[0]
            assert f"prefix {os.environ['HERMES_REDIS_PREFIX']}" in lost
            assert "came back empty" in lost and "every session's state" in lost
            assert "hermesbus stores adopt" in lost

            doctor = await asyncio.to_thread(
                _cli, "doctor", "--bootstrap", running.bootstrap, "--prefix", running.prefix,
                home=home,
            )  # fmt: skip
            assert doctor.code == 1, doctor.output
            line = _line(doctor.out, "store state")
            assert line.startswith("FAIL") and own_redis.url in line, doctor.out
            assert "came back empty" in line and "stores adopt" in doctor.out

            assert answered == []  # nothing was processed: the session did not move on
            adopted_at, adopted_wall = time.monotonic(), datetime.now(UTC)
            adopt = await asyncio.to_thread(_cli, "stores", "adopt", home=home)
            assert adopt.code == 0, adopt.output
            assert "adopted  state" in adopt.out and "adopted  tools" in adopt.out, adopt.out

            resumed: Said = await asyncio.wait_for(answering, TURN_S)
        finally:
            answering.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(answering, return_exceptions=True)
    assert resumed.last is not None and resumed.last.source.startswith("conversation:")
    assert answered and all(at > adopted_at for at, _ in answered)  # none before adoption
    assert len(errors_logged.naming(state)) == 1  # one line, however often it was retried
    assert sum(p.stats.dead_letters for p in running.processors) == 0

    alerts = await _alerts(running)  # and one alert per lost store, raised before adoption
    ids = [envelope.message_id for envelope in alerts]
    assert len(ids) == len(set(ids)), ids
    (alert,) = [e for e in alerts if e.payload.context["store"] == state_store]
    body = alert.payload.body
    assert isinstance(body, ErrorReport) and body.code == "store_lost", alert
    assert body.message == lost and "stores adopt" in body.advice
    assert alert.target == "alerts:store" and alert.timestamp <= adopted_wall
    assert alert.payload.context["held_topic"] == running.prefix + CONVERSATION_IN


async def _alerts(running: Stack) -> list[Envelope]:
    """Every store-lost alert on ``hermes.alerts``, from its start to its end now."""
    topic = running.prefix + ALERTS
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=running.bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        while not (partitions := list(consumer.assignment())):
            await asyncio.sleep(0.1)
        ends = await consumer.end_offsets(partitions)
        records = []
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            for batch in (await consumer.getmany(timeout_ms=1000)).values():
                records.extend(batch)
    finally:
        await consumer.stop()
    found = [default_codec().decode(r.value or b"") for r in records]
    return [e for e in found if e.target == "alerts:store"]


def _texts(said: Said) -> str:
    return "\n".join(f"{r.source}: {reply_text(r)}" for _, r in said.replies)


def _quiet(kind: str, item: object) -> None:
    """The demo's printer, silenced: the test reads what was said instead."""


def _noting(into: list[tuple[float, Envelope]]) -> Callable[[str, Envelope | Turn], None]:
    """The demo's printer, noting when each reply arrived (the one consumer that waits for
    it: a second one, started beside it, could join the topic after the reply was written)."""

    def show(kind: str, item: Envelope | Turn) -> None:
        if kind == "reply" and isinstance(item, Envelope):
            into.append((time.monotonic(), item))

    return show


def _line(out: str, name: str) -> str:
    found = [line.strip() for line in out.splitlines() if f"  {name}  " in line]
    assert found, out
    return found[0]


async def test_an_up_started_against_redis_back_empty_is_refused_until_adopted(
    own_redis: OwnRedis, unique: str, tmp_path: Path
) -> None:
    """What a restart of ``up`` meets: the mark is remembered in the state folder, so a new
    process (a new store) sees the loss too, before it reads or writes anything."""
    book = MarkBook(tmp_path / "home")  # the state folder's, as every up there is given
    config = RedisConfig(url=own_redis.url, prefix=f"empty{unique}")
    async with RedisStateStore(config, book=book) as store:
        assert await store.commit("conversation", "s1", StateChange(0, "m1", {"n": 1}, ("m1",)))
    await own_redis.restart_empty()
    async with RedisStateStore(config, book=book) as store:
        with pytest.raises(StoreLost, match="is lost .its mark is gone.: paused until"):
            await store.load("conversation", "s1")
        with pytest.raises(StoreLost):  # nothing is written past it either
            await store.commit("conversation", "s1", StateChange(0, "m2", {"n": 2}, ("m2",)))
        assert await store.redis.dbsize() == 0
        await store.adopt()
        assert (await store.load("conversation", "s1")).version == 0  # accepted: afresh
    async with RedisStateStore(config, book=book) as store:  # the adoption is remembered
        assert (await store.load("conversation", "s1")).version == 0


async def _settled(running: Stack, still_s: float = 1.0) -> None:
    """Until no processor has a record waiting and none processed one for ``still_s``."""

    def processed() -> int:
        return sum(p.stats.processed for p in running.processors)

    async def still() -> None:
        last = -1
        while True:
            now = processed()
            if now == last and all(p.waiting == 0 for p in running.processors):
                return
            last = now
            await asyncio.sleep(still_s)

    await asyncio.wait_for(still(), SEEN_S)
