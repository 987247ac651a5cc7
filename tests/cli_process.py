"""The ``hermesbus`` command as a user runs it: a subprocess, its exit code and its output."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest


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


class Background:
    """``hermesbus ARGS`` in the background; stdout and stderr go to ``NAME.out`` and
    ``NAME.err`` in ``folder``, polled. ``session``: in a session of its own, so a signal
    to its group (Ctrl-C) reaches its tool workers and broker too."""

    POLL_S = 0.05

    def __init__(
        self, folder: Path, *args: str, env: Mapping[str, str], name: str, session: bool = True
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.out, self.err = folder / f"{name}.out", folder / f"{name}.err"
        self.session = session
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "hermesbus.cli", *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=dict(env),
                cwd=folder,
                start_new_session=session,
            )
        self.pid = self.process.pid

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def wait_until(self, done: str, check: Callable[[], bool], within_s: float) -> None:
        """Poll ``check()`` until true; fails if the command exits first or time runs out."""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:  # a subprocess's file: nothing to wait on
            if check():
                return
            if self.process.poll() is not None:
                pytest.fail(f"exited ({self.process.returncode}) before {done}:\n{self.stderr()}")
            time.sleep(self.POLL_S)
        pytest.fail(f"not {done} within {within_s:g} s; stderr:\n{self.stderr()}")

    def wait_for(self, text: str, within_s: float, *, stdout: bool = False) -> str:
        """The output (stderr, or ``stdout``) once it holds ``text``."""
        where = self.out if stdout else self.err
        self.wait_until(repr(text), lambda: text in where.read_text(errors="replace"), within_s)
        return where.read_text(errors="replace")

    def interrupt(self, within_s: float) -> int:
        """Ctrl-C (SIGINT to its group, or to it): its exit code."""
        if self.session:
            os.killpg(self.pid, signal.SIGINT)
        else:
            self.process.send_signal(signal.SIGINT)
        return self.process.wait(within_s)

    def kill(self) -> None:
        """SIGKILL (to its group, with a session of its own), and wait for it."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if self.session:
                    os.killpg(self.pid, signal.SIGKILL)
                else:
                    self.process.kill()
            self.process.wait()
