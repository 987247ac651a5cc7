"""Repeated log lines: one per condition per 30 s, the next one saying how many were left
out (92 lines a second while the disk was full); at exit, what is still left out."""

from __future__ import annotations

import logging
import subprocess
import sys
from types import SimpleNamespace

from hermesbus.base.logs import WINDOW_S, RepeatFilter


class Clock:
    """The filter's clock, moved by the test (the window is 30 s of it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _record(
    msg: str, *args: object, name: str = "hermesbus.runtime", level: int = 30
) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_a_condition_is_logged_once_per_window_then_with_the_count() -> None:
    clock = Clock()
    repeats = RepeatFilter(clock=clock)
    passed = []
    for n in range(92 * 30):  # a flood: 92 a second for the window
        record = _record("store write failed for session %s: %s", f"s{n}", "disk full")
        if repeats.filter(record):
            passed.append(record.getMessage())
        clock.now += 1 / 92
    assert passed == ["store write failed for session s0: disk full"]
    clock.now += 1.0
    record = _record("store write failed for session %s: %s", "s-last", "disk full")
    assert repeats.filter(record)
    assert record.getMessage() == (
        "store write failed for session s-last: disk full "
        f"({92 * 30 - 1} more like this not logged since the last one shown)"
    )
    assert repeats.left_out() == []


def test_other_conditions_pass_other_loggers_levels_and_messages() -> None:
    clock = Clock()
    repeats = RepeatFilter(clock=clock)
    assert repeats.filter(_record("a %s", 1))
    assert repeats.filter(_record("b %s", 1))
    assert repeats.filter(_record("a %s", 1, level=40))
    assert repeats.filter(_record("a %s", 1, name="hermesbus.trace.index"))
    assert not repeats.filter(_record("a %s", 2))
    assert repeats.left_out() == [(("hermesbus.runtime", 30, "a %s", ""), 1)]
    clock.now += WINDOW_S
    shown = _record("a %s", 3)
    assert repeats.filter(shown)
    assert shown.getMessage() == "a 3 (1 more like this not logged since the last one shown)"


def test_neo4j_notifications_are_a_condition_per_status() -> None:
    repeats = RepeatFilter(clock=Clock())

    def notification(status: str) -> logging.LogRecord:
        printer = SimpleNamespace(notification=SimpleNamespace(gql_status=status))
        return _record("Received notification from DBMS server: %s", printer,
                       name="neo4j.notifications")  # fmt: skip

    assert repeats.filter(notification("01N50"))
    assert not repeats.filter(notification("01N50"))
    assert repeats.filter(notification("01N51"))


def test_a_process_logging_a_flood_prints_one_line_and_the_count_at_exit() -> None:
    code = (
        "import logging\n"
        "from hermesbus.base.logs import configure\n"
        "configure()\n"
        "log = logging.getLogger('hermesbus.runtime')\n"
        "for n in range(500):\n"
        "    log.warning('cannot write the state of session %s: %s', n, 'disk full')\n"
        "logging.getLogger('hermesbus.trace.index').warning('another condition')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stderr.splitlines() == [
        "WARNING hermesbus.runtime: cannot write the state of session 0: disk full",
        "WARNING hermesbus.trace.index: another condition",
        "WARNING hermesbus.base.logs: 499 more lines of hermesbus.runtime like "
        "'cannot write the state of session %s: %s' were not logged",
    ]


def test_every_command_logs_through_the_filter() -> None:
    """``hermesbus`` (main) configures logging with the filter on the root's handlers."""
    code = (
        "import logging, sys\n"
        "from hermesbus.cli import main\n"
        "from hermesbus.base.logs import RepeatFilter\n"
        "sys.argv = ['hermesbus', 'keys', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "handlers = logging.getLogger().handlers\n"
        "print(len(handlers), all(any(isinstance(f, RepeatFilter) for f in h.filters)"
        " for h in handlers))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.splitlines()[-1] == "1 True"
