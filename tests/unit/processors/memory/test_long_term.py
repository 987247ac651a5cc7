"""Long-term graph: tool-verified writes only, trust-level queries, conflicts, audit records."""

from __future__ import annotations

import json
from typing import Any

from hermesbus import Envelope
from hermesbus.payloads import (
    ErrorReport,
    MemoryContext,
    MemoryFact,
    MemoryQuery,
    MemoryWrite,
    TrustLevel,
    Verification,
)

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


async def test_trust_levels_give_different_answers(session: Session) -> None:
    await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部", trust=TrustLevel.CERTIFIED))
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
    await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部", when=at(0)))
    outcome = await session.write(
        fact_write(ZHANG, "belongs_to", "dept:采购部", when=at(0), trust=TrustLevel.CERTIFIED)
    )
    assert audits(outcome.emit) == [("graph.refreshed", f"{ZHANG}|belongs_to|dept:采购部", False)]
    body = outcome.emit[0].payload.body
    assert isinstance(body, MemoryWrite)
    assert body.trust_level is TrustLevel.CERTIFIED


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
    first = await session.write(write, message_id="again")
    second = await session.write(write, message_id="again")  # the runtime crashed in between
    assert first.emit == second.emit
    assert len(first.emit) == 2
