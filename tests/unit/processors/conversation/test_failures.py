"""Failures and clarifications: exception exits from the table, invalid symbols, problems
kept in the state, and no raw internal error text in a reply."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from hermesbus import (
    Envelope,
    ErrorReport,
    MemoryContext,
    Payload,
    ToolCall,
)
from hermesbus.processors.conversation import MAX_PROBLEMS, Session, handle
from hermesbus.processors.conversation._session import Pending
from hermesbus.processors.flow import EXPENSE_SPEC, State
from hermesbus.runtime import HandlerInput, SessionState

from .demo import (
    RULES,
    TRIP,
    Driver,
    bodies,
    moves,
    the_reply,
    to_review,
    to_s2,
    to_s3,
    writes,
)

T = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)


async def _to_clarify(d: Driver) -> None:
    await to_s3(d)
    invalid = MemoryContext(invalid=("user_dept",))
    out = await d.send(d.answer({"trip_tool": TRIP, "rule_engine_tool": RULES}, context=invalid))
    assert moves(out) == [("S3", "S3.1")]  # ('S3', 'context_invalid')
    reply = the_reply(out)
    assert "user_dept" in reply.text and reply.choices == ("重新校验", "重新上传", "取消")


async def test_an_invalid_symbol_asks_its_own_question_not_the_blur_review() -> None:
    d = Driver()
    await _to_clarify(d)
    keep = await d.say("不用，就这三张")
    assert moves(keep) == [] and not writes(keep)  # no tolerance, no choice observation
    assert the_reply(keep).choices == ("重新校验", "重新上传", "取消")
    assert "user_dept" in the_reply(keep).text
    assert d.state.data["context"] == {} and d.state.data["state"] == "S3.1"  # nothing carried


async def test_re_checking_an_invalid_symbol_runs_the_validation_again() -> None:
    d = Driver()
    await _to_clarify(d)
    out = await d.say("重新校验")
    assert moves(out) == [("S3.1", "S3")]
    calls = bodies(out, ToolCall)
    assert [c.tool for c in calls] == ["trip_tool", "rule_engine_tool"]
    again = await d.send(d.answer({"trip_tool": TRIP, "rule_engine_tool": RULES}))
    assert moves(again) == [("S3", "S3.1")] and the_reply(again).choices[1] == "不用，就这三张"


async def test_re_uploading_after_an_invalid_symbol_goes_back_to_s2() -> None:
    d = Driver()
    await _to_clarify(d)
    assert moves(await d.say("重新上传")) == [("S3.1", "S2")]


async def test_s2_cancel_ends_in_s5() -> None:
    d = Driver()
    await to_s2(d)
    out = await d.say("取消")
    assert moves(out) == [("S2", "S5")] and "已取消" in the_reply(out).text


async def test_s3_1_cancel_ends_in_s5_and_saves_the_report() -> None:
    d = Driver()
    await to_review(d)
    out = await d.say("放弃")
    assert moves(out) == [("S3.1", "S5")]
    (write,) = [w for w in writes(out) if w.key.startswith("unfinished:")]
    assert write.key == "unfinished:sess_456"


def _report(d: Driver, component: str, code: str, message: str) -> Envelope:
    body = ErrorReport(component=component, code=code, message=message, advice="", retryable=False)
    return d._envelope(
        body,
        source="mcp:dispatcher",
        target="conversation:S2",
        payload=Payload(task="memory_write", body=body),
    )


async def test_a_memory_refusal_outside_a_cycle_is_kept_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    d = Driver()
    await to_s2(d)
    with caplog.at_level(logging.WARNING):
        out = await d.send(_report(d, "memory:mid_term", "memory.unconfirmed", "no confirmed_by"))
    assert out.emit == () and out.state is not None
    (problem,) = d.state.data["problems"]
    assert problem["component"] == "memory:mid_term" and problem["code"] == "memory.unconfirmed"
    assert problem["message"] == "no confirmed_by" and d.state.data["state"] == "S2"
    assert any("memory.unconfirmed" in r.getMessage() for r in caplog.records)


async def test_problems_are_bounded_to_the_most_recent() -> None:
    d = Driver()
    await to_s2(d)
    for i in range(MAX_PROBLEMS + 3):
        await d.send(_report(d, "memory:mid_term", f"memory.refused{i}", "refused"))
    problems = d.state.data["problems"]
    assert len(problems) == MAX_PROBLEMS
    assert problems[-1]["code"] == f"memory.refused{MAX_PROBLEMS + 2}"
    assert problems[0]["code"] == "memory.refused3"


async def test_raw_error_detail_stays_out_of_the_reply() -> None:
    leak = "Traceback (most recent call last): HTTP 500 <html>db password=hunter2</html>"
    e = Driver("sess_leak")
    await e.say("我要报上个月去深圳的差旅费")
    current, task, target = e.cycle()
    body = ErrorReport(
        component="tool:finance_tool", code="503", message=leak, advice="稍后重试", retryable=True
    )
    report = e._envelope(
        body,
        source="mcp:dispatcher",
        target=target,
        payload=Payload(task=task, context={"cycle": current}, body=body),
    )
    failed = await e.send(report)
    text = the_reply(failed).text
    assert "tool:finance_tool" in text and "503" in text and "稍后重试" in text
    assert "Traceback" not in text and "hunter2" not in text and "<html>" not in text
    assert e.state.data["problems"][-1]["message"].startswith("Traceback")


def _failure_in(state: str) -> HandlerInput:
    session = Session(
        state=state,
        facts={"goal": "差旅报销"},
        pending=Pending(cycle="c1", task="t", tools=("x_tool",), turn_id="m0"),
    )
    body = ErrorReport(component="tool:x_tool", code="503", message="down", advice="稍后重试")
    envelope = Envelope(
        message_id="err-1",
        timestamp=T,
        source="mcp:dispatcher",
        target=f"conversation:{state}",
        session_id="sess_exit",
        user_id="u_xyz789",
        trace_id="trace-exit",
        payload=Payload(task="t", context={"cycle": "c1"}, body=body),
    )
    data = session.model_dump(mode="json")
    return HandlerInput(envelope, SessionState(1, data, ()), "conversation", {})


STATES = EXPENSE_SPEC.states


@pytest.mark.parametrize("spec", STATES, ids=[s.id for s in STATES])
async def test_every_failure_takes_the_declared_exception_exit(spec: State) -> None:
    outcome = await handle(_failure_in(spec.id))
    assert outcome.state is not None and outcome.state["state"] == (spec.exit or spec.id)
    assert outcome.state["problems"][-1]["component"] == "tool:x_tool"
    assert outcome.state["pending"] is None


async def test_the_s3_timeout_exit_is_the_same_as_its_exception_exit() -> None:
    d = Driver()
    await to_s3(d)
    out = await d.send(d.error("tool:trip_tool", "timeout"))
    assert moves(out) == [("S3", EXPENSE_SPEC.states[2].exit)]
    assert d.working()["ask"] == "review_timeout"
