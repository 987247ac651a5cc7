"""Ctrl-C at any moment of ``hermesbus up``'s start, and one ``up`` per ``HERMES_HOME``.

``up --demo`` runs as a user runs it, in a session of its own (its own terminal, as it
were); SIGINT goes to its whole process group, as Ctrl-C does. Each moment is chosen by
what the process has done so far, not by a sleep. Afterwards: exit 130, no traceback, no
unclosed client, no error, and no process left, neither in its group nor elsewhere (the
broker and the tool workers run in sessions of their own: they are found by a marker in
their environment, TMPDIR, which both inherit).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli_process import Background, clean_env, hermesbus

pytestmark = pytest.mark.kafka

START_S = 180.0
"""How long ``up`` may take to reach a moment of its start (a slow, busy machine)."""
STOP_S = 90.0
"""How long it may take to stop once signalled (every part's stop is bounded well below)."""
POLL_S = 0.02


class _Up(Background):
    """``hermesbus up ARGS`` in a session of its own."""

    def __init__(self, folder: Path, *args: str, env: dict[str, str]) -> None:
        super().__init__(folder, "up", *args, env=env, name="up")

    def wait_until(self, done: str, check: Callable[[], bool], within_s: float = START_S) -> None:
        super().wait_until(done, check, within_s)

    def interrupt(self, within_s: float = STOP_S) -> int:
        return super().interrupt(within_s)


@contextlib.contextmanager
def _up(folder: Path, *args: str, env: dict[str, str]) -> Iterator[_Up]:
    up = _Up(folder, *args, env=env)
    try:
        yield up
    finally:
        up.kill()


def _env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """up's environment with a fresh home and a TMPDIR of its own: the marker of its
    processes (the broker inherits all of the environment, a tool worker TMPDIR)."""
    marker = tmp_path / "tmp"
    marker.mkdir()
    return clean_env(tmp_path / "home", TMPDIR=str(marker)), marker


def _marked(marker: Path) -> list[str]:
    """Every process (but this one) whose environment holds TMPDIR=``marker``."""
    wanted = f"TMPDIR={marker}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if wanted in (proc / "environ").read_bytes().split(b"\0"):
                found.append(f"{proc.name}: {(proc / 'cmdline').read_bytes()!r}")
    return found


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _imported(pid: int) -> bool:
    """True once ``pid`` runs hermesbus's imports (pydantic's extension is mapped)."""
    with contextlib.suppress(OSError):
        return b"pydantic_core" in Path(f"/proc/{pid}/maps").read_bytes()
    return False


MOMENTS = {
    "importing": None,  # while the command line imports: no event loop yet
    "broker-up": "broker up: embedded",
    "topics-ready": "topics ready:",
    "groups-joining": "trace index:",  # the consumer groups join next
    "first-joined": " joined\n",
    "demo-running": "s  ready\n",  # the demo's conversations start
}


@pytest.mark.timeout(START_S + STOP_S + 60)
@pytest.mark.parametrize("moment", list(MOMENTS))
def test_ctrl_c_at_any_moment_of_the_start_stops_cleanly_with_130(
    tmp_path: Path, moment: str
) -> None:
    env, marker = _env(tmp_path)
    said = MOMENTS[moment]
    with _up(tmp_path, "--demo", env=env) as up:
        if said is None:
            up.wait_until("importing", lambda: _imported(up.pid))
        else:
            up.wait_until(repr(said), lambda: said in up.stderr())
        code = up.interrupt()
        left = _marked(marker)
        group = _group_alive(up.pid)
    err = up.stderr()
    assert code == 130, err
    for bad in ("Traceback", "Unclosed", "KeyboardInterrupt", "Aborted", "error:"):
        assert bad not in err, err
    assert not [line for line in err.splitlines() if line.startswith("ERROR")], err  # logged
    assert not left, f"left running: {left}\n{err}"
    assert not group, err
    if said is not None:  # it had started: it says it stopped
        assert err.rstrip().endswith("stopped"), err


@pytest.mark.timeout(START_S + STOP_S + 120)
def test_a_second_up_on_the_same_home_is_refused_naming_the_first(tmp_path: Path) -> None:
    env, _marker = _env(tmp_path)
    home = tmp_path / "home"
    with _up(tmp_path, env=env) as first:
        first.wait_until("serving", lambda: "serving; Ctrl-C stops" in first.stderr())
        second = hermesbus("up", env=env, cwd=tmp_path, timeout=START_S)
        shown = hermesbus("search", "--limit", "1", env=env, cwd=tmp_path, timeout=START_S)
        doctor = hermesbus("doctor", env=env, cwd=tmp_path, timeout=START_S)
        code = first.interrupt()
    assert second.code == 1, second.output
    lines = [line for line in second.err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, second.err
    assert f"a bus already runs on {home}: pid {first.pid} (hermesbus up), since " in lines[0]
    assert f"holds {home / 'bus.lock'}" in lines[0]
    assert "Stop it" in lines[0] and "HERMES_HOME" in lines[0]
    assert "broker up" not in second.err  # refused before it started anything
    assert "Traceback" not in second.output
    assert shown.code == 0, shown.output  # a read-only command works while the bus runs
    assert f"a bus runs on it: pid {first.pid} (hermesbus up), since " in doctor.out, doctor
    assert code == 130, first.stderr()
    # the first one gone, the home is usable again
    with _up(tmp_path, env=env) as again:
        again.wait_until("broker up", lambda: "broker up: embedded" in again.stderr())
        assert again.interrupt() == 130, again.stderr()
