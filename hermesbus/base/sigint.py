"""Ctrl-C while the ``hermesbus`` command is still starting: exit 130 at once, no traceback.

Importing the command line takes a second or more on a busy machine, and Python turns
Ctrl-C into a KeyboardInterrupt raised wherever an import happens to be: a traceback
through importlib. Nothing has been started then (no client, no child process, no file
written), so the command exits with 130 (128 + SIGINT, as a shell reports it) at once.

``hermesbus/__init__`` imports this module first, which then guards, but only when
this process is the ``hermesbus`` command (its script, or ``python -m hermesbus.cli``),
never in an application that imports the package. The command line :func:`release` s the
guard once it knows the command; ``up`` keeps it until its event loop handles SIGINT
(and guards again once everything has stopped). Standard library only: it runs first.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

__all__ = ["INTERRUPTED", "guard", "guard_command", "release"]

INTERRUPTED = 130
"""The exit code of a command stopped by Ctrl-C (SIGINT)."""


def guard_command() -> None:
    """:func:`guard`, if this process is the ``hermesbus`` command."""
    if _is_the_command():
        guard()


def guard() -> None:
    """From now on, SIGINT ends the process with exit code 130 at once (nothing to stop)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _exit_now)


def release() -> None:
    """SIGINT raises KeyboardInterrupt again (Python's default), if :func:`guard` set it."""
    if signal.getsignal(signal.SIGINT) is _exit_now:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _exit_now(_signum: int, _frame: FrameType | None) -> None:
    os._exit(INTERRUPTED)


def _is_the_command() -> bool:
    """The ``hermesbus`` script, or ``python [options] -m hermesbus.cli``."""
    if Path(sys.argv[0]).name in {"hermesbus", "hermesbus.exe"}:
        return True
    argv = getattr(sys, "orig_argv", [])
    return any(a == "-m" and b == "hermesbus.cli" for a, b in itertools.pairwise(argv))


guard_command()  # on import: hermesbus/__init__ imports this module before anything else
