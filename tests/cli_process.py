"""The ``hermesbus`` command as a user runs it: a subprocess, its exit code and its output."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    @property
    def output(self) -> str:
        return self.out + self.err


def clean_env(home: Path | None, **extra: str) -> dict[str, str]:
    """The environment without any HERMES_* setting of the test run, with ``HERMES_HOME``
    = ``home`` (None: unset), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    if home is not None:
        env["HERMES_HOME"] = str(home)
    return {**env, **extra}


def hermesbus(*args: str, env: Mapping[str, str], cwd: Path, timeout: float = 120) -> Ran:
    """Run ``python -m hermesbus.cli ARGS`` in ``cwd`` and wait for it."""
    done = subprocess.run(
        [sys.executable, "-m", "hermesbus.cli", *args],
        capture_output=True,
        text=True,
        env=dict(env),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)
