"""The bus as a fleet on Apache Kafka: three instances of each processor, each an OS process
of its own (``hermesbus run PROCESSOR``), sharing one Redis; 500 sessions of a flow written
as a spec (:data:`tests.integration.test_flows.THIRD`: a reply, a tool call to the demo's
``org_tool`` stub, a second reply) while instances are added, stopped with SIGTERM and
killed with SIGKILL.

Every session gets its two replies once each (as the client sees them), in order; the log
holds exactly two distinct replies per session (nothing lost, nothing answered twice under
another id) and each session's state applied its user turn once; the partitions of every
group moved between instances, as the groups' descriptions show. It prints the counts of
sessions, envelopes, rebalances and faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from hermesbus.base.storemark import MarkBook
from hermesbus.client import Client
from hermesbus.codec import decode
from hermesbus.compose.backends import tool_store
from hermesbus.compose.settings import Settings
from hermesbus.connectors.kafka import KafkaConfig, log_consumer
from hermesbus.connectors.redis import RedisConfig, RedisStateStore
from hermesbus.contract.payloads import Reply, Role
from hermesbus.demo.expense import DEMO_USER
from hermesbus.identity import KEYS_FILE_ENV
from hermesbus.processors.conversation import load_session
from hermesbus.processors.tool import ToolRegistry
from hermesbus.processors.tool.demo import demo_keys, demo_specs
from hermesbus.topics import CONVERSATION_OUT, Catalog
from tests.cli_process import clean_env, hermesbus
from tests.integration.stacks import catalog_topics
from tests.integration.test_flows import THIRD

from .support import Assignments, Fleet, Instance

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(1500)]

PROCESSORS = ("conversation", "dispatcher", "tool", "memory")
SESSIONS = 500
AT_ONCE = 40
"""Sessions in flight at a time, at most."""
RATE = 5.0
"""Sessions started a second: the run lasts long enough for every step to be taken in."""
LAST = 50
"""The last sessions wait for every step: the run does not end before its faults."""
TURN_S = 240.0
"""How long a session may wait for its two replies: past a killed member's session timeout
(10 s) and the rebalances after it, on a slow, busy machine."""
SETTLE_S = 120.0
"""How long the groups may take to hand an ended instance's partitions to the live ones."""
ASKED = "Which parcel? (P and six digits)"


def _parcel(n: int) -> str:
    return f"P{n:06d}"


async def _register(tmp_path: Path, env: dict[str, str], bootstrap: str, prefix: str) -> None:
    """The demo's org_tool in the shared Redis's tool registry; the flow on the registry topic."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        settings = Settings.from_environment()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    (org,) = [spec for spec in demo_specs() if spec.name == "org_tool"]
    async with tool_store(settings) as store:
        await ToolRegistry(store, settings.tool).register(org)
    spec = tmp_path / "parcel.yaml"
    spec.write_text(THIRD, encoding="utf-8")
    registered = await asyncio.to_thread(
        hermesbus, "flows", "register", str(spec), "--bootstrap", bootstrap, "--prefix", prefix,
        env=clean_env(tmp_path / "registrar", **env), cwd=tmp_path,
    )  # fmt: skip
    assert registered.code == 0, registered.output


async def _log_of_replies(kafka: KafkaConfig, topic: str) -> list[tuple[str, str, str]]:
    """Every reply record on ``topic``: (session, message id, text), in each partition's order."""
    consumer = log_consumer(kafka)
    await consumer.start()
    try:
        parts = [
            TopicPartition(topic, p) for p in range(Catalog.load().get(CONVERSATION_OUT).partitions)
        ]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        found: list[tuple[str, str, str]] = []

        async def behind() -> bool:
            return any([await consumer.position(tp) < ends[tp] for tp in parts])

        while await behind():
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    envelope = decode(record.value or b"")
                    body = envelope.payload.body
                    text = body.text if isinstance(body, Reply) else type(body).__name__
                    found.append((envelope.session_id, envelope.message_id, text))
        return found
    finally:
        await consumer.stop()


async def _envelopes(kafka: KafkaConfig, prefix: str) -> dict[str, int]:
    """Records on each of the prefix's session topics (end offsets: every copy counted)."""
    topics = [t.name for t in Catalog.load().with_overrides(prefix=prefix) if t.partitions > 1]
    consumer = log_consumer(kafka)
    await consumer.start()
    try:
        counts: dict[str, int] = {}
        for topic in topics:
            parts = [TopicPartition(topic, p) for p in range(6)]
            ends = await consumer.end_offsets(parts)
            counts[topic[len(prefix) :]] = sum(ends.values())
        return {t: n for t, n in counts.items() if n}
    finally:
        await consumer.stop()


@dataclass(frozen=True)
class Step:
    """After ``after`` sessions finished: add an instance of ``processor`` (``sig`` None),
    or end its oldest live one with ``sig``."""

    after: int
    processor: str
    sig: signal.Signals | None = None


STEPS = (
    Step(60, "conversation"),
    Step(60, "dispatcher"),
    Step(120, "conversation", signal.SIGTERM),
    Step(120, "tool", signal.SIGTERM),
    Step(200, "conversation", signal.SIGKILL),
    Step(200, "dispatcher", signal.SIGKILL),
    Step(280, "memory", signal.SIGKILL),
    Step(280, "tool"),
)
"""Scale up, stop, kill: each step is made while sessions flow, and the next waits until
the group has taken it in (the new instance holds partitions; the ended one holds none,
and none is left unheld), so each shows in the groups' assignments."""


@dataclass
class Run:
    """What the sessions saw: each one's replies (message id, text), and the faults made."""

    got: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)
    done: int = 0
    took_s: float = 0.0
    repeated: int = 0
    unverified: int = 0


def _name(unique: str, n: int) -> str:
    return f"fl{unique}-{n:03d}"


async def _steps(fleet: Fleet, assignments: Assignments, run: Run, finished: asyncio.Event) -> None:
    """Make STEPS in order, each once ``after`` sessions finished, each taken in before the next."""
    for step in STEPS:
        while run.done < step.after:
            await asyncio.sleep(0.1)
        group = fleet.prefix + step.processor
        if step.sig is None:
            instance = fleet.start(step.processor)
            run.faults.append(f"{instance.name} added")
            await fleet.ready([instance])
        else:
            instance = fleet.live(step.processor)[0]
            run.faults.append(f"{step.sig.name} {instance.name}")
            fleet.signal(instance, step.sig)
        await _taken_in(fleet, assignments, group, instance)
    finished.set()


async def _taken_in(fleet: Fleet, assignments: Assignments, group: str, instance: Instance) -> None:
    """Wait until ``group``'s assignment holds ``instance`` (added) or not (ended), and no
    partition is held by an ended instance or left unheld."""

    def wrong() -> list[str]:
        held = assignments.last(group)
        owners = {fleet.owner(client) for client in held.values()}
        ever = {tp for holders in assignments.seen.get(group, []) for tp in holders}
        found = [f"{t[len(fleet.prefix) :]}-{p} unheld" for t, p in sorted(ever - set(held))]
        found += [f"held by {o.name if o else '?'}" for o in owners if o is None or o.ended]
        if not instance.ended and instance not in owners:
            found.append(f"{instance.name} holds nothing")
        return found

    deadline = time.monotonic() + SETTLE_S
    while wrong() and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
    assert not wrong(), (group, wrong(), assignments.seen.get(group, [])[-3:])


async def _drive(fleet: Fleet, assignments: Assignments, unique: str) -> Run:
    """SESSIONS sessions, RATE a second and AT_ONCE at most in flight, each until its two
    replies, while STEPS are made; the last LAST sessions start only once every step is."""
    run = Run()
    finished = asyncio.Event()
    steps = asyncio.create_task(_steps(fleet, assignments, run, finished))
    gate = asyncio.Semaphore(AT_ONCE)
    started = time.monotonic()
    async with Client(bootstrap=fleet.bootstrap, topic_prefix=fleet.prefix) as client:

        async def session(n: int) -> None:
            await asyncio.sleep(n / RATE)
            if n >= SESSIONS - LAST:
                await finished.wait()
            name = _name(unique, n)
            async with gate:
                turn = client.turn(
                    name, DEMO_USER, f"where is my parcel {_parcel(n)}?", flow="parcel_status"
                )
                mine = run.got.setdefault(name, [])
                async with client.replies(name) as replies:
                    await client.send(turn)
                    async with asyncio.timeout(TURN_S):
                        async for reply in replies:
                            body = reply.payload.body
                            assert isinstance(body, Reply), reply
                            mine.append((reply.message_id, body.text))
                            if len(mine) == 2:
                                break
                run.done += 1

        sessions: asyncio.Future[Any] = asyncio.gather(*(session(n) for n in range(SESSIONS)))
        both: list[asyncio.Future[Any]] = [sessions, steps]
        await asyncio.wait(both, return_when=asyncio.FIRST_EXCEPTION)
        for failed, other in ((steps, sessions), (sessions, steps)):
            if failed.done() and failed.exception() is not None:
                other.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await other
                await failed  # raises what it failed with
        await asyncio.gather(*both)
        run.took_s = time.monotonic() - started
        run.repeated, run.unverified = client.repeated, client.unverified
    return run


async def _applied_twice(redis_url: str, namespace: str, unique: str, home: Path) -> list[Any]:
    """Sessions whose conversation state is not closed with one user turn and two replies
    (read with the store-mark book of an instance's state folder, ``home``)."""
    wrong = []
    config = RedisConfig(url=redis_url, prefix=namespace)
    async with RedisStateStore(config, book=MarkBook(home)) as store:
        for n in range(SESSIONS):
            name = _name(unique, n)
            state = load_session((await store.load("conversation", name)).data, name)
            roles = Counter(m.role for m in state.history.recent)
            if state.state != "closed" or roles[Role.USER] != 1 or roles[Role.ASSISTANT] != 2:
                wrong.append((name, state.state, dict(roles)))
    return wrong


def _check_groups(fleet: Fleet, assignments: Assignments) -> dict[str, int]:
    """Every group's partitions moved between instances, three of which were added (each
    held partitions: :func:`_taken_in`). How many partitions of each group moved."""
    moved = {group: assignments.moved(group) for group in assignments.groups}
    assert all(moved.values()), moved
    added = sorted(i.name for i in fleet.instances if i.name.endswith("-3"))
    assert added == ["conversation-3", "dispatcher-3", "tool-3"], added  # and held (_taken_in)
    return {group[len(fleet.prefix) :]: len(parts) for group, parts in moved.items()}


async def test_three_instances_of_each_processor_scale_out_and_survive_stops_and_kills(
    kafka_bootstrap: str, redis_url: str, unique: str, tmp_path: Path
) -> None:
    prefix, namespace = f"fleet{unique}.", f"fleet{unique}"
    kafka = await catalog_topics(kafka_bootstrap, prefix)
    env = {
        KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV],
        "HERMES_REDIS_URL": redis_url,
        "HERMES_REDIS_PREFIX": namespace,
        "HERMES_CONVERSATION_BUDGET_SCALE": "6",
    }
    await _register(tmp_path, env, kafka_bootstrap, prefix)
    fleet = Fleet(tmp_path / "fleet", kafka_bootstrap, prefix, env, {"tool": demo_keys()})
    assignments = Assignments(kafka, [prefix + p for p in PROCESSORS])
    watch = asyncio.create_task(assignments.watch())
    try:
        await fleet.ready([fleet.start(p) for _ in range(3) for p in PROCESSORS])
        run = await _drive(fleet, assignments, unique)
    finally:
        watch.cancel()
        codes = await fleet.stop_all()
    killed = {i.name for i in fleet.instances if i.ended == "SIGKILL"}
    failed = {n: fleet.folder.joinpath(f"{n}.err").read_text() for n, c in codes.items() if c}
    assert set(failed) == killed, {n: err for n, err in failed.items() if n not in killed}

    # the client: each session's two replies, once each, in order
    expected = {
        _name(unique, n): [ASKED, f"Parcel {_parcel(n)}: asked for {DEMO_USER}"]
        for n in range(SESSIONS)
    }
    texts = {name: [text for _, text in replies] for name, replies in run.got.items()}
    wrong = {name: texts.get(name) for name, want in expected.items() if texts.get(name) != want}
    assert wrong == {}, list(wrong.items())[:5]
    assert run.unverified == 0
    # the log: exactly two distinct replies per session (copies are an outbox's re-sends)
    logged = await _log_of_replies(kafka, prefix + CONVERSATION_OUT)
    distinct = Counter(s for s, _ in {(s, m) for s, m, _ in logged})
    assert set(distinct) == set(expected), set(expected) ^ set(distinct)
    assert set(distinct.values()) == {2}, distinct.most_common(3)
    # the state: each session closed, its turn applied once, its two replies in its history
    assert await _applied_twice(redis_url, namespace, unique, fleet.folder / "conversation-0") == []
    moved = _check_groups(fleet, assignments)
    seen = {g[len(prefix) :]: len(h) - 1 for g, h in assignments.seen.items()}
    print(
        f"\nscale-out: {SESSIONS} sessions in {run.took_s:.0f} s;"
        f" envelopes by topic {await _envelopes(kafka, prefix)};"
        f" {len(logged) - 2 * SESSIONS} re-sent reply copies on the log,"
        f" {run.repeated} dropped by the client; assignment changes per group {seen};"
        f" partitions moved {moved}; faults: {', '.join(run.faults)}"
    )
