"""A deadline passed while a tool's calls wait for a free worker is a busy bus, not a failed
tool: the round fails as ``busy`` with advice saying so (#25, item 8)."""

from __future__ import annotations

from hermesbus import ErrorReport
from hermesbus.processors.dispatcher._health import BUSY_ADVICE
from hermesbus.processors.protocol import ToolHealth
from hermesbus.processors.recorded import RecordedHealth

from .helpers import CYCLE, FINANCE_RESULT, Driver, answer_query, answers, call, result_for

TOOLS = ["org_tool", "finance_tool"]


def driver() -> Driver:
    return Driver.with_health(
        ToolHealth(tool="org_tool", latency_ms=50.0, success_rate=1.0),
        ToolHealth(tool="finance_tool", latency_ms=50.0, success_rate=1.0),
    )


async def test_a_deadline_passed_behind_a_tool_queue_says_the_bus_is_busy() -> None:
    d = driver()
    (query,) = await d.send(call("org_tool", TOOLS))
    await d.send(call("finance_tool", TOOLS))
    _, finance_out = await d.send(answer_query(query))
    await d.send(result_for(finance_out, 200, FINANCE_RESULT))
    d.health.set(ToolHealth(tool="org_tool", latency_ms=50.0, success_rate=1.0, queued=7))
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code, report.retryable) == ("tool:org_tool", "busy", True)
    assert report.advice == BUSY_ADVICE
    assert "系统繁忙" in report.advice and "the bus is busy" in report.advice
    assert "5000 ms budget" in report.message
    assert "org_tool had calls waiting for a free worker: the bus is busy" in report.message
    # a replay finds the tool as busy as the dispatcher found it then
    recorded = RecordedHealth()
    recorded.cue([report_env])
    seen = await recorded.health("org_tool")
    assert seen is not None and seen.queued == 1


async def test_a_deadline_before_memory_answered_in_a_busy_bus_says_busy() -> None:
    """Memory never answered while the round's tool had a queue: the bus is busy."""
    d = driver()
    d.health.set(ToolHealth(tool="org_tool", latency_ms=50.0, success_rate=1.0, queued=7))
    await d.send(call("org_tool", TOOLS))
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code, report.advice) == ("tool:org_tool", "busy", BUSY_ADVICE)
    assert "waiting for memory:context" in report.message


async def test_memory_answering_after_the_budget_in_a_busy_bus_says_busy() -> None:
    d = driver()
    d.health.set(ToolHealth(tool="org_tool", latency_ms=50.0, success_rate=1.0, queued=7))
    (query,) = await d.send(call("org_tool", TOOLS), appended_ms=1_000)
    await d.send(call("finance_tool", TOOLS))
    (report_env,) = answers(await d.send(answer_query(query), appended_ms=1_000 + 6_000))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code, report.advice) == ("tool:org_tool", "busy", BUSY_ADVICE)
    assert "memory:context, which answered after 6000 ms" in report.message


async def test_a_queue_at_a_tool_the_round_does_not_wait_for_is_not_named() -> None:
    d = driver()
    (query,) = await d.send(call("org_tool", TOOLS))
    await d.send(call("finance_tool", TOOLS))
    _, finance_out = await d.send(answer_query(query))
    await d.send(result_for(finance_out, 200, FINANCE_RESULT))
    d.health.set(ToolHealth(tool="finance_tool", latency_ms=50.0, success_rate=1.0, queued=7))
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code) == ("tool:org_tool", "timeout")


async def test_no_queue_at_the_deadline_is_still_a_timeout() -> None:
    d = driver()
    (query,) = await d.send(call("org_tool", TOOLS))
    await d.send(call("finance_tool", TOOLS))
    await d.send(answer_query(query))
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code) == ("tool:org_tool", "timeout")
    recorded = RecordedHealth()
    recorded.cue([report_env])
    assert await recorded.health("org_tool") is None


async def test_a_deadline_before_memory_answered_behind_its_backlog_names_memory_busy() -> None:
    """Memory had records waiting for it when the deadline passed: the bus is busy, and
    memory is named, not a tool (its calls wait for memory) nor a memory failure."""
    d = driver()
    d.health.set(ToolHealth(tool="org_tool", latency_ms=50.0, success_rate=1.0, queued=7))
    d.backlog.set("memory", 1_381)
    await d.send(call("org_tool", TOOLS))
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code, report.retryable) == ("memory:context", "busy", True)
    assert report.advice == BUSY_ADVICE
    assert "waiting for memory:context" in report.message
    assert "memory had 1381 records waiting for it: the bus is busy" in report.message
    # a replay finds memory as backlogged as the dispatcher found it then, and no tool busy
    recorded = RecordedHealth()
    recorded.cue([report_env])
    assert await recorded.backlog("memory") == 1
    assert await recorded.health("org_tool") is None


async def test_memory_answering_after_the_budget_behind_its_backlog_names_memory_busy() -> None:
    d = driver()
    d.backlog.set("memory", 3)
    (query,) = await d.send(call("org_tool", TOOLS), appended_ms=1_000)
    await d.send(call("finance_tool", TOOLS))
    (report_env,) = answers(await d.send(answer_query(query), appended_ms=1_000 + 6_000))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code, report.advice) == ("memory:context", "busy", BUSY_ADVICE)
    assert "memory:context, which answered after 6000 ms" in report.message


async def test_memory_backlog_after_memory_answered_does_not_name_memory() -> None:
    """Once memory answered, its backlog is not what the round waited for: a tool that
    never answered in its fair time is named, as a timeout."""
    d = driver()
    (query,) = await d.send(call("org_tool", TOOLS))
    await d.send(call("finance_tool", TOOLS))
    await d.send(answer_query(query))
    d.backlog.set("memory", 50)
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code) == ("tool:org_tool", "timeout")
    recorded = RecordedHealth()
    recorded.cue([report_env])
    assert await recorded.backlog("memory") == 0


async def test_no_memory_backlog_before_memory_answered_is_still_a_timeout() -> None:
    d = driver()
    await d.send(call("org_tool", TOOLS))
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code) == ("memory:context", "timeout")
