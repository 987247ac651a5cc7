"""Where the embedded store lives: ``$HERMES_HOME/state.sqlite3`` unless told otherwise."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from hermesbus.base.config import StateHome, default_home
from hermesbus.connectors.sqlite.client import BUSY_TIMEOUT_MS

__all__ = ["SqliteConfig"]


class SqliteConfig(BaseSettings):
    """``HERMES_HOME`` (default: the per-user data folder) holds the database file."""

    model_config = SettingsConfigDict(env_prefix="HERMES_", frozen=True, extra="ignore")

    home: StateHome = Field(default_factory=default_home)
    busy_timeout_ms: int = BUSY_TIMEOUT_MS
    """How long a write waits for another process's lock. It blocks the event loop, heart
    beats included, so it stays under the shortest consumer session timeout (2 s on the
    embedded broker); a longer lock is a store failure, retried without committing."""

    @property
    def path(self) -> Path:
        return self.home / "state.sqlite3"
