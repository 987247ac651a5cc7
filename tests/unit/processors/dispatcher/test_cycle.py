"""Cycles: memory first, one dispatch per component per round, one answer, the S1 demo."""

from __future__ import annotations

import json
from datetime import timedelta

from hermesbus import (
    Envelope,
    MemoryContext,
    MemoryQuery,
    MemoryTier,
    MemoryWrite,
    ToolCall,
    TrustLevel,
)
from hermesbus.contract.payloads import Reply, ToolResults, Verification
from hermesbus.processors.protocol import ToolHealth
from hermesbus.runtime import derive_id

from .helpers import (
    CYCLE,
    FINANCE_RESULT,
    ORG_RESULT,
    T0,
    USER_ID,
    Driver,
    answer_query,
    answers,
    call,
    cont,
    kinds,
    result_for,
)

TOOLS = ["org_tool", "finance_tool"]


def healthy(tool: str) -> ToolHealth:
    return ToolHealth(tool=tool, latency_ms=80.0, success_rate=1.0)


def assert_demo_writes(long_term: Envelope, short_term: Envelope) -> None:
    """org_tool's verified fact (long-term) and symbol (short-term, 600 s) of the demo."""
    assert long_term.payload.body == MemoryWrite(
        tier=MemoryTier.LONG_TERM,
        key="user:u_xyz789|belongs_to|dept:采购部",
        value_json='{"subject":"user:u_xyz789","relation":"belongs_to","object":"dept:采购部"}',
        verified_by=Verification(tool="org_tool", verified_at=T0),
        trust_level=TrustLevel.VERIFIED,
    )
    assert short_term.payload.body == MemoryWrite(
        tier=MemoryTier.SHORT_TERM, key="user_dept", value_json='"采购部"', ttl_s=600
    )


async def test_s1_check_budget_cycle_of_the_demo() -> None:
    """1 MemoryQuery, then 2 tool calls, then 1 ToolResults in order plus the memory writes."""
    driver = Driver.with_health(healthy("org_tool"), healthy("finance_tool"))
    org = call("org_tool", TOOLS, context={"symbols": ["user_dept"]})
    finance = call("finance_tool", TOOLS, args={"action": "budget", "user_id": USER_ID})

    first = await driver.send(org)
    assert kinds(first) == [("memory:context", "MemoryQuery")]
    (query,) = first
    assert query.payload.body == MemoryQuery(
        symbols=("user_dept",), entity=f"user:{USER_ID}", trust_level=TrustLevel.VERIFIED
    )
    assert query.payload.task == "query_context"
    assert query.payload.context["cycle"] == CYCLE
    assert query.causation_id == org.message_id
    assert query.message_id == derive_id(org.message_id, "out", 0)
    (deadline,) = driver.outcomes[-1].timers
    assert (deadline.purpose, deadline.due_at) == (f"cycle:{CYCLE}", T0 + timedelta(seconds=5))

    assert await driver.send(finance) == ()  # waits for memory, no second query

    calls = await driver.send(answer_query(query))
    assert kinds(calls) == [("tool:org_tool", "ToolCall"), ("tool:finance_tool", "ToolCall")]
    org_out, finance_out = calls
    assert org_out.payload.body == org.payload.body  # same call, same idempotency key
    assert org_out.causation_id == org.message_id
    assert finance_out.causation_id == finance.message_id
    assert org_out.source == "mcp:dispatcher"
    assert org_out.metadata.timeout_ms == 5_000
    assert org_out.payload.context["fallback"] is False
    assert org_out.payload.context["health"] == "ok"
    assert org_out.diagnostics is not None
    assert org_out.diagnostics.external_calls.count == 2

    # the results arrive in the other order: the answer keeps the cycle's tool order
    finance_back = result_for(finance_out, 200, FINANCE_RESULT)
    assert await driver.send(finance_back) == ()
    last = await driver.send(result_for(org_out, 200, ORG_RESULT))
    assert kinds(last) == [
        ("memory:long_term", "MemoryWrite"),
        ("memory:short_term", "MemoryWrite"),
        ("conversation:S1", "ToolResults"),
    ]
    long_term, short_term, reply = last
    assert_demo_writes(long_term, short_term)
    body = reply.payload.body
    assert isinstance(body, ToolResults)
    assert [r.tool for r in body.results] == TOOLS
    assert json.loads(body.results[1].result_json)["budget_remaining"] == 125000
    assert json.loads(body.results[0].result_json)["dept"] == "采购部"
    assert body.context == MemoryContext(symbols={"user_dept": "采购部"})
    assert body.notice == ""
    assert reply.payload.task == "check_budget"
    assert reply.payload.context["cycle"] == CYCLE
    assert reply.diagnostics is not None
    assert reply.diagnostics.external_calls.count == 2
    assert reply.diagnostics.external_calls.avg_latency_ms == 12.0
    assert reply.diagnostics.confidence_score == 1.0
    assert driver.outcomes[-1].cancel == (f"cycle:{CYCLE}",)
    assert f"cycle:{CYCLE}" not in driver.timers
    assert driver.data["cycles"][CYCLE]["status"] == "answered"
    assert driver.counter.total == 0


async def test_no_call_leaves_before_the_memory_context() -> None:
    driver = Driver.with_health(healthy("org_tool"), healthy("finance_tool"))
    (query,) = await driver.send(call("org_tool", TOOLS))
    assert await driver.send(call("finance_tool", TOOLS)) == ()
    assert [e for o in driver.outcomes for e in o.emit if e.target.startswith("tool:")] == []
    dispatched = await driver.send(answer_query(query))
    assert [e.target for e in dispatched] == ["tool:org_tool", "tool:finance_tool"]


async def test_a_call_after_the_memory_context_goes_out_at_once() -> None:
    driver = Driver.with_health(healthy("org_tool"), healthy("finance_tool"))
    (query,) = await driver.send(call("org_tool", TOOLS))
    assert [e.target for e in await driver.send(answer_query(query))] == ["tool:org_tool"]
    late = await driver.send(call("finance_tool", TOOLS))
    assert kinds(late) == [("tool:finance_tool", "ToolCall")]  # no second MemoryQuery


async def test_second_call_for_the_same_tool_is_refused() -> None:
    driver = Driver.with_health(healthy("org_tool"))
    (query,) = await driver.send(call("org_tool", ["org_tool"]))
    (org_out,) = await driver.send(answer_query(query))
    again = call("org_tool", ["org_tool"], message_id="call-again")
    refused = await driver.send(again)
    assert kinds(refused) == [
        ("conversation:S1", "ErrorReport"),
        ("alerts:dispatcher", "ErrorReport"),
    ]
    assert refused[0].payload.body.code == "violation.one_dispatch"  # type: ignore[union-attr]
    assert driver.data["violations"] == {"one_dispatch": 1}
    # the cycle itself is untouched and still answers once
    (reply,) = await driver.send(result_for(org_out, 200, {"dept": "采购部"}))
    assert isinstance(reply.payload.body, ToolResults)


async def test_a_second_answer_only_after_continue() -> None:
    driver = Driver.with_health(healthy("org_tool"))
    (query,) = await driver.send(call("org_tool", ["org_tool"]))
    (org_out,) = await driver.send(answer_query(query))
    (first,) = answers(await driver.send(result_for(org_out, 200, {"n": 1})))

    without = await driver.send(call("org_tool", ["org_tool"], message_id="call-2"))
    assert answers(without)[0].payload.body.code == "violation.one_dispatch"  # type: ignore[union-attr]

    assert await driver.send(cont()) == ()
    (query2,) = await driver.send(call("org_tool", ["org_tool"], message_id="call-3"))
    assert isinstance(query2.payload.body, MemoryQuery)  # memory first again in the new round
    assert query2.payload.context["round"] == 2
    (org_out2,) = await driver.send(answer_query(query2))
    assert org_out2.causation_id == "call-3"
    (second,) = answers(await driver.send(result_for(org_out2, 200, {"n": 2})))
    assert isinstance(first.payload.body, ToolResults)
    assert isinstance(second.payload.body, ToolResults)
    assert second.payload.body.results[0].result_json == '{"n": 2}'
    # and a third needs another continue
    third = await driver.send(call("org_tool", ["org_tool"], message_id="call-4"))
    assert answers(third)[0].payload.body.code == "violation.one_dispatch"  # type: ignore[union-attr]


async def test_slow_ocr_tells_the_user_and_calls_it_normally() -> None:
    """The walkthrough's ocr_tool at 1200 ms is slow -> "处理中，约 30 秒" and a normal call."""
    ocr = ToolHealth(tool="ocr_tool", latency_ms=1200.0, success_rate=0.98)
    driver = Driver.with_health(ocr)
    files = {"files": [{"name": "photo-1.jpg", "uri": "demo://expense/photo-1.jpg"}]}
    ocr_call = call("ocr_tool", ["ocr_tool"], state="S2", task="ocr_precheck", args=files)
    (query,) = await driver.send(ocr_call)
    out = await driver.send(answer_query(query))
    assert kinds(out) == [("user:app", "Reply"), ("tool:ocr_tool", "ToolCall")]
    notice, dispatched = out
    assert notice.payload.body == Reply(
        text="ocr_tool 处理中，约 30 秒（processing, about 30 s）", degraded=True
    )
    assert dispatched.payload.context["fallback"] is False
    assert dispatched.payload.context["health"] == "slow"
    assert dispatched.payload.context["health_latency_ms"] == 1200.0
    (reply,) = await driver.send(result_for(dispatched, 200, {"total": 8240}))
    assert reply.target == "conversation:S2"
    assert reply.payload.body.notice == "ocr_tool 处理中，约 30 秒（processing, about 30 s）"  # type: ignore[union-attr]


async def test_the_same_inputs_give_identical_outcomes() -> None:
    """Determinism: two drivers fed the same envelopes produce byte-identical outcomes."""

    async def run() -> list[object]:
        driver = Driver.with_health(healthy("org_tool"), healthy("finance_tool"))
        (query,) = await driver.send(call("org_tool", TOOLS))
        await driver.send(call("finance_tool", TOOLS))
        org_out, finance_out = await driver.send(answer_query(query))
        await driver.send(result_for(org_out, 503))
        await driver.fire(f"retry:{CYCLE}:org_tool")
        await driver.send(result_for(finance_out, 200, FINANCE_RESULT))
        return [(o.emit, o.state, o.timers, o.cancel) for o in driver.outcomes]

    assert await run() == await run()


async def test_dispatched_call_is_the_conversations_call() -> None:
    driver = Driver.with_health(healthy("org_tool"))
    org = call("org_tool", ["org_tool"])
    (query,) = await driver.send(org)
    (out,) = await driver.send(answer_query(query))
    body = out.payload.body
    assert isinstance(body, ToolCall)
    assert body.idempotency_key == derive_id("turn-1", "call", "org_tool")
    assert (out.trace_id, out.session_id, out.user_id) == ("trace-1", "sess_456", USER_ID)
    assert out.timestamp == T0
    assert out.metadata.retry_policy == org.metadata.retry_policy
    assert out.metadata.attempt == 1
