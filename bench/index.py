"""The trace index: the indexer against raw bulk writes, and `trace` against the topic scan.

(a) indexing: N envelopes (~1 KB, expense flow) on the bus are indexed by the indexer
    (consume, decode, ECS document, write, commit) into Elasticsearch and into SQLite;
    the baselines write the same documents with a raw ``async_streaming_bulk`` and a raw
    ``executemany`` in the same run. Target: indexer/raw >= 0.8 on Elasticsearch.
(b) finding one trace in a log of ``--log`` envelopes (100,000 by default): the index
    (Elasticsearch, SQLite) against the topic scan ``trace --from-log`` does (every
    partition, and the session's partition only); the waterfalls must be equal.

    .venv/bin/python bench/index.py [--count 20000] [--log 100000] [--es URL] [--bootstrap H:P]

Without ``--es`` (or HERMES_ELASTICSEARCH_URL) Elasticsearch is started with
deploy/local/elasticsearch.sh when java and mvn exist, else its rows are skipped. Without
``--bootstrap`` the embedded broker is started for the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from elasticsearch.helpers import async_streaming_bulk

from hermesbus import ContextSnapshot, Envelope, Payload, ToolCall
from hermesbus.base.lifecycle import tune_collector
from hermesbus.codec import default_codec
from hermesbus.compose.broker import EmbeddedBroker
from hermesbus.connectors.elasticsearch import (
    ElasticsearchConfig,
    ElasticsearchTraceIndex,
    bulk_actions,
    connect,
)
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.connectors.sqlite.index import _INSERT as SQLITE_INSERT
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.connectors.sqlite.index import _row as sqlite_row
from hermesbus.contract.headers import envelope_headers
from hermesbus.identity import Keyring
from hermesbus.runtime import RuntimeSettings
from hermesbus.topics import DLQ, Catalog
from hermesbus.trace.index import (
    ArchivedRecord,
    Document,
    DocumentSettings,
    Indexer,
    WriteResult,
    decode,
    document,
)
from hermesbus.trace.spans import collect, hops_of, spans, waterfall

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.8
TOPIC = "hermes.tool"
"""Where the benchmark's envelopes (tool calls) are appended."""
UNSIGNED = Keyring({})
"""The indexer's keys: the bench's records are unsigned (each is indexed as unverified)."""
TRACES_TIMED = 15
PER_TRACE = 20
"""Envelopes per trace in the log of (b): about a demo conversation's."""


def envelope(index: int, trace: int) -> Envelope:
    """A ~1 KB call of rule_engine_tool in the expense flow (session = trace here)."""
    at = datetime(2024, 5, 16, 9, 30, tzinfo=UTC) + timedelta(milliseconds=index)
    arguments = json.dumps(
        {"invoices": [{"id": f"INV-{i}", "category": "交通费", "amount": 1840} for i in range(9)]},
        ensure_ascii=False,
    )
    return Envelope(
        message_id=f"m-{index}",
        timestamp=at,
        source="mcp:dispatcher",
        target="tool:rule_engine_tool",
        session_id=f"sess-{trace}",
        user_id="u_5e884898da28047151d0e56f8dc62927",
        trace_id=f"trace-{trace}",
        causation_id=f"m-{index - 1}" if index % PER_TRACE else None,
        payload=Payload(
            task="expense_validation",
            body=ToolCall(tool="rule_engine_tool", arguments_json=arguments, idempotency_key="k"),
        ),
        snapshot=ContextSnapshot(state_id="S3", entered_at=at, tokens_used=512),
    )


async def produce(kafka: KafkaConfig, topic: str, count: int) -> None:
    """``count`` envelopes, ``PER_TRACE`` per trace and session, on ``topic``."""
    codec = default_codec()
    producer = AIOKafkaProducer(**kafka.client_kwargs(), linger_ms=20, max_batch_size=262_144)
    await producer.start()
    try:
        pending = []
        for i in range(count):
            env = envelope(i, i // PER_TRACE)
            value = codec.encode(env)
            key = env.session_id.encode()
            headers = envelope_headers(env)
            pending.append(await producer.send(topic, value, key=key, headers=headers))
            if len(pending) >= 5_000:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


async def provisioned(kafka: KafkaConfig, prefix: str) -> None:
    catalog = Catalog.load().with_overrides(prefix=prefix)
    async with KafkaAdmin(kafka) as admin:
        await admin.create(list(catalog))


def documents(count: int, topic: str) -> list[Document]:
    """The documents the indexer makes of the produced records (same shape, same sizes)."""
    codec, settings = default_codec(), DocumentSettings()
    out = []
    for i in range(count):
        env = envelope(i, i // PER_TRACE)
        record = ArchivedRecord(
            topic=topic,
            partition=0,
            offset=i,
            timestamp_ms=1_715_851_800_000 + i,
            key=env.session_id.encode(),
            value=codec.encode(env),
            headers=tuple(envelope_headers(env)),
        )
        out.append(document(record, decode(record, codec), settings, {}))
    return out


async def indexer_rate(kafka: KafkaConfig, prefix: str, index: object, count: int) -> float:
    """Envelopes per second of an Indexer, from its join to the last one stored."""
    settings = RuntimeSettings().for_embedded_broker()
    indexer = Indexer(index, kafka=kafka, prefix=prefix, settings=settings,  # type: ignore[arg-type]
                      keys=UNSIGNED, group_id=f"bench-{uuid.uuid4().hex[:8]}")  # fmt: skip
    async with indexer:
        await indexer.joined.wait()
        began = time.perf_counter()
        while indexer.stats.indexed + indexer.stats.existing < count:  # noqa: ASYNC110 - a counter
            await asyncio.sleep(0.01)
        took = time.perf_counter() - began
    return count / took


async def raw_bulk(url: str, stream: str, docs: list[Document]) -> float:
    """The documents made beforehand, written as the index writes them (its actions)."""
    async with connect(ElasticsearchConfig(url=url, request_timeout_s=60)) as es:  # ours
        began = time.perf_counter()
        actions = bulk_actions(stream, docs)
        async for ok, item in async_streaming_bulk(es, actions, chunk_size=500):
            if not ok:
                raise RuntimeError(item)
        return len(docs) / (time.perf_counter() - began)


def raw_executemany(path: Path, docs: list[Document]) -> float:
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(SqliteTraceIndex.schema)
    began = time.perf_counter()
    rows = [sqlite_row(d) for d in docs]
    db.execute("BEGIN IMMEDIATE")
    db.executemany(SQLITE_INSERT, rows)
    db.execute("COMMIT")
    took = time.perf_counter() - began
    db.close()
    return len(docs) / took


async def lookup_times(index: object, traces: list[str], prefix: str) -> tuple[float, list[str]]:
    """Median seconds to read and draw one trace from ``index``; the first one's waterfall."""
    codec = default_codec()
    times: list[float] = []
    drawn: list[str] = []
    for trace in traces:
        began = time.perf_counter()
        docs = await index.by_trace(trace)  # type: ignore[attr-defined]
        lines = waterfall(spans(hops_of(docs, codec, dlq_topic=prefix + DLQ)))
        times.append(time.perf_counter() - began)
        drawn = drawn or lines
    return statistics.median(times), drawn


async def scan_times(
    kafka: KafkaConfig, traces: list[str], prefix: str, *, by_session: bool
) -> tuple[float, list[str]]:
    times: list[float] = []
    drawn: list[str] = []
    for trace in traces:
        session = trace.replace("trace-", "sess-") if by_session else None
        began = time.perf_counter()
        hops = await collect(kafka, trace, session_id=session, prefix=prefix)
        lines = waterfall(spans(hops))
        times.append(time.perf_counter() - began)
        drawn = drawn or lines
    return statistics.median(times), drawn


@contextlib.asynccontextmanager
async def elasticsearch(given: str | None) -> AsyncIterator[tuple[str | None, str]]:
    if given:
        yield given, "given"
        return
    bash = shutil.which("bash")
    if not (shutil.which("java") and shutil.which("mvn") and bash):
        yield None, "skipped: no java/mvn here (pass --es URL)"
        return
    run_dir = tempfile.mkdtemp(prefix="hermesbus-bench-es-")
    env = {**os.environ, "HERMES_ES_RUN_DIR": run_dir}
    script = str(ROOT / "deploy" / "local" / "elasticsearch.sh")
    proc = await asyncio.create_subprocess_exec(
        bash, script, "start", env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    if proc.returncode != 0:
        yield None, f"skipped: elasticsearch.sh start failed: {err.decode()[-300:]}"
        shutil.rmtree(run_dir, ignore_errors=True)
        return
    try:
        yield out.decode().strip().rsplit("=", 1)[1], "started by deploy/local/elasticsearch.sh"
    finally:
        stop = await asyncio.create_subprocess_exec(bash, script, "stop", env=env)
        await stop.wait()
        shutil.rmtree(run_dir, ignore_errors=True)


@contextlib.asynccontextmanager
async def kafka_broker(given: str | None) -> AsyncIterator[tuple[str, str]]:
    if given:
        yield given, "given"
        return
    with tempfile.TemporaryDirectory() as home:
        async with EmbeddedBroker(home=Path(home)) as embedded:
            yield embedded.bootstrap, "embedded (tansu, in memory)"


def row(name: str, value: float, unit: str, ratio: float | None = None, note: str = "") -> None:
    shown = f"{ratio:6.2f}" if ratio is not None else "      "
    print(f"  {name:<50} {value:>12,.1f} {unit:<8} {shown}  {note}")


async def hand_rolled(kafka: KafkaConfig, prefix: str, url: str, count: int) -> float:
    """Envelopes per second of the least a pipeline must do: read the topic (no group, no
    commits), decode, make documents, one ``async_streaming_bulk`` per batch, in series."""
    codec, settings = default_codec(), DocumentSettings()
    stream = f"logs-hermes.envelopes-h{uuid.uuid4().hex[:8]}"
    consumer = AIOKafkaConsumer(**kafka.client_kwargs(), enable_auto_commit=False)
    await consumer.start()
    try:
        async with KafkaAdmin(kafka) as admin:
            topic = (await admin.describe([prefix + TOPIC]))[prefix + TOPIC]
        parts = [TopicPartition(prefix + TOPIC, p) for p in range(topic.partitions)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        async with connect(ElasticsearchConfig(url=url, request_timeout_s=60)) as es:
            done, began = 0, time.perf_counter()
            while done < count:
                batch = await consumer.getmany(timeout_ms=200, max_records=500)
                docs = []
                for records in batch.values():
                    for r in records:
                        record = ArchivedRecord(
                            r.topic,
                            r.partition,
                            r.offset,
                            r.timestamp,
                            r.key,
                            r.value,
                            tuple((k, bytes(v)) for k, v in r.headers),
                        )
                        docs.append(document(record, decode(record, codec), settings, {}))
                actions = bulk_actions(stream, docs)
                async for ok, item in async_streaming_bulk(es, actions, chunk_size=500):
                    if not ok:
                        raise RuntimeError(item)
                done += len(docs)
            return count / (time.perf_counter() - began)
    finally:
        await consumer.stop()


class NoIndex:
    """A trace index that stores nothing: what consuming, decoding and making documents
    cost alone (the indexer's ceiling on this machine)."""

    where = "nowhere"

    async def __aenter__(self) -> NoIndex:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        return None

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def write(self, docs: Sequence[Document]) -> WriteResult:
        return WriteResult(stored=[doc["_id"] for doc in docs])

    async def appended(self, _ids: Sequence[str]) -> dict[str, int]:
        return {}


async def part_a(
    kafka: KafkaConfig, es_url: str | None, count: int, work: Path, *, rounds: int, warm_up_s: float
) -> bool:
    """Raw and indexer alternately, ``rounds`` times after warm-up rounds that do not count
    (at least one, and for ``warm_up_s``: a freshly started Elasticsearch writes at a
    fraction of its rate, and its compiler threads take the cores for minutes), each on
    fresh targets; the best counts."""
    print(f"(a) indexing {count:,} envelopes (~1 KB each), best of {rounds}   per s        ratio")
    prefix = f"bench-a-{uuid.uuid4().hex[:8]}."
    await provisioned(kafka, prefix)
    await produce(kafka, prefix + TOPIC, count)
    best: dict[str, float] = {}
    this: dict[str, float] = {}
    paired: list[float] = []  # each round's indexer/raw: the two ran a few seconds apart
    warming = True

    def keep(name: str, rate: float) -> None:
        if not warming:
            best[name] = max(best.get(name, 0.0), rate)
        this[name] = rate

    n, measured, warm_until = 0, 0, time.monotonic() + warm_up_s
    while measured < rounds:
        warming = n == 0 or time.monotonic() < warm_until
        measured += not warming
        n += 1
        tag = uuid.uuid4().hex[:8]
        docs = documents(count, prefix + TOPIC)
        keep("sqlite raw", raw_executemany(work / f"raw{n}.sqlite3", docs))
        if es_url:
            keep("es raw", await raw_bulk(es_url, f"logs-hermes.envelopes-raw{tag}", docs))
        del docs  # the baselines' documents would otherwise be live while the indexer runs:
        gc.collect()  # each of its collections would scan them, which up's indexer never does
        async with SqliteTraceIndex(work / f"indexer{n}.sqlite3") as sqlite:
            keep("sqlite", await indexer_rate(kafka, prefix, sqlite, count))
        keep("none", await indexer_rate(kafka, prefix, NoIndex(), count))
        if es_url:
            config = ElasticsearchConfig(url=es_url, data_stream=f"logs-hermes.envelopes-b{tag}")
            async with ElasticsearchTraceIndex(config) as es:
                keep("es", await indexer_rate(kafka, prefix, es, count))
            keep("es hand", await hand_rolled(kafka, prefix, es_url, count))
            if not warming:
                paired.append(this["es"] / this["es raw"])
            said = "warm-up" if warming else f"round {measured}"
            print(f"  {said}: Elasticsearch raw {this['es raw']:,.0f}/s, indexer "
                  f"{this['es']:,.0f}/s ({this['es'] / this['es raw']:.2f})")  # fmt: skip
    row("indexer, no index (consume, decode, document)", best["none"], "env/s")
    row("SQLite: raw executemany (baseline)", best["sqlite raw"], "env/s")
    row("SQLite: indexer", best["sqlite"], "env/s", best["sqlite"] / best["sqlite raw"])
    if not es_url:
        return True
    ratio = best["es"] / best["es raw"]
    note = "ok" if ratio >= TARGET else f"below the target {TARGET}"
    row("Elasticsearch: raw async_streaming_bulk (baseline)", best["es raw"], "env/s")
    row("Elasticsearch: hand-rolled read+document+bulk", best["es hand"], "env/s",
        best["es hand"] / best["es raw"])  # fmt: skip
    row("Elasticsearch: indexer", best["es"], "env/s", ratio, note)
    print(f"  median of the rounds' own indexer/raw ratios: {statistics.median(paired):.2f}")
    return ratio >= TARGET


async def part_b(kafka: KafkaConfig, es_url: str | None, log: int, work: Path) -> None:
    print(f"(b) one trace in a log of {log:,} envelopes ({PER_TRACE} per trace)   median ms")
    prefix = f"bench-b-{uuid.uuid4().hex[:8]}."
    await provisioned(kafka, prefix)
    await produce(kafka, prefix + TOPIC, log)
    traces = [f"trace-{(log // PER_TRACE) * k // TRACES_TIMED}" for k in range(TRACES_TIMED)]
    results = []  # each index filled by the indexer itself, from the records on the bus
    async with SqliteTraceIndex(work / "b.sqlite3") as sqlite:
        await indexer_rate(kafka, prefix, sqlite, log)
        results.append(("SQLite index", *await lookup_times(sqlite, traces, prefix)))
    if es_url:
        config = ElasticsearchConfig(
            url=es_url, data_stream=f"logs-hermes.envelopes-l{uuid.uuid4().hex[:8]}"
        )
        async with ElasticsearchTraceIndex(config) as es:
            await indexer_rate(kafka, prefix, es, log)
            await es.refresh()
            results.append(("Elasticsearch index", *await lookup_times(es, traces, prefix)))
    few = traces[:3]
    results.append(
        ("topic scan, session's partitions", *await scan_times(kafka, few, prefix, by_session=True))
    )
    results.append(
        (
            "topic scan, every partition (baseline)",
            *await scan_times(kafka, few, prefix, by_session=False),
        )
    )
    base = results[-1][1]
    for name, seconds, _drawn in results:
        row(name, seconds * 1000, "ms", base / seconds, "x faster than the scan")
    same = {tuple(drawn) for _n, _s, drawn in results}  # the first trace, drawn by each
    agree = len(same) == 1
    print(f"  {traces[0]}: " + ("the same waterfall from each" if agree else "WARNING: differ"))


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--log", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warm-up", type=float, default=90.0, help="seconds (see part_a)")
    parser.add_argument("--es", default=os.environ.get("HERMES_ELASTICSEARCH_URL"))
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args()
    tune_collector()  # as hermesbus up does, for the baselines and the indexer alike
    async with kafka_broker(args.bootstrap) as (bootstrap, how), elasticsearch(args.es) as es:
        es_url, es_how = es
        print(f"broker: {bootstrap} ({how}); Elasticsearch: {es_url or '-'} ({es_how})")
        kafka = KafkaConfig(bootstrap=bootstrap)
        with tempfile.TemporaryDirectory() as work:
            met = await part_a(
                kafka, es_url, args.count, Path(work), rounds=args.rounds, warm_up_s=args.warm_up
            )
            await part_b(kafka, es_url, args.log, Path(work))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
