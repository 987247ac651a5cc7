"""Memory traffic: writes only from verified results, forwards, memory's error reports."""

from __future__ import annotations

import json
from typing import Any

from hermesbus import (
    ContextSnapshot,
    Envelope,
    ErrorReport,
    MemoryTier,
    MemoryWrite,
    StateSnapshot,
)
from hermesbus.contract.payloads import ToolResults
from hermesbus.processors.protocol import ToolHealth

from .helpers import (
    CYCLE,
    ORG_RESULT,
    Driver,
    answer_query,
    answers,
    call,
    envelope,
    kinds,
    result_for,
)
from .helpers import T0 as NOW

TRIP = {
    "verified": True,
    "trip_id": "trip_shenzhen_2024_05",
    "facts": [
        {
            "subject": f"invoice:{i}",
            "relation": "occurred_during",
            "object": "trip:trip_shenzhen_2024_05",
        }
        for i in ("inv-001", "inv-002", "inv-003")
    ]
    + [
        {"subject": "trip:trip_shenzhen_2024_05", "relation": "taken_by", "object": "user:u_xyz789"}
    ],
}


async def one_result(status: int, content: object, verified: bool):  # type: ignore[no-untyped-def]
    d = Driver.with_health(ToolHealth(tool="org_tool", latency_ms=10.0, success_rate=1.0))
    (query,) = await d.send(call("org_tool", ["org_tool"]))
    (out,) = await d.send(answer_query(query))
    return d, await d.send(result_for(out, status, content, verified=verified))


async def test_verified_facts_and_symbols_become_memory_writes() -> None:
    _, out = await one_result(200, ORG_RESULT, verified=True)
    assert kinds(out) == [
        ("memory:long_term", "MemoryWrite"),
        ("memory:short_term", "MemoryWrite"),
        ("conversation:S1", "ToolResults"),
    ]
    assert out[0].payload.context == {"cycle": CYCLE, "tool": "org_tool"}


async def test_every_fact_of_the_trip_becomes_one_long_term_write() -> None:
    _, out = await one_result(200, TRIP, verified=True)
    writes = [e.payload.body for e in out if e.target == "memory:long_term"]
    assert [w.key for w in writes] == [
        "invoice:inv-001|occurred_during|trip:trip_shenzhen_2024_05",
        "invoice:inv-002|occurred_during|trip:trip_shenzhen_2024_05",
        "invoice:inv-003|occurred_during|trip:trip_shenzhen_2024_05",
        "trip:trip_shenzhen_2024_05|taken_by|user:u_xyz789",
    ]
    for write in writes:
        assert isinstance(write, MemoryWrite)
        assert write.verified_by is not None
        assert (write.verified_by.tool, write.verified_by.verified_at) == ("org_tool", NOW)
        assert json.loads(write.value_json)["subject"] == write.key.split("|")[0]


async def test_unverified_results_write_nothing() -> None:
    _, out = await one_result(200, ORG_RESULT, verified=False)
    assert kinds(out) == [("conversation:S1", "ToolResults")]


async def test_non_200_results_write_nothing() -> None:
    _, out = await one_result(404, ORG_RESULT, verified=True)
    assert kinds(out) == [("conversation:S1", "ToolResults")]
    assert out[0].diagnostics is not None
    assert out[0].diagnostics.confidence_score == 0.0


async def test_stale_results_write_nothing() -> None:
    """A cache fallback answers verified but stale: its old facts must not be re-verified now."""
    d = Driver.with_health(ToolHealth(tool="org_tool", latency_ms=10.0, success_rate=1.0))
    (query,) = await d.send(call("org_tool", ["org_tool"]))
    (sent,) = await d.send(answer_query(query))
    stale = result_for(sent, 200, ORG_RESULT, stale=True, stale_since=NOW, fallback="cache")
    assert kinds(await d.send(stale)) == [("conversation:S1", "ToolResults")]


async def test_a_mock_fallback_writes_nothing_though_not_stale() -> None:
    _, out = await one_result_with(fallback="mock")
    assert kinds(out) == [("conversation:S1", "ToolResults")]


async def test_stale_without_fallback_writes_nothing() -> None:
    _, out = await one_result_with(stale=True)
    assert kinds(out) == [("conversation:S1", "ToolResults")]


async def one_result_with(**fields: Any):  # type: ignore[no-untyped-def]
    d = Driver.with_health(ToolHealth(tool="org_tool", latency_ms=10.0, success_rate=1.0))
    (query,) = await d.send(call("org_tool", ["org_tool"]))
    (sent,) = await d.send(answer_query(query))
    return d, await d.send(result_for(sent, 200, ORG_RESULT, **fields))


async def test_malformed_facts_are_skipped() -> None:
    content = {"facts": [{"subject": "a"}, "nonsense"], "symbols": ["not", "a", "map"]}
    _, out = await one_result(200, content, verified=True)
    assert kinds(out) == [("conversation:S1", "ToolResults")]


def snapshot_env(prev: str | None, state: str, message_id: str = "snap-1"):  # type: ignore[no-untyped-def]
    snap = ContextSnapshot(state_id=state, entered_at=NOW, summary="已上传2张发票")
    return envelope(
        StateSnapshot(snapshot=snap, previous_state=prev, trigger="upload"),
        source=f"conversation:{state}",
        message_id=message_id,
        task="state_snapshot",
        snapshot=snap,
    )


async def test_allowed_transition_goes_to_short_term_memory() -> None:
    d = Driver()
    (out,) = await d.send(snapshot_env("S1", "S2"))
    assert (out.target, out.payload.task) == ("memory:short_term", "state_snapshot")
    assert out.payload.body == snapshot_env("S1", "S2").payload.body
    assert out.snapshot is not None
    assert out.snapshot.state_id == "S2"
    assert d.data["last_speaker"] == "conversation:S2"


async def test_mid_term_write_is_forwarded_to_its_tier() -> None:
    d = Driver()
    write = MemoryWrite(
        tier=MemoryTier.MID_TERM,
        key="unfinished:sess_789",
        value_json='{"label": "未完成报销流程"}',
        confirmed_by="turn-4",
        importance=0.8,
    )
    env = envelope(write, source="conversation:S5", message_id="w1", task="unfinished")
    (out,) = await d.send(env)
    assert (out.target, out.payload.body) == ("memory:mid_term", write)


async def test_memory_error_report_goes_to_the_conversation_state_that_last_spoke() -> None:
    d = Driver()
    await d.send(snapshot_env("S2", "S3", message_id="snap-2"))
    refused = ErrorReport(
        component="memory:mid_term", code="pref.unconfirmed", message="no confirmed_by"
    )
    out = await d.send(envelope(refused, source="memory:mid_term", message_id="err-1"))
    assert [(e.target, e.payload.body) for e in out] == [
        ("conversation:S3", refused),
        ("alerts:dispatcher", refused),
    ]
    assert all(e.payload.context == {"refused_write": True} for e in out)
    assert d.data["refused_writes"] == 1
    assert d.counter.refused_writes == 1
    assert d.counter.total == 0  # a refusal is not a violation


async def test_memory_error_with_nobody_to_tell_goes_to_alerts() -> None:
    d = Driver()
    refused = ErrorReport(component="memory:mid_term", code="x", message="y")
    (out,) = await d.send(envelope(refused, source="memory:mid_term", message_id="err-1"))
    assert out.target == "alerts:dispatcher"
    assert out.payload.context == {"refused_write": True}


async def test_memory_error_on_an_open_cycle_is_its_one_answer() -> None:
    d = Driver()
    await d.send(call("org_tool", ["org_tool"]))
    failed = ErrorReport(
        component="memory:context", code="store", message="sqlite locked", retryable=True
    )
    out = await d.send(
        envelope(failed, source="memory:context", message_id="err-2", context={"cycle": CYCLE})
    )
    (report,) = answers(out)
    assert report.payload.body == ErrorReport(
        component="memory:context", code="store", message="sqlite locked", retryable=True
    )
    assert d.outcomes[-1].cancel == (f"cycle:{CYCLE}",)


def refusal_of(write: Envelope, message_id: str = "ref-1") -> Envelope:
    """Memory's refusal of a dispatcher write: context copied from the write (cycle too)."""
    tier = write.target
    report = ErrorReport(component=tier, code="memory.bad_value", message="entity empty")
    return envelope(report, source=tier, message_id=message_id, context=dict(write.payload.context))


async def test_a_refused_write_in_an_open_cycle_is_news_not_the_cycles_answer() -> None:
    """The reviewer's sequence: org answers (writes go out), memory refuses one while the
    cycle waits for finance; the refusal is told without the cycle id, then ToolResults."""
    d = Driver.with_health(
        ToolHealth(tool="org_tool", latency_ms=10.0, success_rate=1.0),
        ToolHealth(tool="finance_tool", latency_ms=10.0, success_rate=1.0),
    )
    tools = ["org_tool", "finance_tool"]
    (query,) = await d.send(call("org_tool", tools))
    await d.send(call("finance_tool", tools))
    org_out, finance_out = await d.send(answer_query(query))
    after_org = await d.send(result_for(org_out, 200, ORG_RESULT))
    assert kinds(after_org) == [
        ("memory:long_term", "MemoryWrite"),
        ("memory:short_term", "MemoryWrite"),
    ]
    refused = await d.send(refusal_of(after_org[1]))
    assert kinds(refused) == [
        ("conversation:S1", "ErrorReport"),
        ("alerts:dispatcher", "ErrorReport"),
    ]
    for sent in refused:
        assert sent.payload.context == {"tool": "org_tool", "refused_write": True}
    assert answers(refused) == [refused[0]]  # the helper's net ...
    assert "cycle" not in refused[0].payload.context  # ... but no cycle: not an answer
    assert d.outcomes[-1].cancel == ()
    assert d.outcomes[-1].timers == ()
    assert d.data["cycles"][CYCLE]["status"] == "open"
    assert d.data["refused_writes"] == 1
    final = await d.send(result_for(finance_out, 200, {"dept": "采购部"}))
    (answer,) = answers(final)
    assert isinstance(answer.payload.body, ToolResults)
    assert answer.payload.context["cycle"] == CYCLE
    assert [r.tool for r in answer.payload.body.results] == tools
    assert d.counter.refused_writes == 1
    assert (d.counter.total, d.counter.late) == (0, 0)


async def test_a_refused_write_while_a_round_waits_for_memory_does_not_fail_it() -> None:
    """A refusal of the last round's write arrives while the new round's query is pending."""
    d = Driver.with_health(ToolHealth(tool="org_tool", latency_ms=10.0, success_rate=1.0))
    (query,) = await d.send(call("org_tool", ["org_tool"]))
    write = MemoryWrite(tier=MemoryTier.SHORT_TERM, key="user_dept", value_json='""')
    pending = envelope(
        write,
        source="mcp:dispatcher",
        message_id="w-old",
        context={"cycle": CYCLE, "tool": "org_tool"},
        target="memory:short_term",
    )
    out = await d.send(refusal_of(pending))
    assert [e.target for e in out] == ["conversation:S1", "alerts:dispatcher"]
    assert answers(out)[0].payload.context.get("cycle") is None
    assert d.data["cycles"][CYCLE]["status"] == "open"
    (sent,) = await d.send(answer_query(query))  # the round goes on
    assert sent.target == "tool:org_tool"


async def test_a_memory_context_error_nobody_waits_for_is_dropped() -> None:
    d, _ = await one_result(200, {}, verified=True)  # the cycle is answered
    failed = ErrorReport(component="memory:context", code="store", message="sqlite locked")
    out = await d.send(
        envelope(failed, source="memory:context", message_id="err-3", context={"cycle": CYCLE})
    )
    assert out == ()
    assert d.data["late"] == 1
