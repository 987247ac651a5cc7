"""Spans and the waterfall from envelopes as they were appended (no broker needed)."""

from __future__ import annotations

from dataclasses import replace

from hermesbus import (
    ContextSnapshot,
    Envelope,
    ErrorReport,
    Payload,
    Reply,
    StateSnapshot,
    ToolCall,
    ToolResult,
    ToolResults,
)
from hermesbus.contract.fields import Record
from hermesbus.topics import ALERTS
from hermesbus.trace.spans import Hop, spans, waterfall
from tests.builders import turn


def _hop(
    message_id: str, route: str, at_ms: int, body: Record, causation: str | None = None
) -> Hop:
    """``route`` is ``"source > target"``."""
    source, target = (part.strip() for part in route.split(">"))
    envelope = turn(
        body,
        message_id=message_id,
        source=source,
        target=target,
        causation_id=causation,
        payload=Payload(task="check_budget", body=body),
    )
    return Hop(envelope, "t", 0, at_ms, at_ms)


def _snap(state: str, previous: str | None) -> StateSnapshot:
    return StateSnapshot(
        snapshot=ContextSnapshot(state_id=state, entered_at=0), previous_state=previous
    )


def _cycle() -> list[Hop]:
    call = ToolCall(tool="org_tool", arguments_json="{}", idempotency_key="k")
    result = ToolResult(tool="org_tool", status_code=200, verified=True)
    asked = _hop("c1", "conversation:S1 > mcp:dispatcher", 1010, call, "u")
    asked = replace(
        asked, envelope=asked.envelope.model_copy(update={"snapshot": _snap("S1", None).snapshot})
    )
    return [
        _hop("u", "app:demo > conversation:in", 1000, turn().payload.body),  # type: ignore[arg-type]
        asked,
        _hop("s1", "conversation:S1 > mcp:dispatcher", 1008, _snap("S1", None), "u"),
        _hop("d1", "mcp:dispatcher > tool:org_tool", 1020, call, "c1"),
        _hop("r1", "tool:org_tool > mcp:dispatcher", 1520, result, "d1"),
        _hop("a1", "mcp:dispatcher > conversation:S1", 1530, ToolResults(results=(result,)), "r1"),
        _hop("o1", "conversation:S2 > user:app", 1540, Reply(text="请提供发票"), "a1"),
        _hop("s2", "conversation:S2 > mcp:dispatcher", 1540, _snap("S2", "S1"), "a1"),
    ]


def test_each_handled_envelope_is_a_span_until_its_last_output() -> None:
    found = spans(_cycle())
    assert [(s.component, s.state, s.what, s.duration_ms) for s in found] == [
        ("conversation", "∅→S1", "UserTurn check_budget", 10),
        ("dispatcher", "S1", "StateSnapshot check_budget", 0),  # nothing came of it here
        ("dispatcher", "S1", "ToolCall org_tool", 10),
        ("tool", "S1", "ToolCall org_tool", 500),
        ("dispatcher", "S1", "ToolResult org_tool 200", 10),
        ("conversation", "S1→S2", "ToolResults check_budget", 10),
        ("dispatcher", "S2", "StateSnapshot check_budget", 0),
    ]
    assert found[4].outcome == "answered"  # its output is the cycle's one answer


def test_an_envelope_sent_again_is_a_duplicate_not_a_negative_span() -> None:
    """The same turn sent twice: the processor skipped the second copy (an applied id)."""
    hops = _cycle()
    again = replace(hops[0], offset=99, appended_ms=5000)  # after every output of the first
    found = spans([*hops, again])
    assert all(s.duration_ms >= 0 for s in found)
    first, second = (s for s in found if s.what == "UserTurn check_budget")
    assert (first.duration_ms, first.outcome) == (10, "ok")
    assert (second.start_ms, second.duration_ms, second.outcome) == (5000, 0, "duplicate")


def _outcome_of(component: str, hops: list[Hop]) -> str:
    (span,) = [s for s in spans(hops) if s.component == component and "ToolCall" in s.what]
    return span.outcome


def test_failures_and_fallbacks_are_the_outcome() -> None:
    hops = _cycle()[:4]  # the turn, the call, its snapshot, the dispatched call
    failed = ToolResult(tool="org_tool", status_code=504, error="killed after 5 s")
    stale = ToolResult(tool="org_tool", status_code=200, stale=True, fallback="cache")
    report = ErrorReport(component="tool:org_tool", code="504", message="timeout")
    back = "tool:org_tool > mcp:dispatcher"
    assert _outcome_of("tool", [*hops, _hop("r", back, 1100, failed, "d1")]) == "failed 504"
    assert _outcome_of("tool", [*hops, _hop("r", back, 1100, stale, "d1")]) == "degraded cache"
    error = _hop("e", "mcp:dispatcher > conversation:S1", 1100, report, "c1")
    assert _outcome_of("dispatcher", [*hops, error]) == "error 504"


def test_the_waterfall_places_each_bar_on_the_trace_time_axis() -> None:
    lines = waterfall(spans(_cycle()), width=54)
    assert lines[0].split()[:3] == ["component", "state", "what"]
    tool = next(line for line in lines if line.startswith("tool"))
    bar = tool.split("|")[1]
    assert bar.index("█") == 2  # starts 20 ms into 540 ms: 20 * 54 // 540
    assert bar.count("█") == 50  # 500 of 540 ms
    assert tool.rstrip().endswith("500  ok")
    assert lines[-1] == "total 540 ms, 7 spans: conversation 2, dispatcher 4, tool 1"
    last = lines[-2].split("|")[1]  # starts at the very end: still drawn, in the last column
    assert last.index("█") == 53
    assert waterfall([]) == ["(no spans)"]


def test_replies_audit_and_alerts_are_not_spans() -> None:
    reply = _hop("x", "conversation:S2 > user:app", 5, Reply(text="hi"))
    audit = _hop("y", "memory:long_term > audit:graph", 6, Reply(text="hi"))
    refused = ErrorReport(
        component="mcp:dispatcher", code="unsigned", message="no signature (record hermes.mcp/0/7)"
    )
    alert = replace(_hop("z", "mcp:dispatcher > alerts:identity", 7, refused, "x"), topic=ALERTS)
    assert spans([reply, audit, alert]) == []
    assert isinstance(reply.envelope, Envelope)
    assert isinstance(alert.envelope.payload.body, ErrorReport)
    # the same report addressed to a processor is a span: its target is what rules an alert out
    handled = alert.envelope.model_copy(update={"target": "mcp:dispatcher"})
    assert [s.what for s in spans([replace(alert, envelope=handled)])] == [
        "ErrorReport check_budget"
    ]
