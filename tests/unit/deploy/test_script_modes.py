"""Every deploy/local script the READMEs run directly is executable, in git and on disk
(``deploy/local/redis.sh start`` said "Permission denied" when it was mode 644)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LOCAL = ROOT / "deploy/local"


def _run_by_readme() -> set[str]:
    """The scripts the READMEs name, less those that say they are sourced."""
    text = (ROOT / "README.md").read_text() + (LOCAL / "README.md").read_text()
    named = set(re.findall(r"\b([a-z][a-z0-9_-]*\.sh)\b", text))
    scripts = {path.name for path in LOCAL.glob("*.sh")}
    return {
        name
        for name in named & scripts
        if "Sourced by" not in (LOCAL / name).read_text().split("\n", 5)[1]
    }


def test_the_scripts_the_readmes_run_are_named_and_found() -> None:
    assert {"redis.sh", "neo4j.sh", "elasticsearch.sh", "kafka.sh"} <= _run_by_readme()


@pytest.mark.parametrize("name", sorted(_run_by_readme()))
def test_a_script_the_readme_runs_is_executable_on_disk(name: str) -> None:
    assert os.access(LOCAL / name, os.X_OK), f"chmod +x deploy/local/{name}"


@pytest.mark.parametrize("name", sorted(_run_by_readme()))
def test_a_script_the_readme_runs_is_executable_in_git(name: str) -> None:
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the mode on disk is checked above")
    staged = subprocess.run(
        [git, "ls-files", "-s", f"deploy/local/{name}"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    assert staged.startswith("100755 "), (
        f"{staged.strip()}: git update-index --chmod=+x deploy/local/{name}"
    )
