"""Start-up of the ``hermesbus`` command itself: seconds from launching it to its exit.

Each command line runs ``--runs`` times as a new process (``python -m hermesbus.cli``, as
the ``hermesbus`` script does, with the same interpreter), its output discarded; the
figure is the best run (the least disturbed by the rest of the machine), with the median
beside it. Baseline, measured in the same run the same way: ``python -c pass``, the
interpreter's own start-up; the ratio says how many of those a command line costs. A
second reference: the help of one command of a minimal typer app (two commands of one
option each), what typer, its pydantic coercion and rich's help cost with no code of ours.

Lines: the top level's help, ``say --help`` (the target's two), and the help of a few
other commands (``tail``, ``up``, ``doctor``), whose modules are imported for it.

    python bench/cli_startup.py [--runs 10]

Target: ``hermesbus --help`` and ``hermesbus say --help`` under 0.4 s. Exits 0 unless a
command line failed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

MINIMAL = """
import typer
app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
@app.command()
def a(x: int = 1) -> None:
    \"\"\"Do a.\"\"\"
@app.command()
def b(y: str = "") -> None:
    \"\"\"Do b.\"\"\"
app()
"""
LINES: list[tuple[str, list[str]]] = [
    ("python -c pass (baseline)", ["-c", "pass"]),
    ("minimal typer app a --help", ["-c", MINIMAL, "a", "--help"]),
    ("hermesbus --help", ["-m", "hermesbus.cli", "--help"]),
    ("hermesbus say --help", ["-m", "hermesbus.cli", "say", "--help"]),
    ("hermesbus tail --help", ["-m", "hermesbus.cli", "tail", "--help"]),
    ("hermesbus up --help", ["-m", "hermesbus.cli", "up", "--help"]),
    ("hermesbus doctor --help", ["-m", "hermesbus.cli", "doctor", "--help"]),
]
TARGET_S = 0.4


def _once(args: list[str]) -> float:
    env = {**os.environ, "COLUMNS": "100"}
    started = time.perf_counter()
    done = subprocess.run(  # noqa: S603 - this interpreter, fixed arguments
        [sys.executable, *args], capture_output=True, env=env, check=False
    )
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} exited {done.returncode}: {done.stderr.decode()}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    times: dict[str, list[float]] = {label: [] for label, _ in LINES}
    for _ in range(runs):  # interleaved: a busy spell touches every line alike
        for label, args in LINES:
            times[label].append(_once(args))
    base = min(times[LINES[0][0]])
    print(f"best of {runs} runs (median beside it); load average {os.getloadavg()[0]:.2f}")
    print(f"{'command line':28} {'best s':>7} {'median s':>9} {'x baseline':>11}")
    for label, taken in times.items():
        best, median = min(taken), statistics.median(taken)
        flag = " (over target)" if label in _TARGETED and best >= TARGET_S else ""
        print(f"{label:28} {best:7.3f} {median:9.3f} {best / base:11.1f}{flag}")
    return 0


_TARGETED = {"hermesbus --help", "hermesbus say --help"}

if __name__ == "__main__":
    sys.exit(main())
