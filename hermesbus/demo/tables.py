"""The table-export demo: one conversation of a flow that is only a spec.

``flows/table_export.yaml`` is the flow (document 001 §2's table export, with document 000
§5.1's symbols); ``hermesbus up --demo`` registers it, and the demo app says the five turns
below after the expense conversations. Nothing of it is in the conversation processor.
"""

from __future__ import annotations

import uuid
from importlib import resources
from typing import Final

from hermesbus.demo.expense import Conversation, Said, Turn, reply_text

__all__ = ["ENDING", "FLOW", "FLOW_FILE", "TURNS", "conversation", "flow_text", "missing"]

FLOW: Final = "table_export"
FLOW_FILE: Final = "flows/table_export.yaml"
TURNS: Final = (
    Turn("把A表导出为Excel"),
    Turn("再加一列时间戳"),
    Turn("导出前检查B字段是否为空"),
    Turn("再导出B表"),
    Turn("合并这两个表"),
)
"""What the user says: each turn depends on the ones before ("再", "导出前", "这两个表")."""
FIGURES: Final = ("订单表", "A.xlsx", "时间戳", "2行为空", "库存表", "B.xlsx")
"""What the replies must show along the way."""
ENDING: Final = "已合并A表与B表，导出为 A+B.xlsx，共8行。"
"""The last reply: "这两个表" were A and B, each still valid."""


def flow_text() -> bytes:
    """The flow spec as shipped (the bytes registered)."""
    return resources.files("hermesbus.demo").joinpath(FLOW_FILE).read_bytes()


def conversation(run: str | None = None) -> Conversation:
    run = run or uuid.uuid4().hex[:6]
    return Conversation("C: 表格导出", f"tables-{run}", f"trace_tables-{run}", TURNS)


def missing(said: Said) -> list[str]:
    """What the conversation failed to show: a figure, or the merge of A and B."""
    texts = " ".join(reply_text(reply) for _, reply in said.replies)
    problems = [f"no {figure!r} in any reply" for figure in FIGURES if figure not in texts]
    last = said.last
    if last is None or reply_text(last) != ENDING:
        problems.append(f"the last reply is not {ENDING!r}")
    return problems
