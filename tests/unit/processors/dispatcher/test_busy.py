"""A deadline passed while what the round waits for waits in the bus is a busy bus, not a
failed component: a tool's calls queued for its workers, records waiting for memory or the
tool's processor, or for the dispatcher itself. The round fails as ``busy`` with advice
saying so, and a replay finds the same backlogs (#25, item 8)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from hermesbus import Envelope, ErrorReport
from hermesbus.processors.dispatcher._health import BUSY_ADVICE
from hermesbus.processors.protocol import BUSY_BEHIND, ToolHealth
from hermesbus.processors.recorded import RecordedHealth

from .helpers import CYCLE, FINANCE_RESULT, Driver, answer_query, answers, call, result_for

TOOLS = ["org_tool", "finance_tool"]


def driver() -> Driver:
    return Driver.with_health(
        ToolHealth(tool="org_tool", latency_ms=50.0, success_rate=1.0),
        ToolHealth(tool="finance_tool", latency_ms=50.0, success_rate=1.0),
    )


async def org_tool_pending() -> Driver:
    """A round of both tools after memory answered: finance_tool answered, org_tool not."""
    d = driver()
    (query,) = await d.send(call("org_tool", TOOLS))
    await d.send(call("finance_tool", TOOLS))
    _, finance_out = await d.send(answer_query(query))
    await d.send(result_for(finance_out, 200, FINANCE_RESULT))
    return d


async def test_a_deadline_passed_behind_a_tool_queue_says_the_bus_is_busy() -> None:
    d = await org_tool_pending()
    d.health.set(ToolHealth(tool="org_tool", latency_ms=50.0, success_rate=1.0, queued=7))
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code, report.retryable) == ("tool:org_tool", "busy", True)
    assert report.advice == BUSY_ADVICE
    assert "系统繁忙" in report.advice and "the bus is busy" in report.advice
    assert "5000 ms budget" in report.message
    assert report.message.endswith("; the bus is busy, records waiting for: tool:org_tool")
    # a replay finds the tool as busy as the dispatcher found it then
    recorded = RecordedHealth()
    recorded.cue([report_env])
    seen = await recorded.health("org_tool")
    assert seen is not None and seen.queued == 1


async def test_a_queue_at_a_tool_whose_call_memory_still_holds_is_not_the_bus() -> None:
    """The call waits for memory and never reached its tool: the tool's queue cannot have
    held the round, and with nothing waiting for memory or the dispatcher it is memory's
    timeout."""
    d = driver()
    d.health.set(ToolHealth(tool="org_tool", latency_ms=50.0, success_rate=1.0, queued=7))
    await d.send(call("org_tool", TOOLS))
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code) == ("memory:context", "timeout")
    assert "waiting for memory:context" in report.message


async def test_memory_answering_late_while_its_tools_are_queued_is_memorys_timeout() -> None:
    d = driver()
    d.health.set(ToolHealth(tool="org_tool", latency_ms=50.0, success_rate=1.0, queued=7))
    (query,) = await d.send(call("org_tool", TOOLS), appended_ms=1_000)
    await d.send(call("finance_tool", TOOLS))
    (report_env,) = answers(await d.send(answer_query(query), appended_ms=1_000 + 6_000))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code) == ("memory:context", "timeout")
    assert "memory:context, which answered after 6000 ms" in report.message


async def test_a_queue_at_a_tool_the_round_does_not_wait_for_is_not_named() -> None:
    d = await org_tool_pending()
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
    """Records waited for memory when the deadline passed: the bus is busy, and memory is
    named first (the calls wait for it), not as failing; the context says all it saw."""
    d = driver()
    d.health.set(ToolHealth(tool="org_tool", latency_ms=50.0, success_rate=1.0, queued=7))
    d.backlog.set("memory:context", 1_381)
    await d.send(call("org_tool", TOOLS))
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code, report.retryable) == ("memory:context", "busy", True)
    assert report.advice == BUSY_ADVICE
    assert "waiting for memory:context" in report.message
    assert report.message.endswith("; the bus is busy, records waiting for: memory:context")
    assert report_env.payload.context[BUSY_BEHIND] == ["memory:context"]
    # a replay finds memory as backlogged as the dispatcher found it then, and nothing else
    recorded = RecordedHealth()
    recorded.cue([report_env])
    assert await recorded.backlog("memory:context") == 1
    assert await recorded.backlog("dispatcher") == 0
    assert await recorded.health("org_tool") is None


async def test_memory_answering_after_the_budget_behind_its_backlog_names_memory_busy() -> None:
    d = driver()
    d.backlog.set("memory:context", 3)
    (query,) = await d.send(call("org_tool", TOOLS), appended_ms=1_000)
    await d.send(call("finance_tool", TOOLS))
    (report_env,) = answers(await d.send(answer_query(query), appended_ms=1_000 + 6_000))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code, report.advice) == ("memory:context", "busy", BUSY_ADVICE)
    assert "memory:context, which answered after 6000 ms" in report.message


async def test_the_dispatchers_own_backlog_is_a_busy_bus_naming_what_the_round_waited_for() -> None:
    """Memory caught up, the tools idle, but records wait for the dispatcher itself (the
    answers the round waits for may be among them, as in a burst): busy, naming what a
    timeout would have named."""
    d = await org_tool_pending()
    d.backlog.set("dispatcher", 1_600)
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code, report.advice) == ("tool:org_tool", "busy", BUSY_ADVICE)
    assert report.message.endswith("; the bus is busy, records waiting for: dispatcher")
    assert report_env.payload.context[BUSY_BEHIND] == ["dispatcher"]
    recorded = RecordedHealth()
    recorded.cue([report_env])
    assert await recorded.backlog("dispatcher") == 1
    assert await recorded.health("org_tool") is None  # named, but its workers had no queue


async def test_records_waiting_for_a_tools_processor_are_a_busy_bus() -> None:
    d = await org_tool_pending()
    d.backlog.set("tool:finance_tool", 9)  # a tool the round heard from: not what it waits for
    d.backlog.set("tool:org_tool", 9)
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code) == ("tool:org_tool", "busy")
    assert report_env.payload.context[BUSY_BEHIND] == ["tool:org_tool"]


async def test_memory_backlog_after_memory_answered_does_not_name_memory() -> None:
    """Once memory answered, records waiting for it are not what the round waits for: the
    tool that never answered in its fair time is named, as a timeout."""
    d = driver()
    (query,) = await d.send(call("org_tool", TOOLS))
    await d.send(call("finance_tool", TOOLS))
    await d.send(answer_query(query))
    d.backlog.set("memory:context", 50)
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code) == ("tool:org_tool", "timeout")
    assert BUSY_BEHIND not in report_env.payload.context
    recorded = RecordedHealth()
    recorded.cue([report_env])
    assert await recorded.backlog("memory:context") == 0


async def test_no_backlog_before_memory_answered_is_still_a_timeout() -> None:
    d = driver()
    await d.send(call("org_tool", TOOLS))
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code) == ("memory:context", "timeout")


async def _deadline_after_memory(d: Driver) -> Envelope:
    (query,) = await d.send(call("org_tool", TOOLS))
    await d.send(call("finance_tool", TOOLS))
    await d.send(answer_query(query))
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    return report_env


async def _deadline_before_memory(d: Driver) -> Envelope:
    await d.send(call("org_tool", TOOLS))
    await d.send(call("finance_tool", TOOLS))
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    return report_env


async def _memory_late(d: Driver) -> Envelope:
    (query,) = await d.send(call("org_tool", TOOLS), appended_ms=1_000)
    await d.send(call("finance_tool", TOOLS))
    (report_env,) = answers(await d.send(answer_query(query), appended_ms=1_000 + 6_000))
    return report_env


@pytest.mark.parametrize(
    ("run", "backlogs", "queued", "named", "behind"),
    [
        (_deadline_after_memory, {"dispatcher": 1_600}, {}, "tool:org_tool", ["dispatcher"]),
        (
            _deadline_after_memory,
            {"dispatcher": 1_600},
            {"finance_tool": 2},
            "tool:finance_tool",
            ["tool:finance_tool", "dispatcher"],
        ),
        (
            _deadline_after_memory,
            {"tool:finance_tool": 3},
            {"org_tool": 1},
            "tool:org_tool",
            ["tool:org_tool", "tool:finance_tool"],
        ),
        (
            _deadline_before_memory,
            {"memory:context": 9, "dispatcher": 2},
            {"org_tool": 4},
            "memory:context",
            ["memory:context", "dispatcher"],
        ),
        (_deadline_before_memory, {"dispatcher": 2}, {}, "memory:context", ["dispatcher"]),
        (
            _memory_late,
            {"memory:context": 3},
            {"org_tool": 4},
            "memory:context",
            ["memory:context"],
        ),
    ],
    ids=[
        "dispatcher",
        "dispatcher-and-a-tool-queue",
        "a-tools-processor-and-a-queue",
        "memory-and-dispatcher",
        "dispatcher-before-memory",
        "memory-late",
    ],
)
async def test_a_replay_with_the_recorded_backlogs_fails_the_round_the_same_way(
    run: Callable[[Driver], Awaitable[Envelope]],
    backlogs: dict[str, int],
    queued: dict[str, int],
    named: str,
    behind: list[str],
) -> None:
    """The same inputs, with the backlogs read back from the busy report, give the same
    report: a busy bus is part of the record, not a live accident of the replay."""
    live = driver()
    for component, waiting in backlogs.items():
        live.backlog.set(component, waiting)
    for tool, calls in queued.items():
        live.health.set(ToolHealth(tool=tool, latency_ms=50.0, success_rate=1.0, queued=calls))
    first = await run(live)
    report = first.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code, report.advice) == (named, "busy", BUSY_ADVICE)
    assert first.payload.context[BUSY_BEHIND] == behind
    recorded = RecordedHealth()
    recorded.cue([first])
    again = await run(Driver(recorded=recorded))
    assert again.payload == first.payload
