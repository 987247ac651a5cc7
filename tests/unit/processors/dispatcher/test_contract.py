"""Each contract rule broken on purpose: refused, reported, counted, nothing forwarded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermesbus import (
    ContextSnapshot,
    Envelope,
    ErrorReport,
    MemoryTier,
    MemoryWrite,
    ModelRequest,
    StateSnapshot,
    ToolResult,
)
from hermesbus.processors.dispatcher import (
    MAX_OPEN_CYCLES,
    MAX_TIMEOUT_MS,
    RULES,
    DispatcherState,
    first_violation,
)
from hermesbus.processors.flow import EXPENSE_MACHINE

from .helpers import T0, Driver, call, cont, envelope

ONE = ["org_tool"]


def snapshot(prev: str | None, state: str) -> Envelope:
    snap = ContextSnapshot(state_id=state, entered_at=T0)
    return envelope(
        StateSnapshot(snapshot=snap, previous_state=prev),
        source=f"conversation:{state}",
        message_id=f"snap-{prev}-{state}",
    )


def result(cycle: str = "cycle-1", tool: str = "org_tool", **fields: object) -> Envelope:
    return envelope(
        ToolResult(tool=tool, status_code=200, verified=True),
        source=f"tool:{tool}",
        message_id="res-x",
        context={"cycle": cycle, **fields},
    )


def model_round(state: str, tools: tuple[str, ...] = ("org_tool",)) -> Envelope:
    """A model round asked from ``state`` of the expense report (which has no agent state)."""
    body = ModelRequest(agent=f"expense/{state}", tools=tools, messages_json="[]", max_tokens=100)
    return envelope(
        body,
        source=f"conversation:{state}",
        message_id=f"model-{state}",
        context={"cycle": f"model-{state}"},
        snapshot=ContextSnapshot(state_id=state, entered_at=T0),
    )


@dataclass(frozen=True)
class Case:
    rule: str
    offender: Callable[[], Envelope]
    setup: tuple[Callable[[], Envelope], ...] = ()
    field: str = ""
    """A word the report's message must contain (the field it names)."""
    to_conversation: bool = True


CASES = [
    Case("target", lambda: call("org_tool", ONE, target="tool:org_tool"), field="target"),
    Case(
        "source",
        lambda: call("org_tool", ONE, source="app:web"),
        field="source",
        to_conversation=False,
    ),
    Case("source", lambda: call("org_tool", ONE, state="S9"), field="'conversation:S9'"),
    Case(
        "body",
        lambda: envelope(
            ToolResult(tool="x", status_code=200), source="conversation:S1", message_id="b"
        ),
        field="ToolResult",
    ),
    Case(
        "body",
        lambda: call("org_tool", ONE, source="tool:org_tool"),
        field="ToolCall",
        to_conversation=False,
    ),
    Case(
        "body",
        lambda: envelope(None, source="memory:context", message_id="b2"),
        field="payload.body",
        to_conversation=False,
    ),
    Case(
        "memory_tier",
        lambda: envelope(
            MemoryWrite(tier=MemoryTier.LONG_TERM, key="a|b|c", value_json="{}"),
            source="conversation:S3",
            message_id="w",
        ),
        field="long_term",
    ),
    Case(
        "snapshot",
        lambda: call("org_tool", ONE, snapshot=ContextSnapshot(state_id="S7", entered_at=T0)),
        field="'S7'",
    ),
    Case(
        "flow",
        lambda: call(
            "org_tool",
            ONE,
            snapshot=ContextSnapshot(
                state_id="S1", entered_at=T0, flow="parcel_status", flow_version=1
            ),
        ),
        field="'parcel_status'",
    ),
    Case("transition", lambda: snapshot("S1", "S4"), field="('S1', 'S4')"),
    Case("cycle", lambda: call("org_tool", ONE, context={"cycle": 7}), field="cycle"),
    Case("cycle", lambda: result(cycle=""), field="cycle", to_conversation=False),
    Case("tools", lambda: call("org_tool", ["finance_tool"]), field="tools"),
    Case("tools", lambda: call("org_tool", ["org_tool", "org_tool"]), field="tools"),
    Case(
        "tools",
        lambda: call("finance_tool", ["finance_tool", "ocr_tool"]),
        setup=(lambda: call("org_tool", ["org_tool", "finance_tool"]),),
        field="opened with tools",
    ),
    Case(
        "tools",
        lambda: result(tools=["other_tool"]),
        setup=(lambda: call("org_tool", ONE),),
        field="tools",
        to_conversation=False,
    ),
    Case(
        "tool_source",
        lambda: envelope(
            ToolResult(tool="finance_tool", status_code=200, verified=True),
            source="tool:org_tool",
            message_id="res-impostor",
            context={"cycle": "cycle-1"},
        ),
        setup=(lambda: call("org_tool", ["org_tool", "finance_tool"]),),
        field="'tool:org_tool'",
        to_conversation=False,
    ),
    Case("timeout", lambda: call("org_tool", ONE, timeout_ms=0), field="timeout_ms = 0"),
    Case("timeout", lambda: call("org_tool", ONE, timeout_ms=2**62), field=f"= {2**62}"),
    Case(
        "timeout",
        lambda: call("org_tool", ONE, timeout_ms=MAX_TIMEOUT_MS + 1),
        field=f"<= {MAX_TIMEOUT_MS}",
    ),
    Case(
        "agent_tools",
        lambda: call("org_tool", ONE, task="S1@tools#1"),
        field="a model-chosen call comes from an agent state",
    ),
    Case("agent_tools", lambda: model_round("S1"), field="a model round comes from an agent"),
    Case("retry", lambda: call("org_tool", ONE, max_attempts=2**31 - 1), field="max_attempts"),
    Case("retry", lambda: call("org_tool", ONE, backoff_ms=2**62), field="backoff_ms"),
    Case("tools", lambda: call("t0", [f"t{i}" for i in range(17)]), field="at most 16"),
    Case(
        "open_cycles",
        lambda: call("org_tool", ONE, cycle="c8"),
        setup=tuple(partial(call, "org_tool", ONE, cycle=f"c{i}") for i in range(MAX_OPEN_CYCLES)),
        field="8 open cycles",
    ),
    Case("cycle_known", lambda: result(cycle="nope"), field="'nope'", to_conversation=False),
    Case("cycle_known", lambda: cont(cycle="nope"), field="'nope'"),
    Case(
        "dispatched",
        result,
        setup=(lambda: call("org_tool", ONE),),  # still waiting for memory
        field="never dispatched",
        to_conversation=False,
    ),
    Case(
        "dispatched",
        lambda: result(tool="finance_tool"),
        setup=(lambda: call("org_tool", ONE),),
        field="'finance_tool'",
        to_conversation=False,
    ),
    Case(
        "one_dispatch",
        lambda: call("org_tool", ONE, message_id="again"),
        setup=(lambda: call("org_tool", ONE),),
        field="already dispatched",
    ),
    Case("continue", cont, setup=(lambda: call("org_tool", ONE),), field="still open"),
]


def test_every_rule_is_broken_by_some_case() -> None:
    assert {case.rule for case in CASES} == {rule.name for rule in RULES}


@pytest.mark.parametrize("case", CASES, ids=[f"{c.rule}-{i}" for i, c in enumerate(CASES)])
async def test_a_violation_is_refused_reported_and_counted(case: Case) -> None:
    driver = Driver()
    for make in case.setup:
        await driver.send(make())
    before = driver.data.get("cycles", {})
    offender = case.offender()
    out = await driver.send(offender)

    # refused: nothing forwarded or executed, no timers, the cycles untouched
    assert all(isinstance(e.payload.body, ErrorReport) for e in out)
    assert driver.outcomes[-1].timers == ()
    assert driver.data["cycles"] == before
    # reported: to the conversation when it offended, always to alerts:dispatcher
    targets = [e.target for e in out]
    expected = [offender.source] if case.to_conversation else []
    assert targets == [*expected, "alerts:dispatcher"]
    report = out[-1].payload.body
    assert isinstance(report, ErrorReport)
    assert report.component == "mcp:dispatcher"
    assert report.code == f"violation.{case.rule}"
    assert case.field in report.message
    assert report.retryable is False
    assert out[-1].payload.context["refused"] == offender.message_id
    assert out[-1].causation_id == offender.message_id
    # counted: in the session state and in the counter port
    assert driver.data["violations"] == {case.rule: 1}
    assert driver.counter.by_rule == {case.rule: 1}


async def test_the_report_to_the_conversation_keeps_the_cycle() -> None:
    driver = Driver()
    out = await driver.send(call("org_tool", ONE, timeout_ms=0))
    assert out[0].payload.context == {
        "refused": "call-cycle-1-org_tool",
        "rule": "timeout",
        "cycle": "cycle-1",
    }


async def test_a_good_call_keeps_every_rule() -> None:
    assert first_violation(call("org_tool", ONE), DispatcherState()) is None


async def test_counts_add_up_per_rule() -> None:
    driver = Driver()
    await driver.send(snapshot("S1", "S4"))
    await driver.send(snapshot("S4", "S3"))
    await driver.send(call("org_tool", ONE, timeout_ms=0))
    assert driver.data["violations"] == {"transition": 2, "timeout": 1}
    assert driver.counter.summary() == (
        "dispatcher: 3 violations (timeout=1, transition=2), 0 late results"
    )


@given(
    st.sampled_from([None, *sorted(EXPENSE_MACHINE.states)]),
    st.sampled_from(sorted(EXPENSE_MACHINE.states)),
)
async def test_a_snapshot_is_forwarded_exactly_when_its_transition_is_allowed(
    prev: str | None, state: str
) -> None:
    out = await Driver().send(snapshot(prev, state))
    if (prev, state) in EXPENSE_MACHINE.pairs:
        assert [e.target for e in out] == ["memory:short_term"]
    else:
        assert [e.target for e in out] == [f"conversation:{state}", "alerts:dispatcher"]
        assert out[0].payload.body.code == "violation.transition"  # type: ignore[union-attr]
