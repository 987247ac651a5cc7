"""One line of ``hermesbus doctor``'s report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Check", "Status"]

Status = Literal["ok", "warn", "FAIL", "skip"]
"""``skip``: not checked, for the reason said (``doctor``'s settings are invalid)."""


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the report: what was checked, how it went, and the fix when not ok."""

    name: str
    status: Status
    said: str
    fix: str = ""
