"""Each transition, each timeout and each exception exit, driven with envelopes and timers."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from hermesbus import MemoryContext, MemoryWrite, Reply, TimerFired
from hermesbus.runtime import Outcome

from .demo import (
    FINANCE,
    OCR,
    ORG,
    PHOTOS,
    RULES,
    TRIP,
    Driver,
    moves,
    replies,
    snap,
    the_reply,
    to_confirm,
    to_review,
    to_s2,
    to_s3,
    writes,
)


def _unfinished(outcome: Outcome) -> list[MemoryWrite]:
    return [w for w in writes(outcome) if w.key.startswith("unfinished:")]


async def test_unclear_intent_ends_in_s5_with_a_reply_saying_so() -> None:
    d = Driver()
    out = await d.say("今天天气怎么样")
    assert moves(out) == [(None, "S1"), ("S1", "S5")]
    assert "没能理解您的意图" in the_reply(out).text
    assert not _unfinished(out)  # nothing was started, nothing to resume


async def test_a_finished_session_starts_over_at_s1() -> None:
    d = Driver()
    await d.say("今天天气怎么样")
    out = await d.say("我要报上个月去深圳的差旅费")
    assert moves(out) == [(None, "S1")]
    assert d.state.data["facts"]["period"] == "2024-05"


async def test_s2_wait_of_5_minutes_asks_whether_the_user_gave_up() -> None:
    d = Driver()
    await to_s2(d)
    assert d.armed["s2_wait"].due_at == datetime(2024, 6, 3, 9, 5, tzinfo=UTC)
    out = await d.send(d.fire("s2_wait"))
    assert moves(out) == [("S2", "S4")]
    reply = the_reply(out)
    assert reply.choices == ("继续上传", "放弃") and "是否放弃" in reply.text
    gave_up = await d.say("放弃")
    assert moves(gave_up) == [("S4", "S5")]
    (write,) = _unfinished(gave_up)
    assert json.loads(write.value_json)["reason"] == "gave_up"


async def test_continue_uploading_after_the_wait_goes_back_to_s2() -> None:
    d = Driver()
    await to_s2(d)
    await d.send(d.fire("s2_wait"))
    out = await d.say("继续上传")
    assert moves(out) == [("S4", "S2")]
    assert "s2_wait" in d.armed
    upload = await d.say("[上传两张图片]", PHOTOS)
    assert moves(upload) == [("S2", "S2")]


async def test_a_further_10_minutes_idle_after_the_wait_is_giving_up() -> None:
    d = Driver()
    await to_s2(d)
    await d.send(d.fire("s2_wait"))
    assert "s4_idle" not in d.armed  # the question's own wait, not the summary's
    fired = d.fire("s4_gave_up")
    out = await d.send(fired)
    assert moves(out) == [("S4", "S5")]
    (write,) = _unfinished(out)
    assert isinstance(fired.payload.body, TimerFired)
    assert write.confirmed_by == fired.payload.body.timer_id
    assert json.loads(write.value_json)["reason"] == "gave_up"


async def test_a_re_armed_wait_makes_the_old_timer_stale() -> None:
    d = Driver()
    await to_s2(d)
    old = d.fire("s2_wait")
    d.now = datetime(2024, 6, 3, 9, 1, tzinfo=UTC)
    again = await d.say("稍等我找一下")
    assert "请提供发票照片和行程单" in the_reply(again).text
    stale = await d.send(old)
    assert stale.emit == () and stale.state is None
    assert d.state.data["state"] == "S2"


async def test_text_without_attachments_asks_for_them() -> None:
    d = Driver()
    await to_s2(d)
    out = await d.say("我上传了")
    assert moves(out) == [] and "没有收到附件" in the_reply(out).text


async def test_missing_itinerary_stays_in_s2_and_names_it() -> None:
    d = Driver()
    await to_s2(d)
    await d.say("[上传两张图片]", PHOTOS)
    out = await d.send(d.answer({"ocr_tool": {**OCR, "itinerary": None}}))
    assert moves(out) == [("S2", "S2")]
    assert "还缺少行程单" in the_reply(out).text


async def test_s3_over_30_seconds_goes_to_human_review_and_late_results_are_stale() -> None:
    d = Driver()
    await to_s3(d)
    late = d.answer({"trip_tool": TRIP, "rule_engine_tool": RULES})
    timeout = await d.send(d.fire("s3_validation"))
    assert moves(timeout) == [("S3", "S3.1")]
    reply = the_reply(timeout)
    assert "超过30秒" in reply.text and reply.choices == ("重试", "取消") and reply.degraded
    ignored = await d.send(late)
    assert ignored.emit == () and ignored.state is None
    retry = await d.say("重试")
    assert moves(retry) == [("S3.1", "S3")]
    review = await d.send(d.answer({"trip_tool": TRIP, "rule_engine_tool": RULES}))
    assert moves(review) == [("S3", "S3.1")]


async def test_a_dispatcher_timeout_in_s3_is_human_review_and_the_timer_goes_stale() -> None:
    d = Driver()
    await to_s3(d)
    timer = d.fire("s3_validation")
    out = await d.send(d.error("tool:trip_tool", "timeout"))
    assert moves(out) == [("S3", "S3.1")]
    assert "s3_validation" in out.cancel
    trace = snap(out.emit[0]).tool_calls[-2]
    assert (trace.tool, trace.status_code) == ("trip_tool", 504)
    assert (await d.send(timer)).emit == ()


async def test_a_failure_in_s1_degrades_to_s5_naming_the_component() -> None:
    d = Driver()
    await d.say("我要报上个月去深圳的差旅费")
    out = await d.send(d.error("tool:finance_tool", "503"))
    assert moves(out) == [("S1", "S5")]
    reply = the_reply(out)
    assert "tool:finance_tool" in reply.text and "稍后重试" in reply.text and reply.degraded
    assert _unfinished(out)


async def test_a_failure_in_s2_takes_the_exit_to_s4_and_the_user_may_go_on() -> None:
    d = Driver()
    await to_s2(d)
    await d.say("[上传两张图片]", PHOTOS)
    out = await d.send(d.error("tool:ocr_tool", "503"))
    assert moves(out) == [("S2", "S4")]  # the table's exception exit of S2
    reply = the_reply(out)
    assert "tool:ocr_tool" in reply.text and "503" in reply.text and "稍后重试" in reply.text
    assert reply.choices == ("继续上传", "放弃") and "s4_gave_up" in d.armed
    again = await d.say("继续上传")
    assert moves(again) == [("S4", "S2")] and "s2_wait" in d.armed


async def test_a_non_timeout_failure_in_s3_goes_to_human_review() -> None:
    d = Driver()
    await to_s3(d)
    out = await d.send(d.error("tool:rule_engine_tool", "502"))
    assert moves(out) == [("S3", "S3.1")] and "s3_validation" in out.cancel
    reply = the_reply(out)
    assert "tool:rule_engine_tool" in reply.text and reply.choices == ("重试", "取消")
    retry = await d.say("重试")
    assert moves(retry) == [("S3.1", "S3")] and d.cycle()[1] == "expense_validation"


async def test_a_failed_result_inside_the_answer_is_a_failure_too() -> None:
    d = Driver()
    await d.say("我要报上个月去深圳的差旅费")
    out = await d.send(d.answer({"org_tool": ORG}, status={"finance_tool": 404}))
    assert moves(out) == [("S1", "S5")]
    assert the_reply(out).text.startswith("finance_tool 无法处理该请求（404）。请联系管理员。")


async def test_an_answer_for_another_cycle_is_ignored() -> None:
    d = Driver()
    await d.say("我要报上个月去深圳的差旅费")
    out = await d.send(d.answer({"org_tool": ORG, "finance_tool": FINANCE}, cycle="other"))
    assert out.emit == () and out.state is None


async def test_a_turn_while_tools_work_gets_a_wait_reply() -> None:
    d = Driver()
    await d.say("我要报上个月去深圳的差旅费")
    out = await d.say("好了吗")
    assert moves(out) == [] and "请稍候" in the_reply(out).text


async def test_failed_validation_ends_in_s5() -> None:
    d = Driver()
    await to_s3(d)
    bad = {"valid": False, "errors": ["发票抬头不符"], "approver": "张主管"}
    out = await d.send(d.answer({"trip_tool": TRIP, "rule_engine_tool": bad}))
    assert moves(out) == [("S3", "S5")] and "发票抬头不符" in the_reply(out).text


async def test_review_reupload_goes_back_to_s2() -> None:
    d = Driver()
    await to_review(d)
    out = await d.say("重新上传")
    assert moves(out) == [("S3.1", "S2")] and d.working()["materials"] == {}


async def test_review_repeats_its_question_on_anything_else() -> None:
    d = Driver()
    await to_review(d)
    out = await d.say("嗯？")
    assert moves(out) == [] and the_reply(out).choices == ("重新上传", "不用，就这三张")


async def test_keep_these_records_the_tolerance_and_observes_the_choice() -> None:
    d = Driver()
    out = await to_confirm(d)
    assert moves(out) == [("S3.1", "S4")]
    assert d.state.data["context"] == {"user_tolerates_blur": True, "ocr_confidence_min": 0.7}
    (choice,) = writes(out)
    assert (choice.key, choice.value_json) == ("choice:ocr_blur_tolerance", '"accept"')
    assert not [w for w in writes(out) if w.key.startswith("pref:")]


async def test_english_keep_these_is_the_same_signal() -> None:
    d = Driver()
    await to_review(d)
    out = await d.say("no, keep these three")
    assert moves(out) == [("S3.1", "S4")]


async def test_s4_idle_for_10_minutes_expires() -> None:
    d = Driver()
    await to_confirm(d)
    fired = d.fire("s4_idle")
    assert fired.timestamp == datetime(2024, 6, 3, 9, 10, 33, tzinfo=UTC)
    out = await d.send(fired)
    assert moves(out) == [("S4", "S5")]
    assert "10分钟无操作" in the_reply(out).text
    (write,) = _unfinished(out)
    assert json.loads(write.value_json)["reason"] == "expired"


async def test_s4_modify_goes_back_to_s2_and_cancel_ends() -> None:
    d = Driver()
    await to_confirm(d)
    assert moves(await d.say("修改")) == [("S4", "S2")]
    e = Driver("sess_c")
    await to_confirm(e)
    out = await e.say("取消")
    assert moves(out) == [("S4", "S5")] and "已取消" in the_reply(out).text


async def test_a_submit_failure_in_s4_ends_in_s5_with_the_progress_saved() -> None:
    d = Driver()
    await to_confirm(d)
    await d.say("确认")
    out = await d.send(d.error("tool:finance_tool", "503", retryable=True))
    assert moves(out) == [("S4", "S5")]  # ('S4', 'tool_error'): the exception exit
    reply = the_reply(out)
    assert "tool:finance_tool" in reply.text and "已保存为未完成报销流程" in reply.text
    (write,) = _unfinished(out)
    assert json.loads(write.value_json)["reason"] == "degraded"
    assert d.state.data["trigger"] == "failed" and not d.armed


@pytest.mark.parametrize("said", ["是", "Yes, please!", "是？", "ok"])
async def test_a_candidate_preference_is_asked_and_written_only_after_yes(said: str) -> None:
    d = Driver()
    await to_s3(d)
    memory = MemoryContext(candidates={"ocr_blur_tolerance": "accept"})
    asked = await d.send(d.answer({"trip_tool": TRIP, "rule_engine_tool": RULES}, context=memory))
    assert moves(asked) == [("S3", "S3.1")] and not writes(asked)
    assert the_reply(asked).choices == ("是", "否")
    yes = await d.say(said)
    (pref,) = [w for w in writes(yes) if w.key.startswith("pref:")]
    assert pref.key == "pref:ocr_blur_tolerance"
    assert json.loads(pref.value_json) == {"value": "accept", "confidence_min": 0.7}
    assert pref.confirmed_by == d.state.data["turn_id"]
    assert moves(yes) == [("S3.1", "S4")] and d.state.data["state"] == "S4"


class _ReadsYes:
    """A model port that reads what the rules do not as a yes."""

    zone = UTC

    async def classify(self, text: str, **_: object) -> tuple[str, dict[str, str]]:
        return "yes", {}


async def test_a_models_yes_passes_the_review_but_keeps_no_preference() -> None:
    """Only the user's own whole answer keeps a preference: a model's reading of "sure
    thing" passes the review (as "就这三张" would) and writes no ``pref:``."""
    d = Driver()
    await to_s3(d)
    memory = MemoryContext(candidates={"ocr_blur_tolerance": "accept"})
    await d.send(d.answer({"trip_tool": TRIP, "rule_engine_tool": RULES}, context=memory))
    d.ports["intent"] = _ReadsYes()
    yes = await d.say("sure thing")
    assert not [w for w in writes(yes) if w.key.startswith("pref:")]
    assert moves(yes) == [("S3.1", "S4")] and d.state.data["state"] == "S4"


async def test_no_to_a_preference_writes_nothing_and_asks_the_review() -> None:
    d = Driver()
    await to_s3(d)
    memory = MemoryContext(candidates={"ocr_blur_tolerance": "accept"})
    await d.send(d.answer({"trip_tool": TRIP, "rule_engine_tool": RULES}, context=memory))
    no = await d.say("否")
    assert not writes(no) and moves(no) == []
    assert the_reply(no).choices == ("重新上传", "不用，就这三张")
    keep = await d.say("不用，就这三张")
    assert not [w for w in writes(keep) if w.key.startswith("pref:")]


async def test_a_confirmed_preference_skips_the_review() -> None:
    d = Driver()
    await to_s3(d)
    memory = MemoryContext(preferences={"ocr_blur_tolerance": "accept"})  # as memory sends it
    out = await d.send(d.answer({"trip_tool": TRIP, "rule_engine_tool": RULES}, context=memory))
    assert moves(out) == [("S3", "S4")] and "已按您的偏好" in the_reply(out).text


def _blurred(confidence: float) -> dict[str, Any]:
    ocr: dict[str, Any] = copy.deepcopy(OCR)
    ocr["invoices"][2]["confidence"] = confidence
    ocr["confidence_min"] = confidence
    return ocr


async def test_a_preference_does_not_cover_an_invoice_below_its_floor() -> None:
    d = Driver()
    await to_s2(d)
    await d.say("[上传两张图片]", PHOTOS)
    memory = MemoryContext(preferences={"ocr_blur_tolerance": "accept"})
    await d.send(d.answer({"ocr_tool": _blurred(0.2)}, context=memory))
    out = await d.send(d.answer({"trip_tool": TRIP, "rule_engine_tool": RULES}))
    assert moves(out) == [("S3", "S3.1")]  # 0.2 < the promised 0.70: human review
    assert the_reply(out).choices == ("重新上传", "不用，就这三张")


@pytest.mark.parametrize(("confidence", "state"), [(0.5, "S4"), (0.49, "S3.1"), (0.2, "S3.1")])
async def test_a_preference_stored_with_its_floor_honours_that_floor(
    confidence: float, state: str
) -> None:
    d = Driver()
    await to_s2(d)
    await d.say("[上传两张图片]", PHOTOS)
    stored = '{"confidence_min":0.5,"value":"accept"}'  # memory shows JSON objects as JSON
    memory = MemoryContext(preferences={"ocr_blur_tolerance": stored})
    await d.send(d.answer({"ocr_tool": _blurred(confidence)}, context=memory))
    out = await d.send(d.answer({"trip_tool": TRIP, "rule_engine_tool": RULES}))
    assert moves(out) == [("S3", state)]


async def test_the_preference_asked_states_the_floor_it_stores() -> None:
    d = Driver()
    await to_s2(d)
    await d.say("[上传两张图片]", PHOTOS)
    await d.send(d.answer({"ocr_tool": _blurred(0.55)}))
    memory = MemoryContext(candidates={"ocr_blur_tolerance": "accept"})
    asked = await d.send(d.answer({"trip_tool": TRIP, "rule_engine_tool": RULES}, context=memory))
    assert "置信度不低于0.55" in the_reply(asked).text
    (pref,) = [w for w in writes(await d.say("是")) if w.key.startswith("pref:")]
    assert json.loads(pref.value_json) == {"value": "accept", "confidence_min": 0.55}


async def test_stale_budget_data_is_flagged_and_said() -> None:
    d = Driver()
    await d.say("我要报上个月去深圳的差旅费")
    since = datetime(2024, 6, 3, 6, 22, tzinfo=UTC)
    out = await d.send(d.answer({"org_tool": ORG, "finance_tool": FINANCE}, stale_since=since))
    reply = the_reply(out)
    assert reply.stale and "预算数据暂未更新，最新刷新时间为14:22" in reply.text


async def test_english_turns_drive_the_same_flow() -> None:
    d = Driver()
    out = await d.say("I want to claim my travel expenses for Shenzhen last month")
    assert moves(out) == [(None, "S1")] and d.state.data["facts"]["city"] == "深圳"
    await d.send(d.answer({"org_tool": ORG, "finance_tool": FINANCE}))
    await d.say("here are the photos", PHOTOS)
    await d.send(d.answer({"ocr_tool": OCR}))
    await d.send(d.answer({"trip_tool": TRIP, "rule_engine_tool": RULES}))
    await d.say("no, keep these three")
    out = await d.say("wait, don't submit yet")
    assert moves(out) == [("S4", "S5")] and "暂不提交" in the_reply(out).text


async def test_exactly_one_reply_per_user_turn_on_the_seed_path() -> None:
    d = Driver()
    turns, answered = 0, list[Reply]()
    for step in ("turn", "budget", "turn", "ocr", "rules", "turn", "turn", "submit"):
        if step == "turn":
            turns += 1
            text = {1: "我要报上个月去深圳的差旅费", 2: "[上传两张图片]", 3: "不用，就这三张"}
            out = await d.say(text.get(turns, "确认"), PHOTOS if turns == 2 else ())
        elif step == "budget":
            out = await d.send(d.answer({"org_tool": ORG, "finance_tool": FINANCE}))
        elif step == "ocr":
            out = await d.send(d.answer({"ocr_tool": OCR}))
        elif step == "rules":
            out = await d.send(d.answer({"trip_tool": TRIP, "rule_engine_tool": RULES}))
        else:
            from .demo import submitted

            out = await d.send(d.answer({"finance_tool": submitted("EXP-1")}))
        answered.extend(r for r in replies(out) if isinstance(r, Reply))
    assert len(answered) == turns == 4
