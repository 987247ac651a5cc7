"""The README's tool spec example registers as written, and is listed and healthy."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli_process import clean_env, hermesbus

README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_readme_spec_registers_and_probes(tmp_path: Path) -> None:
    section = README.read_text(encoding="utf-8").split("## The four processors", 1)[1]
    (block,) = re.findall(r"```yaml\n(.*?)```", section.split("\n## ", 1)[0], re.S)
    spec = tmp_path / "spec.yaml"
    spec.write_text(block, encoding="utf-8")
    env = clean_env(tmp_path / "home")
    registered = hermesbus("tools", "register", str(spec), env=env, cwd=tmp_path)
    assert registered.code == 0, registered.output
    assert "registered org_lookup" in registered.out
    listed = hermesbus("tools", "list", env=env, cwd=tmp_path)
    assert "org_lookup" in listed.out and "ed25519" in listed.out
    health = hermesbus("tools", "health", env=env, cwd=tmp_path)
    assert health.code == 0, health.output
    (row,) = [line for line in health.out.splitlines() if "org_lookup" in line]
    assert "yes" in row and row.rstrip("│ ").endswith("ok")
