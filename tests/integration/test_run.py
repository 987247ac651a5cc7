"""``hermesbus run PROCESSOR...``: the bus's processors in processes of their own.

Two processes on one broker, each with its own state folder and the bus's keys: one runs
the conversation and memory, the other the dispatcher, the tools and the indexer. A
user's turn goes from one to the other and back (conversation, dispatcher, org_tool,
dispatcher, conversation) and the app gets the demo's first answer; each process joined
only its own groups, and both stop on SIGTERM with exit 0.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path

import pytest

from hermesbus.compose.backends import tool_store
from hermesbus.compose.settings import Settings
from hermesbus.demo.expense import DEMO_USER
from hermesbus.identity import KEYS_FILE_ENV
from hermesbus.processors.tool import ToolRegistry
from hermesbus.processors.tool.demo import demo_keys, register_demo
from hermesbus.processors.tool.demo.fixtures import DEMO_BUDGET_REMAINING, DEMO_DEPT
from tests.cli_process import Background, clean_env, hermesbus

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]

START_S = 120.0
STOP_S = 60.0


async def _demo_tools_in(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's tools registered in ``home``'s tool store, as ``up --demo`` does."""
    monkeypatch.setenv("HERMES_HOME", str(home))
    settings = Settings.from_environment()
    async with tool_store(settings) as store:
        await register_demo(ToolRegistry(store, settings.tool))


async def test_the_processors_run_apart_and_a_turn_goes_through_both(
    broker: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"run{unique}."
    front, back = tmp_path / "front", tmp_path / "back"
    await _demo_tools_in(back, monkeypatch)
    shared = {KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV], "HERMES_CONVERSATION_BUDGET_SCALE": "6"}
    options = ("--bootstrap", broker, "--prefix", prefix)
    conversation = Background(
        tmp_path,
        "run", "conversation", "memory", *options,
        env=clean_env(front, **shared),
        name="front",
    )  # fmt: skip
    tools = Background(
        tmp_path,
        "run", "dispatcher", "tool", "indexer", *options,
        env=clean_env(back, **shared, **demo_keys()),
        name="back",
    )  # fmt: skip
    try:
        for running in (conversation, tools):
            await asyncio.to_thread(running.wait_for, "serving; Ctrl-C stops", START_S)
        said = await asyncio.to_thread(
            hermesbus,
            "say", f"sess-{unique}", "我要报上个月去深圳的差旅费", "--user", DEMO_USER,
            "--timeout", "90", *options,
            env=clean_env(tmp_path / "app", **shared),
            cwd=tmp_path,
            timeout=150,
        )  # fmt: skip
        assert said.code == 0, said.output
        (answer,) = said.out.splitlines()
        assert f"您所在部门：{DEMO_DEPT}" in answer  # org_tool answered, in the other process
        assert f"{DEMO_BUDGET_REMAINING:,} CNY" in answer
        assert answer.endswith("  (conversation:S2)")
        codes = []
        for running in (conversation, tools):
            running.process.send_signal(signal.SIGTERM)
            codes.append(await asyncio.to_thread(running.process.wait, STOP_S))
    finally:
        conversation.kill()
        tools.kill()
    front_said, back_said = conversation.stderr(), tools.stderr()
    assert codes == [0, 0], front_said + back_said
    joined = {
        where: set(re.findall(r"s  (\S+) joined$", said_there, re.M))
        for where, said_there in (("front", front_said), ("back", back_said))
    }
    assert joined["front"] == {"conversation", "memory"}, joined
    assert {"dispatcher", "tool", "tool-org_tool", "indexer"} <= joined["back"], joined
    assert not joined["front"] & joined["back"]
    assert "rollup" not in front_said + back_said  # diagnostics not asked for
    for said_here in (front_said, back_said):
        assert said_here.rstrip().endswith("stopped") and "Traceback" not in said_here
