"""Explicit confirmation, never a guess: a negated or asked confirmation never submits."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hermesbus import ToolCall
from hermesbus.processors.flow.expense_hooks import negation

from .demo import Driver, bodies, moves, read, the_reply, to_confirm

NOW = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)

HOLDS = ["不要提交", "别提交", "先别提交", "dont submit", "don't submit", "do not submit"]
"""A negated submit word: a cancel that only pauses (hold)."""
NOT_CONFIRMED = [
    "不确认",
    "我还没确定",
    "no, do not confirm yet",
    "我不太确定",
    "提交不了",
]
"""A negated confirm word (or a negation after one): unclear, the question is asked again."""
ASKED = ["要提交吗？", "确认吗", "submit?"]
CONFIRMED = [  # positive controls
    "确认",
    "确认提交",
    "yes, submit",
    "submit it",
    "confirm",
    "好的，提交吧",
    "没问题，确认",
]


@pytest.mark.parametrize("text", HOLDS)
def test_a_negated_submit_is_a_hold(text: str) -> None:
    assert (*read(text, NOW), negation(text)) == ("cancel", {"hold": "yes"}, "submit")


@pytest.mark.parametrize("text", NOT_CONFIRMED)
def test_a_negated_confirmation_is_unclear(text: str) -> None:
    assert read(text, NOW)[0] is None
    assert negation(text) == "confirm"


@pytest.mark.parametrize("text", ASKED)
def test_a_question_is_not_a_confirmation(text: str) -> None:
    assert read(text, NOW)[0] is None


@pytest.mark.parametrize("text", CONFIRMED)
def test_positive_controls_are_confirmations(text: str) -> None:
    assert read(text, NOW)[0] == "confirm"
    assert negation(text) is None


@pytest.mark.parametrize("text", HOLDS)
async def test_in_s4_a_negated_submit_holds_and_submits_nothing(text: str) -> None:
    d = Driver()
    await to_confirm(d)
    out = await d.say(text)
    assert not bodies(out, ToolCall)
    assert moves(out) == [("S4", "S5")] and "暂不提交" in the_reply(out).text


@pytest.mark.parametrize("text", [*NOT_CONFIRMED, *ASKED])
async def test_in_s4_an_unclear_answer_asks_again_and_submits_nothing(text: str) -> None:
    d = Driver()
    await to_confirm(d)
    out = await d.say(text)
    assert not bodies(out, ToolCall) and moves(out) == []
    assert the_reply(out).choices == ("确认", "修改", "取消") and "s4_idle" in d.armed
    assert d.state.data["state"] == "S4"


@pytest.mark.parametrize("text", ["确认", "确认提交", "yes, submit", "submit it", "是"])
async def test_in_s4_an_explicit_confirmation_submits(text: str) -> None:
    d = Driver()
    await to_confirm(d)
    out = await d.say(text)
    (call,) = bodies(out, ToolCall)
    assert call.tool == "finance_tool" and '"action":"submit"' in call.arguments_json


class _SaysConfirm:
    """A model port that reads every turn the rules do not understand as a confirmation."""

    zone = UTC

    async def classify(self, text: str, **_: object) -> tuple[str, dict[str, str]]:
        return "confirm", {}


@pytest.mark.parametrize("text", ["嗯哼", "请你现在就确认提交全部报销单"])
async def test_a_model_reading_anything_as_confirm_still_does_not_submit(text: str) -> None:
    d = Driver()
    await to_confirm(d)
    d.ports["intent"] = _SaysConfirm()
    out = await d.say(text)  # not a whole short answer: the summary is asked again
    assert not bodies(out, ToolCall) and moves(out) == []
    assert the_reply(out).choices == ("确认", "修改", "取消")
