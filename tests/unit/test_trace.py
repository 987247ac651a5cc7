"""Spans and the waterfall from envelopes as they were appended (no broker needed)."""

from __future__ import annotations

from hermesbus import Envelope, ErrorReport, Payload, Reply, ToolCall, ToolResult, ToolResults
from hermesbus._types import Record
from hermesbus.trace import Hop, spans, waterfall
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


def _cycle() -> list[Hop]:
    call = ToolCall(tool="org_tool", arguments_json="{}", idempotency_key="k")
    result = ToolResult(tool="org_tool", status_code=200, verified=True)
    return [
        _hop("u", "app:demo > conversation:in", 1000, turn().payload.body),  # type: ignore[arg-type]
        _hop("c1", "conversation:S1 > mcp:dispatcher", 1010, call, "u"),
        _hop("d1", "mcp:dispatcher > tool:org_tool", 1020, call, "c1"),
        _hop("r1", "tool:org_tool > mcp:dispatcher", 1520, result, "d1"),
        _hop("a1", "mcp:dispatcher > conversation:S1", 1530, ToolResults(results=(result,)), "r1"),
        _hop("o1", "conversation:S2 > user:app", 1540, Reply(text="请提供发票"), "a1"),
    ]


def test_each_handled_envelope_is_a_span_until_its_last_output() -> None:
    found = spans(_cycle())
    assert [(s.component, s.state, s.duration_ms) for s in found] == [
        ("conversation", "S1", 10),
        ("dispatcher", "dispatcher", 10),
        ("tool", "org_tool", 500),
        ("dispatcher", "dispatcher", 10),
        ("conversation", "S1→S2", 10),
    ]
    assert found[2].what == "ToolCall check_budget"
    assert found[3].what == "ToolResult org_tool 200"
    assert found[3].outcome == "answered"  # its output is the cycle's one answer


def test_failures_and_fallbacks_are_the_outcome() -> None:
    hops = _cycle()[:3]
    failed = ToolResult(tool="org_tool", status_code=504, error="killed after 5 s")
    stale = ToolResult(tool="org_tool", status_code=200, stale=True, fallback="cache")
    report = ErrorReport(component="tool:org_tool", code="504", message="timeout")
    assert spans([*hops, _hop("r", "tool:org_tool > mcp:dispatcher", 1100, failed, "d1")])[
        2
    ].outcome == ("failed 504")
    assert spans([*hops, _hop("r", "tool:org_tool > mcp:dispatcher", 1100, stale, "d1")])[
        2
    ].outcome == ("degraded cache")
    assert spans([*hops, _hop("e", "mcp:dispatcher > conversation:S1", 1100, report, "c1")])[
        1
    ].outcome == ("error 504")


def test_the_waterfall_places_each_bar_on_the_trace_time_axis() -> None:
    lines = waterfall(spans(_cycle()), width=54)
    assert lines[0].split()[:3] == ["component", "state", "what"]
    tool = next(line for line in lines if line.startswith("tool"))
    bar = tool.split("|")[1]
    assert bar.index("█") == 2  # starts 20 ms into 540 ms: 20 * 54 // 540
    assert bar.count("█") == 50  # 500 of 540 ms
    assert tool.rstrip().endswith("500  ok")
    assert "total 540 ms, 5 spans" in lines[-1]
    assert waterfall([]) == ["(no spans)"]


def test_replies_audit_and_alerts_are_not_spans() -> None:
    reply = _hop("x", "conversation:S2 > user:app", 5, Reply(text="hi"))
    audit = _hop("y", "memory:long_term > audit:graph", 6, Reply(text="hi"))
    assert spans([reply, audit]) == []
    assert isinstance(reply.envelope, Envelope)
