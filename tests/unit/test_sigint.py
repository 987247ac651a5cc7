"""Ctrl-C while the command line starts exits 130 at once; an app importing hermesbus keeps
Python's own Ctrl-C handling."""

from __future__ import annotations

import subprocess
import sys

_AS_COMMAND = "import sys; sys.argv[0] = '/usr/bin/hermesbus'; "
"""What the ``hermesbus`` script's process looks like when it imports hermesbus."""
_SHOW = "import hermesbus, signal; print(signal.getsignal(signal.SIGINT).__name__)"
_INTERRUPT = "import os, signal, hermesbus; os.kill(os.getpid(), signal.SIGINT); import time; "
_INTERRUPT += "time.sleep(60)"


_FROM_A_TERMINAL = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, '-c', sys.argv[1]])"
)
"""Starts ``code`` in a Python whose Ctrl-C is the default, as a terminal's is: a test run in
the background of a non-interactive shell inherits SIGINT ignored, and a Python started so
leaves it ignored (no ``default_int_handler`` to keep)."""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _FROM_A_TERMINAL, code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_app_that_imports_hermesbus_keeps_pythons_ctrl_c() -> None:
    assert _run(_SHOW).stdout.strip() == "default_int_handler"
    interrupted = _run(_INTERRUPT)
    assert interrupted.returncode == -2  # Python's own: KeyboardInterrupt, then SIGINT
    assert "KeyboardInterrupt" in interrupted.stderr


def test_the_command_exits_130_at_once_and_quietly_while_it_starts() -> None:
    assert _run(_AS_COMMAND + _SHOW).stdout.strip() == "_exit_now"
    interrupted = _run(_AS_COMMAND + _INTERRUPT)
    assert (interrupted.returncode, interrupted.stderr) == (130, "")
