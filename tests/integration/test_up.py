"""``hermesbus up --demo --once`` on the embedded default: no servers, no Java."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermesbus.stack import DEMO_TURNS

pytestmark = pytest.mark.kafka


def test_up_runs_the_demo_on_the_embedded_broker_and_stops(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_KAFKA")}
    env["HERMES_HOME"] = str(tmp_path / "home")
    result = subprocess.run(
        [sys.executable, "-m", "hermesbus.cli", "up", "--demo", "--once"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for text in DEMO_TURNS:
        assert f"hermes echo: {text}" in result.stdout
    assert "embedded broker (tansu, in memory)" in result.stderr
    assert "topics: 8 created" in result.stderr
    assert "processed=4" in result.stderr
    assert (tmp_path / "home" / "state.sqlite3").exists()
