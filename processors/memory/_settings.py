"""Memory settings from ``HERMES_MEMORY_*`` (and ``HERMES_HOME`` for the default file)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from hermesbus.base.config import StateHome, default_home
from hermesbus.processors.memory._ports import CHANGE_LEDGER, CHOICE_HISTORY

__all__ = ["MAX_TTL_S", "MemorySettings"]

MAX_TTL_S = 10 * 365 * 24 * 3600
"""The longest TTL a write may ask for (10 years); more is refused as ``memory.bad_ttl``."""


class MemorySettings(BaseSettings):
    """Budget, conflict window, multi-valued relations and where the SQLite file lives."""

    model_config = SettingsConfigDict(
        env_prefix="HERMES_MEMORY_", frozen=True, extra="ignore", populate_by_name=True
    )

    home: StateHome = Field(default_factory=default_home, validation_alias="HERMES_HOME")
    """``HERMES_HOME`` (an alias ``home`` would also match the user's ``$HOME``)."""
    path: Path | None = None
    """``HERMES_MEMORY_PATH``; default ``$HERMES_HOME/memory.sqlite3``."""
    budget_items: Annotated[int, Field(ge=1)] = 100
    """Mid-term items kept per user; a write over budget evicts."""
    conflict_window_s: Annotated[int, Field(ge=0)] = 300
    """Two verifications of rival facts closer than this go to human review."""
    choice_threshold: Annotated[int, Field(ge=1)] = 3
    """Identical choices before a preference is proposed as a candidate."""
    choice_history: Annotated[int, Field(ge=1)] = CHOICE_HISTORY
    """Choice observations kept per (user, name), the latest; older ones are pruned."""
    change_ledger: Annotated[int, Field(ge=1)] = CHANGE_LEDGER
    """Applied graph changes remembered against redelivery, the most recent; pruned on write."""
    symbol_ttl_s: Annotated[int, Field(ge=0)] = 600
    """TTL of a short-term symbol whose write names none."""
    max_ttl_s: Annotated[int, Field(ge=1, le=MAX_TTL_S)] = MAX_TTL_S
    """A write's ``ttl_s`` above this is refused (``memory.bad_ttl``): it bounds expiry
    arithmetic and keeps stored times inside SQLite's 64-bit INTEGER."""
    future_skew_s: Annotated[int, Field(ge=0, le=3600)] = 60
    """A long-term ``verified_by.verified_at`` later than the write's envelope time plus
    this is refused (``memory.future_verification``): no fact is verified in the future."""
    multi_valued: frozenset[str] = frozenset(
        {"related_to", "responsible_for", "member_of", "has_role"}
    )
    """Relations a subject may hold to several objects; every other one is single-valued."""
    busy_timeout_ms: Annotated[int, Field(ge=0)] = 1_500
    """How long a write waits for another process's lock (it blocks the event loop: under
    the embedded broker's 2 s session timeout, see SqliteConfig.busy_timeout_ms)."""

    @model_validator(mode="after")
    def _history_holds_a_habit(self) -> MemorySettings:
        if self.choice_history < self.choice_threshold:
            raise ValueError(
                f"choice_history = {self.choice_history} < choice_threshold = "
                f"{self.choice_threshold}: no value could ever be chosen often enough"
            )
        return self

    @property
    def db_path(self) -> Path:
        return self.path if self.path is not None else self.home / "memory.sqlite3"
