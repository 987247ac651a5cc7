"""An agent state on the embedded broker: the model chooses two tools, each an ordinary cycle
through the dispatcher; the session then shadow-replays from the log without the model.

The stack is the one ``hermesbus up --demo`` runs (its budget assistant flow registered,
the demo tools in worker processes); the model is the scripted OpenAI-compatible server
(no model weights can be had here), reached through ``HERMES_LLM_URL``, which counts every
request it gets.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermesbus.compose.stack import Stack
from hermesbus.demo import agent
from hermesbus.identity import KEYS_FILE_ENV
from hermesbus.processors.conversation import FLOW_SETTLE_MS
from hermesbus.processors.tool.demo.model_server import DEMO_SCRIPT, ScriptedModel
from tests.cli_process import Ran, clean_env, hermesbus
from tests.integration.stacks import demo_stack

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]

TURN_S = 120.0
"""How long a turn may take to be answered (a slow, busy machine)."""


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel(DEMO_SCRIPT) as scripted:
        yield scripted


async def _cli(running: Stack, home: Path, *args: str, **env: str) -> Ran:
    environ = clean_env(home, **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]}, **env)
    on = ("--bootstrap", running.bootstrap, "--prefix", running.prefix)
    return await asyncio.to_thread(
        hermesbus, *args, *on, env=environ, cwd=home.parent, timeout=TURN_S + 60
    )


async def test_an_agent_state_answers_through_two_model_chosen_calls_and_replays_without_it(
    embedded_bootstrap: str,
    unique: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    model: ScriptedModel,
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HERMES_LLM_URL", model.url)
    async with demo_stack(embedded_bootstrap, f"agent-{unique}.", home, monkeypatch) as running:
        assert running.demo_flow  # the budget assistant is registered with the table export
        await asyncio.sleep(FLOW_SETTLE_MS / 1000)  # new sessions take it from then on
        session = f"budget-{unique}"
        said = await _cli(
            running, home, "say", session, agent.TURNS[0].text, "--timeout", str(TURN_S)
        )
        assert said.code == 0, said.output
        assert said.out.splitlines() == [f"hermes  {agent.ENDING}  (conversation:ask)"]
        assert running.problems() == []
        # three rounds: org_tool chosen, finance_tool chosen, the answer
        assert len(model.requests) == 3
        chosen = [
            [m["tool_calls"][0]["function"]["name"] for m in r["messages"] if m.get("tool_calls")]
            for r in model.requests
        ]
        assert chosen == [[], ["org_tool"], ["org_tool", "finance_tool"]]

        # the recorded answers stand in for the model: no request reaches it
        shadowed = await _cli(running, home, "replay", "--shadow", "--session", session)
        assert shadowed.code == 0, shadowed.output
        assert "no divergence" in shadowed.out, shadowed.out
        assert len(model.requests) == 3

        # --live-model asks it again, round by round, and compares what it says
        live = await _cli(
            running,
            home,
            "replay",
            "--shadow",
            "--session",
            session,
            "--live-model",
            HERMES_LLM_URL=model.url,
        )
        assert live.code == 0, live.output
        assert len(model.requests) == 6
        unset = await _cli(
            running, home, "replay", "--shadow", "--session", session, "--live-model"
        )
        assert unset.code == 2, unset.output
        assert "HERMES_LLM_URL, which is not set" in unset.err
        assert "Traceback" not in unset.err

        # doctor, on a bus with no model set, says the agent states would fail
        doctor = await _cli(running, home, "doctor")
        flows = [line for line in doctor.out.splitlines() if line.split()[1:2] == ["flows"]]
        assert any(
            line.startswith("warn") and "budget_agent: agent states" in line for line in flows
        ), doctor.output
