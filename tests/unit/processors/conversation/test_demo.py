"""The walkthrough's two conversations end to end, with its figures in hand-built answers."""

from __future__ import annotations

import json
from typing import Any

from hermesbus import Envelope, MemoryTier, StateSnapshot, ToolCall
from hermesbus.processors import protocol
from hermesbus.runtime import Outcome, derive_id

from .demo import (
    FINANCE,
    OCR,
    ORG,
    PHOTOS,
    RULES,
    TRIP,
    USER,
    Driver,
    bodies,
    snap,
    submitted,
    the_reply,
    to_confirm,
    writes,
)

SEED_PATH = [
    (None, "S1"),
    ("S1", "S2"),
    ("S2", "S2"),
    ("S2", "S3"),
    ("S3", "S3.1"),
    ("S3.1", "S4"),
    ("S4", "S5"),
]


def _calls(outcome: Outcome) -> list[Envelope]:
    return [e for e in outcome.emit if isinstance(e.payload.body, ToolCall)]


def _args(envelope: Envelope) -> dict[str, Any]:
    body = envelope.payload.body
    assert isinstance(body, ToolCall)
    return dict(json.loads(body.arguments_json))


async def test_a_walks_the_seed_path_with_its_figures() -> None:
    d = Driver("sess_456")
    first = await d.say("我要报上个月去深圳的差旅费")
    assert not [e for e in first.emit if e.target == protocol.USER]  # the reply waits for tools
    org, finance = (_args(c) for c in _calls(first))
    assert org == {"user_id": USER}
    assert finance == {"action": "budget", "user_id": USER}
    assert {c.payload.task for c in _calls(first)} == {"check_budget"}
    assert all(c.source == "conversation:S1" for c in _calls(first))
    assert all(c.metadata.timeout_ms == 5000 for c in _calls(first))

    budget = the_reply(await d.send(d.answer({"org_tool": ORG, "finance_tool": FINANCE})))
    assert "采购部" in budget.text and "125,000 CNY" in budget.text
    assert "发票照片和行程单" in budget.text

    upload = await d.say("[上传两张图片]", PHOTOS)
    (ocr_call,) = _calls(upload)
    assert _args(ocr_call) == {
        "files": [
            {"name": "photo-1.jpg", "uri": "demo://expense/photo-1.jpg"},
            {"name": "photo-2.jpg", "uri": "demo://expense/photo-2.jpg"},
        ]
    }
    assert snap(ocr_call).summary == "已上传2张发票，待OCR识别"

    validate = await d.send(d.answer({"ocr_tool": OCR}))
    assert not [e for e in validate.emit if e.target == protocol.USER]  # S3: no reply yet
    trip_call, rule_call = _calls(validate)
    assert trip_call.metadata.timeout_ms == 30_000
    assert _args(trip_call)["invoices"] == [
        "inv-001",
        "inv-002",
        "inv-003",
    ]
    assert _args(rule_call)["dept"] == "采购部"
    assert trip_call.payload.context["invoice_count"] == 3

    review = the_reply(await d.send(d.answer({"trip_tool": TRIP, "rule_engine_tool": RULES})))
    assert review.text == (
        "检测到3张发票（合计 8,240 CNY），其中1张金额模糊（inv-003 餐饮 2,200，置信度 0.70），"
        "是否重新上传？"
    )
    assert review.choices == ("重新上传", "不用，就这三张")

    confirm = the_reply(await d.say("不用，就这三张"))
    assert confirm.text == (
        "报销单已校验通过：含3张发票，合计 8,240 CNY；行程单显示往返日期为5月12-15日（已核实）；"
        "提醒：住宿费3200接近标准上限3500。审批人：张主管。是否提交？"
    )
    assert confirm.choices == ("确认", "修改", "取消")
    assert "已比对差旅系统行程记录" in confirm.verification_steps

    submit = await d.say("确认")
    (call,) = _calls(submit)
    report_id = f"EXP-{derive_id('sess_456', 'report')[:8]}"
    assert _args(call) == {
        "action": "submit",
        "user_id": USER,
        "report_id": report_id,
        "amount": 8240,
        "approver": "张主管",
        "invoices": ["inv-001", "inv-002", "inv-003"],
    }
    assert call.payload.context["user_tolerates_blur"] is True
    assert call.payload.context["ocr_confidence_min"] == 0.7

    done = await d.send(d.answer({"finance_tool": submitted(report_id)}))
    assert the_reply(done).text == f"已提交报销单 {report_id}，审批人：张主管。"
    assert not [w for w in writes(done) if w.key.startswith("unfinished:")]
    assert d.path == SEED_PATH
    assert d.state.data["state"] == "S5" and d.working()["materials"] == {}


async def test_b_holds_and_saves_the_unfinished_report() -> None:
    d = Driver("sess_789")
    await to_confirm(d)
    hold = await d.say("等等，住宿费超标了，先不提交")
    assert the_reply(hold).text == "好的，暂不提交。当前进度已保存为未完成报销流程，可随时继续。"
    (write,) = [w for w in writes(hold) if w.key.startswith("unfinished:")]
    assert write.key == "unfinished:sess_789"
    assert write.tier is MemoryTier.MID_TERM
    assert write.importance == 0.8 and write.ttl_s == 30 * 24 * 3600
    value = json.loads(write.value_json)
    assert value["label"] == "未完成报销流程"
    assert value["snapshot"]["state_id"] == "S4"
    assert value["facts"]["dept"] == "采购部" and value["facts"]["total"] == "8,240"
    hold_turn = d.state.data["turn_id"]
    assert write.confirmed_by == hold_turn
    assert d.path == SEED_PATH
    (snapshot,) = bodies(hold, StateSnapshot)
    assert snapshot.trigger == "cancel"
    assert "s4_idle" in hold.cancel  # released: the S4 wait is cancelled


async def test_every_dispatcher_envelope_carries_the_current_snapshot() -> None:
    d = Driver()
    await to_confirm(d)
    outcome = await d.say("等等，住宿费超标了，先不提交")
    to_dispatcher = [e for e in outcome.emit if e.target == protocol.DISPATCHER_ADDRESS]
    assert to_dispatcher and all(e.snapshot is not None for e in to_dispatcher)
    first = snap(to_dispatcher[0])
    assert first.state_id == "S5" and len(first.summary) <= 50
    assert first.tokens_used > 0
    assert [t.tool for t in first.tool_calls] == [
        "org_tool",
        "finance_tool",
        "ocr_tool",
        "trip_tool",
        "rule_engine_tool",
    ]
    assert all(len(t.args_digest) == 12 and t.status_code == 200 for t in first.tool_calls)


async def test_the_same_inputs_give_identical_outcomes() -> None:
    first, second = Driver("sess_x"), Driver("sess_x")
    a = [await to_confirm(first), await first.say("确认")]
    b = [await to_confirm(second), await second.say("确认")]
    assert a == b
    assert first.state == second.state


async def test_every_emitted_envelope_encodes_and_decodes() -> None:
    from hermesbus.codec import decode, encode

    d = Driver("sess_789")
    outcomes = [await to_confirm(d), await d.say("等等，住宿费超标了，先不提交")]
    outcomes.append(await Driver("sess_1").say("我要报上个月去深圳的差旅费"))
    emitted = [e for o in outcomes for e in o.emit]
    assert emitted
    for envelope in emitted:
        assert decode(encode(envelope)) == envelope
