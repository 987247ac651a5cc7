"""What every tier refuses before it looks at a write: other writers and unbounded TTLs."""

from __future__ import annotations

import pytest

from hermesbus import Envelope
from hermesbus.contract.payloads import (
    ErrorReport,
    MemoryContext,
    MemoryQuery,
    MemoryTier,
    MemoryWrite,
)
from hermesbus.processors.memory import MAX_TTL_S

from .helpers import Session, envelope


def report_of(emitted: tuple[Envelope, ...]) -> tuple[str, str]:
    (report,) = emitted
    body = report.payload.body
    assert report.target == "mcp:dispatcher"
    assert isinstance(body, ErrorReport)
    return body.component, body.code


@pytest.mark.parametrize(
    ("write", "component"),
    [
        (
            MemoryWrite(
                tier=MemoryTier.MID_TERM, key="pref:lang", value_json='"en"', confirmed_by="x"
            ),
            "memory:mid_term",
        ),
        (
            MemoryWrite(tier=MemoryTier.MID_TERM, key="choice:x", value_json='"a"'),
            "memory:mid_term",
        ),
        (
            MemoryWrite(tier=MemoryTier.SHORT_TERM, key="dept", value_json='"d"'),
            "memory:short_term",
        ),
    ],
)
@pytest.mark.parametrize("source", ["app:evil", "conversation:S4", "tool:org_tool"])
async def test_only_the_dispatcher_writes_any_tier(
    session: Session, write: MemoryWrite, component: str, source: str
) -> None:
    outcome = await session.write(write, source=source)
    assert report_of(outcome.emit) == (component, "memory.untrusted_source")
    assert outcome.state is None  # no symbol kept
    assert await session.stores.preferences.preference("u_xyz789", "lang") is None
    assert await session.stores.preferences.choices("u_xyz789", "x") == ()


@pytest.mark.parametrize("ttl_s", [MAX_TTL_S + 1, 2**53, 2**62])
@pytest.mark.parametrize(
    ("tier", "key"),
    [
        (MemoryTier.MID_TERM, "note"),
        (MemoryTier.MID_TERM, "pref:lang"),
        (MemoryTier.SHORT_TERM, "dept"),
    ],
)
async def test_a_ttl_beyond_ten_years_is_refused(
    session: Session, tier: MemoryTier, key: str, ttl_s: int
) -> None:
    write = MemoryWrite(tier=tier, key=key, value_json='"v"', ttl_s=ttl_s, confirmed_by="m0")
    outcome = await session.write(write)
    assert report_of(outcome.emit) == (f"memory:{tier.value}", "memory.bad_ttl")
    assert await session.stores.items("u_xyz789") == ()


async def test_a_ttl_of_ten_years_is_kept(session: Session) -> None:
    note = MemoryWrite(tier=MemoryTier.MID_TERM, key="note", value_json='"v"', ttl_s=MAX_TTL_S)
    symbol = MemoryWrite(tier=MemoryTier.SHORT_TERM, key="dept", value_json='"d"', ttl_s=MAX_TTL_S)
    assert (await session.write(note)).emit == ()
    assert (await session.write(symbol)).emit == ()
    (item,) = await session.stores.items("u_xyz789")
    assert item.expires_at_ms == item.created_at_ms + MAX_TTL_S * 1000
    query = MemoryQuery(symbols=("dept",))
    (answer,) = (await session.send(envelope(query, message_id="q"))).emit
    assert isinstance(answer.payload.body, MemoryContext)
    assert answer.payload.body.symbols == {"dept": "d"}
