"""The dispatcher checks a session against the flow version its snapshots name: that
version's states, transitions and budgets, not the expense report's."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from hermesbus import ContextSnapshot, Envelope, ErrorReport, StateSnapshot
from hermesbus.processors.flow import FlowSpec, StaticCatalog, load_flow

from ..flow.specs import CONTRACT, changed
from .helpers import T0, Driver, call, envelope

BACK = "  - {from: look, on: done, to: ended}\n"
V2 = changed(
    changed(CONTRACT, "version: 1", "version: 2"),
    BACK,
    BACK + "  - {from: look, on: lookup, to: ask}\n",
)
"""Version 2 adds the move look -> ask that version 1 lacks."""


def spec_of(text: str) -> FlowSpec:
    return load_flow(text, "test.yaml")[0]


def snap(state: str, version: int = 1) -> ContextSnapshot:
    return ContextSnapshot(
        state_id=state, entered_at=T0, flow="contract_lookup", flow_version=version
    )


def move(previous: str | None, state: str, version: int) -> Envelope:
    return envelope(
        StateSnapshot(snapshot=snap(state, version), previous_state=previous, trigger="t"),
        source=f"conversation:{state}",
        message_id=f"snap-{previous}-{state}-{version}",
    )


def reports(out: Sequence[Envelope]) -> list[ErrorReport]:
    return [e.payload.body for e in out if isinstance(e.payload.body, ErrorReport)]


def refusal(out: Sequence[Envelope]) -> str | None:
    """The violation the dispatcher reported (None: it forwarded the envelope)."""
    found = reports(out)
    return found[0].code if found else None


@pytest.fixture
def driver() -> Driver:
    return Driver(flows=StaticCatalog.of([spec_of(CONTRACT), spec_of(V2)]))


async def test_a_move_its_flow_version_lacks_is_refused_and_the_version_that_has_it_passes(
    driver: Driver,
) -> None:
    out = await driver.send(move("look", "ask", 1))
    assert refusal(out) == "violation.transition"
    assert "('look', 'ask')" in reports(out)[0].message
    assert "contract_lookup v1" in reports(out)[0].message
    out = await driver.send(move("look", "ask", 2))
    assert refusal(out) is None
    assert [e.target for e in out] == ["memory:short_term"]  # forwarded to memory
    assert driver.counter.by_rule == {"transition": 1}


async def test_the_expense_reports_moves_are_not_a_flows(driver: Driver) -> None:
    out = await driver.send(move("S1", "S2", 1))
    assert refusal(out) == "violation.source"  # S2 is no state of contract_lookup


@pytest.mark.parametrize(("flow", "version"), [("contract_lookup", 3), ("support_desk", 1)])
async def test_a_snapshot_naming_no_registered_version_is_refused(
    driver: Driver, flow: str, version: int
) -> None:
    named = ContextSnapshot(state_id="ask", entered_at=T0, flow=flow, flow_version=version)
    out = await driver.send(
        envelope(
            StateSnapshot(snapshot=named, previous_state=None),
            source="conversation:ask",
            message_id=f"snap-{flow}-{version}",
        )
    )
    assert refusal(out) == "violation.flow"
    assert repr(flow) in reports(out)[0].message


async def test_a_flow_without_the_catalog_is_refused() -> None:
    out = await Driver().send(move(None, "ask", 1))
    assert refusal(out) == "violation.flow"


@pytest.mark.parametrize(("timeout_ms", "refused"), [(80_000, None), (80_001, "violation.timeout")])
async def test_a_call_carries_at_most_ten_times_its_states_budget(
    driver: Driver, timeout_ms: int, refused: str | None
) -> None:
    sent = call(
        "contract_tool",
        ["contract_tool"],
        state="look",
        task="look#0",
        timeout_ms=timeout_ms,
        snapshot=snap("look"),
    )
    out = await driver.send(sent)
    assert refusal(out) == refused  # look's timeout_ms is 8000
