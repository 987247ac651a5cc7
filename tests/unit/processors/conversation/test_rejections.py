"""A tool's 4xx is the caller's mistake: the user is told what was wrong, not "retry later".

5xx results and the dispatcher's fail-fast reports (5xx, timeouts) keep "稍后重试".
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermesbus import Envelope, ToolResults
from hermesbus.processors.conversation._reasons import REASON_CHARS, tool_reason
from hermesbus.processors.conversation._texts import rejected_text
from hermesbus.processors.flow.expense_hooks import SAVED

from .demo import ORG, PHOTOS, Driver, moves, the_reply, to_s2

NOT_IN_DIRECTORY = "DemoToolError: user 'u_5e884898' is not in the demo directory"
"""What the demo org_tool answers, through the tool worker, for a user of no fixture."""


def _with_error(answer: Envelope, tool: str, error: str) -> Envelope:
    """The dispatcher's answer with ``tool``'s result carrying ``error``."""
    body = answer.payload.body
    assert isinstance(body, ToolResults)
    results = tuple(
        r.model_copy(update={"error": error}) if r.tool == tool else r for r in body.results
    )
    payload = answer.payload.model_copy(
        update={"body": body.model_copy(update={"results": results})}
    )
    return answer.model_copy(update={"payload": payload})


async def _s1_answer(status: int, error: str, tool: str = "org_tool") -> tuple[Driver, str]:
    d = Driver()
    await d.say("我要报上个月去深圳的差旅费")
    answer = d.answer({"finance_tool": {}, "org_tool": ORG}, status={tool: status})
    out = await d.send(_with_error(answer, tool, error))
    assert moves(out) == [("S1", "S5")]
    return d, the_reply(out).text


async def test_a_4xx_tells_the_user_what_the_tool_said_was_wrong() -> None:
    d, text = await _s1_answer(422, NOT_IN_DIRECTORY)
    assert text == (
        "org_tool 无法处理该请求（422）：user 'u_5e884898' is not in the demo directory。"
        "请检查输入。" + SAVED
    )
    assert "稍后重试" not in text and "DemoToolError" not in text
    problem = d.state.data["problems"][-1]  # the full error is kept for the on-call engineer
    assert (problem["component"], problem["code"], problem["message"]) == (
        "tool:org_tool",
        "422",
        NOT_IN_DIRECTORY,
    )


async def test_a_5xx_inside_the_answer_still_says_retry_later() -> None:
    _, text = await _s1_answer(503, "RuntimeError: the directory is down")
    assert text.startswith("tool:org_tool 暂时无法完成请求（503）。建议：请稍后重试或联系管理员。")
    assert "the directory is down" not in text


async def test_a_4xx_in_s2_takes_the_same_exit_as_any_failure_with_the_reason() -> None:
    d = Driver()
    await to_s2(d)
    await d.say("[上传两张图片]", PHOTOS)
    answer = d.answer({}, status={"ocr_tool": 422})
    error = "DemoToolError: file 'demo://expense/photo-9.jpg' is not a demo upload"
    out = await d.send(_with_error(answer, "ocr_tool", error))
    assert moves(out) == [("S2", "S4")]
    reply = the_reply(out)
    assert reply.text.startswith(
        "ocr_tool 无法处理该请求（422）：file 'demo://expense/photo-9.jpg' is not a demo upload。"
        "请检查输入。"
    )
    assert reply.choices == ("继续上传", "放弃") and reply.degraded


async def test_the_dispatchers_fail_fast_report_keeps_its_advice() -> None:
    d = Driver()
    await d.say("我要报上个月去深圳的差旅费")
    text = the_reply(await d.send(d.error("tool:finance_tool", "timeout"))).text
    assert text.startswith("tool:finance_tool 暂时无法完成请求（timeout）。建议：稍后重试。")


async def test_an_unsafe_4xx_error_is_not_shown_and_the_reply_is_still_a_4xx_reply() -> None:
    leak = 'Traceback (most recent call last):\n  File "/srv/org.py", line 3\nKeyError: password'
    _, text = await _s1_answer(422, leak)
    assert text == "org_tool 无法处理该请求（422）。请检查输入。" + SAVED


@pytest.mark.parametrize(
    ("code", "advice"), [(400, "请检查输入"), (404, "请联系管理员"), (422, "请检查输入")]
)
def test_a_4xx_of_the_request_says_what_was_wrong_and_what_to_do(code: int, advice: str) -> None:
    assert rejected_text("x_tool", code, "Refused: no").endswith(f"（{code}）：no。{advice}。")


@pytest.mark.parametrize(
    ("code", "advice"),
    [(401, "请联系管理员"), (403, "请联系管理员"), (409, "请联系管理员"), (413, "请检查输入")],
)
def test_any_other_4xx_text_is_never_shown(code: int, advice: str) -> None:
    """An access refusal may name a credential or the module allow-list: logs only."""
    leak = "Unauthorized: invalid api key sk-live-12345abcdef"
    assert rejected_text("x_tool", code, leak) == f"x_tool 无法处理该请求（{code}）。{advice}。"


@pytest.mark.parametrize("code", [408, 429])
async def test_a_transient_4xx_says_retry_later(code: int) -> None:
    _, text = await _s1_answer(code, "Too Many Requests: slow down")
    later = f"tool:org_tool 暂时无法完成请求（{code}）。建议：请稍后重试或联系管理员。"
    assert text.startswith(later)
    assert "slow down" not in text


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (NOT_IN_DIRECTORY, "user 'u_5e884898' is not in the demo directory"),
        (
            "arguments: n: 9 is greater than the maximum of 3",
            "arguments: n: 9 is greater than the maximum of 3",
        ),
        ("tool 'x_tool' is not registered", "tool 'x_tool' is not registered"),
        ('org_tool answered HTTP 422: {"detail": "unknown user u_1"}', "unknown user u_1"),
        ('org_tool answered HTTP 400: {"error": {"code": 7}, "message": "bad dept"}', "bad dept"),
        ('org_tool answered HTTP 422: {"detail": "unknown us', ""),  # cut at 200 bytes
        ("org_tool answered HTTP 400: <html><body>Bad Request</body></html>", ""),
        ("org_tool answered HTTP 400: missing field: dept", "missing field: dept"),
        ("ValueError: first line\nsecond line", "first line"),
        ("Refused: bad\x00\x1b[31m input\u200b 。", "bad[31m input"),
        ("ValueError: ", ""),
        ("", ""),
    ],
)
def test_only_the_tools_own_message_is_kept(error: str, reason: str) -> None:
    assert tool_reason(error) == reason


def test_a_long_reason_is_cut_with_a_marker() -> None:
    reason = tool_reason("ValueError: " + "x" * 500)
    assert len(reason) == REASON_CHARS and reason.endswith("…")


@given(st.text(max_size=400))
def test_any_error_gives_one_bounded_printable_line(error: str) -> None:
    reason = tool_reason(error)
    assert len(reason) <= REASON_CHARS
    assert reason.isprintable() and "Traceback" not in reason
