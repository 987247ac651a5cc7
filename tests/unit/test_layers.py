"""Imports go one way, and every backend package has the same shape.

The layers, lowest first; a module imports from its own layer and those below it only:

- **foundation**: :data:`FOUNDATION`, the errors, the service base and the settings.
- **transport**: ``connectors.kafka`` and ``connectors.schema_registry``, the bus and the
  registry the core runs on: below the core, above the foundation only.
- **core**: ``hermesbus.*`` and ``topics`` (envelope, codec, runtime, client, trace,
  replay, index, testing). It knows no processor and no store backend.
- **processors**: ``hermesbus.processors.*``. They define or use Protocols for their
  ports (``runtime.StateStore``, memory's ``PreferenceStore``/``GraphStore``, the tool
  store) and never import a connector.
- **stores**: every other connector (``sqlite``, ``elasticsearch``, later ``redis``,
  ``neo4j``): each implements those Protocols, so it may import the processors' models.
- **composition**: ``hermesbus.backends`` (picks the store implementations from settings),
  ``hermesbus.stack`` (wires them and the processors), ``hermesbus.redrive`` (a sandbox
  stack) and the CLI.

The source is read with :mod:`ast` (every import, also those inside functions), so a lazy
import does not slip through.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {
    "hermesbus": "hermesbus",
    "processors": "hermesbus.processors",
    "connectors": "hermesbus.connectors",
    "topics": "hermesbus.topics",
    "schemas": "hermesbus.schemas",
}
FOUNDATION = frozenset({"hermesbus.errors", "hermesbus.lifecycle", "hermesbus.config"})
TRANSPORT = ("hermesbus.connectors.kafka", "hermesbus.connectors.schema_registry")
COMPOSITION = ("hermesbus.backends", "hermesbus.stack", "hermesbus.redrive", "hermesbus.cli")
ORDER = ("foundation", "transport", "core", "processors", "stores", "composition")
BACKEND_SHAPE = ("__init__.py", "client.py", "config.py", "errors.py")


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()


def _imports(module: str, path: Path) -> Iterator[str]:
    """Every hermesbus module ``module`` imports; ``from pkg import sub`` names ``pkg.sub``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("hermesbus"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, *([node.module] if node.module else [])])
            if not base.startswith("hermesbus"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield sub if sub in MODULES else base


def layer(module: str) -> str:
    if module in FOUNDATION:
        return "foundation"
    if module.startswith(TRANSPORT):
        return "transport"
    if module.startswith("hermesbus.connectors"):
        return "stores"
    if module.startswith("hermesbus.processors"):
        return "processors"
    if any(module == c or module.startswith(c + ".") for c in COMPOSITION):
        return "composition"
    return "core"


def _edges() -> dict[str, set[str]]:
    return {module: set(_imports(module, path)) for module, path in MODULES.items()}


EDGES = _edges()


def test_the_analysis_sees_the_tree() -> None:
    # the rules below are only as good as what they read: the known edges are found
    assert "hermesbus.runtime._records" in MODULES
    assert "hermesbus.connectors.kafka" in EDGES["hermesbus.runtime._records"]
    assert "hermesbus.processors.memory" in EDGES["hermesbus.connectors.sqlite.memory"]
    assert layer("hermesbus.cli._replay") == "composition"
    assert layer("hermesbus.client") == "core"
    assert layer("hermesbus.connectors.kafka.admin") == "transport"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module: str) -> None:
    mine = ORDER.index(layer(module))
    upward = sorted(t for t in EDGES[module] if ORDER.index(layer(t)) > mine)
    assert not upward, f"{module} ({layer(module)}) imports a higher layer: {upward}"


def _unit(module: str) -> str:
    """The package a module belongs to: ``hermesbus.runtime``, ``hermesbus.connectors.kafka``."""
    parts = module.split(".")
    nested = len(parts) > 1 and parts[1] in ("processors", "connectors")
    return ".".join(parts[:3] if nested else parts[:2])


def test_no_two_packages_import_each_other() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in EDGES.items():
        graph[_unit(module)] |= {_unit(t) for t in targets} - {_unit(module)}
    cycles = [sorted(c) for c in _cycles(graph)]
    assert not cycles, f"packages that import each other: {cycles}"


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in list(graph):
        if node not in index:
            visit(node)
    return found


def test_every_backend_package_has_the_same_shape() -> None:
    backends = sorted(p for p in (ROOT / "connectors").iterdir() if (p / "__init__.py").exists())
    assert {p.name for p in backends} >= {"kafka", "schema_registry", "sqlite", "elasticsearch"}
    for package in backends:
        missing = [name for name in BACKEND_SHAPE if not (package / name).exists()]
        assert not missing, f"connectors/{package.name} lacks {missing} (client, config, errors)"
