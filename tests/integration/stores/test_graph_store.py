"""The GraphStore suite against a real Neo4j: the very tests SQLite passes (imported from
the unit suite, so the assertions cannot drift apart), then what only Neo4j promises: its
constraints, properties on the relationships, and Cypher that is never built from strings.
"""

from __future__ import annotations

import ast
import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.neo4j import Neo4jConfig, Neo4jGraphStore
from hermesbus.connectors.neo4j import graph as neo4j_graph
from hermesbus.contract.payloads import MemoryWrite, TrustLevel
from hermesbus.processors.memory import GraphPlan, GraphReader, GraphStore, MemorySettings
from hermesbus.processors.memory._emit import Refused
from hermesbus.processors.memory._graph import plan_write
from tests.unit.processors.memory.helpers import DISPATCHER, at, fact_write, ms
from tests.unit.processors.memory.test_graph_store import (  # the shared suite
    FIXTURE,
    edge,
    test_apply_is_idempotent_by_change_id,
    test_apply_stores_nodes_and_edges,
    test_apply_upserts_edges_by_their_triple,
    test_decide_applies_the_planners_plan_once,
    test_decide_writes_nothing_for_what_is_not_a_plan,
    test_facts_by_trust_level,
    test_is_the_protocol,
    test_review_queue_keeps_order,
    test_the_redelivery_ledger_keeps_the_most_recent_changes,
)

__all__ = [
    "test_apply_is_idempotent_by_change_id",
    "test_apply_stores_nodes_and_edges",
    "test_apply_upserts_edges_by_their_triple",
    "test_decide_applies_the_planners_plan_once",
    "test_decide_writes_nothing_for_what_is_not_a_plan",
    "test_facts_by_trust_level",
    "test_is_the_protocol",
    "test_review_queue_keeps_order",
    "test_the_redelivery_ledger_keeps_the_most_recent_changes",
]

CONNECTOR = Path(neo4j_graph.__file__).parent
PASSED_ON = {"statement", "query"}
"""The two names a query is passed on under: the loop over ``SCHEMA`` (a tuple of
literals) and ``_read``'s parameter, whose callers are held to constants here too."""


@pytest.fixture
async def graph_store(neo4j_url: str, unique: str, book: MarkBook) -> AsyncIterator[GraphStore]:
    """A namespace of its own on the run's server (Community has one database)."""
    config = Neo4jConfig(url=neo4j_url, namespace=f"t{unique}")
    async with Neo4jGraphStore(config, book=book) as store:
        yield store


async def test_facts_carry_who_verified_them_when_and_how_trusted(
    graph_store: Neo4jGraphStore,
) -> None:
    await graph_store.apply(FIXTURE)
    rows = await graph_store.driver.execute_query(
        "MATCH (s:Entity {ns: $ns, name: 'user:u1'})-[r:FACT {relation: 'belongs_to'}]->"
        "(o:Entity {name: 'dept:a'}) RETURN properties(r) AS props",
        ns=graph_store.config.namespace,
    )
    props = rows.records[0]["props"]
    assert props["verified_by"] == "org_tool" and props["verified_at"] == 1_000
    assert props["trust_level"] == "certified" and props["deprecated"] is False


async def test_queries_never_return_properties_they_do_not_name(
    graph_store: Neo4jGraphStore,
) -> None:
    await graph_store.apply(FIXTURE)
    await graph_store.driver.execute_query(  # something sensitive stored beside a fact
        "MATCH (:Entity {ns: $ns, name: 'user:u1'})-[r:FACT]->() SET r.raw_note = 'id 1234'",
        ns=graph_store.config.namespace,
    )
    facts = await graph_store.facts("user:u1", TrustLevel.RAW, include_deprecated=True)
    assert facts and all("raw_note" not in fact.model_dump() for fact in facts)
    assert all(
        f.trust_level is not TrustLevel.RAW
        for f in await graph_store.facts("user:u1", TrustLevel.VERIFIED)
    )


async def test_constraints_and_indexes_are_made_at_start(graph_store: Neo4jGraphStore) -> None:
    rows = await graph_store.driver.execute_query("SHOW CONSTRAINTS YIELD name RETURN name")
    names = {r["name"] for r in rows.records}
    assert {"hermes_entity", "hermes_change", "hermes_review", "hermes_counter"} <= names
    rows = await graph_store.driver.execute_query("SHOW INDEXES YIELD name RETURN name")
    assert {"hermes_fact_relation", "hermes_fact_trust"} <= {r["name"] for r in rows.records}


AT_START = ("_TOKENS", "_ONE_COUNTER_EACH")
"""Run once at start, never per record: the rolled-back token maker (it only creates) and
the tidy-up of counters made before their constraint (it must see them all)."""
QUERIES = {
    name: value
    for name, value in vars(neo4j_graph).items()
    if name.startswith("_") and name.isupper() and isinstance(value, str) and name not in AT_START
}
"""Every query the store runs for memory's reads and writes."""
SCANS = ("AllNodesScan", "NodeByLabelScan", "DirectedAllRelationshipsScan", "RelationshipTypeScan")


def _operators(plan: dict[str, Any]) -> list[str]:
    """The plan's operators, root first (``NodeUniqueIndexSeek``, without ``@neo4j``)."""
    name = str(plan["operatorType"]).split("@", maxsplit=1)[0]
    return [name] + [op for child in plan.get("children", ()) for op in _operators(child)]


async def test_every_query_starts_from_an_index_seek_never_a_scan(
    graph_store: Neo4jGraphStore,
) -> None:
    """A MERGE on the ledger's counter once scanned every namespace's counters (no index
    for it): each write paid for the whole database. EXPLAIN plans, runs nothing."""
    assert len(QUERIES) >= 12
    params = {
        "ns": "x", "entity": "e", "subject": "s", "relation": "r", "object": "o", "minimum": 0,
        "include_deprecated": False, "change_id": "c", "plan": "{}", "keep": 5, "count": 1,
        "counter": "k", "nodes": [], "edges": [], "reviews": [],
    }  # fmt: skip
    for name, query in QUERIES.items():
        result = await graph_store.driver.execute_query("EXPLAIN " + query, params)
        plan = result.summary.plan
        assert plan is not None, name
        operators = _operators(plan)
        assert not [op for op in operators if op in SCANS], (name, operators)
        assert any("IndexSeek" in op for op in operators), (name, operators)


async def test_a_new_graph_store_logs_no_warning_for_its_own_queries(
    neo4j_url: str, unique: str, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """No ``01N00`` (deprecated ``CALL {}``) or ``01N52`` (a property not known yet): the
    driver logged one per query, and read as failures in a demo's output."""
    with caplog.at_level("WARNING", logger="neo4j.notifications"):
        config = Neo4jConfig(url=neo4j_url, namespace=f"w{unique}")
        async with Neo4jGraphStore(config, book=MarkBook(tmp_path)) as store:
            assert await store.facts("user:nobody", TrustLevel.RAW) == ()
            assert await store.node("user:nobody") is None
            assert await store.review_queue() == ()
    assert [r.getMessage() for r in caplog.records if r.name == "neo4j.notifications"] == []


def test_the_start_makes_every_label_and_property_the_queries_name() -> None:
    """What keeps the ``01N52`` warnings away on a new database (the test above cannot:
    the run's shared server has every token by the time it runs): each ``:Label``,
    ``:TYPE`` and ``x.property`` of every query appears in ``_TOKENS``."""
    made = set(re.findall(r"[:.]([A-Za-z_]+)", neo4j_graph._TOKENS))
    made |= set(re.findall(r"([a-z_]+):", neo4j_graph._TOKENS))  # {ns: ..., name: ...}
    for name, query in QUERIES.items():
        rows = set(re.findall(r"UNWIND \$\w+ AS (\w+)", query))  # maps, not nodes
        body = re.sub(r"\$[a-z_]+", "", query)  # parameters are not tokens
        named = {p for v, p in re.findall(r"\b([a-z]\w*)\.([a-z_]+)\b", body) if v not in rows}
        named |= set(re.findall(r"[(\[]\w*:([A-Z][A-Za-z]+)", body))  # (x:Label), [r:TYPE]
        named |= set(re.findall(r"[{,]\s*([a-z_]+):", body))  # {property: ...}
        assert named <= made, (name, sorted(named - made))


async def test_namespaces_do_not_see_each_other(
    neo4j_url: str, unique: str, tmp_path: Path
) -> None:
    one = Neo4jGraphStore(
        Neo4jConfig(url=neo4j_url, namespace=f"a{unique}"), book=MarkBook(tmp_path)
    )
    two = Neo4jGraphStore(
        Neo4jConfig(url=neo4j_url, namespace=f"b{unique}"), book=MarkBook(tmp_path)
    )
    async with one, two:
        await one.apply(GraphPlan(change_id="c1", edges=(edge("x", "y", "z"),)))
        assert await one.edge("x", "y", "z") is not None
        assert await two.edge("x", "y", "z") is None
        assert await two.apply(GraphPlan(change_id="c1")) == GraphPlan(change_id="c1")


def test_every_cypher_query_is_a_literal_with_parameters() -> None:
    """No query of the connector is built from strings: every query passed to the driver
    is a string literal or a module constant bound to one, and no f-string, ``%`` or
    ``.format`` ever holds Cypher."""
    checked = 0
    for path in sorted(CONNECTOR.glob("*.py")):
        tree = ast.parse(path.read_text())
        constants = {
            target.id
            for node in tree.body
            if isinstance(node, ast.AnnAssign | ast.Assign)
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name) and _literal(node.value)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                text = "".join(str(v.value) for v in node.values if isinstance(v, ast.Constant))
                assert not _cypher(text), f"{path.name}:{node.lineno}: an f-string holds Cypher"
            if isinstance(node, ast.Call) and _called(node) in {"run", "execute_query", "_read"}:
                query = node.args[0] if node.args else None
                ok = query is not None and (
                    _literal(query)
                    or (
                        isinstance(query, ast.Name)
                        and (query.id in constants or query.id in {"statement", "query"})
                    )
                )
                assert ok, f"{path.name}:{node.lineno}: {_called(node)}() gets a built query"
                checked += 1
    assert checked >= 10  # the walk saw the connector's queries (node, edge, facts, apply...)


def _literal(node: ast.expr | None) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # implicit concatenation
        return _literal(node.left) and _literal(node.right)
    if isinstance(node, ast.Tuple):
        return all(_literal(e) for e in node.elts)
    return False


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _cypher(text: str) -> bool:
    return any(word in text.upper() for word in ("MATCH ", "MERGE ", "CREATE ", "DELETE "))


async def test_two_writers_of_one_subject_decide_one_after_the_other(
    neo4j_url: str, unique: str, tmp_path: Path
) -> None:
    """Two workers verify conflicting single-valued facts about one user at once. Each
    planner reads, then dawdles before it decides: were the reads not in the write
    transaction behind the subject's lock, both would see no rival and both facts would
    stay live. Decided one after the other, the newer verification wins and the older is
    deprecated, whichever ran first."""
    config = Neo4jConfig(url=neo4j_url, namespace=f"c{unique}")
    settings = MemorySettings()
    early = fact_write("user:u1", "belongs_to", "dept:a", when=at(0))
    late = fact_write("user:u1", "belongs_to", "dept:b", when=at(600))  # 10 minutes on
    async with (
        Neo4jGraphStore(config, book=MarkBook(tmp_path)) as one,
        Neo4jGraphStore(config, book=MarkBook(tmp_path)) as two,
    ):

        async def decide(store: Neo4jGraphStore, write: MemoryWrite, change: str) -> object:
            async def planner(graph: GraphReader) -> GraphPlan | Refused:
                plan = await plan_write(
                    write, DISPATCHER, change, graph, settings, now_ms=ms(at(700))
                )
                await asyncio.sleep(0.3)  # the other writer reads meanwhile, if it can
                return plan

            return await store.decide(change, planner, lock="user:u1")

        await asyncio.gather(decide(one, late, "w-late"), decide(two, early, "w-early"))
        edges = await one.edges_from("user:u1", "belongs_to")
    live = [(e.object, e.deprecated) for e in edges]
    assert live == [("dept:a", True), ("dept:b", False)]
