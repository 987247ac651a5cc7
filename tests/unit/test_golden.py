"""The golden histories (``tests/golden/``) shadow-replayed against the current code.

A divergence fails the suite with the first one: envelope, field path, then and now. If
the change is intended, re-record them: ``.venv/bin/python -m tests.golden.record``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hermesbus import Reply, StateSnapshot
from hermesbus.compose.flows import bundled, catalog_of
from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import REPLAYABLE, shadows
from hermesbus.processors.protocol import DISPATCHER_TOPIC, ProtocolPolicy
from hermesbus.replay.bundle import read_bundle
from hermesbus.replay.shadow import shadow
from tests.golden.record import BUNDLES, HERE

ENDINGS = {
    "demo-a.tar.gz": "已提交报销单",
    "demo-b.tar.gz": "未完成报销流程",
    "demo-tables.tar.gz": "已合并A表与B表",
}
"""What the last reply of each recorded conversation says: A submitted, B kept unfinished,
the table export merged."""


@pytest.mark.parametrize("name", BUNDLES)
async def test_the_golden_history_replays_without_divergence(name: str) -> None:
    bundle = read_bundle(HERE / name)
    recording = bundle.recording()
    replies = [
        h.envelope.payload.body
        for h in recording.hops
        if isinstance(h.envelope.payload.body, Reply)
    ]
    assert ENDINGS[name] in replies[-1].text  # the history is the conversation it claims
    flows = catalog_of(bundled(bundle.flows, name)) if bundle.flows else None  # the table export
    settings = Settings.from_environment()
    async with shadows(settings, prefix=bundle.prefix, flows=flows) as wired:
        report = await shadow(
            recording,
            wired,
            sessions=bundle.sessions,
            policy=ProtocolPolicy(),
            prefix=bundle.prefix,
        )
    lines = [line for d in report.divergences for line in d.lines()]
    advice = "intended? re-record: .venv/bin/python -m tests.golden.record"
    assert not report.diverged, "\n".join([*lines, advice])
    assert set(report.compared) == set(REPLAYABLE) and all(report.compared.values())


def test_the_golden_folder_holds_exactly_the_recorded_bundles() -> None:
    found = sorted(p.name for p in Path(HERE).glob("*.tar.gz"))
    assert found == sorted(BUNDLES)


# what the demo's expense conversations said, and the moves they made, before the expense
# report's machine was read from its spec: word for word (the report id is the run's)
_ASKED = (
    "conversation:S2 好的，已为您发起2024年5月深圳差旅报销。您所在部门：采购部，"
    "部门预算余额 125,000 CNY。请提供发票照片和行程单。"
)
_REVIEW = (
    "conversation:S3.1 检测到3张发票（合计 8,240 CNY），其中1张金额模糊（inv-003 餐饮 2,200，"
    "置信度 0.70），是否重新上传？ [重新上传|不用，就这三张]"
)
_CONFIRM = (
    "conversation:S4 报销单已校验通过：含3张发票，合计 8,240 CNY；行程单显示往返日期为5月12-15日"
    "（已核实）；提醒：住宿费3200接近标准上限3500。审批人：张主管。是否提交？ [确认|修改|取消]"
)
SAID = {
    "demo-a.tar.gz": [
        _ASKED,
        _REVIEW,
        _CONFIRM,
        "conversation:S5 已提交报销单 EXP-…，审批人：张主管。",
    ],
    "demo-b.tar.gz": [
        _ASKED,
        _REVIEW,
        _CONFIRM,
        "conversation:S5 好的，暂不提交。当前进度已保存为未完成报销流程，可随时继续。",
    ],
}
MOVES = [
    "None -> S1 on user_turn",
    "S1 -> S2 on expense_intent",
    "S2 -> S2 on upload",
    "S2 -> S3 on materials_complete",
    "S3 -> S3.1 on low_confidence",
    "S3.1 -> S4 on review_passed",
]


@pytest.mark.parametrize(
    ("name", "last"), [("demo-a.tar.gz", "submitted"), ("demo-b.tar.gz", "cancel")]
)
def test_the_expense_conversations_say_what_they_said_before(name: str, last: str) -> None:
    """The golden histories replay as the code runs now (above); here, what they hold is
    what the demo said before its machine was a spec, and the same moves (span shapes)."""
    bundle = read_bundle(HERE / name)
    session = bundle.sessions[0]
    said, moves = [], []
    for hop in bundle.recording().hops:
        envelope, body = hop.envelope, hop.envelope.payload.body
        if envelope.session_id != session or not envelope.source.startswith("conversation:"):
            continue
        if isinstance(body, Reply):
            choices = f" [{'|'.join(body.choices)}]" if body.choices else ""
            text = re.sub(r"EXP-[0-9a-f]{8}", "EXP-…", body.text)
            said.append(f"{envelope.source} {text}{choices}")
        if isinstance(body, StateSnapshot) and hop.topic.endswith(DISPATCHER_TOPIC):
            moves.append(f"{body.previous_state} -> {body.snapshot.state_id} on {body.trigger}")
    assert said == SAID[name]
    assert moves == [*MOVES, f"S4 -> S5 on {last}"]
