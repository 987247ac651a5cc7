"""A tool whose server reports progress while its call runs: the user hears it is
processing, once per tool and round, and only the figures travel (never the server's words)."""

from __future__ import annotations

from hermesbus import Envelope, ErrorReport, Reply, ToolCall, ToolResults
from hermesbus.processors.protocol import (
    DISPATCHER_TOPIC,
    PROGRESS,
    USER,
    ProtocolPolicy,
    ToolHealth,
    progress_notice,
)

from .helpers import (
    CYCLE,
    FINANCE_RESULT,
    ORG_RESULT,
    Driver,
    answer_query,
    answers,
    call,
    result_for,
)

TOOLS = ["org_tool", "finance_tool"]


def driver(org_latency_ms: float = 50.0) -> Driver:
    return Driver.with_health(
        ToolHealth(tool="org_tool", latency_ms=org_latency_ms, success_rate=1.0),
        ToolHealth(tool="finance_tool", latency_ms=50.0, success_rate=1.0),
    )


async def calls_out(d: Driver) -> list[Envelope]:
    (query,) = await d.send(call("org_tool", TOOLS))
    await d.send(call("finance_tool", TOOLS))
    emitted = await d.send(answer_query(query))
    return [e for e in emitted if isinstance(e.payload.body, ToolCall)]


def progress(held: Envelope, done: float = 0, total: float | None = 2) -> Envelope:
    news = progress_notice(held, done, total, 0)
    assert news is not None
    return news


def told(emitted: tuple[Envelope, ...]) -> list[str]:
    return [
        e.payload.body.text
        for e in emitted
        if e.target == USER and isinstance(e.payload.body, Reply)
    ]


def test_only_the_dispatchers_calls_get_a_progress_notice() -> None:
    assert progress_notice(call("org_tool", TOOLS), 0, None, 0) is None


async def test_the_user_is_told_once_that_the_tool_is_processing() -> None:
    d = driver()
    org_out, finance_out = await calls_out(d)
    news = progress(org_out)
    report = news.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code) == ("tool:org_tool", PROGRESS)
    assert news.payload.context["cycle"] == CYCLE and news.causation_id == org_out.message_id
    assert ProtocolPolicy().refusal(DISPATCHER_TOPIC, "tool", news) is None  # a tool may say it
    (said,) = told(await d.send(news))
    assert said == "org_tool 处理中（org_tool is processing）"  # none of the tool's words
    assert told(await d.send(progress(org_out, 1, 2))) == []  # once per tool and round
    await d.send(result_for(org_out, 200, ORG_RESULT))
    (answer,) = answers(await d.send(result_for(finance_out, 200, FINANCE_RESULT)))
    body = answer.payload.body
    assert isinstance(body, ToolResults) and "org_tool 处理中" in body.notice


async def test_a_slow_tools_notice_already_said_it() -> None:
    d = driver(org_latency_ms=1_500.0)  # slow: the user was told when it was called
    org_out, _ = await calls_out(d)
    assert told(await d.send(progress(org_out))) == []


async def test_progress_of_another_tool_or_a_closed_round_tells_nobody() -> None:
    d = driver()
    org_out, finance_out = await calls_out(d)
    forged = progress(org_out).model_copy(update={"source": "tool:finance_tool"})
    assert told(await d.send(forged)) == []  # each tells only of itself
    await d.send(result_for(org_out, 200, ORG_RESULT))
    await d.send(result_for(finance_out, 200, FINANCE_RESULT))
    assert told(await d.send(progress(org_out))) == []  # the round was answered
