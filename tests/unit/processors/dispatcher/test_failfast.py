"""Fail fast on 5xx and on the deadline; retries with backoff; late results dropped."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from hermesbus import ErrorReport, ToolCall
from hermesbus.contract.payloads import ToolResults
from hermesbus.processors.dispatcher._health import BUSY, BUSY_ADVICE
from hermesbus.processors.protocol import BUSY_PREFIX, ToolHealth

from .helpers import (
    CYCLE,
    FINANCE_RESULT,
    T0,
    Driver,
    answer_query,
    answers,
    call,
    kinds,
    result_for,
)

TOOLS = ["org_tool", "finance_tool"]
RETRY_LATER = "稍后重试或使用降级数据（retry later or use fallback data）"


def driver() -> Driver:
    return Driver.with_health(
        ToolHealth(tool="org_tool", latency_ms=50.0, success_rate=1.0),
        ToolHealth(tool="finance_tool", latency_ms=50.0, success_rate=1.0),
    )


async def open_cycle(d: Driver, **kwargs: object):  # type: ignore[no-untyped-def]
    (query,) = await d.send(call("org_tool", TOOLS, **kwargs))  # type: ignore[arg-type]
    await d.send(call("finance_tool", TOOLS, **kwargs))  # type: ignore[arg-type]
    org_out, finance_out = await d.send(answer_query(query))
    return org_out, finance_out


async def test_final_503_fails_fast_with_one_report_and_drops_the_late_result() -> None:
    d = driver()
    org_out, finance_out = await open_cycle(d, max_attempts=1)
    out = await d.send(result_for(org_out, 503, error="HR system down"))
    assert kinds(out) == [("conversation:S1", "ErrorReport")]
    report = out[0].payload.body
    assert report == ErrorReport(
        component="tool:org_tool",
        code="503",
        message="org_tool answered 503 on attempt 1 of 1: HR system down",
        advice=RETRY_LATER,
        retryable=True,
    )
    assert out[0].payload.context["cycle"] == CYCLE
    assert out[0].diagnostics is not None
    assert out[0].diagnostics.confidence_score == 0.0
    assert d.outcomes[-1].cancel == (f"cycle:{CYCLE}",)
    assert d.timers == {}
    # the pending finance call's result comes late: dropped, counted, no second answer
    assert await d.send(result_for(finance_out, 200, FINANCE_RESULT)) == ()
    assert d.data["late"] == 1
    assert d.counter.late == 1
    assert d.data["cycles"][CYCLE]["status"] == "failed"


async def test_504_after_the_retry_fails_fast_and_cancels_pending_retries() -> None:
    d = driver()
    org_out, finance_out = await open_cycle(d)
    # finance fails first with attempts left: a retry is scheduled
    assert await d.send(result_for(finance_out, 503)) == ()
    assert f"retry:{CYCLE}:finance_tool" in d.timers
    # org times out on its last attempt after its own retry
    assert await d.send(result_for(org_out, 504)) == ()
    (org_again,) = await d.fire(f"retry:{CYCLE}:org_tool")
    assert org_again.metadata.attempt == 2
    out = await d.send(result_for(org_again, 504, error="tool timed out"))
    (report_env,) = answers(out)
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code, report.retryable) == ("tool:org_tool", "504", True)
    assert "attempt 2 of 2" in report.message
    assert report.advice == RETRY_LATER
    assert set(d.outcomes[-1].cancel) == {f"cycle:{CYCLE}", f"retry:{CYCLE}:finance_tool"}
    assert d.timers == {}


async def test_the_deadline_timer_fails_fast_with_timeout() -> None:
    d = driver()
    org_out, finance_out = await open_cycle(d)
    await d.send(result_for(finance_out, 200, FINANCE_RESULT))
    fired = d.fired(f"cycle:{CYCLE}")
    assert fired.timestamp == T0 + timedelta(milliseconds=5_000)
    out = await d.send(fired)
    (report_env,) = answers(out)
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code) == ("tool:org_tool", "timeout")
    assert "5000 ms" in report.message
    assert "tool:org_tool" in report.message
    assert report.advice == RETRY_LATER
    assert report.retryable is True
    # the org result arrives after the deadline: late
    assert await d.send(result_for(org_out, 200, {"dept": "采购部"})) == ()
    assert d.data["late"] == 1


async def test_deadline_before_memory_answered_names_memory() -> None:
    d = driver()
    (query,) = await d.send(call("org_tool", TOOLS))
    (report_env,) = answers(await d.fire(f"cycle:{CYCLE}"))
    report = report_env.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code) == ("memory:context", "timeout")
    assert "no call yet for ['finance_tool']" in report.message
    # memory's late answer and the conversation's late call: dropped, nothing dispatched
    assert await d.send(answer_query(query)) == ()
    assert await d.send(call("finance_tool", TOOLS)) == ()
    assert d.data["late"] == 2


async def test_retry_with_backoff_then_success() -> None:
    d = driver()
    org_out, finance_out = await open_cycle(d)
    assert await d.send(result_for(org_out, 503)) == ()
    timer = d.timers[f"retry:{CYCLE}:org_tool"].request
    assert timer.due_at == T0 + timedelta(milliseconds=100)  # backoff_ms * 2**(1-1)
    assert json.loads(timer.data_json) == {
        "attempt": 2,
        "cycle": CYCLE,
        "round": 1,
        "tool": "org_tool",
    }
    (again,) = await d.fire(f"retry:{CYCLE}:org_tool")
    assert again.target == "tool:org_tool"
    assert again.metadata.attempt == 2
    assert again.metadata.timeout_ms == 4_900  # the time left of the 5 s budget
    assert isinstance(again.payload.body, ToolCall)
    assert again.payload.body == org_out.payload.body  # same idempotency key
    assert await d.send(result_for(finance_out, 200, FINANCE_RESULT)) == ()
    out = await d.send(result_for(again, 200, {"dept": "采购部"}))
    (reply,) = answers(out)
    assert isinstance(reply.payload.body, ToolResults)
    assert [r.status_code for r in reply.payload.body.results] == [200, 200]


async def test_no_retry_when_the_backoff_would_pass_the_deadline() -> None:
    d = driver()
    org_out, _ = await open_cycle(d, timeout_ms=100)
    (report,) = answers(await d.send(result_for(org_out, 503)))
    assert report.payload.body.code == "503"  # type: ignore[union-attr]


async def test_a_stale_retry_timer_is_ignored() -> None:
    d = driver()
    org_out, _ = await open_cycle(d)
    await d.send(result_for(org_out, 503))
    fired = d.fired(f"retry:{CYCLE}:org_tool")
    (again,) = await d.send(fired)
    assert again.metadata.attempt == 2
    assert await d.send(fired.model_copy(update={"message_id": "dup"})) == ()


async def test_a_verification_failure_is_not_retryable() -> None:
    """With attempts left, a 502 still fails fast: a retry would re-run e.g. a real submit."""
    d = driver()
    org_out, _ = await open_cycle(d, max_attempts=2)
    (report,) = answers(await d.send(result_for(org_out, 502, error="bad signature")))
    body = report.payload.body
    assert isinstance(body, ErrorReport)
    assert (body.code, body.retryable) == ("502", False)
    assert "attempt 1 of 2" in body.message
    assert d.outcomes[-1].timers == ()
    assert d.timers == {}  # no retry timer, the deadline cancelled


@pytest.mark.parametrize("status", [501, 505, 507])
async def test_other_5xx_fail_fast_without_a_retry(status: int) -> None:
    d = driver()
    org_out, _ = await open_cycle(d, max_attempts=3)
    (report,) = answers(await d.send(result_for(org_out, status)))
    body = report.payload.body
    assert isinstance(body, ErrorReport)
    assert (body.code, body.retryable) == (str(status), False)
    assert d.timers == {}


@pytest.mark.parametrize("status", [500, 503, 504])
async def test_only_transient_5xx_are_retried(status: int) -> None:
    d = driver()
    org_out, _ = await open_cycle(d, max_attempts=2)
    assert await d.send(result_for(org_out, status)) == ()
    assert f"retry:{CYCLE}:org_tool" in d.timers


async def test_a_final_503_because_every_worker_was_taken_is_told_as_busy() -> None:
    """The tool's pool gave the call no worker in its time: the bus is busy, the tool did
    not fail, so the user hears 'busy, still queued' rather than '503, retry later'."""
    d = driver()
    org_out, _ = await open_cycle(d, max_attempts=1)
    error = f"{BUSY_PREFIX} org_tool had none of its 2 within 4.5 s (37 calls waiting)"
    out = await d.send(result_for(org_out, 503, error=error))
    assert kinds(out) == [("conversation:S1", "ErrorReport")]
    assert out[0].payload.body == ErrorReport(
        component="tool:org_tool",
        code=BUSY,
        message=f"org_tool answered 503 on attempt 1 of 1: {error}",
        advice=BUSY_ADVICE,
        retryable=True,
    )


async def test_a_503_of_a_tool_named_busy_is_still_a_failure() -> None:
    """A worker's own errors start with the tool's name: a tool named ``busy`` that failed
    is not a busy bus."""
    d = driver()
    org_out, _ = await open_cycle(d, max_attempts=1)
    out = await d.send(result_for(org_out, 503, error="busy: worker failed: broken pipe"))
    report = out[0].payload.body
    assert isinstance(report, ErrorReport) and report.code == "503"
