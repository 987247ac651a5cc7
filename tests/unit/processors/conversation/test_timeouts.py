"""Every wait of the expense report has its own text, and only a current wait says anything.

The reported bug: after a restart the OCR pre-check ran into the dispatcher's 30-second
deadline; the S2 exit asked "continue uploading?", and the next turn ("不用，就这三张") was
answered with the S2 wait's "您已超过5分钟未上传材料" although no wait had expired.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from hermesbus import Envelope, Payload, StateSnapshot, TimerFired, ToolCall
from hermesbus.processors.flow import EXPENSE_SPEC, ReplyAction, Wait, duration_ms
from hermesbus.runtime import Outcome, SessionState

from .demo import (
    PHOTOS,
    Driver,
    bodies,
    moves,
    snap,
    the_reply,
    to_confirm,
    to_s2,
    to_s3,
)

WAITS = [(state.id, wait) for state in EXPENSE_SPEC.states for wait in state.waits]
PURPOSES = [wait.id for _, wait in WAITS]
CHOICES_GAVE_UP = ("继续上传", "放弃")
CHOICES_TIMEOUT = ("重试", "取消")
UPLOAD_FAILED = "上传的材料未能完成预检，是否继续上传？"
VALIDATION_FAILED = "数据校验未能完成，已转人工复核。您可以重试校验或取消。"


def _move(state: str, wait: Wait) -> tuple[str | None, str]:
    """Where the wait's move leads, and what the user is told: the wait's text, or (a wait
    that says nothing itself) the reply of its move."""
    move = next(m for m in EXPENSE_SPEC.transitions if m.source == state and m.on == wait.trigger)
    said = [a.reply.text for a in move.do if isinstance(a, ReplyAction)]
    return move.to, wait.text or said[0]


TEXTS = {wait.id: _move(state, wait)[1] for state, wait in WAITS}
GAVE_UP = TEXTS["s2_wait"]
VALIDATION_TIMEOUT = TEXTS["s3_validation"]
DURATION = re.compile(r"\d+\s*(?:秒|分钟|小时)")

IDLE_GAVE_UP_TEXT = (
    "超过10分钟未收到回复，已按放弃处理。当前进度已保存为未完成报销流程，可随时继续。"
)


def _said(after: timedelta) -> str:
    """How a text states a wait: ``5分钟``, ``30秒``."""
    seconds = int(after.total_seconds())
    return f"{seconds // 60}分钟" if seconds % 60 == 0 else f"{seconds}秒"


async def _to_gave_up(d: Driver) -> None:
    await to_s2(d)
    await d.send(d.fire("s2_wait"))


ARMING: dict[str, Callable[[Driver], Awaitable[object]]] = {
    "s2_wait": to_s2,
    "s3_validation": to_s3,
    "s4_idle": to_confirm,
    "s4_gave_up": _to_gave_up,
}
"""How to reach the state that arms each wait; a new purpose needs an entry here too."""


def test_every_wait_of_the_spec_has_its_own_text() -> None:
    assert len(PURPOSES) == len(set(PURPOSES)) == 4
    assert len(set(TEXTS.values())) == len(PURPOSES), "two waits share a text"


@pytest.mark.parametrize(("state", "wait"), WAITS, ids=PURPOSES)
def test_each_text_states_its_own_duration_and_no_other(state: str, wait: Wait) -> None:
    text = TEXTS[wait.id]
    after = timedelta(milliseconds=duration_ms(wait.after))
    assert DURATION.findall(text) == [_said(after)], (state, text)


@pytest.mark.parametrize(("state", "wait"), WAITS, ids=PURPOSES)
async def test_each_wait_fires_its_own_move_and_text(state: str, wait: Wait) -> None:
    arm = ARMING.get(wait.id)
    if arm is None:
        pytest.fail(f"no way to arm {wait.id!r}: add it to ARMING")
    d = Driver()
    await arm(d)
    assert d.state.data["state"] == state and wait.id in d.armed
    fired = d.fire(wait.id)
    out = await d.send(fired)
    assert moves(out) == [(state, _move(state, wait)[0])]
    (moved,) = bodies(out, StateSnapshot)
    assert moved.trigger == wait.trigger
    assert the_reply(out).text == TEXTS[wait.id]
    assert not bodies(out, ToolCall)
    again = await d.send(fired)  # the same timer once more: it is no longer armed
    assert again.emit == () and again.state is None


def _timer(d: Driver, purpose: str, data: object) -> Envelope:
    body = TimerFired(
        timer_id=f"t-{purpose}", due_at=d.now, purpose=purpose, data_json=json.dumps(data)
    )
    return d._envelope(
        body,
        message_id=f"t-{purpose}-{d.count}",
        source="conversation:timer",
        target="conversation:S4",
        payload=Payload(task="timer", body=body),
    )


def _silent(out: Outcome) -> bool:
    return out.emit == () and out.state is None and out.timers == () and out.cancel == ()


async def test_a_timer_of_a_wait_the_current_state_lacks_says_nothing() -> None:
    d = Driver()
    await to_confirm(d)
    left_over = "left-over"
    timers = {**d.state.data["timers"], "s2_wait": left_over}
    # an S2 wait the saved state still lists (e.g. state written before a restart)
    d.state = SessionState(d.state.version, {**d.state.data, "timers": timers}, d.state.applied)
    before = d.state
    out = await d.send(_timer(d, "s2_wait", {"state": "S4", "token": left_over}))
    assert _silent(out) and d.state.data == before.data


async def test_a_timer_of_an_unknown_purpose_says_nothing() -> None:
    d = Driver()
    await to_confirm(d)
    token = d.state.data["timers"]["s4_idle"]
    out = await d.send(_timer(d, "s9_nap", {"state": "S4", "token": token}))
    assert _silent(out)


async def test_a_timer_without_a_token_is_never_current() -> None:
    d = Driver()
    await to_confirm(d)
    await d.say("确认")  # submitting: the S4 idle wait is cancelled
    assert "s4_idle" not in d.state.data["timers"]
    out = await d.send(_timer(d, "s4_idle", {"state": "S4"}))
    assert _silent(out) and d.state.data["state"] == "S4"


async def test_the_reported_case_a_failed_pre_check_never_speaks_of_5_minutes() -> None:
    d = Driver()
    await to_s2(d)
    await d.say("[上传两张图片]", PHOTOS)
    d.later(seconds=30)  # the dispatcher's S2 deadline, not the 5-minute wait
    failed = await d.send(d.error("tool:ocr_tool", "timeout"))
    assert moves(failed) == [("S2", "S4")]
    asked = the_reply(failed)
    assert "5分钟" not in asked.text and asked.choices == CHOICES_GAVE_UP
    assert snap(failed.emit[0]).summary == "材料预检失败，询问是否继续上传"
    assert "s4_gave_up" in d.armed and "s4_idle" not in d.armed
    d.later(seconds=30)
    out = await d.say("不用，就这三张")
    reply = the_reply(out)
    assert (reply.text, reply.choices) == (UPLOAD_FAILED, CHOICES_GAVE_UP)
    assert moves(out) == [] and not bodies(out, ToolCall)
    expired = await d.send(d.fire("s4_gave_up"))
    assert moves(expired) == [("S4", "S5")] and the_reply(expired).text == IDLE_GAVE_UP_TEXT


async def test_after_the_real_5_minute_wait_the_question_asked_again_is_the_same() -> None:
    d = Driver()
    await _to_gave_up(d)
    out = await d.say("不用，就这三张")
    reply = the_reply(out)
    assert (reply.text, reply.choices) == (GAVE_UP, CHOICES_GAVE_UP)
    assert moves(out) == [] and not bodies(out, ToolCall)


async def test_a_failed_validation_tool_is_never_called_a_30_second_timeout() -> None:
    d = Driver()
    await to_s3(d)
    failed = await d.send(d.error("tool:rule_engine_tool", "502"))
    assert moves(failed) == [("S3", "S3.1")] and "30秒" not in the_reply(failed).text
    assert snap(failed.emit[0]).summary == "校验失败，待人工复核"
    out = await d.say("这是什么意思")
    reply = the_reply(out)
    assert (reply.text, reply.choices) == (VALIDATION_FAILED, CHOICES_TIMEOUT)
    retry = await d.say("重试")
    assert moves(retry) == [("S3.1", "S3")]


async def test_after_the_real_30_second_timeout_the_question_asked_again_is_the_same() -> None:
    d = Driver()
    await to_s3(d)
    await d.send(d.fire("s3_validation"))
    out = await d.say("这是什么意思")
    reply = the_reply(out)
    assert (reply.text, reply.choices) == (VALIDATION_TIMEOUT, CHOICES_TIMEOUT)
