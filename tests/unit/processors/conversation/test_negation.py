"""Explicit confirmation, never a guess: a negated or asked confirmation never submits."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hermesbus import ToolCall
from hermesbus.processors.conversation import IntentName, RuleIntentParser, negation

from .demo import Driver, bodies, moves, the_reply, to_confirm

NOW = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)
RULES = RuleIntentParser()
N = IntentName

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
    intent = RULES.parse_now(text, now=NOW)
    assert (intent.name, intent.hold, negation(text)) == (N.CANCEL, True, "submit")


@pytest.mark.parametrize("text", NOT_CONFIRMED)
def test_a_negated_confirmation_is_unclear(text: str) -> None:
    assert RULES.parse_now(text, now=NOW).name is N.UNCLEAR
    assert negation(text) == "confirm"


@pytest.mark.parametrize("text", ASKED)
def test_a_question_is_not_a_confirmation(text: str) -> None:
    assert RULES.parse_now(text, now=NOW).name is N.UNCLEAR


@pytest.mark.parametrize("text", CONFIRMED)
def test_positive_controls_are_confirmations(text: str) -> None:
    assert RULES.parse_now(text, now=NOW).name is N.CONFIRM
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
    """An intent port (like a model) that reads everything as a confirmation."""

    zone = UTC

    async def parse(self, text: str, **_: object) -> object:
        return RULES.parse_now("确认", now=NOW)


async def test_a_port_reading_a_negation_as_confirm_still_does_not_submit() -> None:
    d = Driver()
    await to_confirm(d)
    d.ports["intent"] = _SaysConfirm()
    out = await d.say("不要提交")
    assert not bodies(out, ToolCall) and moves(out) == []
