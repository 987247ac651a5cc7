"""Cycle budgets: the documents' by default, scaled by HERMES_CONVERSATION_BUDGET_SCALE."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hermesbus.contract.envelope import Envelope
from hermesbus.processors.conversation import BUDGETS_PORT, Budgets, ConversationSettings
from hermesbus.processors.flow import EXPENSE_SPEC
from hermesbus.processors.recorded import RecordedBudgets

from .demo import Driver

S1_TURN = "我要报上个月去深圳的差旅费"


async def _s1_calls(ports: dict[str, object]) -> list[Envelope]:
    d = Driver(ports=dict(ports))
    await d.say(S1_TURN)
    return d.calls


async def test_without_the_port_a_cycle_gets_the_documents_budget() -> None:
    calls = await _s1_calls({})
    assert calls and {c.metadata.timeout_ms for c in calls} == {5_000}


async def test_the_scale_multiplies_every_states_budget() -> None:
    calls = await _s1_calls({BUDGETS_PORT: Budgets(6.0)})
    assert {c.metadata.timeout_ms for c in calls} == {30_000}
    assert Budgets(2.5).timeout_ms("S3") == 75_000
    assert Budgets().timeout_ms("S1") == EXPENSE_SPEC.budget_of("S1") == 5_000


def test_the_scale_comes_from_the_environment_within_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert ConversationSettings().conversation_budget_scale == 1.0
    monkeypatch.setenv("HERMES_CONVERSATION_BUDGET_SCALE", "6")
    assert ConversationSettings().conversation_budget_scale == 6.0
    for bad in ("0", "11", "lots"):  # 10x keeps S3's 30 s within the dispatcher's 300 s cap
        monkeypatch.setenv("HERMES_CONVERSATION_BUDGET_SCALE", bad)
        with pytest.raises(ValidationError, match="conversation_budget_scale"):
            ConversationSettings()


async def test_a_replay_gives_the_conversation_the_budget_its_recorded_calls_carried() -> None:
    """A log made at 6x replays at 6x whatever this machine's setting: no divergence on
    ``metadata.timeout_ms`` (``hermesbus replay --shadow`` cues it like the tools' health)."""
    recorded = await _s1_calls({BUDGETS_PORT: Budgets(6.0)})
    budgets = RecordedBudgets()
    budgets.cue(recorded)
    replayed = await _s1_calls({BUDGETS_PORT: budgets})
    assert [c.metadata.timeout_ms for c in replayed] == [c.metadata.timeout_ms for c in recorded]
    budgets.cue([])  # an envelope for which it sent no call then
    assert budgets.timeout_ms("S1") == 5_000
