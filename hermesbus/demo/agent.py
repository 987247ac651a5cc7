"""The budget assistant: one conversation of a flow whose working state is an agent.

``flows/budget_agent.yaml`` is the flow: a model chooses among the demo's directory and
ledger tools, round by round, then answers. ``hermesbus up --demo`` registers it and, when
no ``HERMES_LLM_URL`` is set, answers its model requests with the scripted model of
``hermesbus.processors.tool.demo.model_server`` (no model weights can be had on the
machines this is built on). The demo app says the turn below after the table export.
"""

from __future__ import annotations

import uuid
from importlib import resources
from typing import Final

from hermesbus.demo.expense import Conversation, Said, Turn, reply_text

__all__ = ["ENDING", "FLOW", "FLOW_FILE", "TURNS", "conversation", "flow_text", "missing"]

FLOW: Final = "budget_agent"
FLOW_FILE: Final = "flows/budget_agent.yaml"
TURNS: Final = (Turn("我的部门还有多少预算？"),)
ENDING: Final = "张三，您所在的采购部本月预算余额为 125000 CNY。"
"""The answer: the user's name from org_tool, the budget from finance_tool."""


def flow_text() -> bytes:
    """The flow spec as shipped (the bytes registered)."""
    return resources.files("hermesbus.demo").joinpath(FLOW_FILE).read_bytes()


def conversation(run: str | None = None) -> Conversation:
    run = run or uuid.uuid4().hex[:6]
    return Conversation("D: 预算助手", f"budget-{run}", f"trace_budget-{run}", TURNS)


def missing(said: Said) -> list[str]:
    """What the conversation failed to show: the model's answer from both tools."""
    last = said.last
    if last is None or reply_text(last) != ENDING:
        shown = reply_text(last) if last is not None else "nothing"
        return [f"the budget assistant answered {shown!r}, not {ENDING!r}"]
    return []
