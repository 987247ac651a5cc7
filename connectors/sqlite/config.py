"""Where the embedded store lives: ``$HERMES_HOME/state.sqlite3`` unless told otherwise."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from hermesbus.config import StateHome, default_home

__all__ = ["SqliteConfig"]


class SqliteConfig(BaseSettings):
    """``HERMES_HOME`` (default: the per-user data folder) holds the database file."""

    model_config = SettingsConfigDict(env_prefix="HERMES_", frozen=True, extra="ignore")

    home: StateHome = Field(default_factory=default_home)
    busy_timeout_ms: int = 5_000
    """How long a write waits for another process's lock; it blocks the event loop, so it
    stays well under the consumer session timeout (10 s)."""

    @property
    def path(self) -> Path:
        return self.home / "state.sqlite3"
