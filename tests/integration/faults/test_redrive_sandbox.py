"""A redrive cannot reach another environment, on each real broker (issue 25 item 5), and is
isolated by construction (issue 26 point 3).

With two tenants on one broker, ``replay --redrive --into prod`` from the first fed the
second's running groups, wrote its state and ran its tools; with ``HERMES_MEMORY_PATH``
set, a redrive wrote production's memory file. Here: a prefix with topics, or with a
consumer group that has a member or committed offsets, is refused (exit 2, one line)
unless a redrive marked it as its sandbox; a redrive into a fresh prefix writes none of
production's stores, files or servers. In every case nothing outside the sandbox
changes: topics' end offsets, groups' committed offsets, every file of the state folder
and memory's own file (by digest), Redis keys and Neo4j nodes of production.

With Redis, Neo4j and Elasticsearch configured for production, a redrive and then a fork
run and none of those servers gets a single connection or command, as the servers count
them: Redis's connections received and calls per command, Neo4j's Bolt connection ids
(numbered in order by the server), Elasticsearch's HTTP connections opened. Each count
is read the same way before and after; what one reading itself costs is measured first.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from neo4j import AsyncGraphDatabase
from redis.asyncio import Redis

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.connectors.neo4j import Neo4jConfig, Neo4jGraphStore
from hermesbus.connectors.redis import RedisConfig, RedisStateStore
from hermesbus.demo.expense import Said, run
from hermesbus.errors import SettingError
from hermesbus.identity import KEYS_FILE_ENV
from hermesbus.replay.sandbox import MARKER, claim, marker_of
from hermesbus.topics import CONVERSATION_IN, Catalog
from hermesbus.trace.tail import Filters, Position, tail
from tests.cli_process import Ran, clean_env, hermesbus
from tests.integration.commits import commits_under, group_names
from tests.integration.index.proxy import Relay
from tests.integration.stacks import demo_stack

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]

_JOIN_S = 60.0


def _quiet(kind: str, item: object) -> None:
    """The demo's printer, silenced."""


async def _demo(broker: str, prefix: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> Said:
    """The demo's two conversations on ``prefix``, run and stopped; the second (stopped
    at S4, its report unsubmitted) is the one redriven."""
    async with demo_stack(broker, prefix, home, monkeypatch) as running:
        return (await run(running.bootstrap, running.prefix, _quiet))[1]


async def _topics(kafka: KafkaConfig, prefixes: Sequence[str]) -> dict[str, int]:
    """The broker's topics under ``prefixes``, with their partition counts."""
    async with KafkaAdmin(kafka) as admin:
        names = [t for t in await admin.client.list_topics() if t.startswith(tuple(prefixes))]
        return {name: t.partitions for name, t in (await admin.describe(names)).items()}


async def _broker_state(kafka: KafkaConfig, prefixes: Sequence[str]) -> dict[str, Any]:
    """Under ``prefixes``: every topic's end offsets, every group's commits there, and the
    groups named with one of the prefixes (with or without commits)."""
    topics = await _topics(kafka, prefixes)
    parts = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
    consumer = AIOKafkaConsumer(**kafka.client_kwargs(), group_id=None)
    await consumer.start()
    try:
        consumer.assign(parts)
        ends = {
            f"{tp.topic}/{tp.partition}": o for tp, o in (await consumer.end_offsets(parts)).items()
        }
    finally:
        await consumer.stop()
    ours = [g for g in await group_names(kafka) if g.startswith(tuple(prefixes))]
    commits = await commits_under(kafka, prefixes)
    return {"topics": sorted(topics), "ends": ends, "groups": ours, "commits": commits}


def _files(*roots: Path) -> dict[str, str | None]:
    """Every file under ``roots`` but the sandboxes' folder, by digest (None: a root that
    does not exist)."""
    found: dict[str, str | None] = {}
    for root in roots:
        if not root.exists():
            found[str(root)] = None
            continue
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in paths:
            if "replays" not in path.relative_to(root.parent).parts:
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _redrive(
    session: str,
    source: str,
    into: str,
    *,
    broker: str,
    env: dict[str, str],
    more: Sequence[str] = ("--redrive",),
) -> Ran:
    """``hermesbus replay`` of ``session`` into ``into``: ``--redrive``, or ``more``."""
    cwd = Path(env["HERMES_HOME"]).parent
    args = ["--session", session, "--bootstrap", broker, "--prefix", source, "--into", into]
    return hermesbus("replay", *args, *more, env=env, cwd=cwd, timeout=300)


async def _environment(kafka: KafkaConfig, prefix: str) -> None:
    """Another environment on the same broker: the catalog's topics, a turn waiting."""
    catalog = Catalog.load().with_overrides(prefix=prefix)
    async with KafkaAdmin(kafka) as admin:
        await admin.create(catalog.topics)
    producer = AIOKafkaProducer(**kafka.client_kwargs())
    await producer.start()
    try:
        await producer.send_and_wait(
            prefix + CONVERSATION_IN, b"a turn of that environment", key=b"s"
        )
    finally:
        await producer.stop()


async def _commit(kafka: KafkaConfig, group: str, topic: str) -> None:
    """``group`` commits offset 1 on ``topic`` from outside (no member stays)."""
    consumer = AIOKafkaConsumer(**kafka.client_kwargs(), group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        place = TopicPartition(topic, 0)
        consumer.assign([place])
        await consumer.commit({place: 1})
    finally:
        await consumer.stop()


@asynccontextmanager
async def _member(kafka: KafkaConfig, group: str, topic: str) -> AsyncIterator[None]:
    """A member of ``group`` (subscribed to ``topic``, committing nothing) while inside."""
    consumer = AIOKafkaConsumer(
        **kafka.client_kwargs(),
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="latest",
    )
    consumer.subscribe([topic])
    await consumer.start()
    try:
        async with asyncio.timeout(_JOIN_S):
            while not consumer.assignment():
                await consumer.getmany(timeout_ms=500)
        yield
    finally:
        await consumer.stop()


async def test_a_redrive_into_another_environment_is_refused_and_changes_nothing(
    broker: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, home = f"dev-{unique}.", tmp_path / "home"
    stopped = await _demo(broker, source, home, monkeypatch)
    session = stopped.conversation.session_id
    kafka = KafkaConfig(bootstrap=broker)
    live, busy, idle = f"live-{unique}", f"busy-{unique}", f"idle-{unique}"
    await _environment(kafka, live + ".")  # its topics exist
    await _commit(kafka, idle + ".conversation", source + CONVERSATION_IN)  # offsets only
    env = clean_env(home, **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]})
    prefixes = [source, live + ".", busy + ".", idle + "."]
    async with _member(kafka, busy + ".conversation", source + CONVERSATION_IN):  # a member
        before = await _broker_state(kafka, prefixes)
        files = _files(home)
        refusals = {  # in threads: the member keeps beating meanwhile
            into: await asyncio.to_thread(_redrive, session, source, into, broker=broker, env=env)
            for into in (live, busy, idle)
        }
        after = await _broker_state(kafka, prefixes)
    says = {
        live: f"topics {live}.hermes.",
        busy: f"consumer groups {busy}.conversation exist (members or offsets)",
        idle: f"consumer groups {idle}.conversation exist (members or offsets)",
    }
    for into, ran in refusals.items():
        assert ran.code == 2, ran.output
        lines = ran.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: --into {into}.: refused, "), ran.err
        assert says[into] in lines[0] and f"no {into}.{MARKER} marker" in lines[0], lines[0]
        assert "Traceback" not in ran.output and ran.out == ""
    assert after == before  # no topic, group, offset or record more; no marker either
    assert not any(t.endswith(MARKER) for t in after["topics"])
    assert _files(home) == files
    assert not (home / "replays").exists()  # refused before its folder was made


@pytest.mark.parametrize("production", ["sqlite", "servers"])
async def test_a_redrive_and_a_fork_write_none_of_productions_stores(
    broker: str,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    production: str,
    request: pytest.FixtureRequest,
) -> None:
    """Production's settings in the environment (memory's own file; with "servers",
    Redis, Neo4j and Elasticsearch too): the sandbox uses its own SQLite files, nothing of
    those; with "servers" a fork runs too, and no server hears of either."""
    source, home = f"prod-{unique}.", tmp_path / "home"
    memory_file = tmp_path / "production" / "memory.sqlite3"
    settings = {"HERMES_MEMORY_PATH": str(memory_file)}
    relays: dict[str, Relay] = {}  # production reaches each server through a relay of ours
    if production == "servers":
        for name in ("redis", "neo4j", "elasticsearch"):
            relays[name] = await _relay(request.getfixturevalue(f"{name}_url"))
        settings |= {
            "HERMES_REDIS_URL": f"redis://127.0.0.1:{relays['redis'].port}/0",
            "HERMES_REDIS_PREFIX": f"prod{unique}",
            "HERMES_NEO4J_URL": f"bolt://127.0.0.1:{relays['neo4j'].port}",
            "HERMES_NEO4J_NAMESPACE": f"prod{unique}",
            "HERMES_ELASTICSEARCH_URL": relays["elasticsearch"].url,
            "HERMES_ELASTICSEARCH_DATA_STREAM": f"logs-hermes.envelopes-t{unique}",
        }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    memory_file.parent.mkdir()
    stopped = await _demo(broker, source, home, monkeypatch)
    assert memory_file.exists() == (production == "sqlite")  # production's memory is there
    kafka = KafkaConfig(bootstrap=broker)
    sandbox = f"sandbox-{unique}."
    before = await _broker_state(kafka, [source])
    files = _files(home, memory_file)
    servers = await _servers(settings, home)
    heard = await _heard(settings)  # the servers' own counts, and what reading them costs
    through = {name: relay.accepted for name, relay in relays.items()}
    env = clean_env(home, **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]}, **settings)
    session = stopped.conversation.session_id
    # in a thread: the relays (this loop) keep serving, so a connection would be counted
    ran = await asyncio.to_thread(_redrive, session, source, sandbox, broker=broker, env=env)
    assert ran.code == 0, ran.output
    assert "hermes  " in ran.out  # the sandbox answered
    if production == "servers":  # a fork of the first turn, into a sandbox of its own
        (first, *_) = [turn for turn, _reply in stopped.replies]
        fork = await _first_turn_id(kafka, source, session, first.text)
        args = ["--fork", fork, "--set", "payload.body.text=我要报上个月去北京的差旅费"]
        into = f"fork-{unique}."
        forked = await asyncio.to_thread(
            _redrive, session, source, into, broker=broker, env=env, more=args
        )
        assert forked.code == 0, forked.output
        assert "hermes  " in forked.out
    # first, before this test's own reads below connect to them
    assert {name: relay.accepted for name, relay in relays.items()} == through
    assert await _heard(settings, since=heard) == {}, "a production server heard of the sandbox"
    assert await _broker_state(kafka, [source]) == before
    assert _files(home, memory_file) == files
    assert await _servers(settings, home) == servers
    # what the sandbox kept is in its own folder: memory's choice of "不用，就这三张" too
    own = home / "replays" / sandbox.rstrip(".")
    assert (own / "state.sqlite3").exists() and (own / "memory.sqlite3").exists()
    if production == "servers":
        assert servers["redis"] > 0 and servers["neo4j"] > 0  # production had data there
        assert all(through.values()), through  # production itself went through the relays
    for relay in relays.values():
        await relay.stop()


async def _relay(url: str) -> Relay:
    parts = urlsplit(url)
    relay = Relay(parts.hostname or "127.0.0.1", parts.port or 0)
    await relay.start()
    return relay


def test_a_redrive_on_its_own_broker_writes_only_in_its_sandbox(tmp_path: Path) -> None:
    """No broker given: the redrive starts an embedded one. Its log, the keys the sandbox
    signs with (the state folder has none) and every store stay in the sandbox's folder."""
    home = tmp_path / "home"
    golden = Path(__file__).resolve().parents[2] / "golden" / "demo-b.tar.gz"
    args = ["--bundle", str(golden), "--redrive", "--into", "try-1"]
    ran = hermesbus("replay", *args, env=clean_env(home), cwd=tmp_path, timeout=300)
    assert ran.code == 0, ran.output
    assert "hermes  " in ran.out  # the sandbox answered
    outside = [p for p in home.rglob("*") if p.is_file() and "replays" not in p.parts]
    assert outside == [], outside
    own = home / "replays" / "try-1"
    assert (own / "keys.json").exists() and list((own / "broker").glob("tansu-*.log"))


async def _servers(settings: dict[str, str], home: Path) -> dict[str, int]:
    """Production's Redis keys and Neo4j nodes (under its prefix and namespace), read by
    stores whose marks are in the book of production's state folder ``home``."""
    if "HERMES_REDIS_URL" not in settings:
        return {}
    prefix, book = settings["HERMES_REDIS_PREFIX"], MarkBook(home)
    config = RedisConfig(url=settings["HERMES_REDIS_URL"], prefix=prefix)
    async with RedisStateStore(config, book=book) as r:
        keys = [k async for k in r.redis.scan_iter(match=f"{prefix}:*")]
    graph_config = Neo4jConfig(
        url=settings["HERMES_NEO4J_URL"], namespace=settings["HERMES_NEO4J_NAMESPACE"]
    )
    async with Neo4jGraphStore(graph_config, book=book) as graph:
        rows = await graph.driver.execute_query(
            "MATCH (n {ns: $ns}) RETURN count(n) AS n", ns=graph_config.namespace
        )
    return {"redis": len(keys), "neo4j": int(rows.records[0]["n"])}


async def test_only_a_fresh_prefix_or_a_marked_sandbox_is_claimed(broker: str, unique: str) -> None:
    kafka = KafkaConfig(bootstrap=broker)
    sandbox = f"sb-{unique}."
    assert await claim(kafka, sandbox) is True  # fresh: marked now
    async with KafkaAdmin(kafka) as admin:  # the topics a redrive then makes
        await admin.create(Catalog.load().with_overrides(prefix=sandbox).topics)
    assert await claim(kafka, sandbox) is False  # a sandbox a redrive made: allowed again
    await _commit(kafka, sandbox + "conversation", sandbox + CONVERSATION_IN)
    assert await claim(kafka, sandbox) is False  # its own groups' offsets too
    # a marker topic whose record names another prefix does not make a sandbox
    forged = f"fg-{unique}."
    await _environment(kafka, forged)
    async with KafkaAdmin(kafka) as admin:
        await admin.create([_Topic(forged + MARKER)])
    producer = AIOKafkaProducer(**kafka.client_kwargs())
    await producer.start()
    try:
        await producer.send_and_wait(forged + MARKER, marker_of(sandbox), partition=0)
    finally:
        await producer.stop()
    with pytest.raises(SettingError, match=f"--into {forged}: refused, topics {forged}hermes"):
        await claim(kafka, forged)


class _Topic:
    """A one-partition topic as KafkaAdmin.create takes it."""

    def __init__(self, name: str) -> None:
        self.name, self.partitions, self.replication_factor = name, 1, 1

    def kafka_configs(self) -> dict[str, str]:
        return {}


async def _first_turn_id(kafka: KafkaConfig, prefix: str, session: str, text: str) -> str:
    """The message id of the session's user turn that says ``text``, read from the log."""
    found = tail(
        kafka,
        [prefix + CONVERSATION_IN],
        start=Position("beginning"),
        filters=Filters(session=session),
    )
    async for read in found:
        env = read.envelope
        if env is not None and env.source.startswith("app:") and env.payload.body.text == text:  # type: ignore[union-attr]
            return env.message_id
    raise AssertionError(f"no turn {text!r} of {session} in the log")


Counts = dict[str, int]


async def _counts(settings: dict[str, str]) -> Counts:
    """What the production servers count of their clients, each read once, the same way:
    Redis's connections received and calls per command (``INFO``), Neo4j's highest Bolt
    connection id (the server numbers connections in order: ``dbms.listConnections``),
    Elasticsearch's HTTP connections opened (``_nodes/stats/http``)."""
    counts: Counts = {}
    redis = Redis.from_url(settings["HERMES_REDIS_URL"], single_connection_client=True)
    try:
        stats = await redis.info("stats")
        commands = await redis.info("commandstats")
    finally:
        await redis.aclose()
    counts["redis connections"] = int(stats["total_connections_received"])
    counts |= {f"redis {name}": int(row["calls"]) for name, row in commands.items()}
    driver = AsyncGraphDatabase.driver(settings["HERMES_NEO4J_URL"], auth=None)
    try:
        rows = await driver.execute_query(
            "CALL dbms.listConnections() YIELD connectionId RETURN connectionId"
        )
    finally:
        await driver.close()
    ids = [str(r["connectionId"]) for r in rows.records]
    bolt = [int(i.rsplit("-", 1)[1]) for i in ids if i.startswith("bolt-")]
    counts["neo4j bolt connections"] = max(bolt)
    async with httpx.AsyncClient(base_url=settings["HERMES_ELASTICSEARCH_URL"]) as es:
        nodes = (await es.get("/_nodes/stats/http")).raise_for_status().json()["nodes"]
    counts["elasticsearch http connections"] = sum(
        n["http"]["total_opened"] for n in nodes.values()
    )
    return counts


async def _heard(settings: dict[str, str], since: tuple[Counts, Counts] | None = None) -> Any:
    """Without ``since``: the servers' counts now, and what one reading adds to them
    (read twice). With it: what changed since then beyond one more reading, by count
    (empty when no server heard from anyone else). {} without servers configured."""
    if "HERMES_REDIS_URL" not in settings:
        return {} if since is not None else ({}, {})
    if since is None:
        first = await _counts(settings)
        second = await _counts(settings)
        return second, {k: second[k] - first.get(k, 0) for k in second}
    before, reading = since
    now = await _counts(settings)
    changed = {
        k: now[k] - before.get(k, 0) - reading.get(k, 0)
        for k in now
        if now[k] - before.get(k, 0) != reading.get(k, 0)
    }
    return changed
