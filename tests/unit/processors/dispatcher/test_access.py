"""Who may call what, how often: the dispatcher refuses before the tool runs, says why in one
sentence, counts and alerts it, and the refusals replay identically.

The four processors run on the in-memory bus as ``up`` wires them, with the real memory
processor (roles are the ``has_role`` facts a directory tool verified) and the access
rules and per-user counts in a real SQLite tool store. The session is then replayed in
the shadow from the bus's log, the access decisions read from what was recorded.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hermesbus import Envelope, ErrorReport, Payload, Reply, ToolCall, UserTurn
from hermesbus.base.storemark import MarkBook
from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import in_memory, shadows
from hermesbus.connectors.sqlite.tools import SqliteToolStore
from hermesbus.demo.scripted import ScriptedTools
from hermesbus.processors import protocol
from hermesbus.processors.dispatcher import StaticHealth
from hermesbus.processors.flow import StaticCatalog, load_flow
from hermesbus.processors.tool import Access, Quota, RateLimit, ToolAccess, ToolSpec, Window
from hermesbus.replay.shadow import Recording, shadow
from hermesbus.testing import Harness
from hermesbus.trace.spans import Hop

from .helpers import Driver, answer_query, answers, call, to

T0 = datetime(2024, 6, 3, 1, 0, tzinfo=UTC)
FLOW = """\
flow: payroll
version: 1
start: asked
timeout_ms: 5000
intents:
  - name: pay
    phrases: ["工资"]
states:
  - id: asked
    name: 查询工资
    exit: refused
    on_enter:
      - call: {tool: dir_tool, args: {user_id: "{user.id}"}}
      - call: {tool: ledger_tool, args: {user_id: "{user.id}"}}
      - reply: {text: "工资：{results.ledger_tool.amount}"}
  - id: paid
    name: 已查询
    kind: terminal
  - id: refused
    name: 未查询
    kind: terminal
transitions:
  - {from: asked, on: done, to: paid}
"""
ROLES = {"u_fin": ["employee", "finance"], "u_emp": ["employee"]}
"""Several roles each (``has_role`` is many-valued in memory: the later does not replace)."""
FORBIDDEN_TEXT = (
    "您没有调用 ledger_tool 的权限（需要以下角色之一：finance）"
    "（you may not call ledger_tool: it needs one of the roles finance）。"
)
OVER_QUOTA_TEXT = (
    "您今天调用 ledger_tool 的次数已用完（每天最多 1 次，按 UTC 计）"
    "（your ledger_tool quota of 1 calls a UTC day is used up）。"
)


def directory(call: ToolCall) -> dict[str, object]:
    """The user's roles, as verified facts (the dispatcher writes them to long-term memory)."""
    user = json.loads(call.arguments_json)["user_id"]
    facts = [
        {"subject": f"user:{user}", "relation": "has_role", "object": f"role:{role}"}
        for role in ROLES.get(user, [])
    ]
    return {"user_id": user, "facts": facts}


@dataclass
class Bus:
    harness: Harness
    tools: ScriptedTools
    store: SqliteToolStore


@asynccontextmanager
async def payroll(
    tmp_path: Path, flow: str, tools: ScriptedTools, rules: dict[str, Access]
) -> AsyncIterator[Bus]:
    """The four processors on the in-memory bus running ``flow``, the tools' access
    ``rules`` in a SQLite tool store (every scripted tool healthy)."""
    health = StaticHealth([protocol.ToolHealth(name, 20.0, 1.0) for name in tools.script])
    async with SqliteToolStore(tmp_path / "tools.sqlite3", book=MarkBook(tmp_path)) as store:
        for name, access in rules.items():
            await store.save_spec(ToolSpec(name=name, kind="python", target="p:t", access=access))
        async with in_memory(
            tmp_path,
            tools=tools,
            health=health,
            policy=protocol.ProtocolPolicy(),
            flows=StaticCatalog.of([load_flow(flow, "payroll.yaml")[0]]),
            access=ToolAccess(store),
        ) as harness:
            yield Bus(harness, tools, store)


@pytest.fixture
async def bus(tmp_path: Path) -> AsyncIterator[Bus]:
    tools = ScriptedTools({"dir_tool": directory, "ledger_tool": {"amount": 100}})
    access = Access(roles=("finance",), roles_from=("dir_tool",), quota=Quota(calls=1, per="day"))
    async with payroll(tmp_path, FLOW, tools, {"ledger_tool": access}) as running:
        yield running


def turn(user: str, session: str, n: int) -> Envelope:
    return Envelope(
        message_id=f"m{n}",
        timestamp=T0 + timedelta(minutes=n),
        source="app:web",
        target="conversation:in",
        session_id=session,
        user_id=user,
        trace_id=f"t{n}",
        payload=Payload(body=UserTurn(text="工资")),
    )


async def said(bus: Bus, user: str, session: str, n: int) -> list[str]:
    before = len(bus.harness.sent)
    await bus.harness.send(turn(user, session, n))
    return [
        s.envelope.payload.body.text
        for s in bus.harness.sent[before:]
        if isinstance(s.envelope.payload.body, Reply)
    ]


def ledger_calls(bus: Bus) -> int:
    return sum(1 for call, _ in bus.tools.calls if call.tool == "ledger_tool")


def alerts(bus: Bus) -> list[str]:
    return [
        s.envelope.payload.body.code
        for s in bus.harness.log
        if isinstance(s.envelope.payload.body, ErrorReport)
        and s.envelope.target == "alerts:dispatcher"
    ]


async def test_without_the_role_and_over_quota_a_call_is_refused_before_the_tool_runs(
    bus: Bus, tmp_path: Path
) -> None:
    assert await said(bus, "u_emp", "s-emp", 1) == [FORBIDDEN_TEXT]
    assert ledger_calls(bus) == 0  # refused before it reached the tool
    assert await said(bus, "u_fin", "s-fin-1", 2) == ["工资：100"]
    assert ledger_calls(bus) == 1
    assert await said(bus, "u_fin", "s-fin-2", 3) == [OVER_QUOTA_TEXT]
    assert ledger_calls(bus) == 1
    assert bus.harness.refused == []
    # counted in each session's state, alerted once each
    assert bus.harness.state("dispatcher", "s-emp").data["refused_calls"] == {"forbidden": 1}
    assert bus.harness.state("dispatcher", "s-fin-2").data["refused_calls"] == {"over_quota": 1}
    assert alerts(bus) == ["access.forbidden", "access.over_quota"]
    # the next day the quota is there again (the envelope's day, not the clock's)
    assert await said(bus, "u_fin", "s-fin-3", 24 * 60 + 5) == ["工资：100"]

    # replayed in the shadow from the bus's log: the same decisions, with no store asked
    hops = [  # in log order per topic; no append times, as the bus ran without them
        Hop(sent.envelope, sent.topic, 0, offset, -1) for offset, sent in enumerate(bus.harness.log)
    ]
    recording = Recording.of(hops, "the in-memory bus")
    catalog = StaticCatalog.of([load_flow(FLOW, "payroll.yaml")[0]])
    async with shadows(Settings.of(tmp_path / "replay"), flows=catalog) as wired:
        report = await shadow(recording, wired, policy=protocol.ProtocolPolicy())
    assert not report.diverged, report.divergences
    assert report.compared["dispatcher"] > 0 and report.compared["conversation"] > 0


async def test_a_rate_limit_counts_the_envelopes_times_per_user(tmp_path: Path) -> None:
    access = Access(rate=RateLimit(calls=2, per_s=60))
    ledger = ToolSpec(name="ledger_tool", kind="python", target="payroll:ledger", access=access)
    async with SqliteToolStore(tmp_path / "tools.sqlite3", book=MarkBook(tmp_path)) as store:
        await store.save_spec(ledger)
        gate = ToolAccess(store)
        no_roles: frozenset[tuple[str, str]] = frozenset()
        at = int(T0.timestamp() * 1000)
        first = await gate.admit("ledger_tool", "u1", no_roles, at, "k1")
        assert first == protocol.Admission(checked=True)
        assert (await gate.admit("ledger_tool", "u1", no_roles, at + 1_000, "k2")).refusal is None
        third = await gate.admit("ledger_tool", "u1", no_roles, at + 2_000, "k3")
        assert third.refusal == protocol.RATE_LIMITED
        assert third.reason == (
            "您调用 ledger_tool 过于频繁（每 60 秒最多 2 次），请稍后再试"
            "（ledger_tool allows 2 calls per 60 s: try again later）。"
        )
        assert (await gate.admit("ledger_tool", "u2", no_roles, at + 2_000, "k4")).refusal is None
        later = await gate.admit("ledger_tool", "u1", no_roles, at + 60_000, "k5")
        assert later.refusal is None  # the first call left the window
        assert await gate.admit("dir_tool", "u1", no_roles, at, "k6") == protocol.ADMIT


async def test_roles_count_only_from_the_tools_that_may_grant_them(tmp_path: Path) -> None:
    access = Access(roles=("finance",), roles_from=("dir_tool",), quota=Quota(calls=5, per="month"))
    ledger = ToolSpec(name="ledger_tool", kind="python", target="payroll:ledger", access=access)
    async with SqliteToolStore(tmp_path / "tools.sqlite3", book=MarkBook(tmp_path)) as store:
        await store.save_spec(ledger)
        gate = ToolAccess(store)
        at = int(T0.timestamp() * 1000)
        said_by_another = frozenset({("finance", "echo_tool")})  # any tool may write a fact
        refused = await gate.admit("ledger_tool", "u1", said_by_another, at, "k1")
        assert refused.refusal == protocol.FORBIDDEN
        granted = frozenset({("finance", "dir_tool")})
        assert (await gate.admit("ledger_tool", "u1", granted, at, "k2")).refusal is None
        nobody = await gate.admit("ledger_tool", "", granted, at, "k3")  # counted per user
        assert nobody.refusal == protocol.FORBIDDEN
        assert "needs a user id" in nobody.reason
    with pytest.raises(ValueError, match="roles need roles_from"):
        Access(roles=("finance",))


async def test_a_call_stamped_later_and_read_first_still_counts_against_the_rate(
    tmp_path: Path,
) -> None:
    access = Access(rate=RateLimit(calls=2, per_s=60))
    ledger = ToolSpec(name="ledger_tool", kind="python", target="payroll:ledger", access=access)
    async with SqliteToolStore(tmp_path / "tools.sqlite3", book=MarkBook(tmp_path)) as store:
        await store.save_spec(ledger)
        gate = ToolAccess(store)
        none: frozenset[tuple[str, str]] = frozenset()
        at = int(T0.timestamp() * 1000)
        assert (await gate.admit("ledger_tool", "u1", none, at + 31_000, "k1")).refusal is None
        assert (await gate.admit("ledger_tool", "u1", none, at + 30_000, "k2")).refusal is None
        late = await gate.admit("ledger_tool", "u1", none, at, "k3")  # other partitions lag
        assert late.refusal == protocol.RATE_LIMITED


async def test_a_round_refused_for_a_role_uses_none_of_its_other_calls_quota(
    tmp_path: Path,
) -> None:
    """Roles are checked for every call of the round before any is counted."""
    both = FLOW.replace(
        """      - call: {tool: ledger_tool, args: {user_id: "{user.id}"}}""",
        """      - parallel:
          budget_ms: 5000
          calls:
            - {tool: quota_tool, args: {user_id: "{user.id}"}}
            - {tool: ledger_tool, args: {user_id: "{user.id}"}}""",
    )
    tools = ScriptedTools(
        {"dir_tool": directory, "ledger_tool": {"amount": 100}, "quota_tool": {"ok": True}}
    )
    rules = {
        "ledger_tool": Access(roles=("finance",), roles_from=("dir_tool",)),
        "quota_tool": Access(quota=Quota(calls=1, per="month")),
    }
    async with payroll(tmp_path, both, tools, rules) as running:
        await running.harness.send(turn("u_emp", "s-emp", 1))
        assert [call.tool for call, _ in tools.calls] == ["dir_tool"]
        month = [Window(protocol.OVER_QUOTA, 0, 10**13, 1)]
        assert await running.store.admit_call("quota_tool", "u_emp", "fresh", 0, month) is None


class NoFinance:
    """finance_tool refused to everyone; every other tool admitted and counted."""

    async def admit(
        self,
        tool: str,
        user: str,
        roles: frozenset[tuple[str, str]],
        at_ms: int,
        key: str,
        *,
        count: bool = True,
    ) -> protocol.Admission:
        if tool == "finance_tool":
            return protocol.Admission(protocol.FORBIDDEN, "不可以。", checked=True)
        return protocol.Admission(checked=True)


async def test_a_call_that_comes_after_memory_answered_is_checked_too() -> None:
    """A round's second call arriving once memory has answered (a redelivery, a slow
    producer) goes out only if it may: it is put to the access rules like the others."""
    both = ["org_tool", "finance_tool"]
    driver = Driver(
        health=StaticHealth([protocol.ToolHealth(name, 20.0, 1.0) for name in both]),
        access=NoFinance(),
    )
    (query,) = to(await driver.send(call("org_tool", both)), "memory:")
    went = await driver.send(answer_query(query))
    assert [e.target for e in to(went, "tool:")] == ["tool:org_tool"]
    assert to(went, "tool:")[0].payload.context[protocol.ACCESS] == protocol.ADMITTED
    late = await driver.send(call("finance_tool", both))
    assert to(late, "tool:") == []
    (refusal,) = answers(late)
    assert isinstance(refusal.payload.body, ErrorReport)
    assert (refusal.payload.body.code, refusal.payload.body.message) == ("forbidden", "不可以。")
    assert driver.data["refused_calls"] == {"forbidden": 1}
