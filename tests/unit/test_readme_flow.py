"""The README's flow spec is one: it reads, its machine lints clean against the demo's
tools, and the engine answers its `say` as the README shows (the integration suite
registers a flow of the same shape and drives it with `say` on both brokers)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from hermesbus import Envelope, Payload, Reply, UserTurn
from hermesbus.compose.stack import in_memory
from hermesbus.demo import agent, tables
from hermesbus.demo.scripted import ScriptedTools
from hermesbus.processors.dispatcher import StaticHealth
from hermesbus.processors.flow import StaticCatalog, lint, load_flow
from hermesbus.processors.protocol import ProtocolPolicy, ToolHealth
from hermesbus.processors.tool import DEMO_MODULES

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Flows as data: specs and the registry"
WRITING = "### Writing a flow: the table export"
AGENT = "### An agent state: the model chooses the tools"


def test_the_readme_flow_reads_and_lints_clean() -> None:
    text = README.read_text(encoding="utf-8")
    assert SECTION in text, f"the README has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    spec_text = re.findall(r"```yaml\n(.*?)```", section, re.S)[0]
    spec, lines = load_flow(spec_text, "README.md")
    assert (spec.flow, spec.version, [s.id for s in spec.states]) == (
        "parcel_status",
        1,
        ["asked", "looked_up", "closed"],
    )
    assert lint(spec, lines, modules=(DEMO_MODULES,), registered={"org_tool"}) == []


async def test_the_readme_flow_runs_as_the_readme_shows(tmp_path: Path) -> None:
    """The section's `say` shows the two replies of the first turn: the engine says them."""
    text = README.read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0].split(WRITING, 1)[0]
    spec_text = re.findall(r"```yaml\n(.*?)```", section, re.S)[0]
    shown = re.findall(r"^#   hermes  (.*?)  \(conversation:(\w+)\)$", section, re.M)
    assert len(shown) == 2, "the section shows the two replies of `say`"
    said = re.search(r'^hermesbus say (\S+) "(.*?)" --wait$', section, re.M)
    assert said is not None
    spec, _ = load_flow(spec_text, "README.md")
    tools = ScriptedTools({"org_tool": {"user_id": "u_xyz789", "name": "张三"}})
    health = StaticHealth([ToolHealth("org_tool", 20.0, 1.0)])
    async with in_memory(
        tmp_path,
        tools=tools,
        health=health,
        policy=ProtocolPolicy(),
        flows=StaticCatalog.of([spec]),
    ) as harness:
        turn = Envelope(
            message_id="m1",
            timestamp=datetime(2024, 6, 3, 1, 0, tzinfo=UTC),
            source="app:cli",
            target="conversation:in",
            session_id=said.group(1),
            user_id="u_xyz789",
            trace_id="t1",
            payload=Payload(body=UserTurn(text=said.group(2))),
        )
        await harness.send(turn)
        replies = [
            (s.envelope.payload.body.text, s.envelope.source.split(":", 1)[1])
            for s in harness.sent
            if isinstance(s.envelope.payload.body, Reply)
        ]
        assert replies == shown
        assert harness.refused == []


def test_the_table_export_in_the_readme_is_the_shipped_flow_and_says_what_it_shows() -> None:
    """ "Writing a flow" shows the shipped file whole, and the conversation `up --demo`
    plays (tests/unit/test_table_demo.py runs it: these are its replies)."""
    text = README.read_text(encoding="utf-8")
    assert WRITING in text, f"the README has no section {WRITING!r}"
    section = text.split(WRITING, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    (spec_text,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert spec_text == tables.flow_text().decode()
    said = re.findall(r"^user    (.*)$", section, re.M)
    assert said == [turn.text for turn in tables.TURNS]
    replies = re.findall(r"^hermes  (.*?)  \(conversation:\w+\)$", section, re.M)
    assert replies[-1] == tables.ENDING
    assert replies == TABLE_REPLIES


def test_the_agent_state_in_the_readme_is_the_shipped_flow_and_says_what_it_shows() -> None:
    """The agent-state section shows the shipped budget assistant whole, and what the
    scripted model makes it say (tests/unit/processors/conversation/test_agent.py)."""
    text = README.read_text(encoding="utf-8")
    assert AGENT in text, f"the README has no section {AGENT!r}"
    section = text.split(AGENT, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    (spec_text,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert spec_text == agent.flow_text().decode()
    assert re.findall(r"^user    (.*)$", section, re.M) == [turn.text for turn in agent.TURNS]
    replies = re.findall(r"^hermes  (.*?)  \(conversation:\w+\)$", section, re.M)
    assert replies == [agent.ENDING]


TABLE_REPLIES = [
    "已将订单表（A表）导出为 A.xlsx，共5行、4列。",
    "已在A表加一列“时间戳”并重新导出 A.xlsx（5列）。",
    "导出前已检查A表的B字段：2行为空。已导出 A.xlsx。",
    "已将库存表（B表）导出为 B.xlsx，共3行。",
    tables.ENDING,
]
"""What the engine says to the table export's turns (tests/unit/test_table_demo.py)."""
