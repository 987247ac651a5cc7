"""Re-record the golden histories after an intended change of the processors' behaviour.

    .venv/bin/python -m tests.golden.record

runs ``hermesbus up --demo --once`` in a fresh, temporary ``HERMES_HOME`` (the embedded
broker, no servers), then exports conversation A (submitted) to ``demo-a.tar.gz``, B
(stopped, kept unfinished) to ``demo-b.tar.gz`` and the table export (a registered flow:
its bundle carries the flow's spec) to ``demo-tables.tar.gz`` beside this file. ``tests/unit/
test_golden.py`` shadow-replays both against the current code, so CI fails on any
divergence until they are recorded again (and the change reviewed in the diff of the
replies it prints).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUNDLES = ("demo-a.tar.gz", "demo-b.tar.gz", "demo-tables.tar.gz")
"""Conversation A, then B, then the table export, as ``hermesbus up --demo`` runs them."""


def _hermesbus(*args: str, env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "hermesbus.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(
            f"hermesbus {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )
    return done.stdout


def record(into: Path = HERE) -> list[Path]:
    """Run the demo once and export its sessions into ``into``; the bundles' paths."""
    with tempfile.TemporaryDirectory(prefix="hermes-golden-") as folder:
        home = Path(folder) / "home"
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
        env["HERMES_HOME"] = str(home)
        out = _hermesbus("up", "--demo", "--once", env=env, cwd=Path(folder))
        line = next(line for line in out.splitlines() if line.startswith("replay them:"))
        sessions = re.findall(r"--session (\S+)", line)
        if len(sessions) != len(BUNDLES):
            raise SystemExit(f"expected the demo's {len(BUNDLES)} sessions, found {sessions}")
        written = []
        for session, name in zip(sessions, BUNDLES, strict=True):
            _hermesbus("export", session, "-o", str(into / name), env=env, cwd=Path(folder))
            written.append(into / name)
    return written


if __name__ == "__main__":
    for path in record():
        print(
            f"recorded {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}"
        )
