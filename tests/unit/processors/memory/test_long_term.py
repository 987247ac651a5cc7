"""Long-term graph: tool-verified writes only, trust-level queries, conflicts, audit records."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from hermesbus import Envelope
from hermesbus.contract.payloads import (
    ErrorReport,
    MemoryContext,
    MemoryFact,
    MemoryQuery,
    MemoryWrite,
    TrustLevel,
    Verification,
)
from hermesbus.processors.memory import Edge, GraphPlan

from .helpers import Session, at, envelope, fact_write, ms

ZHANG = "user:u_xyz789"


def audits(emitted: tuple[Envelope, ...]) -> list[tuple[str, str, object]]:
    """(task, key, deprecated) of each audit envelope, checking where each goes."""
    out: list[tuple[str, str, object]] = []
    for env in emitted:
        assert (env.target, env.source) == ("audit:graph", "memory:long_term")
        assert isinstance(env.payload.body, MemoryWrite)
        out.append((env.payload.task, env.payload.body.key, env.payload.context["deprecated"]))
    return out


async def facts(session: Session, entity: str, trust: TrustLevel) -> tuple[MemoryFact, ...]:
    query = MemoryQuery(entity=entity, trust_level=trust)
    (answer,) = (await session.send(envelope(query, message_id=f"q-{trust}"))).emit
    assert isinstance(answer.payload.body, MemoryContext)
    return answer.payload.body.facts


async def test_a_verified_fact_becomes_an_edge_and_an_audit_record(session: Session) -> None:
    outcome = await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部", when=at(1)))
    assert audits(outcome.emit) == [("graph.created", f"{ZHANG}|belongs_to|dept:采购部", False)]
    body = outcome.emit[0].payload.body
    assert isinstance(body, MemoryWrite)
    assert body.verified_by == Verification(tool="org_tool", verified_at=at(1))
    assert json.loads(body.value_json) == {
        "subject": ZHANG,
        "relation": "belongs_to",
        "object": "dept:采购部",
    }
    edge = await session.stores.edge(ZHANG, "belongs_to", "dept:采购部")
    assert edge is not None
    assert (edge.verified_tool, edge.verified_at_ms, edge.trust_level) == (
        "org_tool",
        ms(at(1)),
        TrustLevel.VERIFIED,
    )
    node = await session.stores.graph.node("dept:采购部")
    assert node is not None
    assert node.trust_level is TrustLevel.VERIFIED


async def certify(session: Session, subject: str, relation: str, object_: str) -> None:
    """The explicit path to ``certified``: a plan applied to the graph store, no envelope."""
    edge = Edge(
        subject=subject,
        relation=relation,
        object=object_,
        trust_level=TrustLevel.CERTIFIED,
        verified_tool="hr_review",
        verified_at_ms=ms(at(0)),
    )
    await session.stores.graph.apply(GraphPlan(change_id=f"certify-{edge.key}", edges=(edge,)))


async def test_trust_levels_give_different_answers(session: Session) -> None:
    await certify(session, ZHANG, "belongs_to", "dept:采购部")
    await session.write(fact_write("trip:t1", "taken_by", ZHANG, tool="trip_tool"))
    await session.write(fact_write(ZHANG, "likes", "drink:tea", trust=TrustLevel.RAW))
    raw = await facts(session, ZHANG, TrustLevel.RAW)
    verified = await facts(session, ZHANG, TrustLevel.VERIFIED)
    certified = await facts(session, ZHANG, TrustLevel.CERTIFIED)
    assert [(f.relation, f.object) for f in raw] == [
        ("taken_by", ZHANG),
        ("belongs_to", "dept:采购部"),
        ("likes", "drink:tea"),
    ]
    assert [f.relation for f in verified] == ["taken_by", "belongs_to"]
    assert [(f.relation, f.trust_level) for f in certified] == [
        ("belongs_to", TrustLevel.CERTIFIED)
    ]
    assert verified[0].verified_by == Verification(tool="trip_tool", verified_at=at(0))


async def test_rival_verifications_under_five_minutes_go_to_review(session: Session) -> None:
    await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部", when=at(0)))
    outcome = await session.write(
        fact_write(ZHANG, "belongs_to", "dept:市场部", tool="finance_tool", when=at(299.999))
    )
    assert audits(outcome.emit) == [("graph.review", f"{ZHANG}|belongs_to|dept:市场部", False)]
    assert outcome.emit[0].payload.context["related"] == f"{ZHANG}|belongs_to|dept:采购部"
    (review,) = await session.stores.review_queue()
    assert (review.edge.object, review.conflicts_with.object) == ("dept:市场部", "dept:采购部")
    assert await session.stores.edge(ZHANG, "belongs_to", "dept:市场部") is None  # no change
    live = await session.stores.facts(ZHANG)
    assert [(e.object, e.deprecated) for e in live] == [("dept:采购部", False)]


async def test_rivals_five_minutes_apart_newest_wins_old_deprecated(session: Session) -> None:
    await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部", when=at(0)))
    outcome = await session.write(fact_write(ZHANG, "belongs_to", "dept:市场部", when=at(300)))
    assert audits(outcome.emit) == [
        ("graph.deprecated", f"{ZHANG}|belongs_to|dept:采购部", True),
        ("graph.created", f"{ZHANG}|belongs_to|dept:市场部", False),
    ]
    everything = await session.stores.facts(ZHANG, TrustLevel.RAW, include_deprecated=True)
    assert [(e.object, e.deprecated) for e in everything] == [
        ("dept:市场部", False),
        ("dept:采购部", True),  # kept, marked deprecated
    ]
    assert [f.object for f in await facts(session, ZHANG, TrustLevel.RAW)] == ["dept:市场部"]
    assert await session.stores.review_queue() == ()


async def test_an_older_verification_loses_and_is_kept_deprecated(session: Session) -> None:
    await session.write(fact_write(ZHANG, "belongs_to", "dept:市场部", when=at(600)))
    outcome = await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部", when=at(0)))
    assert audits(outcome.emit) == [("graph.deprecated", f"{ZHANG}|belongs_to|dept:采购部", True)]
    assert [f.object for f in await facts(session, ZHANG, TrustLevel.RAW)] == ["dept:市场部"]


async def test_a_repeated_fact_refreshes_its_verification(session: Session) -> None:
    await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部", when=at(0)))
    outcome = await session.write(
        fact_write(ZHANG, "belongs_to", "dept:采购部", tool="hr_tool", when=at(30))
    )
    key = f"{ZHANG}|belongs_to|dept:采购部"
    assert audits(outcome.emit) == [("graph.refreshed", key, False)]
    body = outcome.emit[0].payload.body
    assert isinstance(body, MemoryWrite)
    assert body.verified_by == Verification(tool="hr_tool", verified_at=at(30))
    edge = await session.stores.edge(ZHANG, "belongs_to", "dept:采购部")
    assert edge is not None
    assert (edge.verified_tool, edge.verified_at_ms) == ("hr_tool", ms(at(30)))


async def test_a_higher_trust_refresh_is_audited_with_the_new_trust(session: Session) -> None:
    await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部", trust=TrustLevel.RAW))
    outcome = await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部"))
    assert audits(outcome.emit) == [("graph.refreshed", f"{ZHANG}|belongs_to|dept:采购部", False)]
    body = outcome.emit[0].payload.body
    assert isinstance(body, MemoryWrite)
    assert body.trust_level is TrustLevel.VERIFIED


async def test_a_claimed_certification_is_stored_as_verified(session: Session) -> None:
    claimed = fact_write(ZHANG, "belongs_to", "dept:采购部", trust=TrustLevel.CERTIFIED)
    outcome = await session.write(claimed)
    body = outcome.emit[0].payload.body
    assert isinstance(body, MemoryWrite) and body.trust_level is TrustLevel.VERIFIED
    edge = await session.stores.edge(ZHANG, "belongs_to", "dept:采购部")
    assert edge is not None and edge.trust_level is TrustLevel.VERIFIED
    node = await session.stores.graph.node("dept:采购部")
    assert node is not None and node.trust_level is TrustLevel.VERIFIED
    assert await facts(session, ZHANG, TrustLevel.CERTIFIED) == ()


async def test_a_forwarded_refresh_keeps_an_explicit_certification(session: Session) -> None:
    await certify(session, ZHANG, "belongs_to", "dept:采购部")
    await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部", when=at(30)))
    edge = await session.stores.edge(ZHANG, "belongs_to", "dept:采购部")
    assert edge is not None
    assert (edge.trust_level, edge.verified_at_ms) == (TrustLevel.CERTIFIED, ms(at(30)))


async def test_a_verification_dated_in_the_future_is_refused(session: Session) -> None:
    future = fact_write(ZHANG, "belongs_to", "dept:evil", when=datetime(2099, 1, 1, tzinfo=UTC))
    (report,) = (await session.write(future, when=at(0))).emit
    assert isinstance(report.payload.body, ErrorReport)
    assert (report.target, report.payload.body.code) == (
        "mcp:dispatcher",
        "memory.future_verification",
    )
    assert await session.stores.facts(ZHANG, TrustLevel.RAW, include_deprecated=True) == ()
    # the true fact, verified later, is created, not deprecated on arrival
    true = await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部", when=at(86_400)))
    assert audits(true.emit) == [("graph.created", f"{ZHANG}|belongs_to|dept:采购部", False)]


async def test_the_verification_may_lead_the_write_by_the_skew_only(session: Session) -> None:
    inside = await session.write(fact_write(ZHANG, "likes", "drink:tea", when=at(60)), when=at(0))
    assert audits(inside.emit) == [("graph.created", f"{ZHANG}|likes|drink:tea", False)]
    outside = fact_write(ZHANG, "likes", "drink:coffee", when=at(60.001))
    (report,) = (await session.write(outside, when=at(0))).emit
    assert isinstance(report.payload.body, ErrorReport)
    assert report.payload.body.code == "memory.future_verification"


async def test_a_refresh_that_changes_nothing_is_not_audited(session: Session) -> None:
    await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部", when=at(30)))
    same = await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部", when=at(30)))
    older = await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部", when=at(0)))
    assert (same.emit, older.emit) == ((), ())
    edge = await session.stores.edge(ZHANG, "belongs_to", "dept:采购部")
    assert edge is not None
    assert edge.verified_at_ms == ms(at(30))


async def test_multi_valued_relations_do_not_conflict(session: Session) -> None:
    await session.write(fact_write(ZHANG, "responsible_for", "contract:A", when=at(0)))
    outcome = await session.write(fact_write(ZHANG, "responsible_for", "contract:B", when=at(1)))
    assert audits(outcome.emit) == [("graph.created", f"{ZHANG}|responsible_for|contract:B", False)]
    assert len(await session.stores.facts(ZHANG)) == 2


async def test_writes_without_verification_or_from_others_are_refused(session: Session) -> None:
    cases: list[tuple[dict[str, Any], MemoryWrite, str]] = [
        ({}, fact_write(ZHANG, "belongs_to", "dept:x", verified=False), "memory.unverified_fact"),
        (
            {"source": "conversation:S2"},
            fact_write(ZHANG, "belongs_to", "dept:x"),
            "memory.untrusted_source",
        ),
        ({}, fact_write(ZHANG, "belongs|to", "dept:x"), "memory.bad_key"),
        (
            {},
            fact_write(ZHANG, "belongs_to", "dept:x").model_copy(
                update={"value_json": json.dumps({"subject": "user:other"})}
            ),
            "memory.bad_value",
        ),
    ]
    for fields, write, code in cases:
        (report,) = (await session.write(write, **fields)).emit
        assert report.target == "mcp:dispatcher"
        assert isinstance(report.payload.body, ErrorReport)
        assert (report.payload.body.component, report.payload.body.code) == (
            "memory:long_term",
            code,
        )
    assert await session.stores.facts(ZHANG, TrustLevel.RAW, include_deprecated=True) == ()


async def test_a_redelivered_write_reports_the_same_change(session: Session) -> None:
    await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部", when=at(0)))
    write = fact_write(ZHANG, "belongs_to", "dept:市场部", when=at(400))
    before = session.state
    first = await session.write(write, message_id="again")
    # the runtime crashed before it saved the state: the same envelope runs again on it
    env = envelope(write, message_id="again", when=at(400), target="memory:long_term")
    second = await session.unsaved(env, before)
    assert first.emit == second.emit
    assert len(first.emit) == 2
