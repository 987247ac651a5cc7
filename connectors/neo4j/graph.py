"""Neo4j graph store: memory's long-term graph (the ``GraphStore`` Protocol) on Neo4j.

The model: ``(:Entity {ns, name})`` nodes and ``[:FACT {relation}]`` relationships between
them, each carrying ``verified_by`` (the tool), ``verified_at`` (epoch ms), ``trust_level``
(with ``trust_rank`` to compare it) and ``deprecated``; a relation is a property, not a
relationship type, because Cypher cannot take a type as a parameter and no query here is
ever built from strings (``tests/integration/stores/test_graph_store.py`` holds every query
to a literal with parameters). Reviews are ``(:Review)``, the ledger of applied changes
``(:GraphChange)``; ``ns`` (the configured namespace) is on every node.

Constraints and indexes are created at start. A write is decided in one write transaction
(``decide``): the ledger check that makes a redelivered change a no-op, the lock on its
subject, the memory processor's conflict rule reading the graph as the transaction sees it,
and the plan it makes. Queries return named fields, never whole nodes or
relationships: a property stored on them beside these is never read back.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, LiteralString, TypeVar

from hermesbus.base.lifecycle import Service
from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.neo4j import mark as marks
from hermesbus.connectors.neo4j.client import connect, translated
from hermesbus.connectors.neo4j.config import Neo4jConfig
from hermesbus.contract.payloads import TrustLevel
from hermesbus.errors import StoreError
from hermesbus.processors.memory import (
    CHANGE_LEDGER,
    TRUST_RANK,
    Edge,
    GraphPlan,
    Node,
    Planner,
    ReviewItem,
)

if TYPE_CHECKING:
    from neo4j import AsyncDriver, AsyncManagedTransaction

__all__ = ["SCHEMA", "Neo4jGraphStore"]

T = TypeVar("T")
R = TypeVar("R")

SCHEMA: tuple[LiteralString, ...] = (
    "CREATE CONSTRAINT hermes_entity IF NOT EXISTS FOR (e:Entity) REQUIRE (e.ns, e.name) IS UNIQUE",
    "CREATE CONSTRAINT hermes_change IF NOT EXISTS "
    "FOR (c:GraphChange) REQUIRE (c.ns, c.change_id) IS UNIQUE",
    "CREATE CONSTRAINT hermes_review IF NOT EXISTS "
    "FOR (v:Review) REQUIRE (v.ns, v.review_id) IS UNIQUE",
    "CREATE CONSTRAINT hermes_counter IF NOT EXISTS "
    "FOR (k:Counter) REQUIRE (k.ns, k.name) IS UNIQUE",
    "CREATE CONSTRAINT hermes_mark IF NOT EXISTS FOR (m:StoreMark) REQUIRE m.ns IS UNIQUE",
    "CREATE INDEX hermes_change_seq IF NOT EXISTS FOR (c:GraphChange) ON (c.ns, c.seq)",
    "CREATE INDEX hermes_review_seq IF NOT EXISTS FOR (v:Review) ON (v.ns, v.seq)",
    "CREATE INDEX hermes_fact_relation IF NOT EXISTS FOR ()-[r:FACT]-() ON (r.relation)",
    "CREATE INDEX hermes_fact_trust IF NOT EXISTS FOR ()-[r:FACT]-() ON (r.trust_rank)",
)
INDEXES_ONLINE_S = 120
"""How long the store's start waits for the indexes of :data:`SCHEMA` to be online (on a
database that has them: no time; a new one builds them over an empty graph in moments)."""
"""Created at start, each idempotent (after :data:`_ONE_COUNTER_EACH`)."""

_ONE_COUNTER_EACH: LiteralString = """
MATCH (k:Counter)
WITH k.ns AS ns, k.name AS name, collect(k) AS copies, max(k.next) AS top
WHERE size(copies) > 1
WITH copies[0] AS kept, copies[1..] AS extra, top
SET kept.next = top
WITH extra UNWIND extra AS k DELETE k
"""
"""Before its unique constraint existed, two writers could each create a counter: keep one
per (ns, name) with the highest number taken, so the constraint can be made on a database
written by an earlier version (a no-op once it exists: the constraint allows no copies)."""

_NODE: LiteralString = """
MATCH (e:Entity {ns: $ns, name: $entity}) WHERE e.trust_level IS NOT NULL
RETURN e.name AS entity, e.trust_level AS trust_level, e.verified_by AS verified_by,
       e.verified_at AS verified_at, e.deprecated AS deprecated
"""

_EDGE: LiteralString = """
MATCH (s:Entity {ns: $ns, name: $subject})-[r:FACT {relation: $relation}]->
      (o:Entity {ns: $ns, name: $object})
RETURN s.name AS subject, r.relation AS relation, o.name AS object,
       r.trust_level AS trust_level, r.verified_by AS verified_by,
       r.verified_at AS verified_at, r.deprecated AS deprecated
"""

_EDGES_FROM: LiteralString = """
MATCH (s:Entity {ns: $ns, name: $subject})-[r:FACT {relation: $relation}]->(o:Entity)
RETURN s.name AS subject, r.relation AS relation, o.name AS object,
       r.trust_level AS trust_level, r.verified_by AS verified_by,
       r.verified_at AS verified_at, r.deprecated AS deprecated
ORDER BY object
"""

_FACTS: LiteralString = """
MATCH (:Entity {ns: $ns, name: $entity})-[r:FACT]-(:Entity)
WHERE r.trust_rank >= $minimum AND (NOT r.deprecated OR $include_deprecated)
WITH DISTINCT startNode(r) AS s, r, endNode(r) AS o
RETURN s.name AS subject, r.relation AS relation, o.name AS object,
       r.trust_level AS trust_level, r.verified_by AS verified_by,
       r.verified_at AS verified_at, r.deprecated AS deprecated
ORDER BY subject, relation, object
"""
"""Both directions in one match from the entity's unique-index seek (no ``CALL {UNION}``,
whose form without a scope clause Neo4j 5.23+ deprecates and which plans slower)."""

_SEEN: LiteralString = """
MATCH (c:GraphChange {ns: $ns, change_id: $change_id}) RETURN c.plan AS plan
"""

_PUT_NODES: LiteralString = """
UNWIND $nodes AS n
MERGE (e:Entity {ns: $ns, name: n.entity})
SET e.trust_level = n.trust_level, e.trust_rank = n.trust_rank,
    e.verified_by = n.verified_by, e.verified_at = n.verified_at, e.deprecated = n.deprecated
"""

_PUT_EDGES: LiteralString = """
UNWIND $edges AS x
MERGE (s:Entity {ns: $ns, name: x.subject})
MERGE (o:Entity {ns: $ns, name: x.object})
MERGE (s)-[r:FACT {relation: x.relation}]->(o)
SET r.trust_level = x.trust_level, r.trust_rank = x.trust_rank,
    r.verified_by = x.verified_by, r.verified_at = x.verified_at, r.deprecated = x.deprecated
"""

_NEXT: LiteralString = """
MERGE (k:Counter {ns: $ns, name: $counter}) ON CREATE SET k.next = 0
SET k.next = k.next + $count
RETURN k.next - $count AS first
"""
"""Takes ``$count`` numbers of a counter (the write locks it for the transaction)."""

_PUT_REVIEWS: LiteralString = """
UNWIND $reviews AS q
MERGE (v:Review {ns: $ns, review_id: q.review_id})
ON CREATE SET v.item = q.item, v.seq = q.seq
"""

_PUT_CHANGE: LiteralString = """
MERGE (k:Counter {ns: $ns, name: 'changes'}) ON CREATE SET k.next = 0
SET k.next = k.next + 1
CREATE (c:GraphChange {ns: $ns, change_id: $change_id, plan: $plan, seq: k.next})
WITH k
MATCH (old:GraphChange {ns: $ns}) WHERE old.seq <= k.next - $keep
DETACH DELETE old
"""
"""The ledger entry, numbered by a counter (its write locks it), and the oldest pruned."""

_LOCK: LiteralString = """
MERGE (e:Entity {ns: $ns, name: $entity})
SET e._lock = true
REMOVE e._lock
"""
"""Neo4j's way to take a node's write lock for the rest of the transaction."""

_REVIEWS: LiteralString = """
MATCH (v:Review {ns: $ns}) WHERE v.seq IS NOT NULL RETURN v.item AS item ORDER BY v.seq
"""
"""``seq IS NOT NULL`` lets the (ns, seq) index serve it: by ``ns`` alone, Neo4j scanned
every namespace's reviews."""

_TOKENS: LiteralString = """
CREATE (e:Entity {ns: $ns, name: $name})-[r:FACT]->(e)
SET e.trust_level = '', e.trust_rank = 0, e.verified_by = '', e.verified_at = 0,
    e.deprecated = false, e._lock = true, r.relation = '', r.trust_level = '', r.trust_rank = 0,
    r.verified_by = '', r.verified_at = 0, r.deprecated = false
CREATE (:GraphChange {ns: $ns, change_id: $name, plan: '', seq: 0})
CREATE (:Review {ns: $ns, review_id: $name, item: '', seq: 0})
CREATE (:Counter {ns: $ns, name: $name, next: 0})
CREATE (:StoreMark {ns: $name, mark: ''})
"""
"""Every label, relationship type and property the queries name; run once at start and
rolled back (:func:`_make_tokens`)."""

_LEVELS = {level.value: level for level in TRUST_RANK}


class Neo4jGraphStore(Service):
    """The :class:`~hermesbus.processors.memory.GraphStore` on Neo4j (``HERMES_NEO4J_URL``)."""

    def __init__(self, config: Neo4jConfig, *, book: MarkBook | None = None) -> None:
        """``book``: where the store's mark is expected (the composition gives the state
        folder's); given none, the store refuses to start (ConfigError)."""
        self.config = config
        self._driver: AsyncDriver | None = None
        self.marks = marks.guard_for(self.config, book)

    @property
    def where(self) -> str:
        return f"Neo4j at {self.config.shown_url} (namespace {self.config.namespace})"

    async def start(self) -> None:
        if self._driver is not None:
            return
        self.marks.require_book()
        driver = connect(self.config)
        try:
            async with translated(self.config, "connecting"):
                await driver.verify_connectivity()
                await driver.execute_query(_ONE_COUNTER_EACH, database_=self.config.database)
                for statement in SCHEMA:
                    await driver.execute_query(statement, database_=self.config.database)
                # a new index is built in the background: until it is online, the planner
                # plans without it (a query of the first moments would scan)
                await driver.execute_query(
                    "CALL db.awaitIndexes($seconds)",
                    seconds=INDEXES_ONLINE_S,
                    database_=self.config.database,
                )
                await _make_tokens(driver, self.config)
                await self._settle(driver)
        except BaseException:
            await driver.close()
            raise
        self._driver = driver

    async def _settle(self, driver: AsyncDriver) -> None:
        """The mark at start: written at first use, else compared with the book's (a loss
        is noted here and raised by the first operation)."""
        found = await marks.query_mark(driver, self.config, marks.READ)
        with contextlib.suppress(StoreError):  # a loss: raised by the operations
            first = self.marks.settle(found)
            if first is not None:
                self.marks.made(await marks.query_mark(driver, self.config, marks.CLAIM, first))

    async def adopt(self) -> marks.Mark:
        """Accept the store as it is now (``stores adopt``): a new mark, written and recorded."""
        async with translated(self.config, "adopting"):
            mark = await marks.query_mark(self.driver, self.config, marks.REPLACE, marks.Mark.new())
        if mark is None:
            raise StoreError(f"{self.marks.where}: its mark was not written")
        self.marks.made(mark)
        return mark

    async def peek(self) -> marks.Mark | None:
        """The mark in the store now, on a driver of its own (``doctor``)."""
        return await marks.peek(self.config)

    @contextlib.asynccontextmanager
    async def _doing(self, what: str) -> AsyncIterator[None]:
        """One operation: its errors made ours, refused while the mark is gone, the mark read
        first when due (every ``CHECK_EVERY_S``, after an error)."""
        try:
            async with translated(self.config, what):
                if self.marks.due():
                    found = await marks.query_mark(self.driver, self.config, marks.READ)
                    self.marks.verify(found)
                self.marks.raise_if_lost()
                yield
        except StoreError:
            self.marks.suspect()
            raise

    async def stop(self) -> None:
        driver, self._driver = self._driver, None
        if driver is not None:
            await driver.close()

    @property
    def driver(self) -> AsyncDriver:
        if self._driver is None:
            raise StoreError("the Neo4j graph store is not started")
        return self._driver

    async def _read(self, query: LiteralString, doing: str, **params: Any) -> list[Any]:
        async with self._doing(doing):
            result = await self.driver.execute_query(
                query,
                parameters_={"ns": self.config.namespace, **params},
                routing_="r",
                database_=self.config.database,
            )
        return list(result.records)

    async def node(self, entity: str) -> Node | None:
        rows = await self._read(_NODE, "node", entity=entity)
        return _node(rows[0]) if rows else None

    async def edge(self, subject: str, relation: str, object_: str) -> Edge | None:
        rows = await self._read(_EDGE, "edge", subject=subject, relation=relation, object=object_)
        return _edge(rows[0]) if rows else None

    async def edges_from(self, subject: str, relation: str) -> tuple[Edge, ...]:
        rows = await self._read(_EDGES_FROM, "edges_from", subject=subject, relation=relation)
        return tuple(_edge(row) for row in rows)

    async def facts(
        self, entity: str, minimum: TrustLevel, *, include_deprecated: bool = False
    ) -> tuple[Edge, ...]:
        rows = await self._read(
            _FACTS,
            "facts",
            entity=entity,
            minimum=TRUST_RANK[minimum],
            include_deprecated=include_deprecated,
        )
        return tuple(_edge(row) for row in rows)

    async def apply(self, plan: GraphPlan, *, keep_changes: int = CHANGE_LEDGER) -> GraphPlan:
        ns = self.config.namespace

        async def work(tx: AsyncManagedTransaction) -> GraphPlan:
            seen = await _recorded(tx, ns, plan.change_id)
            if seen is not None:
                return seen
            await _write(tx, ns, plan, keep_changes)
            return plan

        return await self._in_write("apply", work)

    async def decide(
        self, change_id: str, planner: Planner[T], *, lock: str, keep_changes: int = CHANGE_LEDGER
    ) -> GraphPlan | T:
        """The write lock on the ``lock`` entity is taken before the planner reads, so two
        transactions deciding about one entity run one after the other: the second reads
        what the first wrote. A deadlock or a lost leader retries the whole transaction,
        planner included (it only reads, so running it again is harmless)."""
        ns = self.config.namespace

        async def work(tx: AsyncManagedTransaction) -> GraphPlan | T:
            seen = await _recorded(tx, ns, change_id)
            if seen is not None:
                return seen
            await tx.run(_LOCK, ns=ns, entity=lock)
            decided = await planner(_Reader(tx, ns))
            if isinstance(decided, GraphPlan):
                await _write(tx, ns, decided, keep_changes)
            return decided

        return await self._in_write("decide", work)

    async def _in_write(
        self, doing: str, work: Callable[[AsyncManagedTransaction], Awaitable[R]]
    ) -> R:
        async with (
            self._doing(doing),
            self.driver.session(database=self.config.database) as session,
        ):
            return await session.execute_write(work)

    async def review_queue(self) -> tuple[ReviewItem, ...]:
        rows = await self._read(_REVIEWS, "review_queue")
        return tuple(ReviewItem.model_validate_json(row["item"]) for row in rows)


class _RolledBack(Exception):
    """Ends the token transaction: raised out of it, it is rolled back, never retried."""


async def _make_tokens(driver: AsyncDriver, config: Neo4jConfig) -> None:
    """Neo4j keeps the labels, relationship type and property keys a transaction names even
    when it rolls back: with them known, the queries on an empty graph plan without a
    ``01N52`` warning (property does not exist) logged for each."""

    async def work(tx: AsyncManagedTransaction) -> None:
        await tx.run(_TOKENS, ns=config.namespace, name="\x00tokens")
        raise _RolledBack

    async with driver.session(database=config.database) as session:
        with contextlib.suppress(_RolledBack):
            await session.execute_write(work)


class _Reader:
    """The graph as one write transaction sees it (a planner's reads in ``decide``)."""

    def __init__(self, tx: AsyncManagedTransaction, ns: str) -> None:
        self._tx, self._ns = tx, ns

    async def rows(self, query: LiteralString, **params: Any) -> list[Any]:
        result = await self._tx.run(query, ns=self._ns, **params)
        return [record async for record in result]

    async def node(self, entity: str) -> Node | None:
        rows = await self.rows(_NODE, entity=entity)
        return _node(rows[0]) if rows else None

    async def edge(self, subject: str, relation: str, object_: str) -> Edge | None:
        rows = await self.rows(_EDGE, subject=subject, relation=relation, object=object_)
        return _edge(rows[0]) if rows else None

    async def edges_from(self, subject: str, relation: str) -> tuple[Edge, ...]:
        rows = await self.rows(_EDGES_FROM, subject=subject, relation=relation)
        return tuple(_edge(row) for row in rows)


async def _recorded(tx: AsyncManagedTransaction, ns: str, change_id: str) -> GraphPlan | None:
    seen = await (await tx.run(_SEEN, ns=ns, change_id=change_id)).single()
    return None if seen is None else GraphPlan.model_validate_json(seen["plan"])


async def _write(tx: AsyncManagedTransaction, ns: str, plan: GraphPlan, keep_changes: int) -> None:
    """The plan's nodes, edges and reviews, and its ledger entry (the oldest pruned)."""
    if plan.nodes:
        await tx.run(_PUT_NODES, ns=ns, nodes=[_node_row(n) for n in plan.nodes])
    if plan.edges:
        await tx.run(_PUT_EDGES, ns=ns, edges=[_edge_row(e) for e in plan.edges])
    if plan.reviews:
        first = await _take(tx, ns, "reviews", len(plan.reviews))
        reviews = [
            {"review_id": r.review_id, "item": r.model_dump_json(), "seq": first + i}
            for i, r in enumerate(plan.reviews)
        ]
        await tx.run(_PUT_REVIEWS, ns=ns, reviews=reviews)
    await tx.run(
        _PUT_CHANGE,
        ns=ns,
        change_id=plan.change_id,
        plan=plan.model_dump_json(),
        keep=keep_changes,
    )


async def _take(tx: AsyncManagedTransaction, ns: str, counter: str, count: int) -> int:
    row = await (await tx.run(_NEXT, ns=ns, counter=counter, count=count)).single()
    if row is None:  # MERGE always yields its node
        raise StoreError(f"Neo4j: counter {counter!r} returned nothing", retriable=False)
    return int(row["first"])


def _node_row(n: Node) -> dict[str, Any]:
    return {
        "entity": n.entity,
        "trust_level": n.trust_level.value,
        "trust_rank": TRUST_RANK[n.trust_level],
        "verified_by": n.verified_tool,
        "verified_at": n.verified_at_ms,
        "deprecated": n.deprecated,
    }


def _edge_row(e: Edge) -> dict[str, Any]:
    return {
        "subject": e.subject,
        "relation": e.relation,
        "object": e.object,
        "trust_level": e.trust_level.value,
        "trust_rank": TRUST_RANK[e.trust_level],
        "verified_by": e.verified_tool,
        "verified_at": e.verified_at_ms,
        "deprecated": e.deprecated,
    }


def _node(row: Any) -> Node:
    return Node(
        entity=row["entity"],
        trust_level=_LEVELS[row["trust_level"]],
        verified_tool=row["verified_by"],
        verified_at_ms=row["verified_at"],
        deprecated=bool(row["deprecated"]),
    )


def _edge(row: Any) -> Edge:
    return Edge(
        subject=row["subject"],
        relation=row["relation"],
        object=row["object"],
        trust_level=_LEVELS[row["trust_level"]],
        verified_tool=row["verified_by"],
        verified_at_ms=row["verified_at"],
        deprecated=bool(row["deprecated"]),
    )
