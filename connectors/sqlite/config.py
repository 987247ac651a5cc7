"""Where the embedded store lives: ``$HERMES_HOME/state.sqlite3`` unless told otherwise."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["SqliteConfig"]


class SqliteConfig(BaseSettings):
    """``HERMES_HOME`` (default ``./.hermes``) holds the database file."""

    model_config = SettingsConfigDict(env_prefix="HERMES_", frozen=True, extra="ignore")

    home: Path = Path(".hermes")
    busy_timeout_ms: int = 5_000
    """How long a write waits for another process's lock; it blocks the event loop, so it
    stays well under the consumer session timeout (10 s)."""

    @property
    def path(self) -> Path:
        return self.home / "state.sqlite3"
