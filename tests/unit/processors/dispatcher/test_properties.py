"""Whatever order results, memory answers, refusals and timers arrive in: one answer per cycle."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermesbus import Envelope, ErrorReport, MemoryQuery, MemoryWrite, ToolCall
from hermesbus.processors.protocol import ToolHealth

from .helpers import Driver, answer_query, answers, call, envelope, result_for

CYCLES = {"c1": ["org_tool", "finance_tool"], "c2": ["ocr_tool", "trip_tool", "rule_engine_tool"]}
STATUSES = st.sampled_from([200, 200, 200, 404, 500, 502, 503, 504])
FACT = {"subject": "user:u_xyz789", "relation": "belongs_to", "object": "dept:采购部"}


def refusal(write: Envelope, index: int) -> Envelope:
    """Memory refuses a dispatcher write; like memory, it echoes the write's context."""
    report = ErrorReport(component=write.target, code="memory.bad_value", message="refused")
    return envelope(
        report,
        source=write.target,
        message_id=f"refusal-{index}",
        context=dict(write.payload.context),
    )


def health() -> Driver:
    tools = [t for ts in CYCLES.values() for t in ts]
    return Driver.with_health(
        *(ToolHealth(tool=t, latency_ms=10.0, success_rate=1.0) for t in tools)
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
async def test_each_cycle_gets_exactly_one_answer_in_any_order(data: st.DataObject) -> None:
    driver = health()
    pool: list[Envelope] = [
        call(tool, tools, cycle=cid, message_id=f"{cid}-{tool}")
        for cid, tools in CYCLES.items()
        for tool in tools
    ]
    emitted: list[Envelope] = []
    memory_answered: set[str] = set()
    refusals = 0
    while pool or driver.timers:
        purposes = sorted(driver.timers)
        pick = data.draw(st.integers(0, len(pool) + len(purposes) - 1))
        if pick < len(pool):
            env = pool.pop(pick)
        else:
            env = driver.fired(purposes[pick - len(pool)])
        if env.source == "memory:context":
            memory_answered.add(str(env.payload.context["cycle"]))
        out = await driver.send(env)
        emitted.extend(out)
        for sent in out:
            cid = str(sent.payload.context.get("cycle"))
            if isinstance(sent.payload.body, MemoryQuery):
                pool.append(answer_query(sent))
            elif isinstance(sent.payload.body, ToolCall):
                assert cid in memory_answered, "a tool call left before the memory context"
                status = data.draw(STATUSES)
                content = {"ok": status, "facts": [FACT], "symbols": {"user_dept": "采购部"}}
                pool.append(result_for(sent, status, content))
            elif isinstance(sent.payload.body, MemoryWrite) and data.draw(st.booleans()):
                refusals += 1
                pool.append(refusal(sent, refusals))

    for cid in CYCLES:
        mine = [e for e in answers(tuple(emitted)) if e.payload.context.get("cycle") == cid]
        assert len(mine) == 1, (cid, mine)
        queries = [
            e
            for e in emitted
            if isinstance(e.payload.body, MemoryQuery) and e.payload.context["cycle"] == cid
        ]
        assert len(queries) == 1
    told = [e for e in emitted if e.payload.context.get("refused_write") is True]
    assert all("cycle" not in e.payload.context for e in told)
    assert len(told) == 2 * refusals  # the conversation and alerts:dispatcher, each time
    assert driver.counter.refused_writes == refusals
    assert driver.counter.total == 0  # nothing legitimate is ever called a violation
    assert driver.timers == {}
