"""The table-export flow of the demo, a spec and nothing else, on the in-memory bus with
the demo database's tool (its answers unsigned) and the real memory processor, which
checks the symbols "这两个表" resolves to."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hermesbus import Envelope, Payload, Reply, ToolCall, UserTurn
from hermesbus.compose.stack import in_memory
from hermesbus.demo import tables
from hermesbus.demo.scripted import ScriptedTools
from hermesbus.processors.dispatcher import StaticHealth
from hermesbus.processors.flow import StaticCatalog, lint, load_flow
from hermesbus.processors.protocol import ProtocolPolicy, ToolHealth
from hermesbus.processors.tool import DEMO_MODULES
from hermesbus.processors.tool.demo.tools import table_result
from hermesbus.testing import Harness
from tests.unit.test_readme_flow import TABLE_REPLIES

T0 = datetime(2024, 6, 3, 1, 0, tzinfo=UTC)


def answer(call: ToolCall) -> dict[str, object]:
    return table_result(json.loads(call.arguments_json))


@pytest.fixture
async def bus(tmp_path: Path) -> AsyncIterator[Harness]:
    spec, _ = load_flow(tables.flow_text().decode(), tables.FLOW_FILE)
    async with in_memory(
        tmp_path,
        tools=ScriptedTools({"table_tool": answer}),
        health=StaticHealth([ToolHealth("table_tool", 20.0, 1.0)]),
        policy=ProtocolPolicy(),
        flows=StaticCatalog.of([spec]),
    ) as harness:
        yield harness


async def say(harness: Harness, text: str, n: int, at: datetime) -> list[str]:
    before = len(harness.sent)
    await harness.send(
        Envelope(
            message_id=f"m{n}",
            timestamp=at,
            source="app:demo",
            target="conversation:in",
            session_id="tables-1",
            user_id="u_xyz789",
            trace_id=f"t{n}",
            payload=Payload(body=UserTurn(text=text)),
        )
    )
    return [
        s.envelope.payload.body.text
        for s in harness.sent[before:]
        if isinstance(s.envelope.payload.body, Reply)
    ]


def test_the_shipped_flow_lints_clean_against_the_demo_tools() -> None:
    spec, lines = load_flow(tables.flow_text().decode(), tables.FLOW_FILE)
    assert lint(spec, lines, modules=(DEMO_MODULES,), registered={"table_tool"}) == []


async def test_each_turn_depends_on_the_ones_before_and_the_two_tables_are_a_and_b(
    bus: Harness,
) -> None:
    said = [
        await say(bus, turn.text, n, T0 + timedelta(seconds=10 * n))
        for n, turn in enumerate(tables.TURNS)
    ]
    assert said == [[reply] for reply in TABLE_REPLIES]  # as the README shows them
    assert bus.refused == []
    symbols = bus.state("memory", "tables-1").data["symbols"]
    assert symbols == {}  # the flow ended: memory dropped the session's symbols


async def test_two_tables_that_no_longer_hold_make_it_ask_instead_of_guessing(
    bus: Harness,
) -> None:
    for n, turn in enumerate(tables.TURNS[:4]):
        await say(bus, turn.text, n, T0 + timedelta(seconds=10 * n))
    later = T0 + timedelta(minutes=30)  # past the symbols' ten minutes
    said = await say(bus, "合并这两个表", 5, later)
    assert said == ["之前导出的表已无法核实（可能已被删除或已过期），请重新导出要合并的两张表。"]
    assert bus.state("conversation", "tables-1").data["state"] == "unsure"
    merges = [
        h
        for h in bus.handled
        if h.processor == "tool"
        and isinstance(h.envelope.payload.body, ToolCall)
        and json.loads(h.envelope.payload.body.arguments_json)["action"] == "merge"
    ]
    assert merges == []  # nothing was guessed: the merge never ran


@pytest.mark.parametrize(
    ("turns", "last"),
    [
        (["把A表导出为Excel", "取消合并"], "好的，已取消表格导出。"),
        (
            ["把a表导出为Excel", "导出前检查客户字段是否为空"],
            "导出前已检查A表的客户字段：0行为空。已导出 A.xlsx。",
        ),
        (
            ["把A表导出为Excel", "导出前检查b字段是否为空"],
            "导出前已检查A表的b字段：2行为空。已导出 A.xlsx。",
        ),
    ],
)
async def test_cancelling_says_so_and_fields_and_tables_are_named_as_users_type_them(
    bus: Harness, turns: list[str], last: str
) -> None:
    said = [await say(bus, text, n, T0 + timedelta(seconds=n)) for n, text in enumerate(turns)]
    assert said[-1] == [last]


@pytest.mark.parametrize("text", ["帮我导出上个月的报销单", "合并这两个表", "取消"])
async def test_a_turn_that_does_not_begin_a_table_export_starts_none(
    bus: Harness, text: str
) -> None:
    await say(bus, text, 1, T0)
    assert bus.state("conversation", "tables-1").data["flow"] is None  # the expense report's
