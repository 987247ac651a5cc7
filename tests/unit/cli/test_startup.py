"""The command line starts without what it does not need (no timing: which modules load).

``hermesbus --help`` lists the commands from one-line summaries kept in
``hermesbus.cli.COMMANDS``; a command's module (and the clients, stores and models it
uses) is imported only when that command runs or shows its help. bench/cli_startup.py
measures the time this saves.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import pytest

from hermesbus.cli import COMMANDS, load

HEAVY = ("aiokafka", "fastavro", "elasticsearch", "redis", "neo4j", "jsonschema", "cryptography")
"""Libraries of the bus, the stores and the keys: none is needed to print a help."""
PROBE = """
import json, sys
sys.argv = ["hermesbus", *sys.argv[1:]]
import hermesbus.cli
imported = lambda: sorted(m for m in sys.modules if m.split(".")[0] in {heavy})
before = imported()
commands = sorted(m for m in sys.modules if m.startswith("hermesbus.cli._"))
try:
    hermesbus.cli.main()
except SystemExit as exit:
    code = exit.code
print(json.dumps({{"import": before, "commands": commands, "code": code,
                   "after": imported(),
                   "loaded": sorted(m for m in sys.modules if m.startswith("hermesbus.cli._"))}}))
"""


def _probe(*args: str) -> dict[str, object]:
    """Import the command line, then run it with ``args`` (its output on stdout first)."""
    code = PROBE.format(heavy=repr(set(HEAVY)))
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "100"},
        check=True,
        timeout=120,
    )
    found: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return found


def test_importing_the_command_line_and_its_help_load_no_client_store_or_command() -> None:
    found = _probe("--help")
    assert found["code"] == 0
    assert found["import"] == []
    assert found["commands"] == []  # no command's module, on import
    assert found["after"] == []
    assert found["loaded"] == []  # nor for the top level's help


@pytest.mark.parametrize("command", ["say", "tail"])
def test_a_commands_help_loads_its_module_only_and_no_client(command: str) -> None:
    found = _probe(command, "--help")
    assert found["code"] == 0
    module = COMMANDS[command][0].lstrip(".")
    assert f"hermesbus.cli.{module}" in found["loaded"]  # type: ignore[operator]
    assert found["after"] == []


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_summary_is_the_first_paragraph_of_the_commands_own_help(name: str) -> None:
    command = load(name)
    assert command.name == name
    assert command.help is not None
    assert COMMANDS[name][2] == inspect.cleandoc(command.help).split("\n\n")[0]


def test_the_help_lists_every_command_by_its_summary() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hermesbus.cli", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "300"},
        check=True,
        timeout=120,
    )
    rows = [line.split("│")[1].split() for line in done.stdout.splitlines() if line.count("│") == 2]
    for name, (_, _, summary) in COMMANDS.items():
        assert [name, *summary.splitlines()[0].split()] in rows, (name, done.stdout)


def test_says_default_user_is_the_demos() -> None:
    from hermesbus.cli._say import DEMO_USER
    from hermesbus.demo.expense import DEMO_USER as DEMOS

    assert DEMO_USER == DEMOS
