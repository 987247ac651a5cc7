"""deploy/local/setup.sh's editable install: strict, quiet, and importable from the root.

The install is setuptools' strict editable mode: a link tree under build/ laid out as the
installed package, so `processors/` is `hermesbus/processors/` there and mypy, IDEs and the
interpreter read one layout. Run from the repository root, the folder `hermesbus/` comes
first on sys.path; `hermesbus/__init__.py` extends its path with the link tree.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FOLDERS = ("hermesbus", "processors", "connectors", "topics", "schemas")


def _copy(to: Path) -> None:
    """The project's package folders and metadata: installing it rewrites its build/."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, to / folder, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, to / name)


@pytest.mark.slow
def test_the_strict_editable_install_maps_the_folders_quietly(tmp_path: Path) -> None:
    setup = (ROOT / "deploy/local/setup.sh").read_text()
    found = re.search(
        r'PYTHONWARNINGS="([^"]+)"\s*\\\n\s*"\$VENV/bin/python" -m pip install[^\n]*\\\n'
        r"\s*--config-settings editable_mode=strict -e",
        setup,
    )
    assert found, "setup.sh no longer installs in strict editable mode with PYTHONWARNINGS set"
    project = tmp_path / "project"
    _copy(project)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    done = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "install", "--disable-pip-version-check",
         "--no-deps", "--config-settings", "editable_mode=strict", "-e", str(project)],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYTHONWARNINGS": found.group(1)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Successfully installed hermesbus" in done.stdout
    said = done.stdout + done.stderr
    assert "Warning" not in said and "!!" not in said, said
    (tree,) = (project / "build").glob("__editable__.hermesbus-*/hermesbus")
    assert (tree / "processors/dispatcher/__init__.py").resolve() == (
        project / "processors/dispatcher/__init__.py"
    )
    # From the root, `hermesbus` is the folder; the mapped packages come from the tree.
    # This interpreter has the dependencies; the copy's tree goes first on its path.
    imported = subprocess.run(
        [sys.executable, "-c",
         "import hermesbus, hermesbus.processors.dispatcher as d; print(hermesbus.__file__);"
         " print(d.__file__)"],
        cwd=project, env={**os.environ, "PYTHONPATH": str(tree.parent)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    package, dispatcher = imported.stdout.split()
    assert Path(package) == project / "hermesbus/__init__.py"
    assert Path(dispatcher) == tree / "processors/dispatcher/__init__.py"
