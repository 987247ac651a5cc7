"""Fixtures of the tool processor's tests: a real SQLite store and a service in tmp_path."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hermesbus.base.storemark import MarkBook
from hermesbus.cli import app
from hermesbus.connectors.sqlite.tools import SqliteToolStore
from hermesbus.processors.tool import Fallback, ToolService, ToolSettings, ToolSpec

SAMPLES = "tests.unit.processors.tool.sample_tools"
MODULES = "hermesbus.processors.tool.demo,tests.unit.processors.tool"
"""HERMES_TOOL_MODULES of the tests: the demo and the sample tools."""
ECHO_IN = {"type": "object", "properties": {"text": {"type": "string"}}}
ECHO_OUT = {
    "type": "object",
    "required": ["echo"],
    "properties": {"echo": {"type": "string"}, "verification_steps": {"type": "array"}},
}


def python_spec(name: str, function: str, **fields: Any) -> ToolSpec:
    """A complete, admissible python tool spec over a sample tool; fields override."""
    values: dict[str, Any] = {
        "name": name,
        "kind": "python",
        "target": f"{SAMPLES}:{function}",
        "input_schema": ECHO_IN,
        "output_schema": ECHO_OUT,
        "health": f"{SAMPLES}:probe",
        "verifier": f"{SAMPLES}:verify",
        "fallback": Fallback(strategy="mock", mock_result={"echo": "mocked"}),
        "timeout_s": 5.0,
    }
    return ToolSpec(**{**values, **fields})


@pytest.fixture
def settings(tmp_path: Path) -> ToolSettings:
    return ToolSettings(
        home=tmp_path, debug=False, tool_hosts="127.0.0.1,localhost", tool_modules=MODULES
    )


@pytest.fixture(autouse=True)
def _modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings built from the environment (the CLI's) allow the sample tools too."""
    monkeypatch.setenv("HERMES_TOOL_MODULES", MODULES)


@pytest.fixture
def environ() -> dict[str, str]:
    """The environment the service is handed (a copy of the tests' own): a test sets the
    variables a tool or a signature needs here, before the tool first runs."""
    return dict(os.environ)


@pytest.fixture
async def tools(settings: ToolSettings, environ: dict[str, str]) -> AsyncIterator[ToolService]:
    store = SqliteToolStore(settings=settings, book=MarkBook(settings.home))
    async with ToolService(store, settings, environ=environ) as service:
        yield service


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``HERMES_HOME`` for the CLI's commands: a tmp folder (``HERMES_DEBUG`` unset)."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    monkeypatch.delenv("HERMES_DEBUG", raising=False)
    return tmp_path


def run(*args: str) -> tuple[int, str]:
    """``hermesbus ARGS`` in this process: its exit code and what it printed."""
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output
