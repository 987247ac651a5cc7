"""Short-term symbols: TTL by envelope time, named validators, clarification on invalid."""

from __future__ import annotations

import json

from hermesbus.contract.payloads import (
    ErrorReport,
    MemoryContext,
    MemoryQuery,
    MemoryTier,
    MemoryWrite,
    StateSnapshot,
    TrustLevel,
)
from hermesbus.contract.snapshot import ContextSnapshot

from .helpers import T0, Session, at, envelope, fact_write


def symbol(name: str, value: object, ttl_s: int | None = 600) -> MemoryWrite:
    return MemoryWrite(
        tier=MemoryTier.SHORT_TERM,
        key=name,
        value_json=json.dumps(value, ensure_ascii=False),
        ttl_s=ttl_s,
    )


async def ask(session: Session, *names: str, seconds: float = 0) -> MemoryContext:
    outcome = await session.send(
        envelope(MemoryQuery(symbols=names), message_id=f"q{seconds}", when=at(seconds))
    )
    (answer,) = outcome.emit
    assert isinstance(answer.payload.body, MemoryContext)
    return answer.payload.body


async def test_a_symbol_is_valid_until_its_ttl_by_envelope_time(session: Session) -> None:
    outcome = await session.write(symbol("user_dept", "采购部"))
    assert outcome.emit == ()  # a write succeeds silently
    assert session.state.data["symbols"]["user_dept"] == {
        "entity": "采购部",
        "created_ms": int(T0.timestamp() * 1000),
        "ttl_s": 600,
        "validator": "present",
    }
    assert (await ask(session, "user_dept", seconds=599.999)).symbols == {"user_dept": "采购部"}
    expired = await ask(session, "user_dept", seconds=600)
    assert (expired.symbols, expired.invalid) == ({}, ("user_dept",))


async def test_unknown_symbols_are_invalid_too(session: Session) -> None:
    await session.write(symbol("invoices", "inv-001,inv-002,inv-003"))
    context = await ask(session, "invoices", "这两个表")
    assert context.symbols == {"invoices": "inv-001,inv-002,inv-003"}
    assert context.invalid == ("这两个表",)


async def test_the_graph_validator_needs_a_verified_node(session: Session) -> None:
    await session.write(fact_write("user:u_xyz789", "belongs_to", "dept:采购部"))
    await session.write(fact_write("x:raw", "likes", "y:raw", trust=TrustLevel.RAW))
    await session.write(symbol("dept", {"entity": "dept:采购部", "validator": "graph"}))
    await session.write(symbol("gone", {"entity": "dept:市场部", "validator": "graph"}))
    await session.write(symbol("rawish", {"entity": "x:raw", "validator": "graph"}))
    context = await ask(session, "dept", "gone", "rawish")
    assert context.symbols == {"dept": "dept:采购部"}
    assert context.invalid == ("gone", "rawish")


async def test_an_unknown_validator_is_refused(session: Session) -> None:
    outcome = await session.write(symbol("a", {"entity": "t1", "validator": "table_exists"}))
    (report,) = outcome.emit
    assert report.target == "mcp:dispatcher"
    assert isinstance(report.payload.body, ErrorReport)
    assert report.payload.body.code == "memory.unknown_validator"
    assert report.payload.body.component == "memory:short_term"
    assert "present" in report.payload.body.advice
    assert "a" not in session.state.data.get("symbols", {})


async def test_a_symbol_without_a_string_entity_is_refused(session: Session) -> None:
    (report,) = (await session.write(symbol("n", [1, 2]))).emit
    assert isinstance(report.payload.body, ErrorReport)
    assert report.payload.body.code == "memory.bad_value"


async def test_expired_symbols_leave_the_state_and_ttl_defaults(session: Session) -> None:
    await session.write(symbol("old", "a", ttl_s=1))
    await session.write(symbol("new", "b", ttl_s=None), when=at(5))
    symbols = session.state.data["symbols"]
    assert set(symbols) == {"new"}
    assert symbols["new"]["ttl_s"] == 600  # HERMES_MEMORY_SYMBOL_TTL_S default


async def test_the_latest_snapshot_is_kept_and_s5_ends_the_symbols(session: Session) -> None:
    await session.write(symbol("user_dept", "采购部"))
    snap = ContextSnapshot(state_id="S4", entered_at=T0, summary="报销单已校验通过")
    body = StateSnapshot(snapshot=snap, previous_state="S3.1", trigger="review_passed")
    outcome = await session.send(envelope(body, message_id="s1", target="memory:short_term"))
    assert outcome.emit == ()
    kept = session.state.data["snapshot"]
    assert (kept["state_id"], kept["previous_state"], kept["trigger"]) == (
        "S4",
        "S3.1",
        "review_passed",
    )
    assert "user_dept" in session.state.data["symbols"]
    end = StateSnapshot(snapshot=ContextSnapshot(state_id="S5", entered_at=T0), previous_state="S4")
    await session.send(envelope(end, message_id="s2", target="memory:short_term"))
    assert session.state.data["snapshot"]["state_id"] == "S5"
    assert session.state.data["symbols"] == {}
