"""Live tool health: fallback for unhealthy tools, notices for slow, stale and fallback data."""

from __future__ import annotations

from datetime import UTC, datetime

from hermesbus.contract.payloads import Reply, ToolResults
from hermesbus.processors.dispatcher import Verdict, choose
from hermesbus.processors.protocol import ToolHealth
from hermesbus.processors.recorded import health_of

from .helpers import Driver, answer_query, answers, call, kinds, result_for

FINANCE = ["finance_tool"]


async def dispatch_one(d: Driver, **kwargs: object):  # type: ignore[no-untyped-def]
    (query,) = await d.send(call("finance_tool", FINANCE, **kwargs))  # type: ignore[arg-type]
    return await d.send(answer_query(query))


async def test_unhealthy_tool_gets_the_fallback_flag_and_the_user_is_told() -> None:
    d = Driver.with_health(ToolHealth(tool="finance_tool", latency_ms=3_000.0, success_rate=0.5))
    out = await dispatch_one(d)
    assert kinds(out) == [("user:app", "Reply"), ("tool:finance_tool", "ToolCall")]
    notice, dispatched = out
    text = (
        "finance_tool 暂时不可用，正在使用降级数据（finance_tool unavailable, using fallback data）"
    )
    assert notice.payload.body == Reply(text=text, degraded=True)
    assert dispatched.payload.context["fallback"] is True
    assert dispatched.payload.context["health"] == "unhealthy"
    assert dispatched.payload.context["health_latency_ms"] == 3_000.0
    assert dispatched.diagnostics is not None
    assert dispatched.diagnostics.confidence_score == 0.5
    (reply,) = answers(await d.send(result_for(dispatched, 200, {"x": 1}, fallback="cache")))
    body = reply.payload.body
    assert isinstance(body, ToolResults)
    assert body.notice.splitlines() == [
        text,
        "finance_tool 使用降级数据 cache（fallback data: cache）",
    ]


async def test_quota_exhausted_is_unhealthy() -> None:
    health = ToolHealth(tool="finance_tool", latency_ms=10.0, success_rate=1.0, quota_remaining=0)
    assert choose("finance_tool", health, fallback_allowed=True).fallback is True


async def test_no_fallback_when_the_call_does_not_allow_it() -> None:
    d = Driver.with_health(ToolHealth(tool="finance_tool", latency_ms=3_000.0, success_rate=0.5))
    out = await dispatch_one(d, fallback_allowed=False)
    assert kinds(out) == [("tool:finance_tool", "ToolCall")]
    assert out[0].payload.context["fallback"] is False
    assert out[0].payload.context["health"] == "unhealthy"


async def test_unknown_tool_is_called_normally_and_recorded_as_unknown() -> None:
    d = Driver()
    (dispatched,) = await dispatch_one(d)
    assert dispatched.payload.context["health"] == Verdict.UNKNOWN.value
    assert "health_latency_ms" not in dispatched.payload.context


async def test_stale_result_notice_says_since_when() -> None:
    d = Driver.with_health(ToolHealth(tool="finance_tool", latency_ms=10.0, success_rate=1.0))
    (dispatched,) = await dispatch_one(d)
    since = datetime(2024, 6, 3, 8, 30, tzinfo=UTC)
    result = result_for(
        dispatched, 200, {"budget_remaining": 125000}, stale=True, stale_since=since
    )
    (reply,) = answers(await d.send(result))
    body = reply.payload.body
    assert isinstance(body, ToolResults)
    assert body.notice == (
        "finance_tool 数据可能已过期，最后更新于 2024-06-03 08:30 UTC"
        "（stale since 2024-06-03 08:30 UTC）"
    )
    assert body.results[0].stale is True
    assert reply.diagnostics is not None
    assert reply.diagnostics.confidence_score == 0.5


async def test_the_user_is_told_once_per_tool_even_across_retries() -> None:
    ocr = ToolHealth(tool="finance_tool", latency_ms=1_500.0, success_rate=0.99)
    d = Driver.with_health(ocr)
    out = await dispatch_one(d)
    assert [e.target for e in out] == ["user:app", "tool:finance_tool"]
    await d.send(result_for(out[1], 503))
    again = await d.fire("retry:cycle-1:finance_tool")
    assert [e.target for e in again] == ["tool:finance_tool"]
    assert again[0].payload.context["health"] == "slow"


async def test_health_is_read_live_at_each_dispatch() -> None:
    d = Driver.with_health(ToolHealth(tool="finance_tool", latency_ms=10.0, success_rate=1.0))
    out = await dispatch_one(d)
    assert out[0].payload.context["fallback"] is False
    await d.send(result_for(out[0], 503))
    d.health.set(ToolHealth(tool="finance_tool", latency_ms=10.0, success_rate=0.2))
    again = await d.fire("retry:cycle-1:finance_tool")
    assert kinds(again) == [("user:app", "Reply"), ("tool:finance_tool", "ToolCall")]
    assert again[1].payload.context["fallback"] is True


async def test_a_tool_under_an_alert_is_answered_by_its_fallback_and_a_replay_says_the_same() -> (
    None
):
    healthy_but_alerted = ToolHealth(
        tool="finance_tool", latency_ms=10.0, success_rate=1.0, alert="low_confidence"
    )
    d = Driver.with_health(healthy_but_alerted)
    notice, dispatched = await dispatch_one(d)
    text = (
        "finance_tool 告警中（low_confidence），正在使用降级数据"
        "（finance_tool under alert low_confidence, using fallback data）"
    )
    assert notice.payload.body == Reply(text=text, degraded=True)
    context = dispatched.payload.context
    assert context["fallback"] is True and context["health"] == "unhealthy"
    assert context["health_alert"] == "low_confidence"
    recorded = health_of(dispatched)  # what a replay's dispatcher is told
    assert recorded is not None and recorded.alert == "low_confidence"
    assert choose("finance_tool", recorded, fallback_allowed=True).notice == text
