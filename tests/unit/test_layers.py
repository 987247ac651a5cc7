"""Imports go one way, the folders show the layers, and every backend package has one shape.

The layers, lowest first; a module imports from its own layer and those below it only. Each
subpackage of ``hermesbus`` is in one layer (:data:`LAYERS` names them all, so a new one
must be placed):

- **foundation**: ``hermesbus.errors`` and ``hermesbus.base`` (settings, lifecycle, logging).
- **transport**: ``connectors.kafka`` and ``connectors.schema_registry``, the bus and the
  registry the core runs on: below the core, above the foundation only.
- **core**: the contract, codec, identity, runtime, client, trace, replay and testing
  packages, ``topics`` and ``schemas``. It knows no processor and no store backend.
- **processors**: ``hermesbus.processors.*``. They define or use Protocols for their
  ports (``runtime.StateStore``, memory's ``PreferenceStore``/``GraphStore``, the tool
  store) and never import a connector.
- **stores**: every other connector (``sqlite``, ``elasticsearch``, ``redis``, ``neo4j``):
  each implements those Protocols, so it may import the processors' models.
- **composition**: ``hermesbus.compose`` (picks the store implementations from settings,
  wires them and the processors, runs a redrive's sandbox), the CLI, and the demo.

Which folder is which package is read from ``pyproject.toml`` (``package-dir``), as
setuptools reads it. The source is read with :mod:`ast` (every import, also those inside
functions), so a lazy import does not slip through.
"""

from __future__ import annotations

import ast
import tomllib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_MAPPED = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
FOLDERS = {"hermesbus": "hermesbus"} | {folder: name for name, folder in _MAPPED.items()}
"""Folder -> the package it imports as (``processors`` -> ``hermesbus.processors``)."""
LAYERS = {
    "hermesbus.errors": "foundation",
    "hermesbus.base": "foundation",
    "hermesbus.connectors.kafka": "transport",
    "hermesbus.connectors.schema_registry": "transport",
    "hermesbus": "core",  # the package's own __init__: the public names, lazily
    "hermesbus.contract": "core",
    "hermesbus.codec": "core",
    "hermesbus.identity": "core",
    "hermesbus.runtime": "core",
    "hermesbus.client": "core",
    "hermesbus.trace": "core",
    "hermesbus.replay": "core",
    "hermesbus.testing": "core",
    "hermesbus.topics": "core",
    "hermesbus.schemas": "core",
    "hermesbus.processors": "processors",
    "hermesbus.connectors": "stores",
    "hermesbus.compose": "composition",
    "hermesbus.cli": "composition",
    "hermesbus.demo": "composition",
}
"""Package -> layer; a module is in the layer of the longest package it is in."""
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
    """The layer of the longest package in :data:`LAYERS` that holds ``module``."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        found = LAYERS.get(".".join(parts[:n]))
        if found is not None:
            return found
    raise KeyError(f"{module} is in no layer: name its package in LAYERS")


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
    assert layer("hermesbus.connectors.sqlite.memory") == "stores"
    assert layer("hermesbus.base.config") == "foundation"
    assert FOLDERS["processors"] == "hermesbus.processors"
    assert "hermesbus.runtime._effects" in EDGES["hermesbus.runtime._records"]
    assert private_to("hermesbus.runtime._effects") == "hermesbus.runtime"
    assert private_to("hermesbus.runtime") is None


def test_the_top_level_is_subpackages_each_in_one_layer() -> None:
    # hermesbus/ holds its public names (__init__), the error tree and subpackages only,
    # and every subpackage is placed in a layer by name: a new one must be placed
    top = ROOT / "hermesbus"
    modules = sorted(p.name for p in top.glob("*.py"))
    assert modules == ["__init__.py", "errors.py"], f"modules at the top of hermesbus/: {modules}"
    for package in sorted(p for p in top.iterdir() if (p / "__init__.py").exists()):
        assert f"hermesbus.{package.name}" in LAYERS, f"hermesbus/{package.name} is in no layer"
    for folder, name in FOLDERS.items():
        assert name in LAYERS or any(name.startswith(p + ".") for p in LAYERS), folder


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


def _processor_uses(path: Path) -> Iterator[tuple[str, str]]:
    """(processor package, name) for every name ``path`` takes from a processor package:
    ``from hermesbus.processors.tool import X``, and ``tool.X`` after ``from
    hermesbus.processors import tool`` (or ``import hermesbus.processors.tool as tool``)."""
    tree = ast.parse(path.read_text())
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "hermesbus.processors":
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"hermesbus.processors.{alias.name}"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "hermesbus.processors."
        ):
            for alias in node.names:
                yield node.module or "", alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("hermesbus.processors.") and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            yield aliases[node.value.id], node.attr


def test_each_processor_package_exports_what_is_used_outside_it() -> None:
    # outside a processor package, the product uses only what its __init__ exports
    # (its __all__) or its public subpackages; the tests may reach inside (white box)
    import importlib

    wrong = []
    for module, path in MODULES.items():
        for target, name in _processor_uses(path):
            package = ".".join(target.split(".")[:3])
            if module == package or module.startswith(package + "."):
                continue
            if target != package and target.split(".")[3].startswith("_"):
                wrong.append(f"{module} imports {target} (private to {package})")
                continue
            exported = getattr(importlib.import_module(target), "__all__", ())
            if name not in exported and f"{target}.{name}" not in MODULES:
                wrong.append(f"{module} uses {target}.{name}, not in its __all__")
    assert not wrong, "\n".join(sorted(set(wrong)))


def private_to(module: str) -> str | None:
    """The package a private (``_``) module is the internals of: ``hermesbus.runtime`` for
    ``hermesbus.runtime._producer``; None for a public module."""
    parts = module.split(".")
    for n, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:n])
    return None


def test_no_module_imports_the_private_modules_of_another_package() -> None:
    # a package's ``_private`` modules are its own: outside it, only what its __init__
    # exports is used (the trace indexer runs on hermesbus.runtime's public names)
    wrong = sorted(
        f"{module} imports {target} (private to {owner})"
        for module, targets in EDGES.items()
        for target in targets
        if (owner := private_to(target)) is not None
        and module != owner
        and not module.startswith(owner + ".")
    )
    assert not wrong, "\n".join(wrong)
