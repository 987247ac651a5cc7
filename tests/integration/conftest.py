"""Fixtures several integration modules read: runs that take long enough to be made once."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from hermesbus.identity import KEYS_FILE_ENV
from tests.integration.demo_run import DemoRun


@pytest.fixture(scope="session")
def mcp_demo(embedded_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """The demo with its tools served by the demo MCP server over stdio
    (``HERMES_DEMO_TOOLS=mcp``): ``test_up`` compares its replies with the python tools',
    and ``mcp serve`` is read against the bus it left (a run takes half a minute here)."""
    home = tmp_path_factory.mktemp("mcp-demo")
    prefix = f"mcp-{os.getpid()}-{int(time.time())}."
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env |= {"HERMES_HOME": str(home), KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]}
    env["HERMES_CONVERSATION_BUDGET_SCALE"] = "6"  # not about timing: a busy machine
    ran = subprocess.run(
        [sys.executable, "-m", "hermesbus.cli", "up", "--demo", "--once",
         "--bootstrap", embedded_bootstrap, "--prefix", prefix],
        capture_output=True, text=True, env={**env, "HERMES_DEMO_TOOLS": "mcp"}, cwd=home,
        timeout=300, check=False,
    )  # fmt: skip
    return DemoRun(home, embedded_bootstrap, prefix, env, ran)
