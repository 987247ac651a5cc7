"""The production stores against raw calls of the same work, in the same run.

(a) Redis: ``RedisStateStore.commit`` (the version compare-and-set script, a 1 KB state and
    the applied-id window) against a raw ``EVALSHA`` of the same script with the same keys
    and arguments made beforehand. One session after another (each save waits for the
    last: the p99 is the latency a record pays) and ``--in-flight`` sessions at a time.
    Target: store/raw >= 0.8, and a store save's p99 under 2 ms on loopback.
(b) SQLite: ``SqliteStateStore.commit`` (group commit: the saves of one loop turn share a
    transaction) against a raw ``executemany`` of the same UPDATEs in one transaction per
    batch of ``--in-flight``.
(c) Neo4j: ``Neo4jGraphStore.apply`` of a plan with one verified edge (ledger check,
    nodes, edge, ledger entry, in one write transaction) against a raw ``execute_query``
    MERGE of the same edge with its properties.
(d) A memory query: the memory handler answering a ``MemoryQuery`` (a preference from
    SQLite, the user's 20 facts from the graph) on SQLite and on Neo4j, against the facts
    query alone by the backend's own client; its p50 and p99, and the first query after
    the store started (on a Neo4j just started, the server's cold start).

    .venv/bin/python bench/stores.py [--count 5000] [--in-flight 32] [--redis URL] [--neo4j URL]

Without ``--redis`` (or HERMES_REDIS_URL) Redis is started with deploy/local/redis.sh, and
without ``--neo4j`` (or HERMES_NEO4J_URL) Neo4j with deploy/local/neo4j.sh when java and
mvn exist (else its rows are skipped); each is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hermesbus.base.storemark import MarkBook  # noqa: E402
from hermesbus.connectors.neo4j import Neo4jConfig, Neo4jGraphStore  # noqa: E402
from hermesbus.connectors.neo4j import graph as neo4j_graph  # noqa: E402
from hermesbus.connectors.redis import RedisConfig, RedisStateStore  # noqa: E402
from hermesbus.connectors.redis.state import _COMMIT  # noqa: E402
from hermesbus.connectors.sqlite import SqliteStateStore  # noqa: E402
from hermesbus.connectors.sqlite.memory import (  # noqa: E402
    SqliteGraphStore,
    SqlitePreferenceStore,
)
from hermesbus.contract.envelope import Envelope, Payload  # noqa: E402
from hermesbus.contract.fields import from_epoch_ms  # noqa: E402
from hermesbus.contract.payloads import MemoryContext, MemoryQuery, TrustLevel  # noqa: E402
from hermesbus.processors import memory  # noqa: E402
from hermesbus.processors.memory import (  # noqa: E402
    Edge,
    GraphPlan,
    GraphStore,
    MemorySettings,
    MemoryStores,
)
from hermesbus.processors.protocol import DISPATCHER_ADDRESS  # noqa: E402
from hermesbus.runtime import HandlerInput, SessionState, StateChange  # noqa: E402

TARGET, P99_MS = 0.8, 2.0
ROUNDS = 5
DATA = {"state": "S3", "facts": {f"k{i}": "值" * 20 for i in range(16)}, "turns": 7}
"""About 1 KB of JSON, like a conversation's small state."""
_MARKS = tempfile.TemporaryDirectory(prefix="bench-marks-")
BOOK = MarkBook(Path(_MARKS.name))
"""The book of the benchmark's stores' marks: a folder of its own, gone at exit."""


def _applied(n: int) -> tuple[str, ...]:
    return tuple(f"m{j}" for j in range(max(0, n - 9), n + 1))


async def _timed(calls: int, one: Callable[[int], Awaitable[object]]) -> tuple[float, list[float]]:
    """Calls one after another: seconds in all and each call's ms."""
    each = []
    started = time.perf_counter()
    for n in range(calls):
        t = time.perf_counter()
        await one(n)
        each.append((time.perf_counter() - t) * 1000)
    return time.perf_counter() - started, each


async def _concurrent(calls: int, in_flight: int, one: Callable[[int], Awaitable[object]]) -> float:
    started = time.perf_counter()
    for first in range(0, calls, in_flight):
        await asyncio.gather(*(one(n) for n in range(first, min(first + in_flight, calls))))
    return time.perf_counter() - started


async def _alternating(
    calls: int, raw: Callable[[int], Awaitable[object]], ours: Callable[[int], Awaitable[object]]
) -> tuple[tuple[float, list[float]], tuple[float, list[float]]]:
    """``calls`` of each in :data:`ROUNDS` rounds, raw and ours taking turns (numbered on,
    so a compare-and-set version never repeats): for each, the time of all at its best
    round's pace and every call's ms. The machine is shared and noisy: the best round is
    what the code costs, and taking turns lets the noise hit both alike."""
    per = calls // ROUNDS
    found: list[tuple[float, list[float]]] = [(float("inf"), []), (float("inf"), [])]
    for r in range(ROUNDS):
        for side, one in enumerate((raw, ours)):
            seconds, ms = await _timed(per, lambda n, one=one, base=r * per: one(base + n))
            best, each = found[side]
            found[side] = (min(best, seconds), each + ms)
    (raw_s, raw_ms), (our_s, our_ms) = found
    return (raw_s * ROUNDS, raw_ms), (our_s * ROUNDS, our_ms)


def _p99(ms: list[float]) -> float:
    return statistics.quantiles(ms, n=100)[98]


def _row(name: str, count: int, seconds: float, base: float | None, p99: float | None) -> str:
    rate = count / seconds
    ratio = "" if base is None else f"{(count / seconds) / base:6.2f}"
    tail = "" if p99 is None else f"   p99 {p99:5.2f} ms"
    return f"  {name:<34} {rate:>9,.0f}/s {ratio:>6}{tail}"


# ---------------------------------------------------------------- (a) Redis


async def part_redis(url: str, count: int, in_flight: int) -> bool:
    print(f"(a) Redis at {url}: {count:,} state saves of ~{len(orjson.dumps(DATA))} B")
    config = RedisConfig(url=url, prefix=f"bench{uuid.uuid4().hex[:8]}")
    async with RedisStateStore(config, book=BOOK) as store:
        client = store.redis
        sha = await client.script_load(_COMMIT)
        data, ok = orjson.dumps(DATA), True

        def keys(session: str) -> list[str]:
            return [f"{config.prefix}:{{{session}}}:{k}:bench" for k in ("raw", "o", "t", "p")]

        def raw_args(n: int) -> list[object]:
            return [n, data, orjson.dumps(_applied(n)), "1", f"m{n}", b"", b"[]", b"[]"]

        async def raw_one(n: int, session: str = "raw") -> None:
            await client.evalsha(sha, 4, *keys(session), *raw_args(n))

        async def store_one(n: int, session: str = "s") -> None:
            change = StateChange(n, f"m{n}", DATA, _applied(n))
            if not await store.commit("bench", session, change):
                raise SystemExit("a bench save lost its compare-and-set")

        for warm in range(200):  # connections, script cache
            await raw_one(warm, "warm-raw")
            await store_one(warm, "warm")
        (raw_s, raw_ms), (store_s, store_ms) = await _alternating(count, raw_one, store_one)
        ratio = raw_s / store_s
        print(_row("raw EVALSHA, one at a time", count, raw_s, None, _p99(raw_ms)))
        print(_row("RedisStateStore.commit", count, store_s, count / raw_s, _p99(store_ms)))
        ok = ratio >= TARGET and _p99(store_ms) < P99_MS

        versions: dict[str, int] = {}

        async def raw_many(n: int) -> None:
            session = f"r{n % in_flight}"
            v = versions.get(session, 0)
            versions[session] = v + 1
            await client.evalsha(sha, 4, *keys(session), *raw_args(v))

        async def store_many(n: int) -> None:
            session = f"c{n % in_flight}"
            v = versions.get(session, 0)
            versions[session] = v + 1
            await store_one(v, session)

        raw_c = await _concurrent(count, in_flight, raw_many)
        store_c = await _concurrent(count, in_flight, store_many)
        print(_row(f"raw EVALSHA, {in_flight} sessions at a time", count, raw_c, None, None))
        print(_row(f"RedisStateStore, {in_flight} at a time", count, store_c, count / raw_c, None))
        note = "ok" if ok else f"below the target (>= {TARGET}, p99 < {P99_MS} ms)"
        print(f"  one at a time: store/raw {ratio:.2f}, p99 {_p99(store_ms):.2f} ms: {note}")
        async for key in client.scan_iter(match=f"{config.prefix}:*"):
            await client.delete(key)
    return ok


# ---------------------------------------------------------------- (b) SQLite


async def part_sqlite(count: int, in_flight: int) -> None:
    print(f"(b) SQLite: {count:,} state saves, {in_flight} sessions at a time")
    with tempfile.TemporaryDirectory(prefix="bench-stores-") as folder:
        path = Path(folder) / "state.sqlite3"
        async with SqliteStateStore(path, book=BOOK) as store:
            versions: dict[str, int] = {}

            async def store_many(n: int) -> None:
                session = f"s{n % in_flight}"
                v = versions.get(session, 0)
                versions[session] = v + 1
                change = StateChange(v, f"m{v}", DATA, _applied(v))
                if not await store.commit("bench", session, change):
                    raise SystemExit("a bench save lost its compare-and-set")

            for n in range(in_flight):  # the sessions exist, as they do for the raw rows
                await store_many(n)
            store_s = await _concurrent(count, in_flight, store_many)
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        data = orjson.dumps(DATA).decode()
        db.executemany(
            "INSERT INTO state VALUES ('raw', ?, 1, ?, '[]')",
            [(f"s{i}", data) for i in range(in_flight)],
        )
        started = time.perf_counter()
        for first in range(0, count, in_flight):
            rows = [
                (data, orjson.dumps(_applied(n)).decode(), f"s{n % in_flight}", 1 + n // in_flight)
                for n in range(first, min(first + in_flight, count))
            ]
            db.execute("BEGIN IMMEDIATE")
            db.executemany(
                "UPDATE state SET version=version+1, data=?, applied=? "
                "WHERE processor='raw' AND session_id=? AND version=?",
                rows,
            )
            db.execute("COMMIT")
        raw_s = time.perf_counter() - started
        db.close()
    print(_row("raw executemany, a transaction a batch", count, raw_s, None, None))
    print(_row("SqliteStateStore.commit (group commit)", count, store_s, count / raw_s, None))


# ---------------------------------------------------------------- (c) Neo4j

_RAW_MERGE = """
MERGE (s:Entity {ns: $ns, name: $subject})
MERGE (o:Entity {ns: $ns, name: $object})
MERGE (s)-[r:FACT {relation: $relation}]->(o)
SET r.trust_level = 'verified', r.trust_rank = 1, r.verified_by = $tool,
    r.verified_at = $at, r.deprecated = false
"""


async def part_neo4j(url: str, count: int) -> None:
    print(f"(c) Neo4j at {url}: {count:,} verified-edge writes, one at a time")
    config = Neo4jConfig(url=url, namespace=f"bench{uuid.uuid4().hex[:8]}")
    async with Neo4jGraphStore(config, book=BOOK) as graph:

        def edge(n: int) -> Edge:
            return Edge(
                subject=f"expense:{n}",
                relation="approved_by",
                object="person:张主管",
                trust_level=TrustLevel.VERIFIED,
                verified_tool="finance_tool",
                verified_at_ms=1_700_000_000_000 + n,
            )

        async def raw_one(n: int) -> None:
            await graph.driver.execute_query(
                _RAW_MERGE,
                ns=config.namespace + "raw",
                subject=f"expense:{n}",
                object="person:张主管",
                relation="approved_by",
                tool="finance_tool",
                at=1_700_000_000_000 + n,
            )

        async def store_one(n: int) -> None:
            await graph.apply(GraphPlan(change_id=f"c{n}", edges=(edge(n),)))

        for warm in range(50):
            await raw_one(10**9 + warm)
            await store_one(10**9 + warm)
        (raw_s, raw_ms), (store_s, store_ms) = await _alternating(count, raw_one, store_one)
        print(_row("raw execute_query MERGE", count, raw_s, None, _p99(raw_ms)))
        print(
            _row("Neo4jGraphStore.apply (one edge)", count, store_s, count / raw_s, _p99(store_ms))
        )
        await graph.driver.execute_query("MATCH (n {ns: $ns}) DETACH DELETE n", ns=config.namespace)
        await graph.driver.execute_query(
            "MATCH (n {ns: $ns}) DETACH DELETE n", ns=config.namespace + "raw"
        )


# ---------------------------------------------------------------- (d) a memory query

FACTS = 20
"""The facts of the queried user: the demo's user has a handful; a busier one, 20."""


def _facts_plan() -> GraphPlan:
    edges = tuple(
        Edge(
            subject="user:u_bench",
            relation="visited",
            object=f"city:{n}",
            trust_level=TrustLevel.VERIFIED,
            verified_tool="trip_tool",
            verified_at_ms=1_700_000_000_000 + n,
        )
        for n in range(FACTS)
    )
    return GraphPlan(change_id="bench-facts", edges=edges)


def _query(n: int) -> Envelope:
    body = MemoryQuery(preferences=("ocr_blur_tolerance",), entity="user:u_bench")
    return Envelope(
        message_id=f"q{n}",
        timestamp=from_epoch_ms(1_717_405_200_000 + n),
        source=DISPATCHER_ADDRESS,
        target="memory:context",
        session_id="sess_bench",
        user_id="u_bench",
        trace_id="trace_bench",
        span_id="span",
        payload=Payload(task="query_context", body=body),
    )


async def _memory_query(
    name: str, graph: GraphStore, raw: Callable[[], Awaitable[object]], count: int
) -> None:
    """The memory handler answering a MemoryQuery (preferences from SQLite, the user's
    facts from ``graph``) against ``raw``, the facts alone by the backend's own client."""
    with tempfile.TemporaryDirectory(prefix="bench-stores-") as folder:
        home = Path(folder)
        stores = MemoryStores(
            MemorySettings(home=home),
            preferences=SqlitePreferenceStore(home / "prefs.sqlite3", book=BOOK),
            graph=graph,
        )
        started = time.perf_counter()
        async with stores:
            await graph.apply(_facts_plan())
            first = time.perf_counter()
            await memory.handle(
                HandlerInput(_query(-1), SessionState(), memory.NAME, {memory.NAME: stores})
            )
            cold_ms = (time.perf_counter() - first) * 1000
            start_ms = (first - started) * 1000

            async def ours(n: int) -> None:
                inp = HandlerInput(_query(n), SessionState(), memory.NAME, {memory.NAME: stores})
                outcome = await memory.handle(inp)
                (answer,) = outcome.emit
                body = answer.payload.body
                if not isinstance(body, MemoryContext) or len(body.facts) != FACTS:
                    raise SystemExit(f"{name}: the memory query lost facts: {body!r}")

            for warm in range(50):
                await raw()
                await ours(10**6 + warm)
            (raw_s, raw_ms), (our_s, our_ms) = await _alternating(count, lambda _n: raw(), ours)
    p50 = statistics.median(our_ms)
    print(_row(f"{name}: raw facts query", count, raw_s, None, _p99(raw_ms)))
    print(_row(f"{name}: memory query (handler)", count, our_s, count / raw_s, _p99(our_ms)))
    print(
        f"  {name}: memory query p50 {p50:.2f} ms, p99 {_p99(our_ms):.2f} ms; "
        f"store start {start_ms:.0f} ms, its first query {cold_ms:.1f} ms"
    )


async def part_memory_query(neo4j_url: str | None, count: int) -> None:
    print(f"(d) a memory query: {count:,} MemoryQuery -> MemoryContext, {FACTS} facts each")
    with tempfile.TemporaryDirectory(prefix="bench-stores-") as folder:
        path = Path(folder) / "graph.sqlite3"
        lite = SqliteGraphStore(path, book=BOOK)
        db = sqlite3.connect(path, check_same_thread=False)

        async def raw_lite() -> None:
            db.execute(
                "SELECT subject, relation, object, trust, verified_tool, verified_at_ms, "
                "deprecated FROM edges WHERE (subject=? OR object=?) AND trust>=? "
                "AND deprecated=0 ORDER BY subject, relation, object",
                ("user:u_bench", "user:u_bench", 1),
            ).fetchall()

        await _memory_query("SQLite", lite, raw_lite, count)
        db.close()
    if neo4j_url is None:
        print("  Neo4j: skipped (no server)")
        return
    config = Neo4jConfig(url=neo4j_url, namespace=f"bench{uuid.uuid4().hex[:8]}")
    graph = Neo4jGraphStore(config, book=BOOK)

    async def raw_neo4j() -> None:
        await graph.driver.execute_query(
            neo4j_graph._FACTS,
            ns=config.namespace,
            entity="user:u_bench",
            minimum=1,
            include_deprecated=False,
            routing_="r",
        )

    await _memory_query("Neo4j", graph, raw_neo4j, count)
    async with Neo4jGraphStore(config, book=BOOK) as cleaner:
        await cleaner.driver.execute_query(
            "MATCH (n {ns: $ns}) DETACH DELETE n", ns=config.namespace
        )


# ---------------------------------------------------------------- servers


@contextlib.asynccontextmanager
async def _server(script: str, variable: str, given: str | None) -> AsyncIterator[str | None]:
    """``given`` (or the environment's), else one started with ``script`` for the run."""
    url = given or os.environ.get(variable)
    if url:
        yield url
        return
    run_dir = tempfile.mkdtemp(prefix="bench-stores-")
    name = Path(script).stem.upper()
    env = {**os.environ, f"HERMES_{name}_RUN_DIR": run_dir, "TMPDIR": run_dir}
    started = await asyncio.to_thread(
        subprocess.run,
        ["bash", str(ROOT / script), "start"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if started.returncode != 0:
        print(f"  ({script} could not start it: {started.stderr.strip()[-300:]})")
        yield None
        return
    try:
        yield started.stdout.strip().partition("=")[2]
    finally:
        await asyncio.to_thread(
            subprocess.run,
            ["bash", str(ROOT / script), "stop", *(["--fast"] if "neo4j" in script else [])],
            env=env,
            check=False,
        )
        shutil.rmtree(run_dir, ignore_errors=True)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=5_000)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--neo4j-count", type=int, default=1_000)
    parser.add_argument("--query-count", type=int, default=2_000)
    parser.add_argument("--redis", default=None)
    parser.add_argument("--neo4j", default=None)
    args = parser.parse_args()
    ok = True
    async with _server("deploy/local/redis.sh", "HERMES_REDIS_URL", args.redis) as redis:
        if redis is not None:
            ok = await part_redis(redis, args.count, args.in_flight)
    await part_sqlite(args.count, args.in_flight)
    async with _server("deploy/local/neo4j.sh", "HERMES_NEO4J_URL", args.neo4j) as neo4j:
        await part_memory_query(neo4j, args.query_count)  # first: Neo4j as it started
        if neo4j is not None:
            await part_neo4j(neo4j, args.neo4j_count)
        else:
            print("(c) Neo4j: skipped (no server)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
