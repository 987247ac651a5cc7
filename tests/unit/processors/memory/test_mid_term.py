"""Mid-term memory: confirmed preferences only, repeated choices as candidates, budgets."""

from __future__ import annotations

import json

from hermesbus.contract.payloads import (
    ErrorReport,
    MemoryContext,
    MemoryQuery,
    MemoryTier,
    MemoryWrite,
)

from .helpers import USER, Session, at, envelope, ms


def mid(key: str, value: object, **fields: object) -> MemoryWrite:
    return MemoryWrite.model_validate(
        {
            "tier": MemoryTier.MID_TERM,
            "key": key,
            "value_json": json.dumps(value, ensure_ascii=False),
            **fields,
        }
    )


async def ask(session: Session, *names: str, seconds: float = 0) -> MemoryContext:
    query = MemoryQuery(preferences=names)
    asked = f"q{seconds}-{len(session.harness.handled)}"  # a new envelope each time
    outcome = await session.send(envelope(query, message_id=asked, when=at(seconds)))
    (answer,) = outcome.emit
    assert isinstance(answer.payload.body, MemoryContext)
    return answer.payload.body


async def test_a_preference_without_confirmation_is_refused(session: Session) -> None:
    outcome = await session.write(
        mid("pref:ocr_blur_tolerance", "accept"), source="mcp:dispatcher", context={"cycle": "c1"}
    )
    (report,) = outcome.emit
    body = report.payload.body
    assert isinstance(body, ErrorReport)
    assert (report.target, report.source) == ("mcp:dispatcher", "memory:mid_term")
    assert (body.component, body.code) == ("memory:mid_term", "memory.unconfirmed_preference")
    assert "confirmed_by" in body.message
    assert report.payload.context == {"cycle": "c1"}
    assert report.causation_id == "w1"
    assert await session.stores.preference(USER, "ocr_blur_tolerance") is None


async def test_a_confirmed_preference_is_stored_and_returned(session: Session) -> None:
    write = mid("pref:ocr_blur_tolerance", "accept", confirmed_by="msg-yes")
    assert (await session.write(write, when=at(30))).emit == ()
    pref = await session.stores.preference(USER, "ocr_blur_tolerance")
    assert pref is not None
    assert pref.key == f"pref:{USER}:ocr_blur_tolerance"
    assert (pref.value_json, pref.updated_at_ms, pref.confirmed_by) == (
        '"accept"',
        ms(at(30)),
        "msg-yes",
    )
    context = await ask(session, "ocr_blur_tolerance", "lang")
    assert context.preferences == {"ocr_blur_tolerance": "accept"}
    assert context.candidates == {}


async def test_three_identical_choices_make_a_candidate(session: Session) -> None:
    for i in range(2):
        await session.write(mid("choice:ocr_blur_tolerance", "accept"), when=at(i))
    await session.write(mid("choice:ocr_blur_tolerance", "reupload"), when=at(3))
    assert (await ask(session, "ocr_blur_tolerance")).candidates == {}  # only 2 identical
    await session.write(mid("choice:ocr_blur_tolerance", "accept"), when=at(4))
    context = await ask(session, "ocr_blur_tolerance", "other", seconds=5)
    assert context.candidates == {"ocr_blur_tolerance": "accept"}
    assert context.preferences == {}
    assert (await ask(session)).candidates == {}  # only names asked for
    confirmed = mid("pref:ocr_blur_tolerance", "accept", confirmed_by="msg-yes")
    await session.write(confirmed)
    context = await ask(session, "ocr_blur_tolerance", seconds=6)
    assert (context.preferences, context.candidates) == ({"ocr_blur_tolerance": "accept"}, {})


async def test_a_redelivered_choice_counts_once(session: Session) -> None:
    for _ in range(3):
        await session.write(mid("choice:x", "a"), message_id="same")
    assert (await ask(session, "x")).candidates == {}
    (count,) = await session.stores.choices(USER, "x")
    assert count.count == 1


async def test_items_expire_by_envelope_time(session: Session) -> None:
    await session.write(mid("warning:住宿费", "接近上限", ttl_s=60), when=at(0))
    assert [i.key for i in await session.stores.items(USER, at(59))] == ["warning:住宿费"]
    assert await session.stores.items(USER, at(60)) == ()
    await session.write(mid("later", 1), when=at(61))  # a write purges the expired
    assert [i.key for i in await session.stores.items(USER)] == ["later"]


async def test_the_budget_evicts_least_important_then_oldest(session: Session) -> None:
    """The fixture's budget is 3 items per user."""
    await session.write(mid("a-low-old", 1, importance=0.2), when=at(1))
    await session.write(mid("b-high", 1, importance=0.9), when=at(2))
    await session.write(mid("c-low-new", 1, importance=0.2), when=at(3))
    await session.write(mid("d-mid", 1, importance=0.5), when=at(4))
    assert [i.key for i in await session.stores.items(USER)] == ["b-high", "c-low-new", "d-mid"]
    await session.write(mid("e-mid", 1, importance=0.5), when=at(5))
    assert [i.key for i in await session.stores.items(USER)] == ["b-high", "d-mid", "e-mid"]
    await session.write(mid("f-mid", 1, importance=0.5), when=at(6))
    assert [i.key for i in await session.stores.items(USER)] == ["b-high", "e-mid", "f-mid"]
    await session.write(mid("z", 1, importance=0.9), when=at(7), user_id="someone_else")
    assert len(await session.stores.items(USER)) == 3  # budgets are per user


async def test_malformed_mid_term_writes_are_refused(session: Session) -> None:
    cases = [
        (MemoryWrite(tier=MemoryTier.MID_TERM, key="x", value_json="{nope"), "memory.bad_value"),
        (mid("pref:bad name", 1, confirmed_by="m"), "memory.bad_key"),
        (mid("choice:", 1), "memory.bad_key"),
    ]
    for write, code in cases:
        (report,) = (await session.write(write)).emit
        assert isinstance(report.payload.body, ErrorReport)
        assert report.payload.body.code == code
    (report,) = (await session.write(mid("x", 1), user_id="")).emit
    assert isinstance(report.payload.body, ErrorReport)
    assert report.payload.body.code == "memory.no_user"
