"""What a shared demo run left: read by the tests that share it (``conftest.mcp_demo``)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DemoRun:
    """One ``up --demo --once`` on the shared embedded broker under a prefix of its own."""

    home: Path
    bootstrap: str
    prefix: str
    env: dict[str, str]
    """The environment it ran with (``HERMES_*``: only what it was given)."""
    ran: subprocess.CompletedProcess[str]
