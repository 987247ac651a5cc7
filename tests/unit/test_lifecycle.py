"""Process-level tuning of a long-running bus process (what ``hermesbus up`` applies)."""

from __future__ import annotations

import subprocess
import sys

from hermesbus.lifecycle import COLLECTOR_THRESHOLDS

_PROBE = """
import gc
from hermesbus.lifecycle import tune_collector
before = gc.get_freeze_count()
tune_collector()
print(before, gc.get_freeze_count() > before, gc.get_threshold())
"""


def test_tune_collector_freezes_what_start_up_built_and_makes_collections_rare() -> None:
    """In a process of its own: the collector's settings are the whole process's."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    before, frozen, thresholds = done.stdout.strip().split(" ", 2)
    assert before == "0" and frozen == "True"
    assert thresholds == str(COLLECTOR_THRESHOLDS)
    assert COLLECTOR_THRESHOLDS[0] > 700  # above Python's default first generation
