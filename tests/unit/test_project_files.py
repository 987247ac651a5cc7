"""The project's own files keep up with the code: the license is the one pyproject.toml
declares, the changelog has a place for the next landing, CONTRIBUTING.md names every
package a newcomer meets, and the pre-commit hooks run what the test command runs."""

from __future__ import annotations

import hashlib
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]

APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
"""SHA-256 of https://www.apache.org/licenses/LICENSE-2.0.txt, the license's canonical
text, which is reproduced verbatim (the appendix keeps its placeholders)."""


def _packages(folder: str) -> list[str]:
    """The names of the packages (folders with an ``__init__.py``) right under ``folder``."""
    return sorted(p.name for p in (ROOT / folder).iterdir() if (p / "__init__.py").is_file())


def test_the_license_is_the_apache_2_0_text_pyproject_declares() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
    assert declared == "Apache-2.0"
    text = (ROOT / "LICENSE").read_bytes()
    words = text.decode().split()
    assert words[:5] == ["Apache", "License", "Version", "2.0,", "January"], words[:5]
    assert "END OF TERMS AND CONDITIONS" in text.decode()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256, (
        "LICENSE differs from the canonical Apache-2.0 text: copy it verbatim"
    )


def test_the_changelog_opens_with_the_unreleased_section() -> None:
    headings = re.findall(r"^## +(.+?) *$", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert len(headings) > 1, "CHANGELOG.md has no landed entries"
    assert headings[0].strip("[]") == "Unreleased", f"the first section is {headings[0]!r}"


def test_contributing_names_every_subpackage_and_every_connector() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    subpackages = _packages("hermesbus")
    connectors = _packages("connectors")
    assert {"runtime", "compose", "cli"} <= set(subpackages)  # the test sees the tree
    assert {"kafka", "redis", "sqlite"} <= set(connectors)
    folders = [f"hermesbus/{name}/" for name in subpackages]
    folders += [f"connectors/{name}/" for name in connectors]
    missing = [folder for folder in folders if folder not in text]
    assert not missing, f"CONTRIBUTING.md does not name {missing}: say what each holds"


def _test_command_checks() -> list[list[str]]:
    """The ruff and mypy commands deploy/local/test.sh runs, each as its words."""
    script = (ROOT / "deploy/local/test.sh").read_text()
    lines = script.replace("\\\n", " ").splitlines()  # a command continued with \ is one
    commands = [shlex.split(line, comments=True) for line in lines]
    return [words for words in commands if words and words[0] in {"ruff", "mypy"}]


def _hooks() -> list[dict[str, Any]]:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    return [hook for repo in config["repos"] for hook in repo["hooks"]]


def test_the_pre_commit_hooks_run_the_test_commands_ruff_and_mypy() -> None:
    checks = _test_command_checks()
    assert [words[0] for words in checks] == ["ruff", "ruff", "mypy"], checks
    hooks = _hooks()
    for hook in hooks:
        # a system hook runs the entry as written; pass_filenames would append the
        # staged files, checking less than the test command does
        assert hook["language"] == "system", hook["id"]
        assert hook["pass_filenames"] is False, hook["id"]
    run = [shlex.split(hook["entry"]) + list(hook.get("args", [])) for hook in hooks]
    assert run == checks
