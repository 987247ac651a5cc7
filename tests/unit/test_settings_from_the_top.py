"""Settings are read once, where a program starts, and handed down.

Below the composition layer (``hermesbus.compose``, the CLI and the demo: see
tests/unit/test_layers.py) no module reads the environment, builds a settings class
(every ``pydantic_settings.BaseSettings`` reads ``HERMES_*`` when constructed, whatever it
is given), or loads the keyring without being told which file and which variables. What
is read there is read from the object the program's start built and passed down. The
source is read with :mod:`ast`, so a lazy read inside a function does not slip through.

Three places are program starts of their own: :data:`STARTS` names them, with why.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_layers import MODULES, ROOT, layer

STARTS = {
    ("hermesbus.client._settings", "from_environment"): (
        "an app's program start: `Client()` given no settings reads HERMES_* there, once"
    ),
    ("hermesbus.client._settings", "kafka_from_environment"): (
        "the same start: `Client(bootstrap=...)` given no settings reads HERMES_KAFKA_* but "
        "what it was given"
    ),
    ("hermesbus.processors.tool._worker", "*"): (
        "a tool worker is a program of its own (a child process): the environment the tool "
        "spec names is what it is given"
    ),
    ("hermesbus.processors.tool._mcp_launch", "*"): (
        "an MCP server's launcher is a program of its own (a child process): it keeps of "
        "what it was given the variables the tool spec names"
    ),
    ("hermesbus.processors.tool.demo.tools", "*"): (
        "a demo tool, run in a tool worker, takes its signing secret from the environment "
        "its spec names, as any tool does"
    ),
}
"""(module, function or ``*``) -> why it may read the environment."""
_ENVIRONMENT = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}
_BASES = {"BaseSettings"}


def _settings_classes() -> set[str]:
    """The names of every class in the tree that is a BaseSettings, however indirectly."""
    bases: dict[str, set[str]] = {}
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = {
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                }
                bases.setdefault(node.name, set()).update(names)
    found = set(_BASES)
    while True:
        more = {name for name, of in bases.items() if of & found} - found
        if not more:
            return found - _BASES
        found |= more


SETTINGS = _settings_classes()


def _reads(tree: ast.AST) -> Iterator[tuple[int, str, str]]:
    """(line, enclosing function, what) for every read of the environment or the settings."""

    def visit(node: ast.AST, function: str) -> Iterator[tuple[int, str, str]]:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        children = list(ast.iter_child_nodes(node))
        if isinstance(node, ast.Call) and _is_keyring_load(node.func) and node.args:
            children.remove(node.func)  # told which file (and which variables): no read
        found = _read(node)
        if found:
            yield node.lineno, function, found  # type: ignore[attr-defined]
        for child in children:
            yield from visit(child, function)

    yield from visit(tree, "<module>")


def _is_keyring_load(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "load"
        and isinstance(node.value, ast.Name)
        and node.value.id == "Keyring"
    )


def _read(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        if node.value.id == "os" and node.attr in _ENVIRONMENT:
            return f"os.{node.attr}"
        if _is_keyring_load(node):
            return "Keyring.load not told which file: the program's KeySettings say"
    if isinstance(node, ast.ImportFrom) and node.module == "os":
        named = sorted(a.name for a in node.names if a.name in _ENVIRONMENT)
        if named:
            return f"from os import {', '.join(named)}"
    if isinstance(node, ast.Call):
        called = node.func
        name = (
            called.id
            if isinstance(called, ast.Name)
            else called.attr
            if isinstance(called, ast.Attribute)
            else None
        )
        if name in SETTINGS:
            return f"{name}(...) reads HERMES_* when built"
    return None


def _below_composition() -> dict[str, Path]:
    return {m: p for m, p in MODULES.items() if layer(m) != "composition"}


def _allowed(module: str, function: str) -> bool:
    return (module, function) in STARTS or (module, "*") in STARTS


def test_the_scan_sees_the_settings_and_the_layers() -> None:
    # what the rule below checks is only as good as what it finds
    assert {"HermesSettings", "KafkaConfig", "RuntimeSettings", "RedisConfig"} <= SETTINGS
    assert {"ToolSettings", "ConversationSettings", "MemorySettings"} <= SETTINGS
    below = _below_composition()
    assert "hermesbus.runtime._runtime" in below and "hermesbus.connectors.redis.client" in below
    assert "hermesbus.compose.settings" not in below and "hermesbus.cli._up" not in below
    for module, _ in STARTS:
        assert module in below, f"{module}: named as a program start, but not below composition"
    made_up = ast.parse(
        "import os\ndef f(load=Keyring.load):\n    os.environ.get('X')\n    KafkaConfig(a=1)\n"
        "    Keyring.load()\n    Keyring.load(path, environ=given)\n"
    )
    found = [(line, fn) for line, fn, _ in _reads(made_up)]
    assert found == [(2, "f"), (3, "f"), (4, "f"), (5, "f")]


@pytest.mark.parametrize("module", sorted(_below_composition()))
def test_no_module_below_composition_reads_the_environment(module: str) -> None:
    path = MODULES[module]
    reads = [
        f"{path.relative_to(ROOT)}:{line} in {fn}: {what}"
        for line, fn, what in _reads(ast.parse(path.read_text()))
        if not _allowed(module, fn)
    ]
    assert not reads, (
        f"{module} reads settings or the environment below the composition layer; take what "
        f"it needs as an argument, from the settings the program's start read: {reads}"
    )
