"""The handler end to end on envelopes: the demo's cycles, facts, symbols and S5 snapshot."""

from __future__ import annotations

import json

import pytest

from hermesbus.contract.payloads import (
    MemoryContext,
    MemoryQuery,
    MemoryTier,
    MemoryWrite,
    StateSnapshot,
    TimerFired,
    TrustLevel,
    UserTurn,
)
from hermesbus.contract.snapshot import ContextSnapshot
from hermesbus.errors import ConfigError
from hermesbus.processors.memory import NAME, handle
from hermesbus.runtime import HandlerInput, SessionState, derive_id

from .helpers import T0, USER, Session, at, envelope, fact_write

ZHANG = f"user:{USER}"
TRIP = "trip:trip_shenzhen_2024_05"
REPORT = f"EXP-{derive_id('sess_456', 'report')[:8]}"


def query(**fields: object) -> MemoryQuery:
    return MemoryQuery.model_validate({"entity": ZHANG, "trust_level": "verified", **fields})


def symbol(name: str, entity: str) -> MemoryWrite:
    """What the dispatcher sends for a result's ``symbols`` entry."""
    return MemoryWrite(
        tier=MemoryTier.SHORT_TERM, key=name, value_json=json.dumps(entity), ttl_s=600
    )


async def test_a_query_answers_the_dispatcher_in_the_same_cycle(session: Session) -> None:
    context = {"cycle": "cycle-1", "tools": ["org_tool", "finance_tool"]}
    env = envelope(query(), message_id="q1", context=context, task="query_context")
    outcome = await session.send(env)
    (answer,) = outcome.emit
    assert (answer.source, answer.target) == ("memory:context", "mcp:dispatcher")
    assert answer.payload.context == context  # the cycle id is kept
    assert answer.payload.task == "query_context"
    assert answer.causation_id == "q1"
    assert (answer.trace_id, answer.session_id, answer.user_id) == ("trace_789", "sess_456", USER)
    assert (answer.timestamp, answer.parent_span_id) == (T0, "span-in")
    assert answer.span_id == derive_id("q1", "span", 0)[:16]
    assert answer.payload.body == MemoryContext()  # empty memory still answers
    assert outcome.state is None


async def test_the_same_input_gives_the_same_outcome(session: Session) -> None:
    await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部"))
    inp = HandlerInput(
        envelope(query(), message_id="q"), session.state, NAME, ports={NAME: session.stores}
    )
    assert await handle(inp) == await handle(inp)


async def test_the_expense_walkthrough(session: Session) -> None:
    """The walkthrough through memory's eyes: S1 org/finance, S2 OCR, S3 trip, S4 submit."""
    await session.send(envelope(query(), message_id="q-check-budget", when=at(0)))
    org = await session.write(fact_write(ZHANG, "belongs_to", "dept:采购部", when=at(1)))
    await session.write(symbol("user_dept", "采购部"), when=at(1))
    await session.write(symbol("invoices", "inv-001,inv-002,inv-003"), when=at(40))
    trip = [
        fact_write(f"invoice:{inv}", "occurred_during", TRIP, tool="trip_tool", when=at(50))
        for inv in ("inv-001", "inv-002", "inv-003")
    ]
    trip.append(fact_write(TRIP, "taken_by", ZHANG, tool="trip_tool", when=at(50)))
    trip_audits = [await session.write(w, when=at(50)) for w in trip]
    choice = MemoryWrite(
        tier=MemoryTier.MID_TERM, key="choice:ocr_blur_tolerance", value_json='"accept"'
    )
    await session.write(choice, when=at(60), source="mcp:dispatcher")
    submit = await session.write(
        fact_write(f"expense:{REPORT}", "approved_by", "person:张主管", tool="finance_tool"),
        when=at(90),
    )
    tasks = [e.payload.task for o in (org, *trip_audits, submit) for e in o.emit]
    assert tasks == ["graph.created"] * 6
    ask = query(symbols=("user_dept", "invoices"), preferences=("ocr_blur_tolerance",))
    (answer,) = (await session.send(envelope(ask, message_id="q-submit", when=at(95)))).emit
    context = answer.payload.body
    assert isinstance(context, MemoryContext)
    assert context.symbols == {"user_dept": "采购部", "invoices": "inv-001,inv-002,inv-003"}
    assert context.invalid == ()
    assert context.candidates == {}  # one choice is not a habit
    assert [(f.subject, f.relation, f.object) for f in context.facts] == [
        (TRIP, "taken_by", ZHANG),
        (ZHANG, "belongs_to", "dept:采购部"),
    ]
    assert all(f.trust_level is TrustLevel.VERIFIED for f in context.facts)
    trips = await session.stores.facts(TRIP)
    assert len(trips) == 4  # three invoices and the traveller
    approvals = await session.stores.facts("person:张主管")
    assert [e.key for e in approvals] == [f"expense:{REPORT}|approved_by|person:张主管"]


async def test_s5_keeps_the_unfinished_report_in_mid_term(session: Session) -> None:
    """Conversation B: "等等，住宿费超标了，先不提交" ends sess_789 in S5 with a snapshot."""
    s5 = ContextSnapshot(state_id="S5", entered_at=at(120), summary="用户暂不提交，已保存进度")
    forwarded = StateSnapshot(snapshot=s5, previous_state="S4", trigger="user_cancelled")
    await session.send(
        envelope(forwarded, message_id="snap", session_id="sess_789", target="memory:short_term")
    )
    value = {
        "label": "未完成报销流程",
        "snapshot": s5.model_dump(mode="json"),
        "facts": {"total": 8240, "currency": "CNY", "approver": "张主管"},
    }
    unfinished = MemoryWrite(
        tier=MemoryTier.MID_TERM,
        key="unfinished:sess_789",
        value_json=json.dumps(value, ensure_ascii=False),
        confirmed_by="msg-wait",
        importance=0.8,
        ttl_s=30 * 24 * 3600,
    )
    outcome = await session.write(unfinished, when=at(120), session_id="sess_789")
    assert outcome.emit == ()
    item = await session.stores.item(USER, "unfinished:sess_789", at(120))
    assert item is not None
    assert json.loads(item.value_json)["label"] == "未完成报销流程"
    assert (item.importance, item.confirmed_by) == (0.8, "msg-wait")
    assert item.expires_at_ms == item.created_at_ms + 30 * 24 * 3600 * 1000
    assert session.state.data["snapshot"]["state_id"] == "S5"


async def test_other_bodies_are_left_alone(session: Session) -> None:
    for body in (UserTurn(text="hi"), TimerFired(timer_id="t", due_at=T0, purpose="p")):
        outcome = await session.send(envelope(body))
        assert (outcome.emit, outcome.state) == ((), None)


async def test_the_port_must_be_wired() -> None:
    inp = HandlerInput(envelope(query()), SessionState(), NAME, ports={})
    with pytest.raises(ConfigError, match=r'ports\["memory"\]'):
        await handle(inp)
