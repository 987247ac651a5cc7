"""The abstract GraphStore suite: every implementation must pass it (SQLite now)."""

from __future__ import annotations

from hermesbus.contract.payloads import TrustLevel
from hermesbus.processors.memory import (
    Edge,
    GraphEvent,
    GraphPlan,
    GraphReader,
    GraphStore,
    GraphTask,
    Node,
    ReviewItem,
)


def edge(s: str, r: str, o: str, trust: TrustLevel = TrustLevel.VERIFIED, **kw: object) -> Edge:
    values: dict[str, object] = {
        "subject": s,
        "relation": r,
        "object": o,
        "trust_level": trust,
        "verified_tool": "org_tool",
        "verified_at_ms": 1_000,
    }
    return Edge.model_validate({**values, **kw})


def node(entity: str, trust: TrustLevel = TrustLevel.VERIFIED) -> Node:
    return Node(entity=entity, trust_level=trust, verified_tool="org_tool", verified_at_ms=1_000)


FIXTURE = GraphPlan(
    change_id="c1",
    nodes=(node("user:u1"), node("dept:a", TrustLevel.CERTIFIED)),
    edges=(
        edge("user:u1", "belongs_to", "dept:a", TrustLevel.CERTIFIED),
        edge("user:u1", "likes", "tea", TrustLevel.RAW),
        edge("trip:t1", "taken_by", "user:u1"),
        edge("user:u1", "belongs_to", "dept:old", deprecated=True),
        edge("user:u2", "belongs_to", "dept:a"),
    ),
    events=(GraphEvent(task=GraphTask.CREATED, edge=edge("user:u1", "belongs_to", "dept:a")),),
)


async def test_is_the_protocol(graph_store: GraphStore) -> None:
    assert isinstance(graph_store, GraphStore)


async def test_apply_stores_nodes_and_edges(graph_store: GraphStore) -> None:
    assert await graph_store.apply(FIXTURE) == FIXTURE
    assert await graph_store.node("dept:a") == node("dept:a", TrustLevel.CERTIFIED)
    assert await graph_store.node("dept:none") is None
    assert await graph_store.edge("user:u1", "likes", "tea") == FIXTURE.edges[1]
    assert await graph_store.edge("user:u1", "likes", "coffee") is None
    objects = [e.object for e in await graph_store.edges_from("user:u1", "belongs_to")]
    assert objects == ["dept:a", "dept:old"]  # deprecated edges are kept


async def test_apply_is_idempotent_by_change_id(graph_store: GraphStore) -> None:
    await graph_store.apply(FIXTURE)
    other = GraphPlan(change_id="c1", edges=(edge("x", "y", "z"),))
    assert await graph_store.apply(other) == FIXTURE  # the first plan, recorded
    assert await graph_store.edge("x", "y", "z") is None


async def test_the_redelivery_ledger_keeps_the_most_recent_changes(
    graph_store: GraphStore,
) -> None:
    for i in range(5):
        await graph_store.apply(
            GraphPlan(change_id=f"k{i}", edges=(edge("x", "y", f"{i}"),)), keep_changes=2
        )
    # the two most recent ids are still recognised: their recorded plan comes back
    recent = await graph_store.apply(GraphPlan(change_id="k4"), keep_changes=2)
    assert recent.edges == (edge("x", "y", "4"),)
    # an id pruned from the ledger is applied again as new (what the bound costs)
    again = GraphPlan(change_id="k0", edges=(edge("x", "y", "again"),))
    assert await graph_store.apply(again, keep_changes=2) == again
    assert await graph_store.edge("x", "y", "again") is not None


async def test_apply_upserts_edges_by_their_triple(graph_store: GraphStore) -> None:
    await graph_store.apply(FIXTURE)
    gone = edge("user:u1", "belongs_to", "dept:a", TrustLevel.CERTIFIED, deprecated=True)
    await graph_store.apply(GraphPlan(change_id="c2", edges=(gone,)))
    assert await graph_store.edge("user:u1", "belongs_to", "dept:a") == gone


async def test_facts_by_trust_level(graph_store: GraphStore) -> None:
    await graph_store.apply(FIXTURE)

    async def keys(level: TrustLevel, **kw: bool) -> list[str]:
        return [e.key for e in await graph_store.facts("user:u1", level, **kw)]

    assert await keys(TrustLevel.RAW) == [
        "trip:t1|taken_by|user:u1",
        "user:u1|belongs_to|dept:a",
        "user:u1|likes|tea",
    ]
    assert await keys(TrustLevel.VERIFIED) == [
        "trip:t1|taken_by|user:u1",
        "user:u1|belongs_to|dept:a",
    ]
    assert await keys(TrustLevel.CERTIFIED) == ["user:u1|belongs_to|dept:a"]
    with_old = await keys(TrustLevel.RAW, include_deprecated=True)
    assert "user:u1|belongs_to|dept:old" in with_old


async def test_review_queue_keeps_order(graph_store: GraphStore) -> None:
    first = edge("u", "belongs_to", "a")
    reviews = [
        ReviewItem(
            review_id=f"r{i}",
            edge=edge("u", "belongs_to", f"b{i}"),
            conflicts_with=first,
            queued_at_ms=i,
        )
        for i in (2, 1)
    ]
    for i, review in enumerate(reviews):
        await graph_store.apply(GraphPlan(change_id=f"c{i}", reviews=(review,)))
    assert await graph_store.review_queue() == tuple(reviews)  # in the order they came
    assert await graph_store.edge("u", "belongs_to", "b1") is None  # a review changes nothing


async def test_decide_applies_the_planners_plan_once(graph_store: GraphStore) -> None:
    read: list[tuple[Edge, ...]] = []

    async def planner(graph: GraphReader) -> GraphPlan:
        read.append(await graph.edges_from("user:u1", "belongs_to"))
        return GraphPlan(change_id="d1", edges=(edge("user:u1", "belongs_to", "dept:a"),))

    await graph_store.apply(GraphPlan(change_id="c0", edges=(edge("user:u1", "belongs_to", "x"),)))
    first = await graph_store.decide("d1", planner, lock="user:u1")
    assert read == [(edge("user:u1", "belongs_to", "x"),)]  # it read the graph as it was
    assert await graph_store.edge("user:u1", "belongs_to", "dept:a") is not None
    assert await graph_store.decide("d1", planner, lock="user:u1") == first  # the ledger's
    assert len(read) == 1  # a redelivered change is not decided again


async def test_decide_writes_nothing_for_what_is_not_a_plan(graph_store: GraphStore) -> None:
    async def refuses(graph: GraphReader) -> GraphPlan | str:
        assert await graph.node("user:u1") is None
        return "refused"

    assert await graph_store.decide("d2", refuses, lock="user:u1") == "refused"
    assert await graph_store.node("user:u1") is None
    fresh = GraphPlan(change_id="d2", edges=(edge("y", "z", "w"),))
    assert await graph_store.apply(fresh) == fresh  # d2 was never recorded
