"""Memory traffic: writes only from verified results, forwards, memory's error reports."""

from __future__ import annotations

import json

from hermesbus import ContextSnapshot, ErrorReport, MemoryTier, MemoryWrite, StateSnapshot
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
    (out,) = await d.send(envelope(refused, source="memory:mid_term", message_id="err-1"))
    assert (out.target, out.payload.body) == ("conversation:S3", refused)


async def test_memory_error_with_nobody_to_tell_goes_to_alerts() -> None:
    d = Driver()
    refused = ErrorReport(component="memory:mid_term", code="x", message="y")
    (out,) = await d.send(envelope(refused, source="memory:mid_term", message_id="err-1"))
    assert out.target == "alerts:dispatcher"


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
