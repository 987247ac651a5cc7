"""What ``hermesbus up --demo`` does after the start: the two expense conversations and the
table export, shown.

Everything specific to the demo's fixture company that the run checks lives here: the
endings the two conversations must reach (A submits, B stops and is kept as unfinished),
the approver the submitted report must have in long-term memory, the demo user's
mid-term memory. ``hermesbus.demo.expense`` is the app side (what the user says); the tools and
their fixtures are ``hermesbus.processors.tool.demo``.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime

from hermesbus.client import Client
from hermesbus.codec import codec_for
from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import Stack
from hermesbus.contract.envelope import Envelope
from hermesbus.demo import agent, tables
from hermesbus.demo import expense as demo
from hermesbus.processors.flow import expense_hooks as expense
from hermesbus.processors.memory import Edge, MidTermItem
from hermesbus.processors.protocol import FLOW_SNAPSHOT
from hermesbus.trace.spans import collect, spans, waterfall

from ._common import console, err_console, shown

__all__ = ["APPROVER", "ENDINGS", "evidence", "lacks", "run"]

ENDINGS = ("已提交", expense.UNFINISHED_LABEL)
"""What the last reply of conversation A and of conversation B must say."""
APPROVER = "person:张主管"
"""Who approves the demo user's reports in the fixture company (finance_tool says so)."""


async def run(running: Stack, settings: Settings) -> bool:
    """Both expense conversations, each reply as it arrives, then each trace and what memory
    holds (read with the program's ``settings``: its keys, its broker's security, its
    registry); then the table export, a flow that is only a spec, and the budget assistant,
    whose model chooses its tools."""
    said = await demo.run(running.bootstrap, running.prefix, _show, settings)
    finished = True
    kafka = settings.kafka.model_copy(update={"bootstrap": running.bootstrap})
    codec = codec_for(settings.bus)
    for conversation_said, ending in zip(said, ENDINGS, strict=True):
        started = conversation_said.conversation
        console.rule(shown(f"session {started.session_id} · trace {started.trace_id}"))
        hops = await collect(
            kafka,
            started.trace_id,
            session_id=started.session_id,
            prefix=running.prefix,
            codec=codec,
        )
        for line in waterfall(spans(hops)):
            console.print(shown(line), soft_wrap=True)
        problems = demo.missing(conversation_said, ending) + await lacks(running, conversation_said)
        for line in await evidence(running, conversation_said):
            console.print(shown(line), soft_wrap=True)
        finished = _report(problems) and finished
    played: list[demo.Said] = list(said)
    if running.demo_flow:
        exported = await _tables(running, settings)
        problems = tables.missing(exported) + await _snapshot_lacks(running, exported, tables.FLOW)
        finished = _report(problems) and finished
        played.append(exported)
        asked = await _budget(running, settings)
        problems = agent.missing(asked) + await _snapshot_lacks(running, asked, agent.FLOW)
        finished = _report(problems) and finished
        played.append(asked)
    else:
        finished = _report(["the demo's flows are not registered (see above)"]) and False
    finished = _report(running.problems()) and finished
    console.print(
        "demo: all four conversations finished" if finished else "demo: NOT finished",
        soft_wrap=True,
    )
    sessions = " ".join(f"--session {s.conversation.session_id}" for s in played)
    console.print(shown(f"replay them: hermesbus replay {sessions} --shadow"), soft_wrap=True)
    return finished


async def _tables(running: Stack, settings: Settings) -> demo.Said:
    """The table export, dated by the real clock (its flow was registered now)."""
    console.rule("C: 表格导出 (flow table_export, a spec registered by `up --demo`)")
    async with Client(
        settings=settings, bootstrap=running.bootstrap, topic_prefix=running.prefix, name="demo"
    ) as app:
        return await demo.talk(app, tables.conversation(), _show, clock=_now)


async def _budget(running: Stack, settings: Settings) -> demo.Said:
    """The budget assistant: a model chooses the tools (the scripted one, unless
    ``HERMES_LLM_URL`` names another)."""
    console.rule("D: 预算助手 (flow budget_agent, an agent state registered by `up --demo`)")
    async with Client(
        settings=settings, bootstrap=running.bootstrap, topic_prefix=running.prefix, name="demo"
    ) as app:
        return await demo.talk(app, agent.conversation(), _show, clock=_now)


async def _snapshot_lacks(
    running: Stack, said: demo.Said, flow: str, within_s: float = 15.0
) -> list[str]:
    """Whether memory holds the snapshot of ``flow``'s session (written after its last
    reply: asked again for up to ``within_s``, so ``--once`` stops with everything
    written, and a replay of the log finds every output)."""
    key = f"{FLOW_SNAPSHOT}{flow}:{said.conversation.session_id}"
    deadline = time.monotonic() + within_s
    while await running.memory.item(demo.DEMO_USER, key) is None:
        if time.monotonic() > deadline:
            return [f"no {key} in mid-term memory"]
        await asyncio.sleep(0.2)  # polling a store: no event to wait on
    return []


def _now() -> datetime:
    return datetime.now(UTC)


async def lacks(running: Stack, said: demo.Said, *, within_s: float = 15.0) -> list[str]:
    """What memory lacks after a demo conversation: A's approval edge, B's unfinished item.

    The writes travel conversation -> dispatcher -> memory after the last reply went
    out, so memory is asked again for up to ``within_s``.
    """
    deadline = time.monotonic() + within_s
    problems = await _lacks(running, said)
    while problems and time.monotonic() < deadline:  # polling a store: no event to wait on
        await asyncio.sleep(0.2)
        problems = await _lacks(running, said)
    return problems


async def evidence(running: Stack, said: demo.Said) -> list[str]:
    """What memory holds for a demo conversation: the approval edge or the unfinished report."""
    edge, item = await _held(running, said)
    lines = []
    if edge is not None:
        lines.append(
            f"long-term memory: {edge.subject} -approved_by-> {edge.object}"
            f" (verified by {edge.verified_tool}, trust {edge.trust_level.value})"
        )
    if item is not None:
        value = json.loads(item.value_json)
        state = value.get("snapshot", {}).get("state_id")
        lines.append(
            f"mid-term memory: {item.key} = {value.get('label')} (stopped in {state},"
            f" importance {item.importance}, confirmed by {item.confirmed_by})"
        )
    return lines


async def _held(running: Stack, said: demo.Said) -> tuple[Edge | None, MidTermItem | None]:
    """The approval edge of the session's report and its unfinished item, if any."""
    session = said.conversation.session_id
    report = expense.report_id(session)
    edge = await running.memory.edge(f"expense:{report}", "approved_by", APPROVER)
    return edge, await running.memory.item(demo.DEMO_USER, f"unfinished:{session}")


async def _lacks(running: Stack, said: demo.Said) -> list[str]:
    session = said.conversation.session_id
    last = said.last
    text = getattr(last.payload.body, "text", "") if last is not None else ""
    edge, item = await _held(running, said)
    if ENDINGS[0] in text:
        report = expense.report_id(session)
        return [] if edge is not None else [f"no approved_by edge for expense:{report}"]
    label = json.loads(item.value_json).get("label") if item is not None else None
    if label != expense.UNFINISHED_LABEL:
        return [f"no unfinished:{session} ({expense.UNFINISHED_LABEL}) in mid-term memory"]
    return []


def _report(problems: list[str]) -> bool:
    for problem in problems:
        err_console.print(f"[red]not finished:[/red] {shown(problem)}", soft_wrap=True)
    return not problems


def _show(kind: str, item: Envelope | demo.Turn) -> None:
    if isinstance(item, demo.Turn):
        files = f"  (+{len(item.attachments)} files)" if item.attachments else ""
        console.print(f"[bold]user[/bold]    {shown(item.text)}{files}", soft_wrap=True)
        return
    who = "hermes" if item.source.startswith("conversation:") else "notice"
    console.print(
        f"[bold]{who}[/bold]  {shown(demo.reply_text(item))}  [dim]({item.source})[/dim]",
        soft_wrap=True,
    )
