"""One bus per HERMES_HOME: the lock, who holds it, and that a dead holder never keeps it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hermesbus.compose.homelock import LOCK_FILE, held_by, home_lock
from hermesbus.errors import ConfigError

WAIT_S = 60.0
"""How long a helper process may take to say it holds the lock (a busy machine)."""

_HOLDER = textwrap.dedent(
    """
    import subprocess, sys, time
    from pathlib import Path
    from hermesbus.compose.homelock import home_lock
    with home_lock(Path(sys.argv[1])):
        if len(sys.argv) > 2:  # a child of its own, as up's broker and tool workers are
            child = subprocess.Popen(["sleep", "600"], start_new_session=True)
            print(child.pid, flush=True)
        print("locked", flush=True)
        time.sleep(600)
    """
)


@contextmanager
def _holder(home: Path, *, with_child: bool = False) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A process holding ``home``'s lock (and, ``with_child``, its child's pid; else 0)."""
    args = [sys.executable, "-c", _HOLDER, str(home), *(["child"] if with_child else [])]
    child = 0
    with subprocess.Popen(args, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            if with_child:
                child = int(process.stdout.readline())
            assert process.stdout.readline().strip() == "locked"
            yield process, child
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(WAIT_S)
            if child:
                os.kill(child, signal.SIGKILL)


def test_the_lock_names_its_holder_and_refuses_a_second_bus(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with home_lock(home) as path:
        assert path == home / LOCK_FILE
        holder = held_by(home)
        assert holder is not None
        assert holder.pid == os.getpid()
        assert holder.started is not None and abs(holder.started - time.time()) < 3600
        with pytest.raises(ConfigError) as refused:
            with home_lock(home):
                pass
    said = str(refused.value)
    assert f"a bus already runs on {home}: pid {os.getpid()} (" in said
    assert ", since " in said
    assert "Stop it" in said and "HERMES_HOME" in said
    assert held_by(home) is None  # released with the block
    with home_lock(home):  # and usable again
        pass


def test_a_home_without_a_lock_file_is_held_by_nobody(tmp_path: Path) -> None:
    assert held_by(tmp_path / "never") is None
    assert not (tmp_path / "never").exists()  # looking creates nothing


def test_another_process_is_named_and_its_kill_9_frees_the_home(tmp_path: Path) -> None:
    """The kernel drops the lock with the process: no stale lock, also after SIGKILL, and a
    child it started (the broker, the tool workers) does not keep it."""
    home = tmp_path / "home"
    with _holder(home, with_child=True) as (process, child):
        with pytest.raises(ConfigError, match=f"pid {process.pid} \\("):
            with home_lock(home):
                pass
        holder = held_by(home)
        assert holder is not None and holder.pid == process.pid
        assert holder.command.startswith(Path(sys.executable).name)
        process.kill()
        process.wait(WAIT_S)
        assert Path(f"/proc/{child}").exists()  # its child lives on, without the lock
        assert held_by(home) is None
        with home_lock(home):
            assert held_by(home) is not None


def test_an_unwritable_home_is_one_clear_error(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    said = "is not writable: .*afile is a file, not a folder; fix: set HERMES_HOME"
    with pytest.raises(ConfigError, match=said):
        with home_lock(afile / "home"):
            pass
