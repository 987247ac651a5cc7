"""The demo's envelopes in the trace index: every one, once, on Elasticsearch and SQLite.

Acceptance of the trace index: after the demo every record of every topic is a document
(asserted by ids), the waterfall read back is the same from either index, an
Elasticsearch outage mid-demo loses nothing and stores nothing twice, and a session is
still there after the embedded broker (and its log) is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from hermesbus.codec import default_codec
from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import stack
from hermesbus.connectors.elasticsearch import ElasticsearchTraceIndex
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.demo.expense import run
from hermesbus.topics import DLQ, Catalog
from hermesbus.trace.index import Indexer, Search, TraceIndex, doc_id
from hermesbus.trace.spans import hops_of, spans, waterfall
from tests.cli_process import clean_env, hermesbus

from .conftest import es_config
from .proxy import Relay

pytestmark = [pytest.mark.kafka, pytest.mark.elasticsearch, pytest.mark.slow]


def _quiet(kind: str, item: object) -> None:
    """The demo's printer, silenced."""


async def _log_ids(bootstrap: str, prefix: str) -> set[str]:
    """topic/partition/offset of every record on the prefix's indexed topics (all but the
    flow registry, whose records are specs, not envelopes), read from the log."""
    names = Catalog.load().with_overrides(prefix=prefix).indexed_names()
    kafka = KafkaConfig(bootstrap=bootstrap)
    async with KafkaAdmin(kafka) as admin:
        described = await admin.describe(names)
    parts = [TopicPartition(n, p) for n, t in described.items() for p in range(t.partitions)]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    found: set[str] = set()
    try:  # every record read, not end offsets: the embedded broker's may lag the last append
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        quiet = 0
        while quiet < 3:
            batch = await consumer.getmany(timeout_ms=500)
            quiet = 0 if batch else quiet + 1
            found |= {
                doc_id(r.topic, r.partition, r.offset, r.timestamp)
                for rs in batch.values()
                for r in rs
            }
        return found
    finally:
        await consumer.stop()


async def _all_ids(index: TraceIndex) -> list[str]:
    """Every document id in ``index`` (an id twice if it was stored twice)."""
    return [doc["_id"] for doc in await index.search(Search(limit=10_000))]


def _place(document_id: str) -> tuple[str, int, int]:
    """``(topic, partition, offset)`` of a document id (``topic/p/offset@ms``)."""
    place = document_id.rsplit("@", 1)[0]
    topic, partition, offset = place.rsplit("/", 2)
    return topic, int(partition), int(offset)


async def _drawn(index: TraceIndex, trace_id: str, prefix: str) -> list[str]:
    docs = await index.by_trace(trace_id)
    return waterfall(spans(hops_of(docs, default_codec(), dlq_topic=prefix + DLQ)))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


async def test_the_demo_leaves_every_envelope_in_elasticsearch_and_the_same_waterfall(
    broker: str, elasticsearch_url: str, unique: str, home: Path
) -> None:
    prefix = f"idx-{unique}."
    es = ElasticsearchTraceIndex(es_config(elasticsearch_url, unique))
    kafka = KafkaConfig(bootstrap=broker)
    settings = Settings.from_environment()
    async with stack(settings=settings, kafka=kafka, prefix=prefix, demo=True, index=es) as running:
        submitted, held = await run(running.bootstrap, prefix, _quiet)
    in_log = await _log_ids(broker, prefix)
    async with ElasticsearchTraceIndex(es_config(elasticsearch_url, unique)) as es:
        stored = await _all_ids(es)
        assert len(stored) == len(set(stored))  # no document twice
        assert set(stored) == in_log
        assert await es.count() == len(in_log)
        # the same topics indexed into SQLite by a second group: the same waterfall
        sqlite = SqliteTraceIndex(home / "second.sqlite3")
        second = Indexer(
            sqlite,
            kafka=kafka,
            prefix=prefix,
            settings=settings.runtime,
            keyring=settings.keys.load,
            group_id="idx2",
        )
        async with sqlite, second:
            await asyncio.wait_for(_caught_up(second, len(in_log)), 60)
        async with sqlite:
            for said in (submitted, held):
                trace_id = said.conversation.trace_id
                drawn = await _drawn(es, trace_id, prefix)
                assert drawn == await _drawn(sqlite, trace_id, prefix)
                assert {"conversation", "dispatcher", "tool", "memory"} <= {
                    line.split()[0] for line in drawn[1:-1]
                }


async def _caught_up(indexer: Indexer, total: int) -> None:
    while indexer.stats.indexed + indexer.stats.existing < total:
        await asyncio.sleep(0.1)


async def test_an_elasticsearch_outage_mid_demo_loses_nothing_and_stores_nothing_twice(
    embedded_bootstrap: str, elasticsearch_url: str, unique: str, home: Path
) -> None:
    target = urlsplit(elasticsearch_url)
    relay = Relay(target.hostname or "127.0.0.1", target.port or 9200)
    await relay.start()
    prefix = f"outage-{unique}."
    config = es_config(relay.url, unique)
    kafka = KafkaConfig(bootstrap=embedded_bootstrap)
    async with stack(
        settings=Settings.from_environment(),
        kafka=kafka,
        prefix=prefix,
        demo=True,
        index=ElasticsearchTraceIndex(config),
    ) as running:
        indexer = running.indexer
        assert indexer is not None
        demo = asyncio.create_task(run(running.bootstrap, prefix, _quiet))
        while indexer.stats.indexed == 0:  # some of the demo is indexed, then it goes away
            await asyncio.sleep(0.05)
        await relay.stop()
        await asyncio.sleep(3)
        assert indexer.stats.outages >= 1
        direct = ElasticsearchTraceIndex(es_config(elasticsearch_url, unique), install=False)
        async with direct:
            await direct.refresh()
            await _nothing_committed_past_the_stored(kafka, prefix, direct)
        await relay.start()  # the same port: Elasticsearch is back
        await demo
        async with asyncio.timeout(60):  # it catches up (its back-off may still be seconds)
            await _caught_up_with_log(embedded_bootstrap, prefix, elasticsearch_url, unique)
    await relay.stop()
    in_log = await _log_ids(embedded_bootstrap, prefix)
    async with ElasticsearchTraceIndex(es_config(elasticsearch_url, unique)) as es:
        stored = await _all_ids(es)
        assert len(stored) == len(set(stored)) == await es.count()
        assert set(stored) == in_log


async def _caught_up_with_log(bootstrap: str, prefix: str, url: str, unique: str) -> None:
    """Until every record on the log is a stored document."""
    async with ElasticsearchTraceIndex(es_config(url, unique), install=False) as es:
        while True:
            await es.refresh()
            if await _log_ids(bootstrap, prefix) <= set(await _all_ids(es)):
                return
            await asyncio.sleep(0.5)


async def _nothing_committed_past_the_stored(
    kafka: KafkaConfig, prefix: str, es: ElasticsearchTraceIndex
) -> None:
    """Every offset below the indexer group's committed one is a stored document."""
    names = Catalog.load().with_overrides(prefix=prefix).indexed_names()
    consumer = AIOKafkaConsumer(**kafka.client_kwargs(), group_id="indexer")
    await consumer.start()
    try:
        stored = {_place(i) for i in await _all_ids(es)}
        for name in names:
            for partition in consumer.partitions_for_topic(name) or ():
                committed = await consumer.committed(TopicPartition(name, partition)) or 0
                below = {(name, partition, o) for o in range(committed)}
                assert below <= stored
    finally:
        await consumer.stop()


@pytest.mark.usefixtures("broker_binary")
def test_a_session_outlives_the_embedded_broker_in_the_sqlite_index(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = hermesbus("up", "--demo", "--once", env=clean_env(home), cwd=tmp_path, timeout=180)
    assert first.code == 0, first.output
    sessions = _indexed_sessions(home)
    assert len(sessions) == 2
    again = hermesbus("up", "--demo", "--once", env=clean_env(home), cwd=tmp_path, timeout=180)
    assert again.code == 0, again.output  # a new broker: the first run's log is gone
    for session in sessions:
        shown = hermesbus("session", session, env=clean_env(home), cwd=tmp_path)
        assert shown.code == 0, shown.output
        assert f"session {session}:" in shown.out
        assert "conversation" in shown.out and "total " in shown.out
    assert len(_indexed_sessions(home)) == 4


def _indexed_sessions(home: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(home / "index.sqlite3")) as db:
        rows = db.execute(
            "SELECT DISTINCT session_id FROM envelopes WHERE session_id LIKE 'sess_%'"
        ).fetchall()
    return sorted(row[0] for row in rows)
