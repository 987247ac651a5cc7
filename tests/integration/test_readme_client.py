"""The README's client example, run as written against the demo stack on the embedded broker.

The stack is the one ``hermesbus up --demo`` runs (SQLite stores in a fresh HERMES_HOME,
the demo tools in worker processes), its topics prefixed per test; the example runs as
a script in its own process, as a user would run it, with only the environment the
README names (``HERMES_KAFKA_BOOTSTRAP``; the keyring and the topic prefix of the run).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermesbus import Client, Reply
from hermesbus.compose.stack import Stack
from hermesbus.processors.flow.expense_hooks import CANCELLED, SAVED
from hermesbus.processors.tool.demo.fixtures import DEMO_BUDGET_REMAINING, DEMO_DEPT, DEMO_USERS
from tests.integration.stacks import demo_stack

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Apps: the client"


def client_example() -> str:
    """The first ``py`` block of the README's client section."""
    text = README.read_text(encoding="utf-8")
    _, found, rest = text.partition(f"\n{SECTION}\n")
    assert found, f"the README has no section {SECTION!r}"
    blocks = re.findall(r"```py\n(.*?)```", rest.split("\n## ", 1)[0], re.S)
    assert blocks, f"the README's {SECTION!r} has no py block"
    return str(blocks[0])


@pytest.fixture
async def running(
    embedded_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    home = tmp_path / "home"
    async with demo_stack(embedded_bootstrap, f"readme-{unique}.", home, monkeypatch) as running:
        yield running


async def _run_script(script: Path, running: Stack) -> tuple[int, str, str]:
    env = {
        **os.environ,
        "HERMES_KAFKA_BOOTSTRAP": running.bootstrap,
        "HERMES_TOPIC_PREFIX": running.prefix,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        cwd=script.parent,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(120):
            out, err = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    return int(process.returncode or 0), out.decode(), err.decode()


async def test_the_readme_client_example_runs_and_ends_its_conversation(
    running: Stack, tmp_path: Path
) -> None:
    script = tmp_path / "client.py"
    script.write_text(client_example(), encoding="utf-8")
    code, out, err = await _run_script(script, running)
    assert code == 0, err
    assert "Traceback" not in err
    first, last = out.splitlines()  # ask's reply, then the bounded loop's one reply
    assert first.startswith("conversation:S2 好的，已为您发起")
    assert f"您所在部门：{DEMO_DEPT}，部门预算余额 {DEMO_BUDGET_REMAINING:,} CNY" in first
    assert last == f"conversation:S5 {CANCELLED}"


async def test_a_user_outside_the_demo_company_is_told_why(running: Stack) -> None:
    """A tool's 4xx (the caller's mistake) reaches the user as what was wrong, not "retry"."""
    outsider = "u_5e884898"
    assert outsider not in DEMO_USERS
    async with Client(bootstrap=running.bootstrap, topic_prefix=running.prefix) as app:
        reply = await app.ask("sess_outsider", outsider, "我要报上个月去深圳的差旅费", timeout=60)
    assert isinstance(reply.payload.body, Reply)
    assert reply.source == "conversation:S5"
    assert reply.payload.body.text == (
        f"org_tool 无法处理该请求（422）：user '{outsider}' is not in the demo directory。"
        "请检查输入。" + SAVED
    )


async def test_from_a_shell_the_outsider_reads_the_reason_too(running: Stack) -> None:
    """The same turn through ``hermesbus say --wait``, as a user tries the bus."""
    argv = ("say", "sess_outsider_cli", "我要报上个月去深圳的差旅费", "--user", "u_5e884898")
    options = ("--wait", "--bootstrap", running.bootstrap, "--prefix", running.prefix)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hermesbus.cli",
        *argv,
        *options,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(120):
        out, err = await process.communicate()
    said = out.decode() + err.decode()
    assert process.returncode == 0, said
    assert "is not in the demo directory" in said
    assert "请检查输入" in said and "稍后重试" not in said
    assert "Traceback" not in said
